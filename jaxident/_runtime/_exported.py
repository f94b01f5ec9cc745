"""Compiled kernels that a second Python process loads instead of tracing them again.

JAX's persistent compilation cache (see `_config.py`) skips XLA's compilation in a second
process, but not the tracing and lowering that come before it, which on a DAE or L-SERC
kernel take seconds. So `call(kernel, args)` serializes the lowered kernel with
`jax.export` the first time, in `<compilation cache>/jaxident-exported/`, under a key of
everything the trace depends on, and a later process deserializes it (milliseconds) and
lets the compilation cache serve XLA's part.

The key is a SHA-256 of: the library versions (jax, jaxlib, equinox, diffrax, lineax,
optimistix, numpy, Python), the source of jaxident itself, the platform (JAX's default,
and the one the arguments are on), equinox's error mode, the kernel's name, and every
argument: arrays by shape and dtype, everything else (the static part of
`eqx.filter_jit`) by value. A model's class counts by its code: the bytecode, constants
and defaults of its methods, and recursively of the functions and values they name at
module level, as they are now. Anything that cannot be keyed that way (an object of an
unknown type in a static field, say) makes the call a plain kernel call. What the key
cannot see is code reached through another module's attribute (`helpers.rate(x)`, where
`helpers` is the user's own module): a change there is seen by a new process only once
the cache folder is cleared (or `JAXIDENT_CACHE=0`).
"""

import dataclasses
import enum
import functools
import hashlib
import importlib.metadata
import pathlib
import pickle
import sys
import types
import warnings
import weakref

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._config import compiler_options
from ._equinox import on_error_mode
from ._files import write_atomic


_LIBRARIES = frozenset(
    {"jaxident", "jax", "jaxlib", "equinox", "diffrax", "lineax", "optimistix", "optax"}
    | {"numpy", "scipy", "sympy", "jaxtyping", "typing_extensions"}
    | set(sys.stdlib_module_names)
)
_VERSIONED = ("jax", "jaxlib", "equinox", "diffrax", "lineax", "optimistix", "numpy", "sympy")
_MAX_FILES = 400  # entries kept on disk (about 0.1-1 MB each); the oldest go first
# class attributes that are bookkeeping, not behaviour in a trace (construction and
# printing: an instance's field values are keyed themselves)
_SKIP = frozenset(
    {"__init__", "__post_init__", "__check_init__", "__repr__", "__str__", "__eq__"}
    | {"__hash__", "__setattr__", "__delattr__", "__getstate__", "__setstate__"}
    | {"__dict__", "__weakref__", "__doc__", "__module__", "__qualname__", "__annotations__"}
    | {"__dataclass_fields__", "__dataclass_params__", "__match_args__", "__slots__"}
    | {"__abstractmethods__", "_abc_impl", "__parameters__", "__orig_bases__"}
    | {"__firstlineno__", "__static_attributes__", "__annotate__", "__signature__"}
)


class _Unkeyable(Exception):
    pass


def _library(obj) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return module.split(".")[0] in _LIBRARIES


def source_files() -> tuple[pathlib.Path, list[pathlib.Path]]:
    """The package's folder and every Python file in it, in every layer's subfolder
    (this module lives in `_runtime/`, one below the package)."""
    root = pathlib.Path(__file__).resolve().parent.parent
    return root, sorted(root.rglob("*.py"))


@functools.cache
def environment() -> str:
    """Versions, jaxident's own source and the platform: the part of the key that is the
    same for every call in this process."""
    h = hashlib.sha256(sys.version.encode())
    for name in _VERSIONED:
        try:
            h.update(f"{name}={importlib.metadata.version(name)};".encode())
        except importlib.metadata.PackageNotFoundError:
            h.update(f"{name}=?;".encode())
    root, files = source_files()
    for path in files:
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    h.update(f"{jax.default_backend()};x64={jax.config.jax_enable_x64}".encode())
    return h.hexdigest()


def _code(co: types.CodeType) -> tuple:
    consts = tuple(
        _code(c) if isinstance(c, types.CodeType) else _value(c, True) for c in co.co_consts
    )
    return (co.co_code.hex(), co.co_names, co.co_varnames, co.co_freevars, consts)


