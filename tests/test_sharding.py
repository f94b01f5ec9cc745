"""Sweeps split over devices (forced host devices) and over jax.distributed processes."""

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


SCRIPT = pathlib.Path(__file__).with_name("multidevice_sweep.py")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    return {**env, "JAXIDENT_CACHE": "0", **extra}


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
    np.testing.assert_allclose(r["many"][ok], r["one"][ok], rtol=1e-12, atol=0)
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
    np.testing.assert_allclose(joined.values[ok], single.values[ok], rtol=1e-12, atol=0)
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
