"""The host layer under everything: settings applied at import (`_config`: float64, the
persistent compilation cache, the CPU compiler options), whether failures raise
(`_host`: `throw`, `run_kernel`, `diagnosed`), kernels kept lowered for a second
process (`_exported`), equinox's error mode (`_equinox`, its one private hook), and options
as enumerations of their names (`_choice`).

Imports JAX, equinox and NumPy only: nothing else of jaxident.
"""
