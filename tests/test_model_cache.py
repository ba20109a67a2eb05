"""History cache semantics: prefill/commit equivalence, padding, immutability, bidirectionality."""

from __future__ import annotations

import pytest
import torch

from decision.errors import DecisionInputError
from decision.model import AttentionCache, GDNCache, HistoryCache
from decision.model.testing import tiny_model

ATOL = 2e-5


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return tiny_model(seed=0, random_block=True)


def _ids(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(2, 96, shape, generator=torch.Generator().manual_seed(seed))


def _assert_cache_close(a: HistoryCache, b: HistoryCache, atol: float = ATOL) -> None:
    assert torch.equal(a.lengths, b.lengths)
    for la, lb in zip(a.layers, b.layers, strict=True):
        if isinstance(la, GDNCache):
            assert isinstance(lb, GDNCache)
            torch.testing.assert_close(la.state, lb.state, atol=atol, rtol=1e-4)
            torch.testing.assert_close(la.conv_tail, lb.conv_tail, atol=atol, rtol=1e-4)
        else:
            assert isinstance(la, AttentionCache) and isinstance(lb, AttentionCache)
            n = int(a.lengths.max())
            torch.testing.assert_close(la.key[:, :, :n], lb.key[:, :, :n], atol=atol, rtol=1e-4)
            torch.testing.assert_close(la.value[:, :, :n], lb.value[:, :, :n], atol=atol,
                                       rtol=1e-4)


def _row_cache(cache: HistoryCache, row: int) -> HistoryCache:
    return cache.index_select([row])


@torch.inference_mode()
def test_prefill_equals_commit_and_denoise_agrees(model: torch.nn.Module) -> None:
    a, b, block = _ids(2, 23, seed=1), _ids(2, 9, seed=2), _ids(2, 8, seed=3)
    whole = model.prefill(torch.cat([a, b], dim=1))
    stepwise = model.commit(b, model.prefill(a))
    _assert_cache_close(whole, stepwise)
    torch.testing.assert_close(model.denoise(block, whole), model.denoise(block, stepwise),
                               atol=ATOL, rtol=1e-4)


@torch.inference_mode()
def test_blocks_committed_one_by_one_equal_one_prefill(model: torch.nn.Module) -> None:
    ids = _ids(1, 5 + 4 * 7, seed=4)
    cache = model.prefill(ids[:, :5])
    for start in range(5, ids.shape[1], 7):
        cache = model.commit(ids[:, start : start + 7], cache)
    _assert_cache_close(cache, model.prefill(ids))


@torch.inference_mode()
def test_commit_from_empty_cache_equals_prefill(model: torch.nn.Module) -> None:
    ids = _ids(2, 11, seed=5)
    _assert_cache_close(model.commit(ids, model.empty_cache(2)), model.prefill(ids))


@torch.inference_mode()
def test_empty_inputs_and_empty_rows(model: torch.nn.Module) -> None:
    assert model.prefill(torch.zeros(2, 0, dtype=torch.long)).lengths.tolist() == [0, 0]
    cache = model.prefill(_ids(2, 6, seed=24))
    assert model.denoise(torch.zeros(2, 0, dtype=torch.long), cache).shape == (2, 0, 97)
    block = _ids(2, 5, seed=25)
    folded = model.commit(block, cache, block_mask=torch.tensor([[1, 1, 0, 0, 0], [0] * 5]))
    assert folded.lengths.tolist() == [8, 6]
    _assert_cache_close(folded.index_select([1]), cache.index_select([1]))
    assert bool(torch.isfinite(model.denoise(block, model.empty_cache(2))).all())


@torch.inference_mode()
def test_zero_row_batches(model: torch.nn.Module) -> None:
    """A batch of no rows (e.g. ``cache.index_select([])``) runs every path."""
    none = torch.zeros(0, 4, dtype=torch.long)
    assert model.prefill(none).lengths.tolist() == []
    empty = model.prefill(_ids(2, 6, seed=26)).index_select([])
    assert model.denoise(none, empty).shape == (0, 4, 97)
    assert model.commit(none, empty).lengths.tolist() == []


@torch.inference_mode()
def test_batched_right_padded_prefill_equals_per_row(model: torch.nn.Module) -> None:
    lengths = [30, 12, 1]
    ids = _ids(3, 30, seed=6)
    mask = torch.arange(30)[None, :] < torch.tensor(lengths)[:, None]
    batched = model.prefill(ids, attention_mask=mask)
    block = _ids(3, 6, seed=7)
    block_mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 6]).bool()
    logits = model.denoise(block, batched, block_mask=block_mask)
    committed = model.commit(block, batched, block_mask=block_mask)
    for row, n in enumerate(lengths):
        single = model.prefill(ids[row : row + 1, :n])
        _assert_cache_close(_row_cache(batched, row), single)
        n_blk = int(block_mask[row].sum())
        ref = model.denoise(block[row : row + 1, :n_blk], single)
        torch.testing.assert_close(logits[row, :n_blk], ref[0], atol=ATOL, rtol=1e-4)
        ref_commit = model.commit(block[row : row + 1, :n_blk], single)
        _assert_cache_close(_row_cache(committed, row), ref_commit)


