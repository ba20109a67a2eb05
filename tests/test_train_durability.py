"""Training runs when the process dies hard or the disk misbehaves: two runs started into one
run directory, a checkpoint that cannot be written (full disk, I/O error)."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from decision.errors import DecisionInputError
from decision.train.config import config_from_dict
from decision.train.recipe import train

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "tiny.json"


def tiny_raw(out_dir: Path, **run: object) -> dict[str, object]:
    raw = json.loads(TINY.read_text())
    raw["run"].update({"out_dir": str(out_dir), "eval_every": 10_000, **run})
    return raw


# A run of ``decision train`` in another process that stops, alive, at one point: after it has
# taken its directory and is training its tokenizer ("tokenizer"), or after its first checkpoint
# ("checkpoint"); it touches READY there and waits to be killed.
PAUSED_RUN = """
import sys, time
from pathlib import Path
import decision.train.loop as loop
import decision.train.recipe as recipe
where, ready = sys.argv[1], Path(sys.argv[2])

def pause():
    ready.touch()
    time.sleep(600)

if where == "tokenizer":
    recipe.build_tokenizer = lambda cfg: pause()
else:
    save = loop.save_checkpoint
    def save_then_pause(*args, **kwargs):
        save(*args, **kwargs)
        pause()
    loop.save_checkpoint = save_then_pause
from decision.train.cli import main
raise SystemExit(main(sys.argv[3:]))
"""


def start_paused_run(tmp_path: Path, where: str, *args: str) -> subprocess.Popen[bytes]:
    ready = tmp_path / f"ready-{where}"
    proc = subprocess.Popen(
        [sys.executable, "-c", PAUSED_RUN, where, str(ready), *args],
        cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    for _ in range(1200):  # up to 2 minutes on a loaded machine; normally a few seconds
        if ready.exists() or proc.poll() is not None:
            break
        time.sleep(0.1)
    if not ready.exists():
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the paused run did not reach {where}: {err.decode()[-2000:]}")
    return proc


def kill_hard(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.communicate()


def test_a_second_fresh_run_into_a_directory_another_run_holds_is_refused(
    tmp_path: Path,
) -> None:
    """Two runs started into one --out-dir at once both passed the check that refuses a
    directory holding a run (neither had written anything yet): they then wrote each other's
    checkpoint.tmp (one died with a traceback, or a checkpoint held one run's weights and the
    other's optimiser) and each validation twice into evals.jsonl."""
    out = tmp_path / "run"
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_raw(out)))
    first = start_paused_run(tmp_path, "tokenizer", "--config", str(config), "--max-steps", "2")
    try:
        with pytest.raises(DecisionInputError, match="in use by another training run"):
            train(config_from_dict(tiny_raw(out)), max_steps=1)
        assert [p.name for p in out.iterdir()] == [".run.lock"]  # nothing of the second run
    finally:
        kill_hard(first)
    # the first run died (SIGKILL): the directory is free again, nothing to clean up
    result = train(config_from_dict(tiny_raw(out)), max_steps=1)
    assert result.loop.step == 1


def test_a_resume_while_the_run_still_trains_is_refused_and_a_kill_frees_it(
    tmp_path: Path,
) -> None:
    """--resume into a directory whose run was still training loaded its checkpoint and trained
    on beside it: two processes then swapped checkpoints in the same directory."""
    from decision.train.checkpoint import load_trainer_state

    out = tmp_path / "run"
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_raw(out, checkpoint_minutes=0.0)))  # every step
    first = start_paused_run(tmp_path, "checkpoint", "--config", str(config),
                             "--max-steps", "50")
    try:
        assert load_trainer_state(out / "checkpoint")["step"] == 1
        with pytest.raises(DecisionInputError, match="in use by another training run"):
            train(config_from_dict(tiny_raw(out)), resume=True, max_steps=3)
        assert load_trainer_state(out / "checkpoint")["step"] == 1  # not touched
    finally:
        kill_hard(first)  # SIGKILL, as a crash or the OOM killer would
    resumed = train(config_from_dict(tiny_raw(out)), resume=True, max_steps=3)
    assert resumed.loop.step == 3 and len(resumed.loop.losses) == 2  # from the checkpoint


