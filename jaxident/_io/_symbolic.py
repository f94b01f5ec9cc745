"""Symbolic expressions (SymPy trees from a parser or from SBML's MathML, never from
`eval`) evaluated as JAX operations, and ordered so that each is evaluated after the
quantities it uses."""

import math
from collections.abc import Mapping, Sequence

import jax.numpy as jnp
import sympy as sp
from jax import lax
from jaxtyping import Array, ArrayLike


TIME = "time"  # the symbol of time, in SBML (csymbol) and PEtab formulas alike


class UnsupportedMath(ValueError):
    """An expression uses an operation with no JAX counterpart here."""


# `lax`'s own primitives where they take the arrays as they come (a JAX scalar, or a
# Python float for a number): `jnp`'s functions wrap each in a jitted function of its
# own, which costs tracing time on a model of hundreds of operations
_FUNCTIONS = {
    sp.exp: lax.exp,
    sp.log: lax.log,
    sp.Abs: lax.abs,
    sp.sin: lax.sin,
    sp.cos: lax.cos,
    sp.tan: lax.tan,
    sp.asin: jnp.arcsin,
    sp.acos: jnp.arccos,
    sp.atan: jnp.arctan,
    sp.sinh: jnp.sinh,
    sp.cosh: jnp.cosh,
    sp.tanh: lax.tanh,
    sp.floor: lax.floor,
    sp.ceiling: lax.ceil,
    sp.sign: lax.sign,
}

_RELATIONS = {
    sp.StrictLessThan: jnp.less,
    sp.LessThan: jnp.less_equal,
    sp.StrictGreaterThan: jnp.greater,
    sp.GreaterThan: jnp.greater_equal,
    sp.Equality: jnp.equal,
    sp.Unequality: jnp.not_equal,
}


def _is_jax(*values) -> bool:
    return any(not isinstance(v, (int, float)) for v in values)


def _add(a, b):
    return lax.add(a, b) if _is_jax(a, b) else a + b


def _mul(a, b):
    return lax.mul(a, b) if _is_jax(a, b) else a * b


def _power(base: Array, exponent: sp.Expr, env) -> Array:
    n = _small_integer(exponent)
    if n is None:
        return jnp.power(base, evaluate(exponent, env))
    if not _is_jax(base):
        return float(base) ** n if n >= 0 or base != 0 else math.inf
    if n < 0:
        return lax.div(1.0, _integer_power(base, -n))
    return _integer_power(base, n)


def _small_integer(exponent: sp.Expr) -> int | None:
    if exponent.is_number and float(exponent).is_integer() and abs(float(exponent)) <= 64:
        return int(float(exponent))
    return None


def _integer_power(base: Array, n: int) -> Array:
    return base if n == 1 else lax.integer_pow(base, n)


def _reciprocal(power: sp.Pow, n: int, env) -> ArrayLike:
    """`1 / base**n` for `power = base**-n`, computed once per evaluation environment
    (a model divides every rate law by its compartment's size: one division, and one
    derivative of it, not one per rate)."""
    key = ("1/", power)
    if key in env:
        return env[key]
    out = _power(evaluate(power.args[0], env), sp.Integer(-n), env)
    if isinstance(env, dict):
        env[key] = out
    return out


def _product(factors: Sequence[sp.Expr], env) -> ArrayLike:
    """The product of `factors`, a coefficient of 1 dropped and each reciprocal computed
    once (`_reciprocal`): a rate law `1.0*k*x/V` costs two multiplications, not five
    operations. (A coefficient of -1 stays a multiplication: subtracting instead made
    Schwen's vmapped sensitivity sweep 6% slower.)"""
    out = None
    for f in factors:
        if f.is_Number and float(f) == 1.0:
            continue
        n = _small_integer(f.args[1]) if isinstance(f, sp.Pow) else None
        v = _reciprocal(f, -n, env) if n is not None and n < 0 else evaluate(f, env)
        out = v if out is None else _mul(out, v)
    return 1.0 if out is None else out


# XLA's CPU compiler fuses a concatenate with its operands only up to this many operands
# (`kMaxConcatenateArguments` of its instruction fusion); above, every operand is a
# computation of its own, dispatched one by one at every evaluation
_CONCATENATED = 8


