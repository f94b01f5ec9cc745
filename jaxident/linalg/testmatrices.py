"""Adversarial test matrices of Pearce et al. (2022), section 5.2."""

from .._linalg._testmatrices import (
    FAMILIES as FAMILIES,
    Family as Family,
    gu_eisenstat as gu_eisenstat,
    jolliffe as jolliffe,
    kahan as kahan,
    ships as ships,
    sorensen_embree as sorensen_embree,
)
