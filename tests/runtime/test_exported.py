"""Kernels kept lowered on disk (`jaxident._runtime._exported`): the key sees everything a trace
depends on (a model's code included), a second process loads the kernels instead of
tracing them, with the same results, and code changed between processes is traced anew."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap
import types

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxident as ji
from jaxident._identify import _sweep
from jaxident._problem._sensitivity import _sensitivity
from jaxident._runtime import _config, _exported


_DECAY = """
import equinox as eqx, jax, jax.numpy as jnp, jaxident as ji

RATE = {rate}

def speed(x):
    return {speed}

class Decay(ji.ODEModel):
    parameters: ji.Parameters = ji.Parameters(["k", "x0"], [0.5, 2.0])
    times: jax.Array = eqx.field(default_factory=lambda: jnp.linspace(0.5, 4.0, 8))
    t0: float = 0.0

    def vector_field(self, t, x, theta):
        return -{factor} * RATE * theta.k * speed(x)

    def initial_state(self, theta):
        return jnp.array([theta.x0])

    def output(self, t, x, theta):
        return x[0]
"""


def _decay(rate="1.0", speed="x", factor="1.0"):
    module = types.ModuleType("user_decay")
    exec(_DECAY.format(rate=rate, speed=speed, factor=factor), module.__dict__)
    return module.Decay()


def _key(model, times=None, rtol=1e-8):
    times = model.times if times is None else times
    integrator = ji.Integrator(ji.Rodas4(), rtol=rtol)
    args = (model, model.parameters.nominal, times, integrator, "none", False)
    return _exported._key(_sensitivity, args)


def test_the_key_sees_code_and_static_values_but_not_array_values():
    base = _key(_decay())
    assert base is not None and base == _key(_decay())  # a fresh class, same code
    svir = ji.models.load("svir")
    other = svir.parameters.nominal * 1.1
    fresh = ji.models.load("svir")
    assert _exported._key(
        _sensitivity, (svir, svir.parameters.nominal, svir.times, svir.integrator, "none", 0)
    ) == _exported._key(_sensitivity, (fresh, other, svir.times, svir.integrator, "none", 0))
    changed = [
        _key(_decay(factor="2.0")),  # the method's code
        _key(_decay(speed="x**2")),  # a function it calls
        _key(_decay(rate="2.0")),  # a module-level constant it reads
        _key(_decay(rate="jnp.array(1.0)")),  # constant arrays count by value
        _key(_decay(rate="jnp.array(2.0)")),
        _key(_decay(), times=jnp.linspace(0.5, 4.0, 9)),  # a shape
        _key(_decay(), rtol=1e-9),  # a static value
    ]
    assert len({base, *changed}) == 8


def test_sympy_formulas_are_keyed_by_their_text_once(monkeypatch):
    """A model's sympy formulas are keyed by sympy's exact text, computed once per
    expression (a large SBML model's rate laws took 0.2 s a call before): equal
    formulas built apart give the same key, a changed one another, and a second key of
    the same formulas calls `srepr` no more."""
    import sympy as sp

    calls = []
    srepr = sp.srepr
    monkeypatch.setattr(sp, "srepr", lambda e: calls.append(e) or srepr(e))
    k, x = sp.symbols("k_keyed_once x_keyed_once")
    rates = (k * x / (1 + x), -k * x + 2)
    first = _exported._value(rates, True)
    assert len(calls) == 2
    again = _exported._value((k * x / (1 + x), -k * x + 2), True)  # equal, built apart
    assert again == first and len(calls) == 2
    assert _exported._value((k * x / (1 + x), -k * x + 3), True) != first


def test_a_repeated_call_is_keyed_without_fingerprinting_again(monkeypatch):
    """A second call with a new tree of the same objects (each evaluation of a fit
    rebuilds it) gets the full key without fingerprinting the tree again; a leaf that
    could change in place (a mutable dataclass) is fingerprinted at every call, so that
    changing it changes the key."""
    import dataclasses

    model = _decay()
    integrator = ji.Integrator(ji.Rodas4())

    def args(theta, extra=0):
        arrays, rest = eqx.partition((model, theta, model.times, integrator, extra), eqx.is_array)
        return eqx.combine(jax.tree.map(jnp.array, arrays), rest)  # new objects each time

    first = _exported._key(_sensitivity, args(model.parameters.nominal))
    calls = []
    value = _exported._value
    monkeypatch.setattr(_exported, "_value", lambda *a: calls.append(1) or value(*a))
    again = _exported._key(_sensitivity, args(model.parameters.nominal * 2.0))
    assert not calls
    assert again == first == _exported._full_key(_sensitivity, args(model.parameters.nominal))

    @dataclasses.dataclass
    class Setting:
        value: float

    setting = Setting(1.0)
    before = _exported._key(_sensitivity, args(model.parameters.nominal, setting))
    setting.value = 2.0
    after = _exported._key(_sensitivity, args(model.parameters.nominal, setting))
    assert before is not None and after not in (None, before, first)


def test_an_unknown_static_object_means_no_key():
    class Opaque:  # not a value the key can compare across processes
        pass

    model = _decay()
    args = (model, model.parameters.nominal, model.times, model.integrator, Opaque(), 0)
    assert _exported._key(_sensitivity, args) is None


_YNN = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"}


def test_kernels_and_sweeps_compile_with_the_cpu_options(monkeypatch):
    """A kept kernel and a sweep are compiled with `compiler_options` (fusion emitters
    off on a CPU: the E. coli sensitivity compiles in 14 s instead of 21-23 s; a kernel
    (a column selection) without LLVM's optimization passes besides); an XLA that does not
    know an option gets none instead of failing."""

    @eqx.filter_jit
    def kernel(x, scale):
        return jnp.sin(x) * scale

    x = jnp.linspace(0.0, 1.0, 7)
    exported, skeleton = _exported._export(kernel, (x, 2.0))
    if jax.default_backend() == "cpu":
        # (an XLA without YNNPACK does not know its option)
        full = {"xla_cpu_use_fusion_emitters": False, **(_YNN if _config._known(_YNN) else {})}
        assert _config.compiler_options("cpu") == full
        if _YNN.items() <= full.items():
            # YNNPACK's products kept, its reduction fusions not (a rolled SBML
            # right-hand side's sums of fluxes ran 10-13% slower in them)
            x64 = jnp.ones((64, 64))
            text = [
                jax.jit(f, compiler_options=full).lower(x64, x64).compile().as_text()
                for f in (lambda a, b: jnp.sum(a * b, axis=1), lambda a, b: a @ b + 1.0)
            ]
            assert "ynn" not in text[0] and "ynn" in text[1]
        # (no LLVM passes, and code generated in one piece: its split over threads is
        # there to run those passes in parallel)
        quick = {
            **full,
            "xla_backend_optimization_level": 0,
            "xla_cpu_parallel_codegen_split_count": 1,
        }
        assert _config.compiler_options("cpu", optimize=False) == quick
    for optimize in (True, False):
        np.testing.assert_allclose(_exported._Entry(exported, skeleton, optimize)([x]),
                                   kernel(x, 2.0), rtol=1e-15)  # fmt: skip
        np.testing.assert_allclose(_exported.call(kernel, x, 2.0, optimize=optimize),
                                   kernel(x, 2.0), rtol=1e-15)  # fmt: skip
    # the options reach the compiler: an unknown one fails the compile, of a kept kernel
    # (either kind) and of a sweep's chunk
    unknown = {"xla_no_such_option": False}
    seen = []

    def options(platform, optimize=True):
        seen.append(optimize)
        return unknown

    monkeypatch.setattr(_exported, "compiler_options", options)
    monkeypatch.setattr(_sweep, "compiler_options", options)
    for optimize in (True, False):
        with pytest.raises(Exception, match="xla_no_such_option"):
            _exported._Entry(exported, skeleton, optimize)([x])
    with pytest.raises(Exception, match="xla_no_such_option"):
        ji.sweep(lambda th: jnp.sin(th) * 3.0, jnp.ones((4, 2)), progress=False)
    # ... and of a kernel called where nothing is kept (no cache folder, as in this
    # suite: with XLA's defaults the SVIR selection took 8.3 s instead of 2.7 s)
    assert _exported._folder() is None
    for optimize in (True, False):
        with pytest.raises(Exception, match="xla_no_such_option"):
            _exported.call(kernel, x, 2.0, optimize=optimize)
    assert seen == [True, False, True, True, False]  # a sweep is optimized fully
    monkeypatch.undo()
    # ... so only options this XLA knows are used
    caches = (_config._cpu_options, _config._quick_options)
    monkeypatch.setattr(_config, "_CPU_OPTIONS", unknown)
    monkeypatch.setattr(_config, "_QUICK_OPTIONS", unknown)
    for c in caches:
        c.cache_clear()
    try:
        assert _config.compiler_options("cpu") is None
        assert _config.compiler_options("cpu", optimize=False) is None
        # ... each option tried alone where this XLA does not know them all
        one_known = {**unknown, "xla_cpu_use_fusion_emitters": False}
        monkeypatch.setattr(_config, "_CPU_OPTIONS", one_known)
        for c in caches:
            c.cache_clear()
        assert _config.compiler_options("cpu") == {"xla_cpu_use_fusion_emitters": False}
        monkeypatch.undo()
        for c in caches:
            c.cache_clear()
        monkeypatch.setenv("JAXIDENT_FUSION_EMITTERS", "1")  # XLA's fusion emitters asked for
        monkeypatch.setenv("JAXIDENT_OPTIMIZE", "1")  # every program optimized
        rest = _YNN if _config._known(_YNN) else None
        assert _config.compiler_options("cpu") == rest
        assert _config.compiler_options("cpu", optimize=False) == rest
    finally:
        monkeypatch.undo()
        for c in caches:
            c.cache_clear()


def test_answering_once_compiles_the_solves_quickly(monkeypatch):
    """Inside `answering_once` (the command line's analyze) a sensitivity or prediction
    kernel is kept and compiled without LLVM's passes, outside with them; the
    selection always without; the setting is restored on leaving (nested too)."""
    seen = []
    real = _exported.call

    def call(kernel, *args, optimize=True):
        seen.append(optimize)
        return real(kernel, *args, optimize=optimize)

    monkeypatch.setattr(_exported, "call", call)
    model = ji.models.load("sir")
    with _config.answering_once():
        with _config.answering_once():
            assert not _config.solve_optimized()
        assert not _config.solve_optimized()
        quick = ji.sensitivity(model)
    assert _config.solve_optimized()
    full = ji.sensitivity(model)
    ji.select_parameters(full)
    np.testing.assert_allclose(np.asarray(quick.matrix), np.asarray(full.matrix), rtol=1e-12)
    assert seen == [False, True, False]


def test_pivoted_qr_is_kept_and_host_callbacks_never():
    @eqx.filter_jit
    def qr(a, tol):
        _, r, piv = jax.scipy.linalg.qr(a, pivoting=True)  # LAPACK's dgeqp3
        return r, piv, tol

    @eqx.filter_jit
    def called_back(x, scale):
        y = jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return y * scale

    a = jnp.asarray(np.random.default_rng(0).normal(size=(5, 3)))
    exported, skeleton = _exported._export(qr, (a, 1e-3))
    entry = _exported._Entry(exported, skeleton)
    r, piv, tol = entry([a])
    r_ref, piv_ref, _ = qr(a, 1e-3)
    np.testing.assert_array_equal(np.asarray(piv), np.asarray(piv_ref))
    np.testing.assert_allclose(np.asarray(r), np.asarray(r_ref), rtol=1e-13, atol=1e-13)
    assert tol == 1e-3  # a static part of the output comes back as it was
    with pytest.raises(NotImplementedError, match="host_callbacks"):  # call() runs it as it is
        _exported._export(called_back, (jnp.ones(3), 2.0))


def test_a_kept_kernel_compiles_once_for_fresh_and_returned_arrays(tmp_path, monkeypatch):
    """A chunked loop passes `jnp.asarray(0)` (uncommitted, weakly typed) first and the
    kernel's own output (committed) after: one key and one compilation serve both (in a
    second process too, where the outputs come from the kernel loaded from disk)."""

    @eqx.filter_jit
    def advance(x, k):
        return x * 2.0, k + 1

    monkeypatch.setattr(_exported, "_folder", lambda: tmp_path)
    monkeypatch.setattr(_exported, "_MEMORY", {})
    x, k = _exported.call(advance, jnp.ones(3), jnp.asarray(0))
    for _ in range(2):
        x, k = _exported.call(advance, x, k)
    np.testing.assert_array_equal(np.asarray(x), 8.0 * np.ones(3))
    (entry,) = _exported._MEMORY.values()  # one key
    assert int(k) == 3 and entry.call._cache_size() == 1  # one compilation


def test_an_argument_is_settled_once_while_it_lives(monkeypatch):
    """A problem's arrays, passed again at every evaluation of a host-driven fit, are
    committed once: the same settled copy (sharing the buffer) comes back while the
    array lives, a weakly typed one loses its weak type, and the entry leaves with the
    array."""
    import gc

    monkeypatch.setattr(_exported, "_SETTLED", {})
    a = jnp.arange(3.0)
    assert not a.committed
    first = _exported._settled(a)
    assert first.committed and _exported._settled(a) is first
    assert first.unsafe_buffer_pointer() == a.unsafe_buffer_pointer()
    weak = jnp.asarray(2.0)
    assert weak.weak_type and not _exported._settled(weak).weak_type
    committed = jax.device_put(jnp.ones(2), jax.devices()[0])
    assert _exported._settled(committed) is committed  # nothing to keep
    assert len(_exported._SETTLED) == 2
    del a, weak, first
    gc.collect()
    assert not _exported._SETTLED


def test_an_entry_point_with_a_prng_key_is_kept(tmp_path, monkeypatch):
    """A typed PRNG key (`jax.random.key`) is an argument like an array: kept and
    reloaded with the same result (it has no `weak_type`; reading one failed)."""
    monkeypatch.setattr(_exported, "_folder", lambda: tmp_path)
    monkeypatch.setattr(_exported, "_MEMORY", {})
    m = ji.models.load("brusselator_2d")
    run = lambda: ji.perturbation_analysis(m, t=1.0, key=jax.random.key(0), q=2,
                                           wrt="initial_state")  # fmt: skip
    first = run()
    assert list(tmp_path.glob("*.jaxexport"))  # kept on disk
    monkeypatch.setattr(_exported, "_MEMORY", {})  # as a second process: from disk
    again = run()
    np.testing.assert_array_equal(np.asarray(first.value), np.asarray(again.value))


def test_checks_traced_once_as_callbacks_are_nan_inside_the_context():
    """An equinox check traced first as a host callback is traced as NaN inside
    `callback_free` (else a fit kernel could not be kept after, say, a simulation had
    traced the same diffrax check), and as a callback again after it."""
    from jaxident._runtime._host import callback_free

    def check(x):
        return eqx.error_if(x, x < 0, "negative")

    def traced():  # a new caller each time, the same check inside (as diffrax's)
        return str(jax.make_jaxpr(lambda x: check(x) + 1.0)(1.0))

    before = traced()
    with callback_free(jnp.ones(2)):
        inside = traced()
    after = traced()
    assert "callback" in before and "callback" not in inside and "callback" in after


def test_why_the_equinox_hook_is_still_needed():
    """`_runtime/_equinox.py` reaches into equinox's private error machinery for one
    reason: diffrax checks `SaveAt(ts=...)` with an `error_if` whatever `throw` says,
    so a solve at traced observation times (every kernel's) is a host callback, which
    `jax.export` cannot serialize and JAX's persistent cache does not store. Inside
    `callback_free` the check is traced as NaN. When this test fails because the plain
    trace has no callback, diffrax no longer forces it: delete `_equinox.py` and
    `checks_as_nan`, and keep `throw=False` on every library call."""
    import diffrax

    from jaxident._runtime._host import callback_free

    def solve(ts):
        term = diffrax.ODETerm(lambda t, y, args: -y)
        return diffrax.diffeqsolve(term, diffrax.Tsit5(), 0.0, 1.0, 0.1, jnp.ones(()),
                                   saveat=diffrax.SaveAt(ts=ts), throw=False).ys  # fmt: skip

    ts = jnp.linspace(0.1, 1.0, 4)
    plain = str(jax.make_jaxpr(solve)(ts))
    with callback_free(ts):
        inside = str(jax.make_jaxpr(lambda t: solve(t) + 0.0)(ts))  # a fresh trace
    assert "callback" in plain, "diffrax no longer checks saveat.ts: remove _equinox.py"
    assert "callback" not in inside
    exported = jax.export.export(jax.jit(solve))
    with pytest.raises(Exception, match="host_callback|callback"):
        exported(ts)


_PROCESS = textwrap.dedent(
    """
    import json, sys, jax
    traces = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, d, **kw: traces.append(d) if name.endswith("jaxpr_trace_duration") else None
    )
    import jaxident as ji
    from jaxident._runtime import _exported
    sys.path.insert(0, sys.argv[1])
    from user_model import Decay
    d = Decay()
    sens = ji.sensitivity(d)
    sel = ji.select_parameters(sens, k=1)
    m = ji.models.load("nonsmooth_dae_example")
    res = ji.lserc(m, m.THETA_STAR, method=ji.LSERC(twin=0.0, singular=0.0))
    loaded = [type(e).__name__ == "_Entry" for e in _exported._MEMORY.values()]
    print(json.dumps({"S": sens.matrix.tolist(), "ranks": res.reference.rank.tolist(),
                      "selected": list(sel.identifiable),
                      "traced_s": sum(traces), "entries": loaded}))
    """
)


def test_a_second_process_loads_the_kernels_and_sees_changed_code(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env["JAXIDENT_CACHE"] = str(tmp_path / "cache")

    def run(**change):
        (tmp_path / "user_model.py").write_text(
            _DECAY.format(**{"rate": "1.0", "speed": "x", "factor": "1.0", **change})
        )
        out = subprocess.run(
            [sys.executable, "-c", _PROCESS, str(tmp_path)],
            env=env,
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = run()
    files = list((tmp_path / "cache" / "jaxident-exported").glob("*.jaxexport"))
    # the sensitivity, its selection (LAPACK's pivoted QR inside) and lserc
    assert len(files) == len(first["entries"]) == 3
    second = run()
    assert second["S"] == first["S"] and second["ranks"] == first["ranks"]
    assert second["selected"] == first["selected"]
    assert all(second["entries"])
    # nothing of the kernels is traced again: what is left is the host layer's small ops
    assert second["traced_s"] < 0.25 * first["traced_s"]
    # a helper of the model changed in between: its kernel is traced anew, the others not
    changed = run(speed="2.0 * x")
    assert changed["S"] != first["S"]
    assert changed["ranks"] == first["ranks"]
    assert len(list(files[0].parent.glob("*.jaxexport"))) == len(files) + 1


def test_the_key_reads_the_source_of_every_layer():
    """A kept kernel is keyed on all of jaxident's code: the files of every layer's
    folder, not only those beside `_exported.py` (a change to the fit's code must not
    load a kernel lowered before it)."""
    root, files = _exported.source_files()
    assert root == pathlib.Path(ji.__file__).resolve().parent
    names = {str(f.relative_to(root)) for f in files}
    assert {"__init__.py", "_fit/_multistart.py", "_runtime/_exported.py", "petab.py"} <= names
    assert names == {str(f.relative_to(root)) for f in root.rglob("*.py")}
    # read once per process, not at every kept kernel's call
    assert _exported.environment() is _exported.environment()


def test_without_a_cache_folder_there_is_nothing_to_keep():
    # the suite runs with JAXIDENT_CACHE=0 (see conftest.py): kernels are compiled with
    # the same options (`_with_options`), kept in this process only
    assert os.environ.get("JAXIDENT_CACHE") == "0" and _exported._folder() is None


def test_a_damaged_or_swapped_kept_kernel_is_compiled_anew(tmp_path, monkeypatch):
    """64 bytes flipped in a kept kernel made every later process fail with "Failed to
    deserialize StableHLO", naming no file (issue 51); an entry renamed to another
    kernel's key was read as that kernel. Both are compiled anew with a warning naming
    the file, and the result is right."""

    @eqx.filter_jit
    def double(x):
        return x * 2.0

    @eqx.filter_jit
    def triple(x):
        return x * 3.0

    monkeypatch.setattr(_exported, "_folder", lambda: tmp_path)
    monkeypatch.setattr(_exported, "_MEMORY", {})
    _exported.call(double, jnp.ones(3))
    (path,) = tmp_path.glob("*.jaxexport")
    blob = bytearray(path.read_bytes())
    middle = len(blob) // 2
    blob[middle : middle + 64] = bytes(b ^ 0xFF for b in blob[middle : middle + 64])
    path.write_bytes(bytes(blob))
    monkeypatch.setattr(_exported, "_MEMORY", {})  # as a second process
    with pytest.warns(UserWarning, match=f"kept compiled kernel {path} is damaged"):
        out = _exported.call(double, jnp.ones(3))
    np.testing.assert_array_equal(np.asarray(out), 2.0 * np.ones(3))
    monkeypatch.setattr(_exported, "_MEMORY", {})
    np.testing.assert_array_equal(np.asarray(_exported.call(double, jnp.ones(3))), 2.0)
    # triple's entry put where double's is looked for
    _exported.call(triple, jnp.ones(3))
    (other,) = set(tmp_path.glob("*.jaxexport")) - {path}
    path.write_bytes(other.read_bytes())
    monkeypatch.setattr(_exported, "_MEMORY", {})
    with pytest.warns(UserWarning, match="belongs to another kernel"):
        out = _exported.call(double, jnp.ones(3))
    np.testing.assert_array_equal(np.asarray(out), 2.0 * np.ones(3))
