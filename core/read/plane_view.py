"""The apply plane as the board shows it: what `genjob apply --ready` would apply now, in
which order, why it leaves the rest, and which jobs in flight overlap.

One read of `.gen/` that writes nothing and takes no lock: the pass listing only
(`core.review.ready.pull` with `apply=False`) and the overlaps of every job in flight
(`core.store.overlaps.flight_paths`). The board reads it off its event loop whenever the
jobs in flight or their checks change.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.review.ready import pull
from core.store.layout import Layout
from core.store.overlaps import FlightPaths, flight_paths


@dataclass(frozen=True)
class PlaneView:
    """`ready`: the keys a pass would apply (or merge), in its order; `left`: each other job
    with a receipt and why a pass leaves it; `flight`: what each job in flight overlaps."""

    ready: tuple[str, ...] = ()
    left: dict[str, str] = field(default_factory=dict)
    flight: FlightPaths = field(default_factory=FlightPaths)

    def position(self, key: str) -> int | None:
        """Where a pass would take `key` (1 first), or None when it would not."""
        return self.ready.index(key) + 1 if key in self.ready else None

    def lines(self, key: str) -> list[str]:
        """What the apply plane says of `key`: its place in the queue or why it is left,
        then each job in flight it overlaps."""
        at = self.position(key)
        said = [f"apply --ready takes it #{at} of {len(self.ready)}"] if at else []
        if key in self.left:
            said.append(f"apply --ready leaves it: {self.left[key]}")
        return said + [o.line() for o in self.flight.of(key)]


def plane_view(layout: Layout) -> PlaneView:
    """The apply plane now (see the module); GenjobError when the config cannot be read."""
    pulled = pull(layout, apply=False)
    ready = tuple(p.key for p in pulled if p.done == "ready")
    left = {p.key: p.why for p in pulled if p.done != "ready"}
    return PlaneView(ready, left, flight_paths(layout))