def stack(values: Sequence, grouped: bool = True) -> Array:
    """`jnp.stack(values)` (arrays of one shape). `grouped`: built from stacks of at
    most `_CONCATENATED` values each, so that XLA fuses each group with the expressions
    that compute it (and so the tangents of each group under `jvp`): a right-hand side
    of 9 states stacked at once left one computation per state and evaluation, 174 of
    a Rodas4 step's 410 on Fujita (180 in all after). The groups are padded and
    stacked as rows of a matrix, which XLA does not merge back into one concatenate.
    Under a `vmap` over samples the fused groups are slower than the plain stack
    (their loops cannot be vectorised across the samples: Schwen's tangents 1.6x), so
    batched kernels take `grouped=False` (`SBMLModel.for_batches`)."""
    values = [jnp.asarray(v) for v in values]
    if not grouped or len(values) <= _CONCATENATED:
        return jnp.stack(values)
    padded = values + [jnp.zeros_like(values[0])] * (-len(values) % _CONCATENATED)
    groups = [jnp.stack(padded[i : i + _CONCATENATED])
              for i in range(0, len(padded), _CONCATENATED)]  # fmt: skip
    return stack(groups).reshape(-1, *values[0].shape)[: len(values)]


def evaluate(expr: sp.Basic, env: Mapping) -> ArrayLike:
    """The value of `expr` with each symbol looked up by name in `env` (traced arrays
    inside `jit`): a JAX scalar, or a Python float where `expr` holds no symbol. Raises
    `UnsupportedMath` for an operation it does not know, and `KeyError` naming an
    undefined symbol."""
    if isinstance(expr, sp.Symbol):
        try:
            return env[expr.name]
        except KeyError:
            raise KeyError(f"undefined symbol {expr.name!r}") from None
    if expr is sp.true or expr is sp.false:
        return jnp.asarray(bool(expr))
    if expr is sp.pi:
        return math.pi
    if expr is sp.E:
        return math.e
    if expr is sp.oo or expr is -sp.oo:
        return float(expr)
    if expr.is_Number:
        return float(expr)
    args = expr.args
    if isinstance(expr, sp.Add):
        out = evaluate(args[0], env)
        for a in args[1:]:
            out = _add(out, evaluate(a, env))
        return out
    if isinstance(expr, sp.Mul):
        return _product(args, env)
    if isinstance(expr, sp.Pow):
        return _power(evaluate(args[0], env), args[1], env)
    if isinstance(expr, sp.log) and len(args) == 2:
        return jnp.log(evaluate(args[0], env)) / jnp.log(evaluate(args[1], env))
    for kind, fn in _FUNCTIONS.items():
        if isinstance(expr, kind):
            return fn(*(evaluate(a, env) for a in args))
    if isinstance(expr, (sp.Max, sp.Min)):
        fn = jnp.maximum if isinstance(expr, sp.Max) else jnp.minimum
        out = evaluate(args[0], env)
        for a in args[1:]:
            out = fn(out, evaluate(a, env))
        return out
    for kind, fn in _RELATIONS.items():
        if isinstance(expr, kind):
            return fn(evaluate(args[0], env), evaluate(args[1], env))
    if isinstance(expr, (sp.And, sp.Or, sp.Xor)):
        fn = {sp.And: jnp.logical_and, sp.Or: jnp.logical_or, sp.Xor: jnp.logical_xor}
        fn = fn[type(expr)]
        out = evaluate(args[0], env)
        for a in args[1:]:
            out = fn(out, evaluate(a, env))
        return out
    if isinstance(expr, sp.Not):
        return jnp.logical_not(evaluate(args[0], env))
    if isinstance(expr, sp.Piecewise):
        # the last piece first, so that the first true condition wins
        out = None
        for value, cond in reversed(args):
            v = evaluate(value, env)
            if out is None:
                if cond is not sp.true:
                    raise UnsupportedMath(
                        f"piecewise without an 'otherwise' value: {expr}; add a last piece "
                        "whose condition is true."
                    )
                out = v
            else:
                out = jnp.where(evaluate(cond, env), v, out)
        return out
    name = getattr(expr.func, "__name__", type(expr).__name__)
    raise UnsupportedMath(f"unsupported operation {name!r} in {expr}")


def symbols_of(expr: sp.Basic) -> set[str]:
    return {s.name for s in expr.free_symbols}


def dependency_order(defs: Mapping[str, sp.Basic], what: str) -> list[str]:
    """The names of `defs` ordered so that each comes after the names of `defs` its
    expression uses; a cycle is an error naming its members."""
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(name: str, path: Sequence[str]):
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = " -> ".join([*path[path.index(name) :], name])
            raise ValueError(f"The {what} depend on each other in a cycle: {cycle}.")
        state[name] = 1
        for dep in sorted(symbols_of(defs[name])):
            if dep in defs:
                visit(dep, [*path, name])
        state[name] = 2
        order.append(name)

    for name in defs:
        visit(name, [])
    return order


