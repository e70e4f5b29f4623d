"""What every benchmark returns, and small timing helpers.

A benchmark measures genjob and a baseline side by side in one run and reports
``ratio = genjob / baseline`` (lower is better) with the goal it is held to.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Result:
    name: str
    value: float
    unit: str
    baseline: str
    baseline_value: float
    goal: float

    @property
    def ratio(self) -> float:
        return self.value / self.baseline_value if self.baseline_value else float("inf")

    @property
    def met(self) -> bool:
        return self.ratio <= self.goal

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "ratio": round(self.ratio, 4), "met": self.met}


def best_of(runs: int, fn: Callable[[], object]) -> float:
    """The fastest of `runs` wall-clock timings of `fn`, in seconds."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best