@torch.inference_mode()
def test_denoise_leaves_cache_bit_identical(model: torch.nn.Module) -> None:
    cache = model.prefill(_ids(2, 17, seed=8))
    before = [t.clone() for layer in cache.layers for t in vars(layer).values()]
    lengths = cache.lengths.clone()
    for seed in range(3):
        model.denoise(_ids(2, 8, seed=9 + seed), cache)
    after = [t for layer in cache.layers for t in vars(layer).values()]
    assert all(torch.equal(x, y) for x, y in zip(before, after, strict=True))
    assert torch.equal(lengths, cache.lengths)
    model.commit(_ids(2, 8, seed=20), cache)  # commit builds a new cache, the old one stays
    after = [t for layer in cache.layers for t in vars(layer).values()]
    assert all(torch.equal(x, y) for x, y in zip(before, after, strict=True))


@torch.inference_mode()
def test_every_block_position_sees_every_other_and_the_history(model: torch.nn.Module) -> None:
    history, block = _ids(1, 20, seed=11), _ids(1, 8, seed=12)
    cache = model.prefill(history)
    base = model.denoise(block, cache)[0]
    for j in range(block.shape[1]):
        changed = block.clone()
        changed[0, j] = (changed[0, j] + 1) % 96
        diff = (model.denoise(changed, cache)[0] - base).abs().amax(-1)
        assert bool((diff > 1e-6).all()), (j, diff)
    other = history.clone()
    other[0, 0] = (other[0, 0] + 1) % 96  # the first history token: far from the block
    diff = (model.denoise(block, model.prefill(other))[0] - base).abs().amax(-1)
    assert bool((diff > 1e-6).all())


@torch.inference_mode()
def test_padded_block_tokens_are_ignored(model: torch.nn.Module) -> None:
    cache = model.prefill(_ids(1, 10, seed=13))
    block = _ids(1, 8, seed=14)
    mask = torch.tensor([[1] * 5 + [0] * 3]).bool()
    base = model.denoise(block, cache, block_mask=mask)[0, :5]
    other = block.clone()
    other[0, 5:] = 3
    torch.testing.assert_close(model.denoise(other, cache, block_mask=mask)[0, :5], base)


@torch.inference_mode()
def test_segment_ids_change_the_logits(model: torch.nn.Module) -> None:
    cache = model.prefill(_ids(1, 10, seed=15))
    block = _ids(1, 6, seed=16)
    a = model.denoise(block, cache, segment_ids=torch.zeros(1, 6, dtype=torch.long))
    b = model.denoise(block, cache, segment_ids=torch.full((1, 6), 3))
    assert not torch.allclose(a, b)


def test_bad_inputs_raise_decision_input_errors(model: torch.nn.Module) -> None:
    ids = _ids(2, 6, seed=17)
    left_padded = torch.tensor([[0, 0, 1, 1, 1, 1], [1] * 6])
    with pytest.raises(DecisionInputError, match="right-padded") as err:
        model.prefill(ids, attention_mask=left_padded)
    assert err.value.field == "attention_mask"
    with pytest.raises(DecisionInputError, match="token ids outside"):
        model.prefill(torch.full((1, 3), 500))
    with pytest.raises(DecisionInputError, match="segment_ids"):
        model.prefill(ids, segment_ids=torch.full((2, 6), 99))
    with torch.inference_mode():
        cache = model.prefill(ids)
    with pytest.raises(DecisionInputError, match="cache"):
        model.denoise(_ids(3, 4), cache)
    with pytest.raises(DecisionInputError, match="cache"):
        model.denoise(_ids(2, 4), "not a cache")


