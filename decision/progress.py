"""Progress bar on stderr: items done, rate, time left (redrawn at most 5 times a second)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``update(n)`` after each ``unit`` done (groups by default); ``close()`` ends the line.
    Silent when ``enabled`` is off.

    The bar is redrawn in place (a carriage return, no newline), so anything else written to the
    stream while it is shown goes through ``message``, which clears the bar first.
    """

    WIDTH = 24

    def __init__(
        self, total: int, *, done: int = 0, label: str = "score", stream: TextIO | None = None,
        enabled: bool = True, unit: str = "groups",
    ) -> None:
        self.total = total
        self.done = done
        self.label = label
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self._start = time.monotonic()
        self._start_done = done
        self._last_draw = 0.0
        self._shown = 0  # characters of the bar on the current line
        self._draw(force=True)

    def message(self, text: str) -> None:
        """Print ``text`` on a line of its own (clearing the bar), then draw the bar again."""
        if self.enabled and self._shown:
            self.stream.write("\r" + " " * self._shown + "\r")
            self._shown = 0
        self.stream.write(text + "\n")
        self.stream.flush()
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
        line = (f"{self.label} [{bar}] {self.done}/{self.total} {self.unit}  "
                f"{rate:.2f} {self.unit}/s  eta {eta}   ")
        self.stream.write("\r" + line)
        self.stream.flush()
        self._shown = len(line)

    def close(self) -> None:
        """Draw the bar a last time and end its line (also after an interruption or an error,
        so the message that follows starts a line of its own)."""
        if self.enabled:
            self._draw(force=True)
            self.stream.write("\n")
            self.stream.flush()
            self._shown = 0
