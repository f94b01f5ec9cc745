import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from models_for_tests import BlowUp

import jaxident as ji


def test_sweep_matches_direct_vmap_with_padding():
    model = ji.models.load("svir")
    samples = ji.latin_hypercube(jax.random.key(0), model.parameters, 23)
    res = ji.sweep(
        lambda th: ji.sensitivity_matrix(model, th), samples, batch_size=10, progress=False
    )
    direct = jax.vmap(lambda th: ji.sensitivity_matrix(model, th))(samples)
    assert res.values.shape == (23, 31, 4)
    np.testing.assert_allclose(res.values, np.asarray(direct), rtol=1e-10)
    assert res.ok.all() and res.n_failed == 0
    assert "n=23" in repr(res)
    # any number of lanes side by side (a remainder too): the same numbers
    for lanes in (1, 3):
        other = ji.sweep(
            lambda th: ji.sensitivity_matrix(model, th),
            samples,
            batch_size=10,
            progress=False,
            vmap_size=lanes,
        )
        np.testing.assert_allclose(other.values, np.asarray(direct), rtol=1e-10)
    with pytest.raises(ValueError, match="vmap_size must be a positive integer"):
        ji.sweep(lambda th: th, samples, vmap_size=0)


def test_sweep_flags_failures_per_sample():
    model = BlowUp()  # blows up at t = 1/k, the grid ends at t = 2
    ks = jnp.array([[0.1], [0.2], [0.9], [0.3], [5.0]])
    res = ji.sweep(lambda th: ji.sensitivity_matrix(model, th), ks, batch_size=2, progress=False)
    np.testing.assert_array_equal(res.ok, [True, True, False, True, False])
    np.testing.assert_array_equal(res.failed, [2, 4])
    assert np.all(np.isnan(res.values[2])) and np.all(np.isfinite(res.values[0]))
    # outside a sweep the same failure raises
    with pytest.raises(Exception, match="BlowUp failed"):
        ji.sensitivity_matrix(model, ks[2])


def test_sweep_of_selections_and_frequency():
    model = ji.models.load("sevir")
    samples = ji.latin_hypercube(jax.random.key(2), model.parameters, 40)

    def one(th):
        return ji.select_parameters(ji.sensitivity(model, th), k=4)

    res = ji.sweep(one, samples, batch_size=16, progress=False)
    assert res.ok.all()
    freq = ji.identifiability_frequency(res.values)
    assert set(freq) == set(model.parameters.names)
    assert freq["alpha"] == 0.0 and freq["beta"] == 1.0
    assert np.all(np.asarray(res.values.k) == 4)


def test_sweep_resumes_from_disk(tmp_path):
    import json

    def fn(x):
        return jnp.sin(x) * 2.0

    xs = jnp.linspace(0.0, 1.0, 10)
    r1 = ji.sweep(fn, xs, batch_size=4, progress=False, out_dir=tmp_path)
    assert (tmp_path / "sweep_state.json").exists()
    assert not list(tmp_path.glob("*.tmp"))  # written atomically
    np.testing.assert_allclose(np.asarray(r1.values), 2 * np.sin(np.asarray(xs)))
    # a crash after the first chunk: chunks 4 and 8 not recorded, their rows scribbled
    state = json.loads((tmp_path / "sweep_state.json").read_text())
    assert sorted(state["chunks"]) == ["0", "4", "8"]
    state["chunks"] = {"0": state["chunks"]["0"]}
    (tmp_path / "sweep_state.json").write_text(json.dumps(state))
    leaf = np.load(tmp_path / "leaf0.npy", mmap_mode="r+")
    leaf[4:] = -1.0
    leaf.flush()
    r2 = ji.sweep(fn, xs, batch_size=4, progress=False, out_dir=tmp_path)
    np.testing.assert_allclose(np.asarray(r2.values), 2 * np.sin(np.asarray(xs)))
    assert isinstance(r2.values, np.memmap)


def test_sweep_bad_input():
    with pytest.raises(ValueError, match="batch_size"):
        ji.sweep(jnp.sin, jnp.ones(3), batch_size=0, progress=False)
    with pytest.raises(ValueError, match="leading"):
        ji.sweep(lambda t: t[0], (jnp.ones(3), jnp.ones(4)), progress=False)


def test_lanes_per_backend():
    """The backend's rule for samples side by side: the whole share on a GPU; on a CPU
    32, or the largest divisor of the share from 17 to 32 (no remainder compiled apart);
    a given `vmap_size` at most the share."""
    from jaxident._identify._sweep import _lanes

    assert _lanes(None, "gpu", 256) == 256
    assert _lanes(None, "cpu", 256) == 32 and _lanes(None, "cpu", 1000) == 25
    assert _lanes(None, "cpu", 997) == 32  # a prime: a remainder it is
    assert _lanes(None, "cpu", 10) == 10
    assert _lanes(3, "cpu", 10) == 3 and _lanes(64, "cpu", 10) == 10


def test_a_sweep_traces_its_lanes_as_batched(monkeypatch):
    """A sweep with lanes side by side traces its function inside `batched()` (models
    that compile differently for batches are then passed to kernels as such,
    `_batches.for_batches`), one lane at a time outside it; a multi-start fit's
    vmapped kernel is called inside it too."""
    from jaxident._fit import _multistart
    from jaxident._runtime import _batches

    seen = []

    def f(t):
        seen.append(_batches._BATCHED.get())
        return t * 2.0

    for lanes in (2, 1):
        ji.sweep(f, jnp.arange(4.0), vmap_size=lanes, progress=False)
    assert seen == [True, False]
    calls = []
    monkeypatch.setattr(_multistart, "_call_fit", lambda *a: calls.append(_batches._BATCHED.get()))
    _multistart.fit_batch(None, None, [True], None, 1, 1e-6)
    assert calls == [True] and not _batches._BATCHED.get()


def test_models_are_passed_to_kernels_for_batches_inside_batched():
    """`for_batches` replaces every model with a `for_batches` method (an SBML model)
    inside `batched()` and leaves the arguments as they are outside it."""
    from jaxident._runtime import _batches

    class Model(eqx.Module):
        grouped: bool = eqx.field(static=True, default=True)

        def for_batches(self, batched=True):
            return Model(not batched)

    args = (jnp.ones(2), {"model": Model(), "n": 3})
    assert _batches.for_batches(args) is args
    with _batches.batched():
        out = _batches.for_batches(args)
    assert out[1]["model"].grouped is False and out[0] is args[0] and out[1]["n"] == 3
