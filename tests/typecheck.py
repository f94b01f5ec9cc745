"""The runtime type checker used by the tests: beartype with the PEP 484 numeric tower
(an `int` is acceptable where a `float` is annotated, as for static checkers)."""

from beartype import beartype, BeartypeConf


typechecker = beartype(conf=BeartypeConf(is_pep484_tower=True))