@torch.inference_mode()
def test_bf16_model_keeps_fp32_state_and_close_logits() -> None:
    ref_model = tiny_model(seed=1, random_block=True)
    history, block = _ids(2, 40, seed=21), _ids(2, 8, seed=22)
    ref = ref_model.denoise(block, ref_model.prefill(history))
    bf16 = ref_model.to(torch.bfloat16)
    cache = bf16.prefill(history)
    assert all(layer.state.dtype == torch.float32 for layer in cache.layers
               if isinstance(layer, GDNCache))
    got = bf16.denoise(block, cache)
    assert got.dtype == torch.bfloat16
    assert float((got.float() - ref).norm() / ref.norm()) < 0.03


@torch.inference_mode()
def test_attention_query_chunking_is_exact(model: torch.nn.Module,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from decision.model import attention

    ids = _ids(2, 30, seed=23)
    ref = model.history_logits(ids)
    monkeypatch.setattr(attention, "QUERY_CHUNK", 7)
    torch.testing.assert_close(model.history_logits(ids), ref, atol=1e-6, rtol=1e-5)


@torch.inference_mode()
def test_a_cache_of_another_model_is_refused_with_a_clear_error() -> None:
    """A cache of another dtype, layer order or head shape used to fail deep inside SDPA or
    the delta rule; it is one input error naming the layer now."""
    fp32 = tiny_model(seed=2)
    history, block = _ids(1, 12, seed=24), _ids(1, 8, seed=25)
    fp32_cache = fp32.prefill(history)
    bf16 = tiny_model(seed=2).to(torch.bfloat16)
    with pytest.raises(DecisionInputError, match=r"cache layer 0 conv_tail is torch.float32"):
        bf16.denoise(block, fp32_cache)
    with pytest.raises(DecisionInputError, match="cache layer 0 conv_tail is torch.bfloat16"):
        fp32.commit(block, bf16.prefill(history))
    reordered = tiny_model(seed=2, layer_types=["full_attention", "linear_attention",
                                                "linear_attention", "linear_attention"])
    with pytest.raises(DecisionInputError, match="cache layer 0 is a GDNCache where the model "
                                                 "has a AttentionCache"):
        reordered.denoise(block, fp32_cache)
    wider = tiny_model(seed=2, linear_num_value_heads=2)
    with pytest.raises(DecisionInputError, match=r"cache layer 0 state has shape \(1, 4, 8, 8\)"):
        wider.denoise(block, fp32_cache)
    fp32.denoise(block, fp32_cache)  # its own cache is accepted


@torch.inference_mode()
def test_padding_after_a_full_reset_gate_leaves_the_row_finite() -> None:
    """A GDN head whose decay overflows (exp(A_log) = inf: g = -inf, a full reset, which the
    delta-rule kernels take) used to turn a padded step's g into -inf * 0 = NaN: the padded
    row's state and its real tokens' logits became NaN while the row alone was finite."""
    model = tiny_model(seed=0, random_block=True)
    with torch.no_grad():
        model.model.layers[0].linear_attn.A_log[0] = 100.0
    ids = _ids(2, 12, seed=30)
    mask = torch.tensor([[1] * 12, [1] * 6 + [0] * 6]).bool()
    batched = model.prefill(ids, attention_mask=mask)
    single = model.prefill(ids[1:, :6])
    _assert_cache_close(_row_cache(batched, 1), single)
    logits = model.history_logits(ids, attention_mask=mask)
    assert bool(torch.isfinite(logits[1, :6]).all())
    torch.testing.assert_close(logits[1, :6], model.history_logits(ids[1:, :6])[0],
                               atol=ATOL, rtol=1e-4)


@torch.inference_mode()
def test_a_one_token_block_attends_as_the_next_history_token() -> None:
    """Block queries sit at the positions after each row's history: a one-token block sees what
    the next causal token would (every valid history key and itself), so the attention layer's
    block output equals its history output for that token. Block positions counted from 0
    instead of from the row's history length changed no other comparison here (prefill, commit
    and denoise all agreed with each other), only the RoPE distances to the history."""
    model = tiny_model(seed=0)
    attn = next(layer.self_attn for layer in model.model.layers if not layer.is_linear)
    gen = torch.Generator().manual_seed(7)
    hidden = model.config.hidden_size
    history = torch.randn(2, 6, hidden, generator=gen)
    mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])  # rows of 6 and 3 tokens
    empty = attn.empty_cache(2, torch.device("cpu"), torch.float32)
    _, cache = attn.history(history, mask, torch.zeros(2, dtype=torch.long), empty)
    lengths = mask.sum(-1)
    x = torch.randn(2, 1, hidden, generator=gen)
    one = torch.ones(2, 1, dtype=torch.bool)
    causal, _ = attn.history(x, one, lengths, cache)
    torch.testing.assert_close(attn.block(x, one, lengths, cache), causal, atol=1e-5, rtol=1e-5)
