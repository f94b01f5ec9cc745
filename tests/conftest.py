import os
import pathlib


# A persistent compilation cache shared by the test workers and the notebook kernels (they
# inherit the environment): the same models and selections compile once per run. It
# lives in the checkout (ignored by git), so a fresh clone starts empty.
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR", str(pathlib.Path(__file__).resolve().parents[1] / ".jax_cache")
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")

import jax  # noqa: E402
import jaxtyping  # noqa: E402


os.environ.setdefault("MPLBACKEND", "Agg")
# Check every jaxtyping shape annotation at run time (the house style, rule 7). The hook
# must be installed before jaxident is first imported.
jaxtyping.install_import_hook("jaxident", "typecheck.typechecker")

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")

import jaxident  # noqa: E402, F401
