"""A training run's directory (``cfg.run.out_dir``) as a place: the files a run writes there,
the checks before a run takes it (a fresh run refuses one that holds a run, ``--resume`` needs a
checkpoint with trainer state, the directory must be makeable), the lock that keeps a second run
out while one runs, and ``evals.jsonl`` trimmed back to the checkpoint a run resumes from.

Apart from the recipe because both run commands (``decision train`` and the Xiangqi driver)
take their directory the same way, and the export checks its destination against the run's
files; the training itself (tokenizer, model, data, loop) is the recipe's.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from decision.errors import CheckpointError, DecisionInputError
from decision.files import write_whole
from decision.train.checkpoint import (
    CHECKPOINT_DIR,
    CHECKPOINT_OLD,
    CHECKPOINT_TMP,
    STATE_FILE,
    recover_checkpoint,
)


# A stamped line on stderr: the log of a run (the recipe's too)
def log(msg: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    print(f"[{stamp}] {msg}", file=sys.stderr, flush=True)


EVALS_NAME = "evals.jsonl"  # one validation record a line, beside the checkpoint
# What a run writes into its directory (checkpoint.tmp / .old only while it saves)
RUN_FILES = (CHECKPOINT_DIR, CHECKPOINT_TMP, CHECKPOINT_OLD, "tokenizer.json", EVALS_NAME)


def check_no_run(out: Path) -> None:
    """Refuse a fresh run (no ``--resume``) in a directory that already holds one: it would
    overwrite the run's checkpoint and tokenizer and append to its evals.jsonl.

    A lone ``tokenizer.json`` (no checkpoint, no evals.jsonl) is no run: a run that failed
    before its first checkpoint left it, no weights were trained over it, and nothing reads it
    back (a resume takes the checkpoint's own tokenizer), so the new run replaces it."""
    held = [name for name in RUN_FILES if (out / name).exists()]
    if held == ["tokenizer.json"]:
        log(f"{out / 'tokenizer.json'} is from a run that left no checkpoint: it is replaced")
        return
    if held:
        raise DecisionInputError(
            f"{out} already holds a run ({', '.join(held)}): continue it with --resume, or "
            "start a new one in another directory (--out-dir or run.out_dir)", "run.out_dir",
        )


def check_out_dir(out_dir: str) -> None:
    """Refuse a run directory that cannot be made: empty (the working directory; ``--out-dir``
    overrides the config after its checks), a file, under a file, or under a directory that is
    not writable. Such a run failed with a traceback from ``mkdir`` once the tokenizer had been
    trained (and, for the Xiangqi driver, the games read)."""
    if not out_dir.strip():
        raise DecisionInputError("run.out_dir must name a directory, got ''", "run.out_dir")
    out = Path(out_dir)
    first = next((p for p in (out, *out.absolute().parents) if p.exists()), None)
    if first is None:
        return
    if not first.is_dir():
        what = "is a file" if first == out else f"is under {first}, a file"
        raise DecisionInputError(f"run directory {out_dir} {what}, not a directory",
                                 "run.out_dir")
    if not os.access(first, os.W_OK | os.X_OK):
        raise DecisionInputError(f"run directory {out_dir}: {first} is not writable",
                                 "run.out_dir")


RUN_LOCK = ".run.lock"  # the file hold_run_dir locks in a run directory


@contextlib.contextmanager
def hold_run_dir(out_dir: str) -> Iterator[None]:
    """Hold the run directory ``out_dir`` (made if needed) for the ``with`` block: an exclusive
    ``flock`` on its lock file ``RUN_LOCK``, which the OS drops when the process ends however it
    ends (SIGKILL included). A second run started into the same directory (fresh or ``--resume``)
    while one holds it is refused: both passed the checks of :func:`resume_point` before either
    wrote a file, then wrote each other's ``checkpoint.tmp``. The lock file is opened for
    writing (over NFS an exclusive ``flock`` needs it: a directory, opened read-only, gave
    EBADF) and stays (removing it would let a third run lock a new file beside a second that
    holds the old). A fresh directory this call made is removed again when the block fails
    before anything else was written into it. Where the file system has no locks, runs are not
    guarded."""
    check_out_dir(out_dir)
    out = Path(out_dir)
    made = [p for p in (out, *out.absolute().parents) if not p.exists()]
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # what check_out_dir cannot tell (a read-only or virtual file system)
        raise DecisionInputError(f"cannot make the run directory {out}: {exc.strerror or exc}",
                                 "run.out_dir") from None
    lock = out / RUN_LOCK
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise DecisionInputError(f"cannot write in the run directory {out}: "
                                 f"{exc.strerror or exc}", "run.out_dir") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                log(f"warning: cannot lock the run directory {out} ({exc.strerror}): a second "
                    "run started into it would not be refused")
            else:
                raise DecisionInputError(
                    f"run directory {out} is in use by another training run (started into the "
                    "same directory, still running): wait for it to end, or give another "
                    "--out-dir", "run.out_dir",
                ) from None
        try:
            yield
        except BaseException:
            # a directory of this run alone, still empty: its lock file goes with it (one the
            # run wrote into keeps it: "the file stays")
            if made and {p.name for p in out.iterdir()} <= {RUN_LOCK}:
                lock.unlink(missing_ok=True)
            for path in made:  # innermost first; only what is still empty
                with contextlib.suppress(OSError):
                    path.rmdir()
            raise
    finally:
        os.close(fd)  # drops the lock


def may_hold_run_dir(directory: Path) -> bool:
    """Whether this process may hold ``directory`` as :func:`hold_run_dir` does: open its lock
    file for writing, or, where there is none yet, create one in a directory of its own (a lock
    file of ours in another user's shared directory would refuse their own runs)."""
    lock = directory / RUN_LOCK
    if lock.exists():
        return os.access(lock, os.R_OK | os.W_OK)
    return os.access(directory, os.W_OK | os.X_OK) and directory.stat().st_uid == os.geteuid()


def resume_point(out: Path, resume: bool) -> Path | None:
    """The checkpoint of ``out`` that ``--resume`` continues, or None for a fresh run, checked
    before anything is loaded or written: ``--resume`` over a checkpoint without trainer state
    is an error (it started a fresh run over it), and a fresh run in a directory that already
    holds one is refused (:func:`check_no_run`); ``--resume`` where there is no checkpoint yet
    starts a fresh run."""
    ckpt = recover_checkpoint(out)
    if resume and ckpt.exists():
        if not (ckpt / STATE_FILE).is_file():
            raise CheckpointError(
                f"cannot resume: {ckpt} has no {STATE_FILE} (optimiser, step, data position); "
                f"to train on from its weights, start a new run with --init-from {ckpt} and "
                "another --out-dir"
            )
        return ckpt
    if resume:
        log(f"no checkpoint in {ckpt}: starting a fresh run")
    else:
        check_no_run(out)
    return None


def trim_evals(path: Path, step: int) -> None:
    """Drop the records of ``path`` (evals.jsonl) after ``step``, the checkpoint a run resumes
    from: a run killed after a validation but before its next checkpoint wrote them, and the
    resumed run validates those steps again (a second record for the step, or one of another
    config's timeline). Lines that are not a record with a step are kept, except a torn last
    line (no newline: a run killed or out of disk while appending it), which the next record
    would otherwise be written onto."""
    if not path.is_file():
        return
    lines = path.read_text().splitlines(keepends=True)
    torn = bool(lines) and not lines[-1].endswith("\n")

    def later(line: str) -> bool:
        try:
            record = json.loads(line)
        except ValueError:
            return False
        return isinstance(record, dict) and isinstance(record.get("step"), int) \
            and record["step"] > step

    kept = [line for line in lines[:len(lines) - torn] if not later(line)]
    if len(kept) < len(lines):
        write_whole({path: "".join(kept)})  # a kill meanwhile keeps the old file whole
        later_records = len(lines) - torn - len(kept)
        log(f"{path}: dropped {later_records} record(s) after step {step}, the checkpoint's "
            "step (validated again as the run resumes)" + (" and a torn last line" if torn else ""))
