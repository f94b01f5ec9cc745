"""Compiled once: a second call of an entry point with a model of the same structure and
shapes (a fresh instance, other parameter values) neither traces nor compiles, and a
second Python process loads the sweeps' compiled kernels from the persistent cache."""

import collections
import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxident as ji
from jaxident._runtime._host import device_array


_EVENTS = collections.Counter()
jax.monitoring.register_event_duration_secs_listener(
    lambda name, duration, **kwargs: _EVENTS.update([name])
)


def _traces(call) -> int:
    """How many functions JAX traced (for compilation) while `call()` ran."""
    _EVENTS.clear()
    call()
    return _EVENTS["/jax/core/compile/jaxpr_trace_duration"]


def _twice(make_call):
    """`make_call(model)` with one model, then with a fresh instance: the second traces
    nothing."""
    make_call(0)()  # compiles, unless an earlier test in this process did already
    assert _traces(make_call(1)) == 0


def test_the_trace_counter_sees_compilations():
    assert _traces(lambda: jax.jit(lambda x: x * 3.0 + 1.0)(1.0)) == 1


def _svir(i):
    m = ji.models.load("svir")
    return m, m.parameters.nominal * (1.0 + 0.01 * i)


def test_sensitivity_selection_and_estimate_compile_once():
    _twice(lambda i: lambda: ji.simulate(*_svir(i)))
    _twice(lambda i: lambda: ji.select_parameters(ji.sensitivity(*_svir(i)), k=3))
    data = ji.simulate(*_svir(0)).ys
    _twice(lambda i: lambda: ji.estimate(_svir(i)[0], data, theta0=_svir(i)[1]))


def test_ld_sensitivity_and_perturbation_analysis_compile_once():
    d = jnp.asarray([1.0, -1.0, 0.5, 0.0])
    _twice(lambda i: lambda: ji.ld_sensitivity(*_svir(i), M=d))
    key = jax.random.key(0)
    _twice(lambda i: lambda: ji.perturbation_analysis(*_svir(i), t=10.0, key=key, q=2))


def test_lserc_and_reduce_parameters_compile_once():
    def model(i):
        m = ji.models.load("nonsmooth_dae_example")
        return m, m.parameters.nominal * (1.0 + 0.01 * i)

    _twice(lambda i: lambda: ji.lserc(*model(i), method=ji.LSERC(twin=0.0, singular=0.0)))
    samples = jnp.asarray(np.random.default_rng(0).uniform(1.0, 1.1, (4, 4))) * model(0)[1]
    _twice(
        lambda i: (
            lambda: ji.reduce_parameters(
                model(i)[0],
                samples * (1.0 + 0.01 * i),
                method=ji.LSERC(twin=0.0, singular=0.0),
                progress=False,
            )
        )
    )


def test_delay_estimability_compiles_once():
    r = ji.models.load("rossler")
    X = ji.attractor_states(r, n=3, spacing=5.0, transient=20.0)
    results = []

    def call(i):
        model = ji.models.load("rossler")
        scaled = X * (1.0 + 0.01 * i)
        return lambda: results.append(
            ji.delay_estimability(model, scaled, taus=[0.5], K=8, progress=False)
        )

    _twice(call)
    # K = 8 delay coordinates of one output cannot determine 10 unknowns: the Jacobian
    # has fewer rows than columns, and at least 2 null directions
    assert all(res.nullity >= 2 for res in results)


_SECOND_PROCESS = textwrap.dedent(
    """
    import json, jax
    hits = []
    jax.monitoring.register_event_listener(
        lambda name, **kw: hits.append(name) if name.endswith("cache_hits") else None
    )
    import jaxident as ji
    m = ji.models.load("svir")
    xs = ji.latin_hypercube(jax.random.key(0), m.parameters, 8)
    res = ji.sweep(lambda th: ji.sensitivity_matrix(m, th), xs, batch_size=8, progress=False)
    print(json.dumps({"hits": len(hits), "sum": float(res.values.sum()),
                      "cache": jax.config.jax_compilation_cache_dir,
                      "max_size": jax.config.jax_compilation_cache_max_size}))
    """
)


@pytest.mark.parametrize("setting", ["dir", "off", "jax"])
def test_a_second_process_loads_the_compiled_sweep(tmp_path, setting):
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env["JAXIDENT_CACHE"] = str(tmp_path / "cache") if setting == "dir" else "0"
    if setting == "jax":  # a folder chosen through JAX's own setting is bounded too
        env["JAX_COMPILATION_CACHE_DIR"] = env["JAXIDENT_CACHE"] = str(tmp_path / "cache")
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"

    def run():
        out = subprocess.run(
            [sys.executable, "-c", _SECOND_PROCESS], env=env, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    first, second = run(), run()
    assert second["sum"] == first["sum"]
    if setting in ("dir", "jax"):
        assert first["cache"] == env["JAXIDENT_CACHE"]
        assert any((tmp_path / "cache").iterdir())
        # bounded, hence locked: processes sharing it never read a half-written entry
        assert first["max_size"] == 2**30 and (tmp_path / "cache" / ".lockfile").exists()
        assert second["hits"] > first["hits"]
    else:
        assert first["cache"] is None and second["hits"] == 0


def test_device_array_is_asarray_without_a_compilation():
    """`device_array` (how concrete inputs become JAX arrays on a first answer) gives
    what `jnp.asarray` gives, dtype and weak type included, and compiles nothing for a
    NumPy value of a new shape (`jnp.asarray` compiles a small program per shape)."""
    rng = np.random.default_rng(0)
    cases = [
        (rng.normal(size=(3, 7)), None),
        (rng.integers(0, 5, size=11), None),
        (rng.normal(size=13) > 0, None),
        ([1.0, 2.5], None),
        ([1, 2], float),
        (np.float64(2.0), None),
        (True, None),
        (2.0, None),  # a Python number stays weakly typed
        (3, float),
        (jnp.arange(4.0), None),
    ]
    for value, dtype in cases:
        got, want = device_array(value, dtype), jnp.asarray(value, dtype)
        assert isinstance(got, jax.Array)
        assert (got.dtype, got.shape, got.weak_type) == (want.dtype, want.shape, want.weak_type)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    fresh = rng.normal(size=(17, 19))  # a shape no other test converts
    assert _traces(lambda: device_array(fresh)) == 0
    # under a trace it is jnp.asarray: a tracer in, a tracer out
    out = jax.jit(lambda x: device_array(x, float) * 2.0)(jnp.arange(3))
    np.testing.assert_array_equal(np.asarray(out), [0.0, 2.0, 4.0])
    out = jax.vmap(lambda x: device_array(x) + 1.0)(jnp.ones((2, 3)))
    np.testing.assert_array_equal(np.asarray(out), np.full((2, 3), 2.0))