def _names(co: types.CodeType) -> set:
    """The global names a code object (and the code nested in it) may read."""
    out = set(co.co_names)
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            out |= _names(c)
    return out


# memos, per process (as JAX's own caches: a function counts as its code at first use)
_FUNCTIONS: dict = {}
_CLASSES: dict = {}


def _function(f) -> tuple:
    if _library(f):
        return ("fn", f.__module__, f.__qualname__)
    if f in _FUNCTIONS:
        return _FUNCTIONS[f]
    _FUNCTIONS[f] = ("fn", f.__module__, f.__qualname__, "(recursive)")  # for cycles
    cells = tuple(_value(c.cell_contents, True) for c in (f.__closure__ or ()))
    used = []
    for name in sorted(_names(f.__code__)):
        if name in f.__globals__:
            v = f.__globals__[name]
            used.append((name, v.__name__ if isinstance(v, types.ModuleType) else _value(v, True)))
    out = (
        "fn",
        f.__module__,
        f.__qualname__,
        _code(f.__code__),
        _value(f.__defaults__, True),
        _value(f.__kwdefaults__, True),
        cells,
        tuple(used),
    )
    _FUNCTIONS[f] = out
    return out


def _class(cls: type) -> tuple:
    if _library(cls):
        return ("cls", cls.__module__, cls.__qualname__)
    if cls in _CLASSES:
        return _CLASSES[cls]
    _CLASSES[cls] = ("cls", cls.__module__, cls.__qualname__, "(recursive)")
    parts = []
    for base in cls.__mro__:
        if _library(base):
            parts.append((base.__module__, base.__qualname__))
            continue
        for name, attr in sorted(vars(base).items()):
            if name in _SKIP:
                continue
            if isinstance(attr, (staticmethod, classmethod)):
                attr = attr.__func__
            if isinstance(attr, property):
                attr = (attr.fget, attr.fset)
            elif isinstance(attr, functools.cached_property):
                attr = attr.func
            parts.append((base.__qualname__, name, _value(attr, True)))
    out = ("cls", cls.__module__, cls.__qualname__, tuple(parts))
    _CLASSES[cls] = out
    return out


def _value(x, const: bool = False):
    """A fingerprint of `x` that is equal in two processes exactly when `x` would trace
    the same. Arrays count by shape and dtype where they are the kernel's inputs, by
    value where they are constants of the trace (`const`: in a class, a function's
    globals, closure or defaults, a static object)."""
    if x is None or isinstance(x, (bool, int, float, complex, str, bytes)):
        return (type(x).__name__, repr(x))
    if isinstance(x, jax.Array) or eqx.is_array(x):
        weak = getattr(x, "weak_type", False)
        if const:
            data = hashlib.sha256(np.ascontiguousarray(np.asarray(x)).tobytes()).hexdigest()
            return ("constant", tuple(x.shape), str(x.dtype), data)
        return ("array", tuple(x.shape), str(x.dtype), weak)
    if isinstance(x, (tuple, list)):
        return (type(x).__name__, tuple(_value(v, const) for v in x))
    if isinstance(x, dict):
        return ("dict", tuple((_value(k, const), _value(v, const)) for k, v in x.items()))
    if isinstance(x, (set, frozenset)):
        return ("set", tuple(sorted(repr(_value(v, const)) for v in x)))
    if isinstance(x, type):
        return _class(x)
    if isinstance(x, types.FunctionType):
        return _function(x)
    if isinstance(x, types.MethodType):
        return ("method", _function(x.__func__), _value(x.__self__, True))
    if isinstance(x, functools.partial):
        return ("partial", _value(x.func, True), _value(x.args, True), _value(x.keywords, True))
    if isinstance(x, enum.Enum):
        return ("enum", _class(type(x)), x.name)
    if dataclasses.is_dataclass(x):  # equinox modules among them
        fields = tuple(
            (f.name, _value(getattr(x, f.name, None), const)) for f in dataclasses.fields(x)
        )
        return ("dataclass", _class(type(x)), fields)
    if _is_sympy(x):  # (so sympy is imported already)
        return ("sympy", _srepr(x))
    if _library(x) and hasattr(x, "__qualname__"):  # jnp.sin, a custom_jvp of a library
        return ("callable", x.__module__, x.__qualname__)
    raise _Unkeyable(type(x).__qualname__)


