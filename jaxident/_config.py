"""Turn on float64 when jaxident is imported: identifiability is decided in
ill-conditioned matrices. Set JAXIDENT_X64=0 before the import to opt out."""

import os

import jax


if os.environ.get("JAXIDENT_X64", "1") != "0":
    jax.config.update("jax_enable_x64", True)
