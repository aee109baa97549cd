"""Class weights as configured: ``high=6,normal=3,low=1``."""

from __future__ import annotations

import math
import re


def parse_weights(value: str) -> dict[str, float]:
    """Parse ``high=6,normal=3,low=1`` into class weights; ValueError says what is wrong and what is valid."""
    weights: dict[str, float] = {}
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not parts:
        raise ValueError("must name at least one class weight, like high=6,normal=3,low=1")
    for part in parts:
        name, sep, number = (x.strip() for x in part.partition("="))
        try:
            weight = float(number) if sep else math.nan
        except ValueError:
            weight = math.nan
        if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"{part!r} is not class=weight; use comma-separated entries like high=6,normal=3,low=1 "
                             "with positive weights")
        if name in weights:
            raise ValueError(f"class {name!r} is given twice")
        weights[name] = weight
    return weights
