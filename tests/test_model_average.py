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
