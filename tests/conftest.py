import os

import jax
import jaxtyping


os.environ.setdefault("MPLBACKEND", "Agg")
# Check every jaxtyping shape annotation at run time (the house style, rule 7). The hook
# must be installed before jaxident is first imported.
jaxtyping.install_import_hook("jaxident", "typecheck.typechecker")

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")

import jaxident  # noqa: E402, F401
