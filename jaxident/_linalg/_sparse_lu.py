"""A sparse LU factorization with a pattern fixed before tracing, for the Newton matrices
of large reaction networks.

The pattern of `A` (its diagonal included) is known from the model, so everything
symbolic is done once on the host: a fill-reducing symmetric ordering (multiple minimum
degree on `A + A^T`, SuperLU's `MMD_AT_PLUS_A`), the filled pattern of `L` and `U`
without pivoting, and level sets. A pivot's column and row are final once every pivot
that updates them is done, so the pivots of one level are eliminated together, and the
rows of one level of `L` (or `U`) are solved together; each level is one gather, one
multiply and one scatter over padded index arrays, in a `lax.scan`. This is what KLU's
refactorization does in CVODES (the pivot order of a first factorization reused), with
diagonal pivots in the fill-reducing order instead of a first numeric factorization:
a Newton matrix `I - c J` of a network has its largest entries on the diagonal where
`c` is small, and where a pivot grows too large the factorization says so (`ok`), for
the caller to use a dense LU with partial pivoting instead.

On Chen et al. 2009's 500-species network (4,400 nonzeros): 7,660 entries in `L + U`
(dense: 250,000), 44,000 multiplications to factorize, 59 levels. Each level is a few
microseconds of fixed work in a compiled loop on a CPU, so the cost follows the levels
more than the entries: on Chen a factorization and solve take 1.8x less time than
LAPACK's dense LU, but a solve of one right-hand side 1.5x more
(`benchmarks/bench_sparse_lu.py`).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float


# the largest entry of the factors against the largest of the matrix, beyond which the
# factorization without pivoting is refused (partial pivoting's growth is rarely above 10)
_GROWTH = 1e8


class SparseLUPlan:
    """What is fixed by the pattern: the ordering `perm` (row and column `i` of the
    ordered matrix are `perm[i]` of `A`), the entries of `L + U` (`rows`, `cols`, in the
    ordered matrix; `diag[i]` is the slot of `(i, i)`), and the levels of the
    factorization and of the two triangular solves. Compared and hashed by its pattern,
    so that it can be a static field."""

    def __init__(self, pattern: np.ndarray, packed: bytes):
        n = pattern.shape[0]
        self.n = n
        self._key = (n, packed)
        full = pattern | np.eye(n, dtype=bool)
        self.perm = _ordering(full)
        filled = _fill(full[np.ix_(self.perm, self.perm)])
        self.rows, self.cols = np.nonzero(filled)
        self.nnz = self.rows.size
        slot = np.full((n, n), self.nnz, dtype=np.int64)  # absent entries: the zero slot
        slot[self.rows, self.cols] = np.arange(self.nnz)
        self.diag = slot[np.arange(n), np.arange(n)]
        self.gather = (self.perm[self.rows], self.perm[self.cols])
        self.factor_levels = _factor_levels(filled, slot, self.nnz)
        self.lower = _solve_levels(np.tril(filled, -1), slot, self.nnz, n, reverse=False)
        self.upper = _solve_levels(np.triu(filled, 1), slot, self.nnz, n, reverse=True)

    def __eq__(self, other):
        return isinstance(other, SparseLUPlan) and self._key == other._key

    def __hash__(self):
        return hash(self._key)

    def __repr__(self):
        return f"SparseLUPlan(n={self.n}, nnz={self.nnz})"


@functools.lru_cache(maxsize=16)
def _plan(n: int, packed: bytes) -> SparseLUPlan:
    pattern = np.unpackbits(np.frombuffer(packed, np.uint8), count=n * n).astype(bool)
    return SparseLUPlan(pattern.reshape(n, n), packed)


def sparse_lu_plan(pattern, max_fill: float = 0.125) -> SparseLUPlan | None:
    """The plan of the sparse LU of matrices with nonzeros where `pattern` (`(n, n)`
    booleans) is true, or `None` where the factors would hold more than `max_fill` of a
    dense matrix's entries (a dense LU is then the faster)."""
    pattern = np.asarray(pattern, dtype=bool)
    n = pattern.shape[0]
    if pattern.shape != (n, n):
        raise ValueError(f"The pattern must be a square matrix, got {pattern.shape}.")
    plan = _plan(n, np.packbits(pattern).tobytes())
    return plan if plan.nnz <= max_fill * n * n else None


def _ordering(full: np.ndarray) -> np.ndarray:
    """Multiple minimum degree on the pattern of `A + A^T` (SuperLU's ordering, asked
    of a diagonally dominant matrix with this pattern, so that no pivoting moves it)."""
    import scipy.sparse as sp  # (only for a plan: kept out of `import jaxident`)
    import scipy.sparse.linalg as spla

    n = full.shape[0]
    sym = full | full.T
    M = sp.csc_matrix(np.where(sym, 1.0, 0.0) + n * np.eye(n))
    lu = spla.splu(M, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
                   options={"SymmetricMode": True})  # fmt: skip
    # SuperLU's perm_c puts column j at position perm_c[j]
    return np.argsort(lu.perm_c)


def _fill(B: np.ndarray) -> np.ndarray:
    """The pattern of `L + U` of an LU without pivoting of a matrix with pattern `B`."""
    B = B.copy()
    for k in range(B.shape[0]):
        below = np.flatnonzero(B[k + 1 :, k]) + k + 1
        right = np.flatnonzero(B[k, k + 1 :]) + k + 1
        B[np.ix_(below, right)] = True
    return B


