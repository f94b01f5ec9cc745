"""Structural or weak: a null direction at the rank rule's threshold is structural only
where it is null at every point of the box (or an exact symmetry), and a real but tiny
effect is named weak, with finite standard deviations. Planted answers
(tests/planted.py): a fast reversible binding (weak), scaling symmetries (structural
everywhere), a saturation whose constant is tiny at the analysed point and large
elsewhere in the box (weak); each checked against finite differences or a closed form,
and the same in other units, parameter orders and estimation scales. Before, each weak
one was listed as non-identifiable, with an infinite standard deviation."""

import json

import numpy as np
import pytest
import scipy.special
from planted import fast_binding, saturation, shared_scalings, two_dimensional_scaling

import jaxident as ji
from jaxident._linalg._rank import RelativeTolerance
from jaxident._report._structure import deficient, Direction, measure, size


def _weak(rep, names):
    assert rep.non_identifiable == ()
    assert set(rep.weakly_identifiable) == set(names)
    assert not set(rep.identifiable) & set(names)
    (g,) = rep.groups
    assert not g.structural and set(g.names) == set(names)
    return g


def test_fast_binding_is_weak_not_structural():
    problem = fast_binding()
    rep = ji.analyze(problem, progress=False)
    g = _weak(rep, {"kf", "kr"})
    assert g.evidence.startswith("a real effect")
    assert g.combinations == ("kf/kr",)  # the quasi-equilibrium constant
    # the size against finite differences of the outputs along the null direction, on
    # solves at rtol 1e-12: |S v| / |c * v| with c the column norms (the equilibrated
    # units of the size), at least the smallest singular value and close to it
    tight = ji.Integrator(ji.Rodas4(), rtol=1e-12, atol=1e-16)
    th = np.asarray(problem.parameters.nominal)
    names = list(problem.parameters.names)
    (v,) = rep.null_directions  # on the log scale of each: log10 units alike

    def outputs(t):
        return np.asarray(ji.simulate(problem.model, 10.0**t, integrator=tight).ys) / 0.01

    h = 0.01
    D = (outputs(th + h * v) - outputs(th - h * v)) / (2 * h)
    S = np.asarray(ji.sensitivity(problem, th, integrator=tight).matrix)
    c = np.linalg.norm(S, axis=0)
    s1 = np.linalg.svd(S / c, compute_uv=False)[0]
    fd = np.linalg.norm(D) / np.linalg.norm(c * v) / s1
    assert g.size <= fd <= 1.5 * g.size
    assert 1e-9 < g.size < 1e-7  # the grey zone: under the threshold, far above rounding
    # finite, large standard deviations: the inverse information by numpy's SVD of the
    # equilibrated columns (S^T S itself would square the condition number, 1e15)
    _, sv, Vt = np.linalg.svd(S / c, full_matrices=False)
    std = np.sqrt(np.sum((Vt.T / sv) ** 2, axis=1)) / c
    np.testing.assert_allclose(rep.std, std, rtol=1e-3)
    assert np.all(np.isfinite(rep.std)) and rep.decades[names.index("kf")] > 1e3
    text = str(rep)
    assert "a real but tiny effect, 3.6e-08 of the largest" in text
    assert "structurally identifiable, not from data of this precision" in text
    assert "identifiable only" not in text and "locally +" not in text
    # the figure: the weak bars in their own colour, named in the legend
    from matplotlib.colors import to_hex

    fig = rep.plot()
    bars = [to_hex(b.get_facecolor()) for b in fig.axes[1].patches]
    assert [b == to_hex("tab:purple") for b in bars] == [n in ("kf", "kr") for n in names]
    texts = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert "weak: a real but tiny effect" in texts
    d = json.loads(rep.to_json())
    assert d["non_identifiable"] == [] and set(d["weakly_identifiable"]) == {"kf", "kr"}
    assert d["groups"][0]["structural"] is False and d["std"]["kf"] != "inf"


@pytest.mark.parametrize(
    "a0, order, scales",
    [
        (1e9, ("kf", "kr", "k3"), None),  # nanomolar
        (1.0, ("k3", "kr", "kf"), {"k3": "lin", "kr": "log10", "kf": "log"}),
    ],
)
def test_the_classification_is_the_same_in_other_units(a0, order, scales):
    first = ji.analyze(fast_binding(), progress=False)
    other = ji.analyze(fast_binding(a0, order, scales), progress=False)
    g0, g1 = _weak(first, {"kf", "kr"}), _weak(other, {"kf", "kr"})
    np.testing.assert_allclose(g1.size, g0.size, rtol=1e-3)


@pytest.mark.parametrize("planted", [shared_scalings, two_dimensional_scaling])
def test_scaling_symmetries_are_structural_at_every_point(planted):
    problem, answer = planted(0)
    members = set().union(*answer["groups"]) | answer["no_effect"]
    rep = ji.analyze(problem, progress=False)  # exact: no further solve
    assert set(rep.non_identifiable) == members and rep.weakly_identifiable == ()
    assert rep.checked == {"finer": None, "points": (0, 0)}
    assert all(g.evidence.startswith("exact: a scaling symmetry") for g in rep.groups)
    every = ji.analyze(problem, progress=False, generic=True)
    assert set(every.non_identifiable) == members and every.weakly_identifiable == ()
    assert every.checked["points"] == (8, 8)
    for g in every.groups:
        assert g.structural and g.evidence.startswith("generic: null at all 8 points")
    assert all(every.evidence[n].startswith("generic") for n in members)


