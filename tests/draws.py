"""How many random instances a property test draws.

The literal in each test is what CI draws on every run (fresh random draws, except where a test fixes them with
`derandomize=True`). `OPTSEARCH_DRAWS=K` multiplies every count by K, for a longer search on a spare machine:
the extended runs recorded in the closing notes use `OPTSEARCH_DRAWS=4` with `--hypothesis-seed=N`.
"""

from __future__ import annotations

import math
import os

SCALE = float(os.environ.get("OPTSEARCH_DRAWS", "1"))


def draws(n: int) -> int:
    """n scaled by OPTSEARCH_DRAWS, at least one draw."""
    return max(1, math.ceil(n * SCALE))
