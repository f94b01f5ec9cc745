"""Options that select a behaviour, as objects: each a `Choice`, an enumeration whose
members are the strings they are named by, so that `ji.FixAt.mean` and `"mean"` are the
same option, and a misspelt one is an error that lists the others."""

import enum


class Choice(str, enum.Enum):
    """Base of jaxident's option enumerations (no members of its own)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def of(cls, value, what: str):
        """`value` (a member or its string) as a member; anything else is a
        `ValueError` naming `what` and the options."""
        try:
            return cls(value)
        except ValueError:
            options = ", ".join(repr(m.value) for m in cls)
            raise ValueError(f"{what} must be one of {options}, got {value!r}.") from None