def test_a_run_directory_held_in_this_process_is_refused_too(tmp_path: Path) -> None:
    """The lock is the directory's: another run of this process is refused as well, and a
    refused fresh run leaves no directory behind."""
    from decision.train.run_dir import hold_run_dir

    out = tmp_path / "run"
    with hold_run_dir(str(out)):
        with pytest.raises(DecisionInputError, match="in use by another training run"):
            train(config_from_dict(tiny_raw(out)), max_steps=1)
    assert [p.name for p in out.iterdir()] == [".run.lock"]  # nothing of the refused run
    with pytest.raises(RuntimeError), hold_run_dir(str(tmp_path / "never")):
        raise RuntimeError("a run that failed before it wrote anything")
    assert not (tmp_path / "never").exists()


def run_cli(*args: str) -> int:
    from decision.train.cli import main

    return main(list(args))


def enospc_in_torch_save(*args: object, **kwargs: object) -> None:
    # what torch.save raises when the disk fills up under it (no errno, no file name)
    raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 135232 vs "
                       "135120")


def eio_in_model_save(self: object, path: object, max_shard_size: object = None) -> None:
    Path(str(path)).mkdir(parents=True, exist_ok=True)
    (Path(str(path)) / "model.safetensors.part").write_bytes(b"\0" * 100)
    raise OSError(errno.EIO, "Input/output error")


@pytest.mark.parametrize("failure", ["torch_save", "model_save"])
def test_a_checkpoint_that_cannot_be_written_is_one_line_and_keeps_the_last_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    failure: str,
) -> None:
    """A full disk while the trainer state was written ended the run with torch's traceback
    ("unexpected pos 135232 vs 135120": no file, no errno), an I/O error while the weights were
    written with a traceback too; the half-written checkpoint.tmp stayed, holding the space."""
    from decision.model import DecisionModel, load_model
    from decision.train.checkpoint import load_trainer_state

    out = tmp_path / "run"
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_raw(out)))
    assert run_cli("--config", str(config), "--max-steps", "2") == 0
    ckpt = out / "checkpoint"
    weights = (ckpt / "model.safetensors").read_bytes()
    capsys.readouterr()
    if failure == "torch_save":
        monkeypatch.setattr(torch, "save", enospc_in_torch_save)
        names = "trainer_state.pt"
    else:
        monkeypatch.setattr(DecisionModel, "save", eio_in_model_save)
        names = "Input/output error"
    status = run_cli("--config", str(config), "--resume", "--max-steps", "4",
                     "--export", str(tmp_path / "export"))
    monkeypatch.undo()
    assert status == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]  # after the run's progress lines
    assert line.startswith("error: cannot write the checkpoint of step 4: ")
    assert names in line and str(out / "checkpoint.tmp") in line
    assert f"{ckpt} is kept" in line and "--resume" in line
    # the last complete checkpoint stands, and nothing half-written beside it
    assert not (out / "checkpoint.tmp").exists()
    assert load_trainer_state(ckpt)["step"] == 2
    assert (ckpt / "model.safetensors").read_bytes() == weights
    load_model(ckpt)
    assert not (tmp_path / "export").exists()
    # once the disk has room again, --resume goes on from it
    assert run_cli("--config", str(config), "--resume", "--max-steps", "3") == 0
    assert load_trainer_state(ckpt)["step"] == 3


def test_an_export_that_cannot_be_written_is_one_line_and_keeps_the_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A full disk during --export (after the run's last checkpoint) ended the command with
    safetensors' traceback, and an empty DEST.tmp stayed beside DEST."""
    from decision.model import DecisionModel
    from decision.train.checkpoint import load_trainer_state

    out, dest = tmp_path / "run", tmp_path / "export"
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_raw(out)))
    save = DecisionModel.save

    def full_disk_in_export(self: DecisionModel, path: object, max_shard_size: object = None
                            ) -> None:
        if Path(str(path)).name == "export.tmp":
            eio_in_model_save(self, path)  # the I/O error
        save(self, path, max_shard_size)

    monkeypatch.setattr(DecisionModel, "save", full_disk_in_export)
    assert run_cli("--config", str(config), "--max-steps", "2", "--export", str(dest)) == 1
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"error: cannot export to {dest}: writing {dest}.tmp: Input/output")
    assert f"checkpoint {out / 'checkpoint'} is whole" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "tiny.json"]
    assert load_trainer_state(out / "checkpoint")["step"] == 2
    # the export failed inside the run's hold of its fresh directory: the lock file stays
    # beside the checkpoint (it was removed as if the directory held nothing of the run)
    assert (out / ".run.lock").is_file()


