"""Run by tests/identify/test_sharding.py in a fresh process with two forced CPU devices, the
second standing for the host's CPU of a GPU machine (`_config.fit_device`):

python fit_device.py OUT.npz

Every fit kernel (one start, several starts side by side, a stepwise re-estimation run
a few steps at a time) is called once with the fits on the default device and once on
the other; the script records the devices each kernel's arrays were on and what each
fit returned."""

import sys

import jax
import numpy as np
from models_for_tests import Decay, decay_data

import jaxident as ji
from jaxident._fit import _estimate, _multistart
from jaxident._runtime import _exported


def fits(on) -> tuple[dict, dict]:
    """Every kind of fit with its kernels on `on` (`None`: JAX's default device), and the
    devices each kernel's array arguments were on (by the kernel's name)."""
    for module in (_estimate, _multistart):
        module.fit_device = lambda: on
    seen = {}
    call = _exported.call

    def spy(kernel, *args, **kwargs):
        ids = {d.id for d in _exported.array_devices(args)}
        seen.setdefault(kernel.__name__, set()).update(ids)
        return call(kernel, *args, **kwargs)

    _exported.call = spy
    try:
        t, y = decay_data()
        model = Decay()
        problem = ji.Problem.from_model(model, y[:, None], t, 0.01)
        many = ji.estimate(problem, starts=4, key=jax.random.key(2), progress=False).fits
        side = ji.estimate(problem, starts=4, key=jax.random.key(2), progress=False, batch=2).fits
        one = ji.estimate(model, y, t, sigma=0.01, theta0=[0.4, 1.5])
        # a model computed at the fit, as an analysis after it does: no two devices
        at_fit = ji.sensitivity(model, one.theta).outputs
        method = ji.Stepwise(reestimate=True)
        steps = ji.set_by_set(model, y, t, method=method, progress=False)
    finally:
        _exported.call = call
    out = {
        "many": np.asarray(many.theta), "side": np.asarray(side.theta),
        "one": np.asarray(one.theta), "one_home": one.theta.devices().pop().id,
        "at_fit": np.asarray(at_fit), "stepwise": np.asarray(steps.theta),
    }  # fmt: skip
    return out, seen


if __name__ == "__main__":
    assert len(jax.devices()) == 2, jax.devices()
    default, seen_default = fits(None)
    other, seen_other = fits(jax.devices()[1])
    np.savez(
        sys.argv[1],
        **{f"seen_default_{k}": sorted(v) for k, v in seen_default.items()},
        **{f"seen_other_{k}": sorted(v) for k, v in seen_other.items()},
        **{f"default_{k}": v for k, v in default.items()},
        **{f"other_{k}": v for k, v in other.items()},
    )
