"""Profile tables (per-layer forward/backward times): own format, analytic default, importers."""

from __future__ import annotations

from pathlib import Path

from optsearch.profile.analytic import AnalyticProfile
from optsearch.profile.table import Profile, ProfileEntry, ProfileTable, load_table
from optsearch.spec import GpuSpec, ModelSpec

__all__ = ["AnalyticProfile", "Profile", "ProfileEntry", "ProfileTable", "load_table", "resolve_profile"]


def resolve_profile(ref: str | None, model: ModelSpec, gpus: dict[str, GpuSpec]) -> Profile:
    """'analytic' (or None) -> the roofline default; anything else is a path to a CSV/YAML table."""
    if ref is None or ref == "analytic":
        return AnalyticProfile(model=model, gpus=gpus)
    return load_table(Path(ref))