def _is_sympy(x) -> bool:
    return type(x).__module__.split(".")[0] == "sympy"


@functools.lru_cache(maxsize=1 << 16)
def _srepr(expr) -> str:
    """sympy's exact text of an expression, kept per expression: a large SBML model's
    formulas are keyed at every call of a kernel (SalazarCavazos' 618 rate laws, at
    every call), and sympy's expressions are immutable and hashable."""
    return sys.modules["sympy"].srepr(expr)


def array_devices(args) -> list:
    """The devices of the JAX arrays in `args`, in the order of its leaves (NumPy arrays
    have none)."""
    return [d for a in jax.tree.leaves(args) if isinstance(a, jax.Array) for d in a.devices()]


def _platform(args) -> str:
    """Where a kernel called with `args` runs: the platform of its (committed) arrays,
    JAX's default backend where it has none."""
    found = {d.platform for d in array_devices(args)}
    return found.pop() if len(found) == 1 else jax.default_backend()


# `(kernel, treedef, leaves' signature) -> (leaves, key)`: a repeated call (each
# evaluation of a fit: a new tree of the same objects) keyed without fingerprinting the
# whole tree again (a sixth of Boehm's evaluation). Leaves other than JAX
# arrays count by identity, and only where they are immutable (`_FIXED`); they are held
# here, so that their ids are not reused. The treedef compares static fields by value.
_KEYS: dict = {}
_MAX_KEYS = 64
# leaves whose fingerprint cannot change while they live (a NumPy array is keyed by its
# shape and dtype only, which it keeps; functions are kept by identity in `_FUNCTIONS`)
_FIXED = (type(None), bool, int, float, complex, str, bytes, np.ndarray, np.generic,
          types.FunctionType, enum.Enum, type)  # fmt: skip


def _fixed(leaf) -> bool:
    return isinstance(leaf, _FIXED) or _is_sympy(leaf)


def _key(kernel, args) -> str | None:
    """The key of `kernel` called with `args` (`None` where something in them cannot be
    keyed across processes): a hash of `_value(args)`, kept per tree structure."""
    leaves, treedef = jax.tree.flatten(args)
    arrays = [isinstance(a, jax.Array) for a in leaves]
    if not all(is_array or _fixed(a) for a, is_array in zip(leaves, arrays)):
        return _full_key(kernel, args)
    signature = tuple(
        (a.shape, a.dtype, getattr(a, "weak_type", False)) if is_array else id(a)
        for a, is_array in zip(leaves, arrays)
    )
    # (the platform read from the leaves already flattened, not from the tree again)
    memo = (kernel, treedef, signature, environment(), _platform(leaves), on_error_mode())
    try:
        hash(memo)
    except TypeError:  # a static field that cannot be hashed
        return _full_key(kernel, args)
    found = _KEYS.get(memo)
    if found is not None:
        return found[1]
    key = _full_key(kernel, args)
    if len(_KEYS) >= _MAX_KEYS:
        del _KEYS[next(iter(_KEYS))]
    # the non-array leaves held, so that their ids are not reused
    _KEYS[memo] = ([a for a in leaves if not isinstance(a, jax.Array)], key)
    return key


def _full_key(kernel, args) -> str | None:
    try:
        name = (kernel.__module__, kernel.__qualname__)  # jaxident's: its source is keyed
        fingerprint = (environment(), _platform(args), on_error_mode(), name, _value(args))
    except _Unkeyable:
        return None
    return hashlib.sha256(repr(fingerprint).encode()).hexdigest()


