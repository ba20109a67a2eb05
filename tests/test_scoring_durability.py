"""``decision score`` when a process dies or the disk fails: two runs on one predictions file,
and a write the disk refuses halfway through a run."""

from __future__ import annotations

import csv
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from apps.contracts import csv_format
from decision.errors import DecisionInputError
from decision.scoring.output import read_predictions
from decision.scoring.runner import score_csv


class _Engine:
    """Answers every boolean question "yes"; the batch holding document ``hold`` waits for
    ``release`` (a run caught in the middle, with groups written before it)."""

    name = "fake"

    def __init__(self, hold: str | None = None) -> None:
        self.hold = hold
        self.holding = threading.Event()
        self.release = threading.Event()

    def prepare(self, body: Any) -> Any:
        return body

    def decide_many(self, prepared: Sequence[Any]) -> list[Any]:
        from types import SimpleNamespace as NS

        if any(body.document == self.hold for body in prepared):
            self.holding.set()
            assert self.release.wait(60), "never released"
        return [NS(answers=[NS(id=q.id, value=True, text="yes", confidence=0.9)
                            for q in body.questions], steps=1, tokens_per_forward=1.0)
                for body in prepared]


def _csv(path: Path, count: int) -> Path:
    rows = [list(csv_format.HEADER)] + [[f"g{i}", f"d{i}", "q", "Q?", "boolean", "{}", "true"]
                                        for i in range(count)]
    with path.open("w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows(rows)
    return path


@pytest.mark.parametrize("how", ["resume", "overwrite"])
def test_a_second_run_on_a_predictions_file_being_written_is_refused(
    tmp_path: Path, how: str
) -> None:
    """A ``--resume`` (or ``--overwrite``) of OUT.csv started while another run still writes
    it: both wrote it, and the file held groups twice (both runs then ended with "appears
    twice" and no summary) or rows of one run written over the other's."""
    path, out = _csv(tmp_path / "in.csv", 6), tmp_path / "pred.csv"
    first = _Engine(hold="d3")
    outcome: list[Any] = []

    def run_first() -> None:
        try:
            outcome.append(score_csv(path, out, first, batch_groups=1, show_progress=False))
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome.append(exc)

    thread = threading.Thread(target=run_first)
    thread.start()
    try:
        assert first.holding.wait(60)
        before = out.read_bytes()
        with pytest.raises(DecisionInputError, match="another run is writing it"):
            score_csv(path, out, _Engine(), batch_groups=1, show_progress=False,
                      **{how: True})
        assert out.read_bytes() == before  # refused untouched
    finally:
        first.release.set()
        thread.join(60)
    assert not isinstance(outcome[0], BaseException), outcome[0]
    assert [r.group_id for r in read_predictions(out)] == [f"g{i}" for i in range(6)]
    # the lock ends with the run: the next one goes ahead
    result = score_csv(path, out, _Engine(), resume=True, show_progress=False)
    assert (result.resumed, result.scored) == (6, 0)


@pytest.mark.parametrize(("errno_", "strerror"), [(28, "No space left on device"),
                                                   (5, "Input/output error")])
def test_a_write_the_disk_refuses_names_the_file_and_says_how_to_continue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    errno_: int, strerror: str,
) -> None:
    """A full disk halfway through a run said only "cannot write: No space left on device" (no
    file, no word of the groups kept or of --resume), and another write error (EIO, EFBIG, a
    disk remounted read-only) ended it with a traceback."""
    from decision.cli import main as cli_main
    from decision.scoring import output
    from decision.serve.engine import ModelEngine

    path, out = _csv(tmp_path / "in.csv", 4), tmp_path / "pred.csv"
    monkeypatch.setattr(ModelEngine, "load", lambda *a, **k: _Engine())
    real_write_group = output.PredictionWriter.write_group
    written: list[int] = []

    class FailingDisk:
        """The file under the writer once two groups are written: half of the next group's
        bytes reach the disk, then it refuses the rest, as a full disk does (naming no file)."""

        def __init__(self, file: Any) -> None:
            self.file = file

        def write(self, text: str) -> int:
            self.file.write(text[: len(text) // 2])
            self.file.flush()
            raise OSError(errno_, strerror)

        def flush(self) -> None:
            raise OSError(errno_, strerror)

        def close(self) -> None:
            self.file.close()
            raise OSError(errno_, strerror)  # its last flush of what never got written

    def disk_fails(self: output.PredictionWriter, rows: list[output.PredictionRow]) -> None:
        if len(written) == 2 and not isinstance(self._file, FailingDisk):
            self._file = FailingDisk(self._file)
        real_write_group(self, rows)
        written.append(1)

    monkeypatch.setattr(output.PredictionWriter, "write_group", disk_fails)
    assert cli_main(["score", str(path), "--out", str(out), "--no-progress",
                     "--batch-groups", "1"]) == 1
    err = capsys.readouterr().err
    assert err.endswith(f"decision score: error: cannot write {out}: {strerror}; the groups "
                        f"done so far are in {out}: run it again with --resume to continue\n")
    assert err.count("\n") == 1
    monkeypatch.setattr(output.PredictionWriter, "write_group", real_write_group)
    assert cli_main(["score", str(path), "--out", str(out), "--no-progress", "--resume"]) == 0
    assert [r.group_id for r in read_predictions(out)] == ["g0", "g1", "g2", "g3"]


def test_a_file_system_without_locks_scores_unguarded_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where ``flock`` fails for want of locks, not for another run (ENOLCK with no lock daemon,
    EOPNOTSUPP on some FUSE file systems; EBADF over NFS for the read-only descriptor the lock
    was taken on), every run failed with a bare OSError traceback (``decision score``: no file
    named, so re-raised): it goes on unguarded, saying so. The lock's descriptor is open for
    writing, as NFS needs for an exclusive lock."""
    import errno
    import io

    from decision.scoring import output

    path, out = _csv(tmp_path / "in.csv", 3), tmp_path / "pred.csv"
    modes: list[int] = []

    def no_locks(fd: int, operation: int) -> None:
        modes.append(os.O_ACCMODE & _flags(fd))
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(output.fcntl, "flock", no_locks)
    stream = io.StringIO()
    result = score_csv(path, out, _Engine(), show_progress=False, progress_stream=stream)
    assert result.scored == 3
    assert f"warning: cannot lock {out} (No locks available)" in stream.getvalue()
    assert modes == [os.O_RDWR]


def _flags(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_GETFL)


def test_predictions_never_overwrite_the_input_through_a_hard_link(tmp_path: Path) -> None:
    """``--out`` a hard link of the input (another name, the same file) passed the check of
    the resolved paths, and ``--overwrite`` truncated the input it was scoring."""
    path = _csv(tmp_path / "in.csv", 2)
    before = path.read_bytes()
    link = tmp_path / "pred.csv"
    os.link(path, link)
    with pytest.raises(DecisionInputError, match="overwrite the input"):
        score_csv(path, link, _Engine(), overwrite=True, show_progress=False)
    assert path.read_bytes() == before


def test_an_overwrite_cut_off_after_its_run_record_leaves_no_old_rows_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--overwrite`` wrote the new run record before it emptied OUT.csv: a run that died in
    between left the old run's predictions under the new record, and a ``--resume`` of the new
    run kept them as its own answers (another model's, or other options')."""
    from decision.scoring import runner
    from decision.serve.api import DecideOptions

    path, out = _csv(tmp_path / "in.csv", 3), tmp_path / "pred.csv"
    score_csv(path, out, _Engine(), batch_groups=1, show_progress=False)
    assert len(read_predictions(out)) == 3

    def killed(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt  # the process dies before it writes a row

    monkeypatch.setattr(runner, "_score_batches", killed)
    other = DecideOptions(threshold=0.5)
    with pytest.raises(KeyboardInterrupt):
        score_csv(path, out, _Engine(), batch_groups=1, show_progress=False, overwrite=True,
                  options=other)
    monkeypatch.undo()
    assert out.stat().st_size == 0  # not the first run's rows under the new run's record
    resumed = score_csv(path, out, _Engine(), batch_groups=1, show_progress=False, resume=True,
                        options=other)
    assert resumed.resumed == 0 and resumed.scored == 3