def test_the_xiangqi_player_export_that_cannot_be_written_keeps_dest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from apps.xiangqi.train_player import export
    from decision.errors import TrainingError
    from decision.model import DecisionModel

    out = tmp_path / "run"
    train(config_from_dict(tiny_raw(out)), max_steps=1)
    dest = tmp_path / "player"
    dest.mkdir()
    (dest / "README.md").write_text("model card")
    monkeypatch.setattr(DecisionModel, "save", eio_in_model_save)
    with pytest.raises(TrainingError, match=r"writing .*player\.export\.tmp: Input/output error"
                                            r".* export it again \(--export-only\)"):
        export(out / "checkpoint", dest)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["player", "run"]
    assert [p.name for p in dest.iterdir()] == ["README.md"]


def test_a_xiangqi_player_run_into_a_held_directory_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Xiangqi driver takes the run directory as decision train does."""
    from apps.xiangqi.train_player import main
    from decision.train.run_dir import hold_run_dir

    games = REPO.parent / "shared" / "data" / "xiangqi" / "valid-games.jsonl.gz"
    if not games.is_file():
        pytest.skip(f"no game data at {games}")
    config = tmp_path / "player.json"
    config.write_text(json.dumps({
        "train": {"model": json.loads(TINY.read_text())["model"] | {"num_segments": 2},
                  "run": {"out_dir": str(tmp_path / "run"), "max_steps": 1}},
        "xiangqi": {"train_games": str(games), "valid_games": str(games),
                    "train_positions": 8, "val_positions": 2, "tokenizer_positions": 30},
    }))
    with hold_run_dir(str(tmp_path / "run")):
        assert main(["--config", str(config), "--resume"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == (f"error: run directory {tmp_path / 'run'} is in use by another training run "
                    "(started into the same directory, still running): wait for it to end, or "
                    "give another --out-dir")
    assert [p.name for p in (tmp_path / "run").iterdir()] == [".run.lock"]


def test_a_torn_last_validation_record_is_dropped_on_resume(tmp_path: Path) -> None:
    """A run killed (or out of disk) while appending to evals.jsonl left a torn last line, no
    newline: the resumed run kept it and wrote its next record onto the same line, so the file
    no longer read as JSON lines."""
    from decision.train.run_dir import trim_evals

    path = tmp_path / "evals.jsonl"
    path.write_text('{"step": 2, "loss": 1.0}\n{"step": 3, "val')
    trim_evals(path, 10)
    assert path.read_text() == '{"step": 2, "loss": 1.0}\n'
    path.write_text('{"step": 2, "loss": 1.0}\nnot a record\n')  # a whole line is kept
    trim_evals(path, 10)
    assert path.read_text() == '{"step": 2, "loss": 1.0}\nnot a record\n'


def test_the_run_lock_holds_where_flock_needs_a_file_open_for_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over NFS an exclusive flock on a descriptor open read-only fails (EBADF): the run
    directory itself, the first lock, could only be opened so, and a second run into a
    directory on NFS was never refused. The lock is a file in it, opened for writing."""
    import fcntl

    from decision.train.run_dir import hold_run_dir

    flock = fcntl.flock

    def nfs_flock(fd: int, operation: int) -> None:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:
            raise OSError(errno.EBADF, "Bad file descriptor")
        flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", nfs_flock)
    out = tmp_path / "run"
    with hold_run_dir(str(out)):
        with pytest.raises(DecisionInputError, match="in use by another training run"):
            train(config_from_dict(tiny_raw(out)), max_steps=1)


def lock_is_held(run_dir: Path) -> bool:
    """Whether another holder has ``run_dir`` (a run, or an export of its checkpoint): taking it
    here is refused."""
    from decision.train.run_dir import hold_run_dir

    try:
        with hold_run_dir(str(run_dir)):
            return False
    except DecisionInputError as exc:
        assert "in use by another training run" in exc.message
        return True


