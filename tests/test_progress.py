"""The progress bar: redrawn in place on a terminal, whole lines elsewhere, nothing after close."""

from __future__ import annotations

import io

import pytest

from decision.progress import Progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_bar_is_redrawn_in_place() -> None:
    stream = _Terminal()
    bar = Progress(3, stream=stream, label="score")
    assert bar.interactive
    for _ in range(3):
        bar.update()
    bar.close()
    text = stream.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")  # one line, redrawn
    assert text.rstrip().split("\r")[-1].startswith("score [" + "#" * Progress.WIDTH + "] 3/3")


def test_elsewhere_each_draw_is_a_line_and_few_are_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a log file of a half-hour run got a single line of thousands of carriage-return redraws
    stream = io.StringIO()
    bar = Progress(1000, stream=stream, unit="positions", label="agreement")
    assert not bar.interactive
    for _ in range(1000):
        bar.update()
    bar.close()
    lines = stream.getvalue().split("\n")
    assert "\r" not in stream.getvalue() and lines[-1] == ""
    assert [line.split("]")[1].split()[0] for line in lines[:-1]] == ["0/1000", "1000/1000"]
    # with the interval passed, each update is a line of its own (and close adds none)
    monkeypatch.setattr(Progress, "LOG_EVERY_S", 0.0)
    stream = io.StringIO()
    bar = Progress(2, stream=stream, unit="games", label="match")
    bar.update()
    bar.update()
    bar.close()
    assert [line.split("]")[1].split()[0] for line in stream.getvalue().splitlines()] == [
        "0/2", "1/2", "2/2"]


@pytest.mark.parametrize("interactive", [True, False])
def test_nothing_is_drawn_after_close(interactive: bool) -> None:
    # a match's worker thread that finished a game after the interruption redrew the bar below
    # the "interrupted" line; a second close wrote a second newline
    stream = io.StringIO()
    bar = Progress(5, stream=stream, interactive=interactive)
    bar.update()
    bar.close()
    closed = stream.getvalue()
    bar.update(4)
    bar.close()
    assert stream.getvalue() == closed and closed.endswith("\n")


def test_a_message_gets_a_line_of_its_own_in_both_kinds() -> None:
    for stream in (_Terminal(), io.StringIO()):
        bar = Progress(2, stream=stream)
        bar.update()
        bar.message("note: something")
        bar.close()
        shown = [line.split("\r")[-1].strip() for line in stream.getvalue().split("\n")]
        assert "note: something" in shown


def test_disabled_writes_nothing() -> None:
    stream = _Terminal()
    bar = Progress(2, stream=stream, enabled=False)
    bar.update(2)
    bar.close()
    assert stream.getvalue() == ""


def test_a_resumed_run_rates_only_the_items_done_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """6 of 10 groups were done before the resume: one more in 2 s is 0.5 groups/s and 6 s
    left, not 3.5 groups/s (counting the resumed ones as done in those 2 s) and 1 s left."""
    import decision.progress as progress

    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(Progress, "LOG_EVERY_S", 0.0)
    stream = io.StringIO()
    bar = Progress(10, done=6, stream=stream)
    clock[0] += 2.0
    bar.update()
    last = stream.getvalue().splitlines()[-1]
    assert "7/10 groups" in last and "0.50 groups/s" in last and last.endswith("eta 6s")


def test_a_message_on_a_terminal_blanks_the_whole_bar_first() -> None:
    stream = _Terminal()
    bar = Progress(4, stream=stream)
    bar.update()
    before = stream.getvalue()
    shown = before.split("\r")[-1]  # the bar as drawn, with its padding
    bar.message("skipped: g1")
    after = stream.getvalue()[len(before):]
    assert after.startswith("\r" + " " * len(shown) + "\rskipped: g1\n")
