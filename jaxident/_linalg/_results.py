"""Status codes of the linear-algebra core, in the style of `lineax.RESULTS`."""

import equinox as eqx


class RESULTS(eqx.Enumeration):
    successful = ""
    max_swaps_reached = (
        "The strong rank-revealing QR stopped at its cap on swaps before every entry of "
        "sqrt((R11^-1 R12)_ij^2 + (gamma_j/omega_i)^2) was <= f. Raise `max_swaps`, or "
        "use a larger `f`."
    )
    singular_leading_block = (
        "The leading k x k block R11 is exactly singular: k exceeds the rank of the "
        "matrix. Choose a smaller `k`, or let a rank rule choose it."
    )
    nonfinite_input = "The matrix contains NaN or inf entries."
