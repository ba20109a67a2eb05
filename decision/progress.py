"""Progress on stderr: items done, rate, time left.

On a terminal the bar is redrawn in place at most 5 times a second; on anything else (a log file,
a pipe, CI) it is written as whole lines, one every ``LOG_EVERY_S`` seconds and a last one at the
end, so a half-hour run's log holds some sixty readable lines, not one line of 9,000 redraws.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class Progress:
    """``update(n)`` after each ``unit`` done (groups by default); ``close()`` ends the line.
    Silent when ``enabled`` is off.

    ``interactive`` (default: whether ``stream`` is a terminal): the bar is redrawn in place (a
    carriage return, no newline), so anything else written to the stream while it is shown goes
    through ``message``, which clears the bar first. Else each draw is a line of its own. Nothing
    is drawn after ``close()`` (a worker thread that finishes late cannot redraw it).
    """

    WIDTH = 24
    REDRAW_S = 0.2  # on a terminal
    LOG_EVERY_S = 30.0  # elsewhere

    def __init__(
        self, total: int, *, done: int = 0, label: str = "score", stream: TextIO | None = None,
        enabled: bool = True, unit: str = "groups", interactive: bool | None = None,
    ) -> None:
        self.total = total
        self.done = done
        self.label = label
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.interactive = _is_terminal(self.stream) if interactive is None else interactive
        self._start = time.monotonic()
        self._start_done = done
        self._last_draw = 0.0
        self._drawn_done: int | None = None  # the count of the last line written (not on a tty)
        self._shown = 0  # characters of the bar on the current line (on a terminal)
        self._closed = False
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
        if not self.enabled or self._closed:
            return
        now = time.monotonic()
        every = self.REDRAW_S if self.interactive else self.LOG_EVERY_S
        if not force and now - self._last_draw < every:
            return
        if not self.interactive and self.done == self._drawn_done:
            return  # the same line again says nothing new
        self._last_draw = now
        fraction = self.done / self.total if self.total else 1.0
        filled = int(round(fraction * self.WIDTH))
        bar = "#" * filled + "." * (self.WIDTH - filled)
        elapsed = now - self._start
        new = self.done - self._start_done
        rate = new / elapsed if elapsed > 0 and new > 0 else 0.0
        eta = f"{(self.total - self.done) / rate:.0f}s" if rate > 0 else "?"
        line = (f"{self.label} [{bar}] {self.done}/{self.total} {self.unit}  "
                f"{rate:.2f} {self.unit}/s  eta {eta}")
        if self.interactive:
            self.stream.write("\r" + line + "   ")
            self._shown = len(line) + 3
        else:
            self.stream.write(line + "\n")
            self._drawn_done = self.done
        self.stream.flush()

    def close(self) -> None:
        """Draw the bar a last time and end its line (also after an interruption or an error,
        so the message that follows starts a line of its own). Once only."""
        if self.enabled and not self._closed:
            self._draw(force=True)
            if self.interactive:
                self.stream.write("\n")
                self.stream.flush()
            self._shown = 0
        self._closed = True