def cache_folder(name: str) -> pathlib.Path | None:
    """A folder of ours beside JAX's persistent compilation cache, or `None` where there
    is none (`JAXIDENT_CACHE=0`) or it is not on a local disk."""
    root = jax.config.jax_compilation_cache_dir
    if not root or "://" in root:
        return None
    return pathlib.Path(root) / name


def _folder() -> pathlib.Path | None:
    return cache_folder("jaxident-exported")


def write_kept(path: pathlib.Path, blob: bytes) -> None:
    """`blob` into `path`, atomically (`_files.write_atomic`), keeping at most
    `_MAX_FILES` files of its kind in its folder, the oldest going first; where the
    folder cannot be written, nothing."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, blob)
        files = sorted(path.parent.glob(f"*{path.suffix}"), key=lambda p: p.stat().st_mtime)
        for old in files[:-_MAX_FILES]:
            old.unlink(missing_ok=True)
    except OSError:
        pass


class _Slot:
    """Where an array of the kernel's output goes back into its (pickled) structure."""

    def __init__(self, i):
        self.i = i


def _compiled(exported, optimize: bool):
    """The jitted call of `exported`, compiled with `compiler_options` for its platform."""
    one = len(exported.platforms) == 1
    options = compiler_options(exported.platforms[0], optimize) if one else None
    return jax.jit(exported.call, compiler_options=options)


# `id(array) -> (weak reference to it, its settled copy)`: the arrays of a problem that
# a host-driven fit passes at every evaluation are settled once (16 `device_put`s were
# up to a fifth of Boehm's evaluation). An entry leaves with its array.
_SETTLED: dict = {}


def _settled(a):
    """`a` committed to its device and not weakly typed: a jitted call compiles anew for
    an array that differs from the last only in these (a step count that is
    `jnp.asarray(0)` at the first call and a kernel's output at the next). The copy
    shares `a`'s buffer, and is kept while `a` lives."""
    if a.committed and not getattr(a, "weak_type", False):  # a typed PRNG key has none
        return a
    found = _SETTLED.get(id(a))
    if found is not None and found[0]() is a:
        return found[1]
    out = jnp.asarray(a, a.dtype) if getattr(a, "weak_type", False) else a
    out = out if out.committed else jax.device_put(out, next(iter(out.devices())))
    key = id(a)
    _SETTLED[key] = (weakref.ref(a, lambda _: _SETTLED.pop(key, None)), out)
    return out


class _Entry:
    def __init__(self, exported, skeleton, optimize: bool = True):
        self.call = _compiled(exported, optimize)
        self.leaves, self.treedef = jax.tree.flatten(skeleton)
        self.slots = [(j, x.i) for j, x in enumerate(self.leaves) if isinstance(x, _Slot)]

    def __call__(self, dynamic):
        out = self.call(*dynamic)
        leaves = list(self.leaves)
        for j, i in self.slots:
            leaves[j] = out[i]
        return jax.tree.unflatten(self.treedef, leaves)


_MEMORY: dict = {}


def _export(kernel, args):
    """`kernel` lowered at `args` with `jax.export`, as a function of the arrays in
    `args` that returns the arrays of its output, and the rest of its output (a pytree
    with `_Slot`s where the arrays go)."""
    dynamic_tree, static = eqx.partition(args, eqx.is_array)
    dynamic, treedef = jax.tree.flatten(dynamic_tree)
    box = {}

    def flat(*leaves):
        out = kernel(*eqx.combine(jax.tree.unflatten(treedef, leaves), static))
        arrays, rest = eqx.partition(out, eqx.is_array)
        flat_out, out_def = jax.tree.flatten(arrays)
        box["skeleton"] = eqx.combine(
            jax.tree.unflatten(out_def, [_Slot(i) for i in range(len(flat_out))]), rest
        )
        return flat_out

    # Every custom call target may be kept (LAPACK's pivoted QR is not on JAX's list of
    # targets stable across versions, but the key holds the exact versions). Host
    # callbacks, pointers into this process, jax.export refuses itself.
    anything = [jax.export.DisabledSafetyCheck.custom_call("ALL")]
    # lowered for where the arrays are: a fit's on the CPU of a GPU machine (JAX names a
    # GPU's platform "gpu" but exports for "cuda" or "rocm": those are its default)
    platforms = ("cpu",) if _platform(args) == "cpu" else None
    exported = jax.export.export(jax.jit(flat), platforms=platforms, disabled_checks=anything)(
        *dynamic
    )
    return exported, box["skeleton"]


