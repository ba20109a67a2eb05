"""Progress bar on stderr: groups done, rate, time left (redrawn at most 5 times a second)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``update(n)`` after each group; ``close()`` ends the line. Silent when ``enabled`` is off."""

    WIDTH = 24

    def __init__(
        self, total: int, *, done: int = 0, label: str = "score", stream: TextIO | None = None,
        enabled: bool = True,
    ) -> None:
        self.total = total
        self.done = done
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self._start = time.monotonic()
        self._start_done = done
        self._last_draw = 0.0
        self._draw(force=True)

    def update(self, count: int = 1) -> None:
        self.done += count
        self._draw(force=self.done >= self.total)

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < 0.2:
            return
        self._last_draw = now
        fraction = self.done / self.total if self.total else 1.0
        filled = int(round(fraction * self.WIDTH))
        bar = "#" * filled + "." * (self.WIDTH - filled)
        elapsed = now - self._start
        new = self.done - self._start_done
        rate = new / elapsed if elapsed > 0 and new > 0 else 0.0
        eta = f"{(self.total - self.done) / rate:.0f}s" if rate > 0 else "?"
        self.stream.write(
            f"\r{self.label} [{bar}] {self.done}/{self.total} groups  "
            f"{rate:.2f} groups/s  eta {eta}   "
        )
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw(force=True)
            self.stream.write("\n")
            self.stream.flush()
