"""Sweeps split over devices (forced host devices) and over jax.distributed processes;
fits on a device of their own (the host's CPU on a GPU machine)."""

import os
import pathlib
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest
from multidevice_sweep import svir_samples

import jaxident as ji
from jaxident._runtime._config import fit_device


SCRIPT = pathlib.Path(__file__).with_name("multidevice_sweep.py")
FIT_SCRIPT = pathlib.Path(__file__).with_name("fit_device.py")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    # the scripts import the tests' shared modules (tests/)
    shared = str(pathlib.Path(__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (shared, env.get("PYTHONPATH", "")) if p)
    return {**env, "JAXIDENT_CACHE": "0", "PYTHONPATH": path, **extra}


def test_sharded_sweep_equals_single_device(tmp_path):
    out = tmp_path / "out.npz"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "sharded", str(out)],
        env=_env(XLA_FLAGS="--xla_force_host_platform_device_count=4"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = np.load(out)
    assert int(r["n_devices"]) == 4
    assert int(r["many_devices"]) == 4 and int(r["one_devices"]) == 1
    np.testing.assert_array_equal(r["many_ok"], r["one_ok"])
    assert np.flatnonzero(~r["many_ok"]).tolist() == [5, 30, 130, 400]
    ok = r["one_ok"]
    assert np.all(np.isfinite(r["one"][ok]))
    np.testing.assert_allclose(r["many"][ok], r["one"][ok], rtol=1e-9, atol=0)
    assert np.all(np.isnan(r["many"][~ok])) and np.all(np.isnan(r["one"][~ok]))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_two_processes_share_a_sweep(tmp_path):
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(SCRIPT), "process", str(i), str(port), str(tmp_path)],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(o[-3000:] for o in outs)
    # each process took two of the four chunks of 16
    assert "computed 32 rows" in outs[0] and "computed 32 rows" in outs[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part-0-of-2", "part-1-of-2"]

    model, samples = svir_samples(64)
    single = ji.sweep(
        lambda th: ji.sensitivity_matrix(model, th), samples, batch_size=16, progress=False
    )
    joined = ji.load_sweep(tmp_path, like=single.values)
    assert joined.computed.all()
    np.testing.assert_array_equal(joined.ok, single.ok)
    ok = single.ok
    np.testing.assert_allclose(joined.values[ok], single.values[ok], rtol=1e-9, atol=0)
    assert np.all(np.isnan(joined.values[~ok]))


def test_one_process_share_of_chunks(tmp_path, monkeypatch):
    """Process 1 of 3 takes chunks 1, 4, ...; the other rows are left unset, and
    load_sweep reports them as not computed."""
    monkeypatch.setattr(jax, "process_count", lambda: 3)
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    xs = np.linspace(0.0, 1.0, 11)
    res = ji.sweep(lambda x: 2 * x, xs, batch_size=2, progress=False, out_dir=tmp_path)
    mine = np.zeros(11, bool)
    mine[[2, 3, 8, 9]] = True
    np.testing.assert_array_equal(res.computed, mine)
    np.testing.assert_allclose(res.values[mine], 2 * xs[mine])
    assert np.all(np.isnan(res.values[~mine])) and res.n_failed == 0
    joined = ji.load_sweep(tmp_path)
    np.testing.assert_array_equal(joined.computed, mine)
    np.testing.assert_allclose(joined.values[0][mine], 2 * xs[mine])
    assert "computed=4" in repr(joined)


def test_bad_devices_and_mesh():
    xs = np.arange(4.0)
    with pytest.raises(ValueError, match="devices must be a non-empty list"):
        ji.sweep(lambda x: x, xs, devices=[], progress=False)
    with pytest.raises(ValueError, match="twice"):
        d = jax.devices()[0]
        ji.sweep(lambda x: x, xs, devices=[d, d], progress=False)
    with pytest.raises(TypeError, match="Mesh"):
        ji.sweep(lambda x: x, xs, mesh="cpu", progress=False)
    with pytest.raises(ValueError, match="holds no sweep results"):
        ji.load_sweep(pathlib.Path("/nonexistent-jaxident"))


_FIT_KERNELS = ("_fit_problem", "_fit_problems", "fit_kernel", "lm_begin", "lm_advance",
                "lm_finish")  # fmt: skip


@pytest.mark.slow  # 98 s on 2 cores (every fit kernel compiled for two devices); a GPU concern
def test_fits_run_on_the_fit_device(tmp_path):
    """On a GPU machine fits run on the host's CPU (`fit_device`). Here two forced CPU
    devices stand for the two: with the fit device set to the second, every fit kernel
    (one start, starts one by one and side by side, a stepwise re-estimation in chunks)
    runs there and nothing else does. Each fit ends where it ends on the default device,
    its estimate comes back to the default device, and the sensitivities computed at it
    there need no move (arrays on two devices would raise). The kept kernels are
    exported and keyed for the arguments' device (the cache is on)."""
    out = tmp_path / "out.npz"
    env = _env(XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAXIDENT_CACHE=str(tmp_path / "cache"))  # fmt: skip
    proc = subprocess.run([sys.executable, str(FIT_SCRIPT), str(out)], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = np.load(out)
    seen = {k: r[k].tolist() for k in r.files if k.startswith("seen_")}
    for name in _FIT_KERNELS:
        assert seen[f"seen_default_{name}"] == [0] and seen[f"seen_other_{name}"] == [1], seen
    others = [k[len("seen_other_") :] for k in seen if k.startswith("seen_other_")]
    others = [k for k in others if k not in _FIT_KERNELS]
    assert others and all(seen[f"seen_other_{k}"] == [0] for k in others), seen
    assert int(r["default_one_home"]) == 0 and int(r["other_one_home"]) == 0
    for k in ("many", "side", "one", "at_fit", "stepwise"):
        np.testing.assert_allclose(r[f"other_{k}"], r[f"default_{k}"], rtol=1e-9, atol=0)
    # and they are fits: the optimum of the data's closed form (k 0.3, V 2)
    np.testing.assert_allclose(r["other_one"], [0.3037857, 1.9976265], rtol=1e-6)


def test_fit_device_setting(monkeypatch):
    """On a CPU backend fits stay on the default device; `JAXIDENT_FIT_DEVICE` takes
    `cpu` (the default) or `default`, and nothing else."""
    assert jax.default_backend() == "cpu" and fit_device() is None
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert fit_device() == jax.devices("cpu")[0]
    monkeypatch.setenv("JAXIDENT_FIT_DEVICE", "default")
    assert fit_device() is None
    monkeypatch.setenv("JAXIDENT_FIT_DEVICE", "gpu")
    with pytest.raises(ValueError, match="JAXIDENT_FIT_DEVICE must be 'cpu' or 'default'"):
        fit_device()