def test_the_export_of_decision_train_is_written_with_the_run_directory_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``decision train --export DIR`` let go of the run directory when training returned and
    exported after: a run started into it then could swap the checkpoint the export read."""
    import decision.train.recipe as recipe

    out, dest = tmp_path / "run", tmp_path / "export"
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_raw(out)))
    held: list[bool] = []
    export_checkpoint = recipe.export_checkpoint

    def export_noting_the_lock(checkpoint: Path, out_dir: Path) -> Path:
        held.append(lock_is_held(out))
        return export_checkpoint(checkpoint, out_dir)

    monkeypatch.setattr(recipe, "export_checkpoint", export_noting_the_lock)
    assert run_cli("--config", str(config), "--max-steps", "1", "--export", str(dest)) == 0
    assert held == [True]
    assert (dest / "model.safetensors").is_file() and not lock_is_held(out)


def test_an_export_only_from_a_directory_a_run_holds_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m apps.xiangqi.train_player --export-only`` took no lock: beside a run still
    training in the directory it recovered and read the checkpoint that run was swapping. It
    is refused as a second training run is, with the same line, and nothing is written."""
    from apps.xiangqi.train_player import main

    out, dest = tmp_path / "run", tmp_path / "player"
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_raw(out, checkpoint_minutes=0.0)))  # every step
    player = tmp_path / "player.json"
    player.write_text(json.dumps({  # no games are read by an export
        "train": {"model": json.loads(TINY.read_text())["model"] | {"num_segments": 2},
                  "run": {"out_dir": str(out)}},
        "xiangqi": {"train_games": str(tmp_path / "none"), "valid_games": str(tmp_path / "none")},
    }))
    first = start_paused_run(tmp_path, "checkpoint", "--config", str(config),
                             "--max-steps", "50")
    try:
        assert run_cli("--config", str(config), "--resume", "--max-steps", "3") == 2
        refused_run = capsys.readouterr().err.strip().splitlines()[-1]
        # at once (the lock is tried without waiting), before any model is loaded
        assert main(["--config", str(player), "--export-only", "--export", str(dest)]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line == refused_run == (
            f"error: run directory {out} is in use by another training run (started into the "
            "same directory, still running): wait for it to end, or give another --out-dir")
        assert not dest.exists()
    finally:
        kill_hard(first)
    assert main(["--config", str(player), "--export-only", "--export", str(dest)]) == 0
    assert (dest / "model.safetensors").is_file() and not lock_is_held(out)


def test_an_export_only_from_another_users_run_directory_goes_on_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another user's run directory cannot be held (its lock file is theirs; or a lock file of
    ours would refuse their own runs): its export is written without the lock, with a warning,
    as before the lock, rather than refused."""
    from apps.xiangqi import train_player

    out, dest = tmp_path / "run", tmp_path / "player"
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_raw(out)))
    assert run_cli("--config", str(config), "--max-steps", "2") == 0
    player = tmp_path / "player.json"
    player.write_text(json.dumps({
        "train": {"model": json.loads(TINY.read_text())["model"] | {"num_segments": 2},
                  "run": {"out_dir": str(out)}},
        "xiangqi": {"train_games": str(tmp_path / "none"), "valid_games": str(tmp_path / "none")},
    }))
    capsys.readouterr()

    def not_held(out_dir: str) -> None:
        raise AssertionError(f"{out_dir} was held")

    monkeypatch.setattr(train_player, "may_hold_run_dir", lambda directory: directory != out)
    monkeypatch.setattr(train_player, "hold_run_dir", not_held)
    assert train_player.main(["--config", str(player), "--export-only", "--export",
                              str(dest)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].endswith(f"] warning: the run directory {out} is another user's: exported "
                           "without holding it (a run its owner starts there meanwhile is not "
                           "waited for)")
    assert err[-1].endswith(f"] exported bf16 model to {dest}")
    assert (dest / "model.safetensors").is_file()


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a directory to another user (chown)")
def test_an_export_only_leaves_no_lock_file_in_another_users_directory(tmp_path: Path) -> None:
    """In a shared (group- or world-writable) run directory of another user, --export-only
    created .run.lock, 0644 and ours, and the owner's own --resume then could not open it for
    writing ("cannot write in the run directory"). Such a directory is not held; one of our own,
    or one whose lock file we may write, is."""
    from decision.train.run_dir import may_hold_run_dir

    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    theirs.mkdir(mode=0o777)
    ours.mkdir()
    os.chown(theirs, 65534, 65534)  # nobody's
    assert not may_hold_run_dir(theirs) and may_hold_run_dir(ours)
    (theirs / ".run.lock").touch(mode=0o666)  # a lock file there, writable by us: held
    assert may_hold_run_dir(theirs)


def test_a_tokenizer_that_cannot_be_written_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A full disk while a fresh run wrote tokenizer.json, its first file, ended the run with a
    traceback (tokenizers raises a bare Exception, "No space left on device (os error 28)")."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    out = tmp_path / "run"
    out.mkdir()
    (out / "tokenizer.json").symlink_to("/dev/full")  # every write: ENOSPC
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_raw(out)))
    assert run_cli("--config", str(config), "--max-steps", "1") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"error: cannot write the run's tokenizer {out / 'tokenizer.json'}: No space left on "
        "device; nothing was trained: once the disk is fixed (space freed), run the same "
        "command again")
    assert sorted(p.name for p in out.iterdir()) == [".run.lock"]  # no torn file left
    assert run_cli("--config", str(config), "--max-steps", "1") == 0  # room again
