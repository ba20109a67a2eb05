"""decision.model.average: the parameter-wise mean of checkpoints of one shape."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from decision.errors import CheckpointError
from decision.model import load_model
from decision.model.average import average_models, main
from decision.model.testing import tiny_model


def test_mean_of_three_checkpoints_is_the_parameterwise_mean(tmp_path: Path) -> None:
    paths = []
    for seed in (1, 2, 3):
        tiny_model(seed, random_block=True).save(tmp_path / f"m{seed}")
        paths.append(tmp_path / f"m{seed}")
    states = [load_model(p, dtype=None).state_dict() for p in paths]
    assert main([*map(str, paths), "--out", str(tmp_path / "mean")]) == 0
    mean = load_model(tmp_path / "mean", dtype=None).state_dict()
    assert mean.keys() == states[0].keys()
    for name, tensor in mean.items():
        expected = (states[0][name] + states[1][name] + states[2][name]) / 3
        torch.testing.assert_close(tensor, expected.to(tensor.dtype))
    embed = "model.embed_tokens.weight"
    assert not torch.equal(mean[embed], states[0][embed])


def test_mismatched_or_too_few_checkpoints_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tiny_model(1).save(tmp_path / "a")
    tiny_model(2, hidden_size=48).save(tmp_path / "wide")
    with pytest.raises(CheckpointError, match="config differs"):
        average_models([tmp_path / "a", tmp_path / "wide"])
    with pytest.raises(CheckpointError, match="at least two"):
        average_models([tmp_path / "a"])
    assert main([str(tmp_path / "a"), str(tmp_path / "a"), "--out", str(tmp_path / "a")]) == 2
    assert "already exists" in capsys.readouterr().err


def test_weighted_mean_extrapolates_away_from_the_second_checkpoint(tmp_path: Path) -> None:
    for seed in (1, 2):
        tiny_model(seed, random_block=True).save(tmp_path / f"m{seed}")
    paths = [tmp_path / "m1", tmp_path / "m2"]
    states = [load_model(p, dtype=None).state_dict() for p in paths]
    assert main([*map(str, paths), "--weights", "1.5,-0.5", "--out", str(tmp_path / "ext")]) == 0
    ext = load_model(tmp_path / "ext", dtype=None).state_dict()
    for name, tensor in ext.items():
        expected = 1.5 * states[0][name].float() - 0.5 * states[1][name].float()
        torch.testing.assert_close(tensor, expected.to(tensor.dtype))
    # the other way round, a first weight below zero as typed (argparse took "-0.5,1.5" for an
    # option: "expected one argument")
    assert main([*map(str, paths), "--weights", "-0.5,1.5", "--out", str(tmp_path / "ext2")]) == 0
    ext2 = load_model(tmp_path / "ext2", dtype=None).state_dict()
    for name, tensor in ext2.items():
        expected = -0.5 * states[0][name].float() + 1.5 * states[1][name].float()
        torch.testing.assert_close(tensor, expected.to(tensor.dtype))
    first_only = average_models(paths, weights=[1.0, 0.0]).state_dict()
    for name, tensor in first_only.items():
        assert torch.equal(tensor, states[0][name])


def test_weights_must_match_the_checkpoints_and_sum_to_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for seed in (1, 2):
        tiny_model(seed).save(tmp_path / f"m{seed}")
    paths = [tmp_path / "m1", tmp_path / "m2"]
    with pytest.raises(CheckpointError, match="3 weights for 2 checkpoints"):
        average_models(paths, weights=[0.5, 0.25, 0.25])
    with pytest.raises(CheckpointError, match="sum to 1.5, not 1"):
        average_models(paths, weights=[1.0, 0.5])
    with pytest.raises(SystemExit):
        main([*map(str, paths), "--weights", "half,half", "--out", str(tmp_path / "x")])
    assert "not a comma-separated list of numbers" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("weights", [[float("nan"), 1.0], [float("inf"), float("-inf")]])
def test_weights_must_be_finite(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                weights: list[float]) -> None:
    """NaN fails every comparison, so [nan, 1] passed the sum check and wrote a NaN model."""
    for seed in (1, 2):
        tiny_model(seed).save(tmp_path / f"m{seed}")
    paths = [tmp_path / "m1", tmp_path / "m2"]
    with pytest.raises(CheckpointError, match="must be finite numbers"):
        average_models(paths, weights=weights)
    text = ",".join(map(str, weights))
    assert main([*map(str, paths), "--weights", text, "--out", str(tmp_path / "x")]) == 2
    assert "must be finite numbers" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_an_out_that_cannot_be_written_is_one_line_and_leaves_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """--out under a file gave a NotADirectoryError traceback; a write failing midway (a full
    disk) left a partial --out that the rerun then refused as existing."""
    for seed in (1, 2):
        tiny_model(seed).save(tmp_path / f"m{seed}")
    paths = [str(tmp_path / "m1"), str(tmp_path / "m2")]
    (tmp_path / "file").write_text("")
    assert main([*paths, "--out", str(tmp_path / "file" / "mean")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write the mean" in err and "Not a directory" in err

    def disk_full(self: object, path: Path, max_shard_size: object = None) -> None:
        Path(path).mkdir(parents=True)
        (Path(path) / "model.safetensors").write_bytes(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("decision.model.backbone.DecisionModel.save", disk_full)
    assert main([*paths, "--out", str(tmp_path / "mean")]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert not (tmp_path / "mean").exists()


@pytest.mark.parametrize("weights", [None, [1.5, -0.5]])
def test_tied_embeddings_are_averaged_once(tmp_path: Path, weights: list[float] | None) -> None:
    # the tied tensor is in the state under both names: copied in place at the first, it was
    # averaged again at the second (0.25 a + 0.75 b for the plain mean of two)
    models = [tiny_model(seed, tie_word_embeddings=True) for seed in (1, 2)]
    for i, model in enumerate(models):
        model.save(tmp_path / f"m{i}")
    mean = average_models([tmp_path / "m0", tmp_path / "m1"], weights)
    w = weights or [0.5, 0.5]
    want = sum(wi * m.model.embed_tokens.weight for wi, m in zip(w, models, strict=True))
    assert torch.allclose(mean.model.embed_tokens.weight, want, atol=1e-6)
    assert mean.lm_head.weight.data_ptr() == mean.model.embed_tokens.weight.data_ptr()