def _levels(depends: np.ndarray, order) -> np.ndarray:
    """The level of each index: one more than the highest level it depends on."""
    level = np.zeros(depends.shape[0], dtype=np.int64)
    for i in order:
        on = np.flatnonzero(depends[i])
        level[i] = 1 + (level[on].max() if on.size else 0)
    return level


def _padded(groups: list, fill: int) -> np.ndarray:
    width = max(1, max(len(g) for g in groups))
    out = np.full((len(groups), width), fill, dtype=np.int64)
    for i, g in enumerate(groups):
        out[i, : len(g)] = g
    return out


def _factor_levels(filled: np.ndarray, slot: np.ndarray, nnz: int) -> tuple[np.ndarray, ...]:
    """Per level (a row each): the `L` entries divided by their pivots (`da / db`), and
    the updates `uc -= ua * ub` (target, `L` entry, `U` entry). Pivot `k` waits for every
    `m < k` whose column or row of the factors reaches row or column `k`."""
    n = filled.shape[0]
    level = _levels(np.tril(filled | filled.T, -1), range(n))
    div_a, div_b, up_c, up_a, up_b = [], [], [], [], []
    for lev in range(1, level.max() + 1):
        da, db, uc, ua, ub = [], [], [], [], []
        for k in np.flatnonzero(level == lev):
            below = np.flatnonzero(filled[k + 1 :, k]) + k + 1
            right = np.flatnonzero(filled[k, k + 1 :]) + k + 1
            da.extend(slot[below, k])
            db.extend([slot[k, k]] * below.size)
            ii, jj = np.meshgrid(below, right, indexing="ij")
            uc.extend(slot[ii, jj].ravel())
            ua.extend(slot[ii, k].ravel())
            ub.extend(slot[k, jj].ravel())
        div_a.append(da), div_b.append(db), up_c.append(uc), up_a.append(ua), up_b.append(ub)
    # padding: divide the zero slot by the one slot, add 0 * 0 to the zero slot
    return (_padded(div_a, nnz), _padded(div_b, nnz + 1), _padded(up_c, nnz),
            _padded(up_a, nnz), _padded(up_b, nnz))  # fmt: skip


def _solve_levels(T, slot, nnz: int, n: int, reverse: bool) -> tuple[np.ndarray, ...]:
    """Per level (a row each) of the triangular solve with the strict triangle `T`: the
    rows solved (padded with the dummy row `n`), the slots of the entries used, and
    where each goes (`row_in_level * (n + 1) + column`)."""
    order = range(n - 1, -1, -1) if reverse else range(n)
    level = _levels(T, order)
    rows, slots, where = [], [], []
    for lev in range(1, level.max() + 1):
        r = np.flatnonzero(level == lev)
        ii, jj = np.nonzero(T[r])
        rows.append(r)
        slots.append(slot[r[ii], jj])
        where.append(ii * (n + 1) + jj)
    width = max(len(r) for r in rows)
    return _padded(rows, n), _padded(slots, nnz), _padded(where, width * (n + 1) + n)


def sparse_lu_factor(plan: SparseLUPlan, A: Float[Array, "n n"]) -> tuple[Array, Bool[Array, ""]]:
    """The factors of `A` (dense, zero outside the plan's pattern) as the values of the
    plan's entries, and whether they are usable: finite, and no entry above `_GROWTH`
    times `A`'s largest (a pivot too small for an elimination without pivoting)."""
    values = A[plan.gather]
    # two slots at the end: zero (the padding's target and source) and one (its pivot)
    values = jnp.concatenate([values, jnp.array([0.0, 1.0], A.dtype)])

    def level(v, idx):
        da, db, uc, ua, ub = idx
        v = v.at[da].set(v[da] / v[db])
        v = v.at[uc].add(-v[ua] * v[ub])
        return v.at[-2].set(0.0), None

    values, _ = jax.lax.scan(level, values, plan.factor_levels)
    values = values[: plan.nnz]
    big = jnp.max(jnp.abs(A))
    ok = jnp.all(jnp.isfinite(values)) & (jnp.max(jnp.abs(values)) <= _GROWTH * big)
    return values, ok


def sparse_lu_solve(plan: SparseLUPlan, values: Array, b: Array) -> Array:
    """`A^{-1} b` from `sparse_lu_factor`'s values; `b` is `(n,)` or `(n, k)`."""
    n = plan.n
    vector = b.ndim == 1
    x = b[:, None] if vector else b
    k = x.shape[1]
    x = jnp.concatenate([x[plan.perm], jnp.zeros((1, k), x.dtype)])  # the dummy row n
    v = jnp.concatenate([values, jnp.zeros((1,), values.dtype)])  # the zero slot
    pivots = jnp.concatenate([values[plan.diag], jnp.ones((1,), values.dtype)])

    def sweep(divide):
        def level(x, idx):
            rows, slots, where = idx
            width = rows.shape[0]
            products = v[slots][:, None] * x[where % (n + 1)]
            sums = jax.ops.segment_sum(products, where // (n + 1), num_segments=width + 1)
            new = x[rows] - sums[:width]
            if divide:
                new = new / pivots[rows][:, None]
            return x.at[rows].set(new).at[n].set(0.0), None

        return level

    x, _ = jax.lax.scan(sweep(False), x, plan.lower)
    x, _ = jax.lax.scan(sweep(True), x, plan.upper)
    x = jnp.zeros((n, k), x.dtype).at[plan.perm].set(x[:n])
    return x[:, 0] if vector else x
