"""Accuracy measures of a column subset selection (Pearce et al. 2022, section 5)."""

import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from ._misc import after, block_masks, column_norms, leading_block_inverse, svdvals
from ._rank import RelativeTolerance


def css_metrics(
    sigma: Float[Array, " p"], R: Float[Array, "p p"], k: Int[Array, ""], n: int
) -> tuple[Float[Array, ""], Float[Array, ""], Float[Array, ""]]:
    """`(gamma1, gamma2, tau)` of paper eqs. (5.1)-(5.3), from the singular values
    `sigma` of `S` (`n` rows), the triangular factor `R` of `S[:, perm]` and the
    number `k` of selected columns.

    - `gamma1 = sigma_k(S1) / sigma_k(S) <= 1`: how independent the selected columns are.
    - `gamma2 = ||S2 - S1 S1^+ S2||_2 / sigma_{k+1}(S) >= 1`: how well they span the rest.
    - `tau = cond(S1) / cond(S)`: the improvement in conditioning.

    Closer to 1 is better for `gamma1` and `gamma2`. `gamma1` is NaN when `k = 0`;
    `gamma2` is NaN when `k = p` or when `sigma_{k+1}` is below the default rank rule
    `RelativeTolerance()` (`max(n, p) eps sigma_1`), where it would only measure
    rounding (the Kahan and Gu-Eisenstat matrices).
    """
    p = R.shape[0]
    _, _, b11, _, b22 = block_masks(p, k)
    s11 = svdvals(jnp.where(b11, R, 0.0))
    s22 = svdvals(jnp.where(b22, after(R, s11), 0.0))
    km1 = jnp.clip(k - 1, 0, p - 1)
    kk = jnp.clip(k, 0, p - 1)
    nan = jnp.asarray(jnp.nan, R.dtype)
    gamma1 = jnp.where(k > 0, s11[km1] / sigma[km1], nan)
    meaningful = (k < p) & (kk.astype(jnp.int32) < RelativeTolerance()(sigma, (n, p)))
    gamma2 = jnp.where(meaningful, s22[0] / jnp.where(meaningful, sigma[kk], 1.0), nan)
    cond_s1 = s11[0] / s11[km1]
    cond_s = sigma[0] / sigma[-1]
    tau = jnp.where(k > 0, cond_s1 / cond_s, nan)
    return gamma1, gamma2, tau


def srrqr_rho(R: Float[Array, "p p"], k: Int[Array, ""]) -> Float[Array, ""]:
    """`max_ij sqrt((R11^-1 R12)_ij^2 + (gamma_j(R22) / omega_i(R11))^2)` for a
    triangular `R` split at `k` (0 when `k` is 0 or `p`). A strong RRQR with parameter
    `f` guarantees this is `<= f` (Gu & Eisenstat 1996, eq. 3)."""
    p = R.shape[0]
    _, first, _, b12, _ = block_masks(p, k)
    Rinv, AB, _ = leading_block_inverse(R, k)
    gamma = column_norms(jnp.where(~first[:, None], R, 0.0))
    inv_omega = column_norms(Rinv.T)
    rho2 = jnp.where(b12, AB**2 + (inv_omega[:, None] * gamma[None, :]) ** 2, 0.0)
    return jnp.sqrt(jnp.max(rho2))
