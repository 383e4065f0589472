"""What to optimize and under which limits."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from optsearch.spec.base import Spec
from optsearch.units import MAX_DURATION_S, MAX_USD

Objective = Literal["cost", "time"]


class Budget(Spec):
    objective: Objective = Field(default="cost", description="Minimize USD for the whole run, or training time.")
    max_time_s: float | None = Field(default=None, gt=0, le=MAX_DURATION_S,
                                     description="Wall-clock limit for the whole training, s.")
    max_cost_usd: float | None = Field(default=None, gt=0, le=MAX_USD,
                                       description="Dollar limit for the whole training, USD.")
    max_gpus: int | None = Field(default=None, gt=0, le=10_000_000, description="At most this many GPUs in the plan.")
    max_usd_per_hour: float | None = Field(default=None, gt=0, le=MAX_USD,
                                           description="At most this rental rate, USD/hour.")

    def describe(self) -> str:
        from optsearch.units import format_budget_duration, format_usd

        parts = [f"minimize {self.objective}"]
        if self.max_time_s is not None:
            parts.append(f"--max-time {format_budget_duration(self.max_time_s)}")
        if self.max_cost_usd is not None:
            parts.append(f"--max-cost {format_usd(self.max_cost_usd)}")
        if self.max_gpus is not None:
            parts.append(f"--max-gpus {self.max_gpus}")
        if self.max_usd_per_hour is not None:
            parts.append(f"--max-usd-per-hour {format_usd(self.max_usd_per_hour)}")
        return ", ".join(parts)
