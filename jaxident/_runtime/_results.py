"""One status type for every result of the library, as diffrax's and optimistix's
`RESULTS`: an `eqx.Enumeration` that extends diffrax's (which extends optimistix's and
lineax's), so that a solver's, an optimizer's or a linear solve's status is one of
ours after `RESULTS.promote`. Every result module carries it as `result`; `ok` where a
result module offers it is `result == RESULTS.successful`, never a field of its own.

A batch (from `vmap`, `ji.sweep` or a host loop) carries one status per element: the
item's value is then an array of codes, compared elementwise. `status_array` makes one
on the host from per-element codes; `succeeded` reads it back as booleans.
"""

import diffrax
import jax
import numpy as np

from ._equinox import enumeration_codes, enumeration_item, enumeration_items


class RESULTS(diffrax.RESULTS):  # pyright: ignore[reportGeneralTypeIssues]
    max_swaps_reached = (
        "The strong rank-revealing QR stopped at its cap on swaps before every entry of "
        "sqrt((R11^-1 R12)_ij^2 + (gamma_j/omega_i)^2) was <= f. Raise `max_swaps`, or "
        "use a larger `f`."
    )
    singular_leading_block = (
        "The leading k x k block R11 is exactly singular: k exceeds the rank of the "
        "matrix. Choose a smaller `k`, or let a rank rule choose it."
    )
    nonfinite_matrix = "The matrix contains NaN or inf entries."
    inconsistent_initial_values = (
        "No consistent initial values for the algebraic variables: the Newton solve of "
        "g(t0, x0, w, theta) = 0 did not converge, or g_w is singular there (the DAE is "
        "not index 1 at t0)."
    )
    nonfinite_output = (
        "The model produced NaN or inf outputs (the solver itself succeeded): check the "
        "model equations and the parameter values for divisions by zero, logarithms or "
        "square roots of negative numbers."
    )
    nonfinite_sensitivity = (
        "The sensitivities are NaN or inf although the solve succeeded: an output or a "
        "right-hand side is not differentiable at these parameter values."
    )
    zero_output = (
        "scale='relative' divides by the outputs, and an output is exactly zero at some "
        "observation time (often at t0). Drop that time from `times`, or use scale='none'."
    )
    zero_parameter = (
        "scale='relative' multiplies each column by its parameter value, and a "
        "parameter is exactly zero: its column would be zero and the parameter "
        "called non-identifiable for no reason. Use scale='none' there."
    )
    sample_failed = (
        "The computation failed at this sample (a solve, a fit or a factorization did "
        "not succeed, or its result was NaN or inf)."
    )
    fit_failed = "The fit did not reach a point its optimizer accepts as converged."


def items(enumeration=None) -> dict:
    """`{name: item}` of `RESULTS` (or of another enumeration)."""
    return enumeration_items(RESULTS if enumeration is None else enumeration)


def promoted(result) -> RESULTS:
    """`result` (of diffrax, optimistix, lineax or ours) as one of ours."""
    if isinstance(result, RESULTS):
        return result
    return RESULTS.promote(result)


def status_array(codes, failure=None) -> RESULTS:
    """A batch's status on the host: `codes` an array of `RESULTS` items' codes
    (`status_codes`), or booleans, `True` for success and `failure` (an item, default
    `sample_failed`) otherwise."""
    codes = np.asarray(codes)
    if codes.dtype == bool:
        bad = RESULTS.sample_failed if failure is None else failure
        codes = np.where(codes, status_codes(RESULTS.successful), status_codes(bad))
    return enumeration_item(np.asarray(codes, np.int32), RESULTS)


def status_codes(result: RESULTS):
    """The codes of a status (an array for a batch): NumPy for a concrete status, the
    traced value under a trace."""
    codes = enumeration_codes(result)
    return codes if isinstance(codes, jax.core.Tracer) else np.asarray(codes)


def succeeded(result: RESULTS):
    """Whether each element of `result` is `successful`: a NumPy array for a concrete
    status, a JAX array under a trace."""
    return status_codes(result) == status_codes(RESULTS.successful)


def checked(result: RESULTS, good, failure: RESULTS) -> RESULTS:
    """`result`, or `failure` where it succeeded but `good` (a scalar) does not hold:
    a later check never hides an earlier failure."""
    return RESULTS.where((result != RESULTS.successful) | good, result, failure)


def message(result: RESULTS) -> str | None:
    """The message of the first element of a concrete `result` that did not succeed, or
    `None` where every element did."""
    first = first_failure(result)
    return None if bool(succeeded(first)) else RESULTS[first]


def first_failure(result: RESULTS) -> RESULTS:
    """The first element of a concrete batch's status that did not succeed, or
    `successful`: the status of the whole batch."""
    codes = np.ravel(status_codes(result))
    bad = codes[codes != status_codes(RESULTS.successful)]
    code = bad[0] if bad.size else status_codes(RESULTS.successful)
    return enumeration_item(np.asarray(code, np.int32), RESULTS)


def names(result: RESULTS) -> list[str] | str:
    """The items' names (for files): one string, or nested lists for a batch."""
    by_code = {int(status_codes(v)): k for k, v in enumeration_items(RESULTS).items()}
    codes = status_codes(result)
    return np.vectorize(lambda c: by_code[int(c)], otypes=[object])(codes).tolist()
