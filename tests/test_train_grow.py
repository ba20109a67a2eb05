"""Growing a model (decision.train.grow): the grown model computes what its source does."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from decision.errors import DecisionInputError
from decision.model import DecisionModel, load_model
from decision.model.config import FULL, LINEAR
from decision.model.testing import tiny_model
from decision.train.grow import grow, main, upcycle


def dense(seed: int = 0) -> DecisionModel:
    return tiny_model(seed=seed, random_block=True, num_experts=0, intermediate_size=48)


def saved_dense(path: Path) -> None:
    """:func:`dense` saved with a tokenizer, as the command line reads a model."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    source = dense()
    source.tokenizer = Tokenizer(WordLevel({f"t{i}": i for i in range(90)}, unk_token="t0"))
    source.save(path)


def outputs(model: DecisionModel, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal logits of a history and denoising logits of a block over it."""
    g = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size - 1  # leave out the mask id
    history = torch.randint(3, vocab, (2, 9), generator=g)
    block = torch.randint(3, vocab, (2, 5), generator=g)
    block[:, 1] = model.config.mask_token_id
    with torch.no_grad():
        return model.history_logits(history), model(history, block)


@settings(max_examples=8, deadline=None)
@given(
    add=st.lists(st.sampled_from([LINEAR, FULL]), max_size=3),
    extra=st.integers(0, 40),
    seed=st.integers(0, 1000),
)
def test_grown_model_computes_what_its_source_does(add: list[str], extra: int,
                                                   seed: int) -> None:
    if not add and extra == 0:
        return
    source = dense(seed)
    grown = grow(source, add, 48 + extra, seed=seed + 1)
    assert grown.config.num_hidden_layers == 4 + len(add)
    assert grown.config.layer_types == [*source.config.layer_types, *add]
    assert grown.config.intermediate_size == 48 + extra
    for got, want in zip(outputs(grown, seed), outputs(source, seed), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_new_weights_are_live_and_train() -> None:
    """The zeroed outputs are the only thing keeping the new parts silent: set them and the
    logits move; one backward gives them gradients."""
    source = dense()
    grown = grow(source, [LINEAR, FULL], 64)
    new_layer = grown.model.layers[5]
    history = torch.randint(3, 90, (1, 7))
    block = torch.full((1, 4), grown.config.mask_token_id)
    loss = grown(history, block).logsumexp(-1).sum()
    loss.backward()
    for weight in (new_layer.self_attn.o_proj.weight, new_layer.mlp.down_proj.weight,
                   grown.model.layers[0].mlp.down_proj.weight):
        assert weight.grad is not None and weight.grad.abs().sum() > 0
    with torch.no_grad():
        new_layer.mlp.down_proj.weight.normal_(std=0.05)
    moved, _ = outputs(grown, 0)
    same, _ = outputs(source, 0)
    assert not torch.allclose(moved, same, atol=1e-4)


@pytest.mark.parametrize(("kwargs", "field"), [
    (dict(add_layers=["conv"], intermediate_size=None), "add_layers"),
    (dict(add_layers=[], intermediate_size=32), "intermediate_size"),
    (dict(add_layers=[], intermediate_size=None), "add_layers"),
])
def test_bad_growth_is_refused(kwargs: dict, field: str) -> None:
    with pytest.raises(DecisionInputError) as info:
        grow(dense(), **kwargs)
    assert info.value.field == field


def test_moe_models_are_refused() -> None:
    with pytest.raises(DecisionInputError, match="dense models only"):
        grow(tiny_model(), [LINEAR])


def test_cli_writes_a_loadable_grown_checkpoint(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    saved_dense(tmp_path / "small")
    out = tmp_path / "grown"
    assert main([str(tmp_path / "small"), str(out), "--add-layers",
                 "linear_attention, full_attention", "--intermediate-size", "64"]) == 0
    assert "6 layers, intermediate 64" in capsys.readouterr().out
    grown = load_model(out)
    assert grown.tokenizer is not None
    for got, want in zip(outputs(grown, 3), outputs(load_model(tmp_path / "small"), 3),
                         strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(SystemExit):  # never over an existing directory
        main([str(tmp_path / "small"), str(out), "--add-layers", "full_attention"])


@settings(max_examples=8, deadline=None)
@given(
    experts=st.integers(1, 6),
    per_token=st.integers(1, 6),
    size=st.integers(1, 40),
    seed=st.integers(0, 1000),
)
def test_upcycled_model_computes_what_its_source_does(experts: int, per_token: int, size: int,
                                                      seed: int) -> None:
    per_token = min(per_token, experts)
    source = dense(seed)
    moe = upcycle(source, experts, per_token, size, seed=seed + 1)
    assert moe.config.num_experts == experts
    assert moe.config.num_experts_per_tok == per_token
    assert moe.config.moe_intermediate_size == size
    assert moe.config.shared_expert_intermediate_size == 48
    assert all(moe.config.layer_is_moe(i) for i in range(4))
    for got, want in zip(outputs(moe, seed), outputs(source, seed), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_upcycled_experts_are_live_and_train() -> None:
    """The zeroed expert outputs and shared-expert gate keep the experts silent: one backward
    gives them gradients, and once set they move the logits."""
    source = dense()
    moe = upcycle(source, 4, 2, 16, seed=3)
    block = moe.model.layers[1].mlp
    history = torch.randint(3, 90, (1, 7))
    masked = torch.full((1, 4), moe.config.mask_token_id)
    moe(history, masked).logsumexp(-1).sum().backward()
    for weight in (block.experts.down_proj, block.shared_expert_gate.weight,
                   block.shared_expert.up_proj.weight):
        assert weight.grad is not None and weight.grad.abs().sum() > 0
    with torch.no_grad():
        block.experts.down_proj.normal_(std=0.05)
    moved, _ = outputs(moe, 0)
    same, _ = outputs(source, 0)
    assert not torch.allclose(moved, same, atol=1e-4)


@pytest.mark.parametrize(("args", "field"), [
    ((0, 1, 8), "num_experts"),
    ((4, 5, 8), "num_experts_per_tok"),
    ((4, 0, 8), "num_experts_per_tok"),
    ((4, 2, 0), "moe_intermediate_size"),
])
def test_bad_upcycling_is_refused(args: tuple[int, int, int], field: str) -> None:
    with pytest.raises(DecisionInputError) as info:
        upcycle(dense(), *args)
    assert info.value.field == field
    with pytest.raises(DecisionInputError, match="dense model"):
        upcycle(tiny_model(), 4, 2, 8)


def test_cli_upcycles_into_a_loadable_moe_checkpoint(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    saved_dense(tmp_path / "small")
    out = tmp_path / "moe"
    assert main([str(tmp_path / "small"), str(out), "--experts", "4"]) == 0
    assert "4 experts of 24 (2 a token)" in capsys.readouterr().out
    moe = load_model(out)
    assert moe.config.num_experts == 4 and moe.tokenizer is not None
    for got, want in zip(outputs(moe, 3), outputs(load_model(tmp_path / "small"), 3),
                         strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(SystemExit):  # a zero width is refused, not taken for the default
        main([str(tmp_path / "small"), str(tmp_path / "zero"), "--experts", "4",
              "--expert-size", "0"])
    assert not (tmp_path / "zero").exists()
    # the MLP width the source already has, with --experts, was "nothing to grow"
    assert main([str(tmp_path / "small"), str(tmp_path / "same"), "--experts", "4",
                 "--intermediate-size", "48"]) == 0
    assert load_model(tmp_path / "same").config.num_experts == 4
