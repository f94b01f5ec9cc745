"""Run by tests/identify/test_sharding.py in fresh processes, which need their own device setup:

python multidevice_sweep.py sharded OUT.npz          (XLA_FLAGS forces 4 CPU devices)
python multidevice_sweep.py process I PORT OUT_DIR   (one of two jax.distributed processes)
"""

import sys

import jax
import numpy as np


def svir_samples(n: int):
    import jaxident as ji

    model = ji.models.load("svir")
    samples = np.array(ji.latin_hypercube(jax.random.key(0), model.parameters, n))
    samples[[i for i in (5, 30, 130, 400) if i < n]] = np.nan  # failed in every run
    return model, samples


def sharded(out: str) -> None:
    import jaxident as ji

    model, samples = svir_samples(512)

    def fn(th):
        return ji.sensitivity_matrix(model, th)

    many = ji.sweep(fn, samples, batch_size=128, progress=False)
    one = ji.sweep(fn, samples, batch_size=128, progress=False, devices=jax.devices()[:1])
    np.savez(
        out,
        many=many.values,
        many_ok=many.ok,
        one=one.values,
        one_ok=one.ok,
        many_devices=len(many.devices),
        one_devices=len(one.devices),
        n_devices=len(jax.devices()),
    )


def process(i: int, port: str, out_dir: str) -> None:
    jax.distributed.initialize(f"localhost:{port}", num_processes=2, process_id=i)
    import jaxident as ji

    model, samples = svir_samples(64)
    res = ji.sweep(
        lambda th: ji.sensitivity_matrix(model, th),
        samples,
        batch_size=16,
        progress=False,
        out_dir=out_dir,
    )
    print(f"process {i}: computed {int(res.computed.sum())} rows", flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    jax.config.update("jax_enable_x64", True)
    if sys.argv[1] == "sharded":
        sharded(sys.argv[2])
    else:
        process(int(sys.argv[2]), sys.argv[3], sys.argv[4])
