"""The training device (``run.device``): validated, resolved, and the same losses on any device.

The CUDA test runs only where torch sees a GPU (the device machine); elsewhere it is skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from decision.errors import DecisionInputError
from decision.train.config import TrainConfig, config_from_dict
from decision.train.loop import resolve_device
from decision.train.masking import apply_mask
from decision.train.recipe import train
from decision.train.rows import Row, collate

TINY = Path(__file__).resolve().parents[1] / "configs" / "tiny.json"
HAS_CUDA = torch.cuda.is_available()


def tiny_config(out_dir: Path, **run: object) -> TrainConfig:
    raw = json.loads(TINY.read_text())
    raw["run"].update({"out_dir": str(out_dir), "eval_every": 10_000, **run})
    return config_from_dict(raw)


@pytest.mark.parametrize("name", ["cpu", "auto", "cuda", "cuda:1"])
def test_config_accepts_device_names(name: str, tmp_path: Path) -> None:
    assert tiny_config(tmp_path, device=name).run.device == name


@pytest.mark.parametrize("name", ["gpu", "CUDA", "cuda:", "cuda:x", "mps", ""])
def test_config_rejects_other_device_names(name: str, tmp_path: Path) -> None:
    with pytest.raises(DecisionInputError) as err:
        tiny_config(tmp_path, device=name)
    assert err.value.field == "run.device"


def test_default_device_is_the_cpu(tmp_path: Path) -> None:
    assert tiny_config(tmp_path).run.device == "cpu"
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal where there is no GPU")
def test_cuda_without_a_gpu_is_one_clear_error() -> None:
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(DecisionInputError, match="no CUDA device") as err:
        resolve_device("cuda")
    assert err.value.field == "run.device"


def _rows() -> list[Row]:
    return [
        Row([5, 6, 7], [1, 1, 1], [8, 9, 10, 11], [2, 2, 2, 2], [-1, 0, 0, -1], [0], "joint"),
        Row([5, 6], [1, 1], [8, 12], [2, 2], [-1, 0], [0], "standalone"),
    ]


def test_batches_and_masks_move_whole() -> None:
    batch = collate(_rows(), pad_token_id=0)
    moved = batch.to(torch.device("cpu"))
    assert moved.n_tokens == batch.n_tokens
    for name in ("history_ids", "history_mask", "block_ids", "block_mask", "slot_of", "roles"):
        assert torch.equal(getattr(moved, name), getattr(batch, name)), name
    rates = torch.full((2, 1), 0.5)
    masked = apply_mask(batch.block_ids, batch.slot_of, rates, 99, torch.Generator().manual_seed(0))
    again = masked.to(torch.device("cpu"))
    assert torch.equal(again.noised, masked.noised) and torch.equal(again.masked, masked.masked)
    assert torch.equal(again.weights, masked.weights)
    assert again.n_loss_tokens == masked.n_loss_tokens == 3


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_a_gpu_run_matches_the_cpu_run(tmp_path: Path) -> None:
    """Same data, same noise (drawn on the CPU), same initial weights: the losses agree up to the
    kernels' float differences, and the checkpoint reloads on the CPU."""
    from decision.model import load_model

    cpu = train(tiny_config(tmp_path / "cpu", max_steps=6, log_every=2))
    gpu = train(tiny_config(tmp_path / "gpu", max_steps=6, log_every=2, device="cuda"))
    assert gpu.loop.losses == pytest.approx(cpu.loop.losses, rel=2e-2, abs=2e-3)
    reloaded = load_model(gpu.checkpoint)
    assert next(reloaded.parameters()).device.type == "cpu"
    resumed = train(tiny_config(tmp_path / "gpu", max_steps=8, log_every=2, device="cuda"),
                    resume=True)
    assert resumed.loop.step == 8


@pytest.mark.parametrize("device", ["gpu", "cuda:x"])
def test_command_lines_refuse_a_bad_device(
    device: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from apps.xiangqi.train_player import main as train_player
    from decision.train.cli import main as train_decision

    out = str(tmp_path / "run")
    assert train_decision(["--config", str(TINY), "--out-dir", out, "--device", device]) == 2
    assert "run.device must be" in capsys.readouterr().err
    assert train_player(["--out-dir", out, "--device", device]) == 2
    assert "run.device must be" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # refused before anything was written


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal where there is no GPU")
def test_a_missing_gpu_is_refused_before_any_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from decision.train.cli import main as train_decision

    out = tmp_path / "run"
    assert train_decision(["--config", str(TINY), "--out-dir", str(out), "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert not out.exists()