def _store(folder: pathlib.Path, key: str, found) -> None:
    """Writes `found`, an `(exported, skeleton)` pair or `None` for a kernel that
    `jax.export` refuses (so that no later process tries again)."""
    try:
        if found is None:
            blob = pickle.dumps((key, None, None, None))
        else:
            exported, skeleton = found
            serialized = bytes(exported.serialize())
            digest = hashlib.sha256(serialized).hexdigest()
            blob = pickle.dumps((key, digest, serialized, skeleton))
    except Exception:  # an unpicklable output: memory only
        return
    write_kept(folder / f"{key}.jaxexport", blob)


def _load(folder: pathlib.Path, key: str):
    """`(exported, skeleton)`, `False` for a kernel marked as refused, or `None` (absent;
    or damaged, or another key's entry: said in a warning, and exported anew)."""
    path = folder / f"{key}.jaxexport"
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    try:
        kept_key, digest, serialized, skeleton = pickle.loads(blob)
        if kept_key != key:
            raise ValueError("the entry of another kernel")
        if digest is None:
            return False
        if hashlib.sha256(serialized).hexdigest() != digest:
            raise ValueError("its checksum does not match")
        return jax.export.deserialize(bytearray(serialized)), skeleton
    except Exception as e:  # damaged, swapped, or from another version
        warnings.warn(
            f"The kept compiled kernel {path} is damaged or belongs to another kernel "
            f"({type(e).__name__}: {e}); it is compiled anew and replaced.",
            stacklevel=2,
        )
        return None


_OPTIONED: dict = {}


def _with_options(kernel, args, optimize: bool):
    """`kernel` compiled with `compiler_options` for where `args` are, without a kept
    copy (no cache folder, or arguments that cannot be keyed): the same program as
    through the cache, which XLA's defaults compile several times slower (the SVIR
    selection). Jitted once per kernel and options; JAX's own cache then
    keys each call by its arguments, as for `kernel` itself."""
    options = compiler_options(_platform(args), optimize)
    fn = getattr(kernel, "__wrapped__", None)
    if options is None or fn is None:
        return kernel
    slot = (id(kernel), optimize, tuple(sorted(options.items())))
    found = _OPTIONED.get(slot)
    if found is None:  # (the kernel held as well, so that its id is not reused)
        found = _OPTIONED[slot] = (kernel, eqx.filter_jit(fn, compiler_options=options))
    return found[1]


def call(kernel, *args, optimize: bool = True):
    """`kernel(*args)` (an `eqx.filter_jit` kernel, concrete arguments, no host
    callbacks inside), through a `jax.export`ed copy kept on disk beside the persistent
    compilation cache, compiled with `compiler_options(platform, optimize)`; where there
    is no cache or no key, compiled with the same options and kept in this process
    only."""
    folder = _folder()
    if folder is None:
        return _with_options(kernel, args, optimize)(*args)
    # keyed, traced and called with settled arrays: the same in every process, whether
    # an array was made by `jnp.asarray` or returned by a kernel loaded from disk
    args = jax.tree.map(lambda a: _settled(a) if isinstance(a, jax.Array) else a, args)
    key = _key(kernel, args)
    if key is None:
        return _with_options(kernel, args, optimize)(*args)
    entry = _MEMORY.get((key, optimize))
    if entry is None:
        found = _load(folder, key)
        if found is None:
            try:
                found = _export(kernel, args)
            except Exception:  # something jax.export refuses: the kernel as it is
                found = False
            _store(folder, key, found or None)
        entry = _MEMORY[key, optimize] = _Entry(*found, optimize) if found else kernel
    if entry is kernel:
        return _with_options(kernel, args, optimize)(*args)
    return entry(jax.tree.leaves(eqx.filter(args, eqx.is_array)))