def from_mathml(node, where: str) -> sp.Basic:
    """A libsbml `ASTNode` as a SymPy expression (`where` names it in errors)."""
    import libsbml as L

    if node is None:
        raise ValueError(f"{where}: missing math.")
    t = node.getType()
    out = _mathml_leaf(L, node, t)
    if out is None:
        kids = [from_mathml(node.getChild(i), where) for i in range(node.getNumChildren())]
        out = _mathml_operation(L, t, kids)
    if out is None:
        what = node.getName() or L.formulaToL3String(node)
        raise ValueError(f"{where}: the MathML operation {what!r} is not supported.")
    return out


def _mathml_leaf(L, node, t) -> sp.Basic | None:
    """A number, name or constant node as SymPy (libsbml is `L`); `None` for others."""
    if t == L.AST_INTEGER:
        return sp.Integer(node.getInteger())
    if t in (L.AST_REAL, L.AST_REAL_E):
        v = node.getReal()
        return sp.Float(v) if math.isfinite(v) else (sp.oo if v > 0 else -sp.oo)
    if t == L.AST_RATIONAL:
        return sp.Rational(node.getNumerator(), node.getDenominator())
    if t == L.AST_NAME:
        return sp.Symbol(node.getName())
    if t == L.AST_NAME_TIME:
        return sp.Symbol(TIME)
    if t == L.AST_NAME_AVOGADRO:
        return sp.Float(6.02214076e23)
    if t == L.AST_CONSTANT_E:
        return sp.E
    if t == L.AST_CONSTANT_PI:
        return sp.pi
    if t == L.AST_CONSTANT_TRUE:
        return sp.true
    if t == L.AST_CONSTANT_FALSE:
        return sp.false
    return None


def _mathml_operation(L, t, kids: list) -> sp.Basic | None:
    """An operation of type `t` on the SymPy `kids`; `None` where it is not supported."""
    if t == L.AST_PLUS:
        return sp.Add(*kids) if kids else sp.Integer(0)
    if t == L.AST_TIMES:
        return sp.Mul(*kids) if kids else sp.Integer(1)
    if t == L.AST_MINUS:
        return -kids[0] if len(kids) == 1 else kids[0] - kids[1]
    if t == L.AST_DIVIDE:
        return kids[0] / kids[1]
    if t in (L.AST_POWER, L.AST_FUNCTION_POWER):
        return kids[0] ** kids[1]
    if t == L.AST_FUNCTION_ROOT:
        return kids[-1] ** (1 / kids[0]) if len(kids) == 2 else sp.sqrt(kids[0])
    if t == L.AST_FUNCTION_LOG:
        return sp.log(kids[1], kids[0]) if len(kids) == 2 else sp.log(kids[0], 10)
    if t == L.AST_FUNCTION_PIECEWISE:
        pieces = [(kids[i], kids[i + 1]) for i in range(0, len(kids) - 1, 2)]
        if len(kids) % 2:
            pieces.append((kids[-1], sp.true))
        return sp.Piecewise(*pieces)
    unary = {
        L.AST_FUNCTION_EXP: sp.exp,
        L.AST_FUNCTION_LN: sp.log,
        L.AST_FUNCTION_ABS: sp.Abs,
        L.AST_FUNCTION_FLOOR: sp.floor,
        L.AST_FUNCTION_CEILING: sp.ceiling,
        L.AST_FUNCTION_SIN: sp.sin,
        L.AST_FUNCTION_COS: sp.cos,
        L.AST_FUNCTION_TAN: sp.tan,
        L.AST_FUNCTION_ARCSIN: sp.asin,
        L.AST_FUNCTION_ARCCOS: sp.acos,
        L.AST_FUNCTION_ARCTAN: sp.atan,
        L.AST_FUNCTION_SINH: sp.sinh,
        L.AST_FUNCTION_COSH: sp.cosh,
        L.AST_FUNCTION_TANH: sp.tanh,
        L.AST_LOGICAL_NOT: sp.Not,
    }
    if t in unary:
        return unary[t](kids[0])
    nary = {
        L.AST_LOGICAL_AND: sp.And,
        L.AST_LOGICAL_OR: sp.Or,
        L.AST_LOGICAL_XOR: sp.Xor,
        L.AST_FUNCTION_MAX: sp.Max,
        L.AST_FUNCTION_MIN: sp.Min,
    }
    if t in nary:
        return nary[t](*kids)
    relations = {
        L.AST_RELATIONAL_LT: sp.StrictLessThan,
        L.AST_RELATIONAL_LEQ: sp.LessThan,
        L.AST_RELATIONAL_GT: sp.StrictGreaterThan,
        L.AST_RELATIONAL_GEQ: sp.GreaterThan,
        L.AST_RELATIONAL_EQ: sp.Eq,
        L.AST_RELATIONAL_NEQ: sp.Ne,
    }
    if t in relations and len(kids) == 2:
        return relations[t](kids[0], kids[1], evaluate=False)
    return None
