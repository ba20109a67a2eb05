"""Data splits by disjoint seed ranges: a group is in the split its seed falls in, at any level.

Training draws seeds from TRAIN only; model selection uses VALIDATION; reported numbers use TEST.
The ranges are disjoint and far apart, so held-out evaluation never sees a training seed (the
same seed at another level is a different group, but it stays inside its split all the same).
"""

from __future__ import annotations

from dataclasses import dataclass

from decision.errors import DecisionInputError


@dataclass(frozen=True)
class SeedRange:
    """Seeds ``start <= seed < stop``."""

    name: str
    start: int
    stop: int

    def __contains__(self, seed: object) -> bool:
        return isinstance(seed, int) and self.start <= seed < self.stop

    def __len__(self) -> int:
        return self.stop - self.start

    def seeds(self, count: int, offset: int = 0) -> range:
        """``count`` consecutive seeds starting ``offset`` into the range."""
        if offset < 0 or count < 0 or offset + count > len(self):
            raise DecisionInputError(
                f"{self.name}: offset {offset} + count {count} exceeds the {len(self)} seeds",
                "count")
        return range(self.start + offset, self.start + offset + count)


TRAIN = SeedRange("train", 0, 10_000_000)
VALIDATION = SeedRange("validation", 10_000_000, 10_100_000)
TEST = SeedRange("test", 20_000_000, 20_100_000)
SPLITS: dict[str, SeedRange] = {s.name: s for s in (TRAIN, VALIDATION, TEST)}


def split_of(seed: int) -> str | None:
    """The split a seed belongs to, or None for seeds outside every split."""
    for split in SPLITS.values():
        if seed in split:
            return split.name
    return None


def get_split(name: str) -> SeedRange:
    """The split by name ("train", "validation", "test")."""
    if name not in SPLITS:
        raise DecisionInputError(f"unknown split {name!r}; expected one of {sorted(SPLITS)}",
                                 "split")
    return SPLITS[name]