def _lambert(k, K, t):
    """The saturation's output in closed form (tests/planted.py)."""
    return K * np.real(scipy.special.lambertw((1 / K) * np.exp((1 - k * K * t) / K)))


def test_tiny_here_and_large_elsewhere_is_weak():
    problem = saturation(1e13)
    rep = ji.analyze(problem, progress=False)
    g = _weak(rep, {"K"})
    assert "resolved elsewhere in the box" in g.evidence and g.size < 1e-12
    assert np.all(np.isfinite(rep.std))
    # the closed form: at K = 1e13 the output moves by 1e-13 of k's effect; at K = 1 (in
    # the box) the two columns are far from parallel
    t = np.asarray(problem.model.times)

    def columns(k, K, h=1e-5):
        dk = (_lambert(k * 10**h, K, t) - _lambert(k * 10**-h, K, t)) / (2 * h)
        dK = (_lambert(k, K * 10**h, t) - _lambert(k, K * 10**-h, t)) / (2 * h)
        return np.stack([dk, dK], 1)

    C = columns(1.0, 1.0)
    s = np.linalg.svd(C / np.linalg.norm(C, axis=0), compute_uv=False)
    assert s[1] / s[0] > 1e-2
    # jaxident's sensitivities against it there
    at = np.array([0.0, 0.0])
    S = np.asarray(ji.sensitivity(problem, at).matrix) * 0.01
    np.testing.assert_allclose(S, columns(1.0, 1.0), rtol=1e-5, atol=1e-9)


def test_an_exact_null_here_is_checked_over_the_box_on_request():
    # K = 1e15: K's effect is at rounding level here, so by default exact (no effect at
    # all): the check over the box, on request, finds it resolved elsewhere
    problem = saturation(1e15)
    rep = ji.analyze(problem, progress=False)
    assert rep.no_effect == ("K",) and rep.evidence["K"].startswith("exact")
    every = ji.analyze(problem, progress=False, generic=True)
    assert every.no_effect == () and "resolved elsewhere" in _weak(every, {"K"}).evidence
    off = ji.analyze(saturation(1e13), progress=False, generic=False)
    assert off.non_identifiable == ("K",) and off.checked["finer"] is None


def test_sizes_and_deficiency_do_not_depend_on_units_or_the_svd_basis():
    """The size of a direction comes from singular values and index sets alone: the
    same when a parameter changes units (its column times `f`, its unit move over `f`)
    and when the rows are rotated (the outputs in another orthonormal basis), which
    changes the basis an SVD returns for the null space but not the answer."""
    rng = np.random.default_rng(0)
    n = 40
    B = rng.standard_normal((n, 3))
    # columns 3, 4 in the span of 0, 1 (a two-dimensional null space), column 2 free
    S = np.hstack([B, B[:, :2] @ rng.standard_normal((2, 2))])
    S[:, 3] += 1e-9 * rng.standard_normal(n)  # a weak, real part of one direction
    d = Direction((0, 1, 3, 4), 2, False)
    rule = RelativeTolerance(accuracy=1e-7)
    m = measure(S, rule, np.ones(5))
    f = np.array([1e3, 1e-2, 7.0, 1e-4, 30.0])
    scaled = measure(S * f, rule, 1 / f)
    Q = np.linalg.qr(rng.standard_normal((n, n)))[0]
    rotated = measure(Q @ S, rule, np.ones(5))
    for other in (scaled, rotated):
        assert deficient(other, d) and deficient(m, d)
        np.testing.assert_allclose(size(other, d), size(m, d), rtol=1e-5)
        np.testing.assert_array_equal(other.out, m.out)
    # against numpy: the second-smallest singular value of the equilibrated columns
    A = S[:, [0, 1, 3, 4]] / np.linalg.norm(S[:, [0, 1, 3, 4]], axis=0)
    s = np.linalg.svd(A, compute_uv=False)
    s1 = np.linalg.svd(S / np.linalg.norm(S, axis=0), compute_uv=False)[0]
    np.testing.assert_allclose(size(m, d), s[-2] / s1, rtol=1e-6)
    assert 1e-10 < size(m, d) < 1e-8


def test_cli_generic_flags(tmp_path, capsys):
    from jaxident import cli

    out = {}
    for flag in ("--generic", "--no-generic", None):
        js = tmp_path / f"{flag}.json"
        argv = ["analyze", "crauste", "--json", str(js), "--quiet"] + ([flag] if flag else [])
        assert cli.main(argv) == 0
        out[flag] = (json.loads(js.read_text()), capsys.readouterr().out)
    for flag in ("--generic", None):
        rep, text = out[flag]
        assert rep["non_identifiable"] == [] and rep["weakly_identifiable"] == ["rho_P"]
        assert rep["checked"]["finer_rtol"] == 1e-10
        assert "{rho_P}: a real but tiny effect, 7.7e-08 of the largest" in text
    rep, text = out["--no-generic"]  # every null direction structural, at this point
    assert rep["non_identifiable"] == ["rho_P"] and rep["checked"]["finer_rtol"] is None
    assert "(the check over the box was off)" in text


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"generic_points": 0}, "generic_points must be a positive integer"),
        ({"generic_points": -3}, "generic_points must be a positive integer"),
    ],
)
def test_generic_arguments_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ji.analyze(saturation(1e13), progress=False, **kwargs)
