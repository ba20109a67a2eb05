"""Tokenizer: digits split, specials fixed, outlines vocabulary maps tokens to their exact bytes."""

from __future__ import annotations

import json

import pytest

from decision.errors import DecisionInputError
from decision.joint.toy import lease_sentences
from decision.tokenizer import (
    SPECIAL_TOKENS,
    build_vocabulary,
    special_ids,
    token_bytes,
    train_tokenizer,
)


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(lease_sentences(300), vocab_size=600)


def test_trains_with_specials_first() -> None:
    # how fast it trains is a benchmark's question, not a test's (no wall-clock bound here)
    tok = train_tokenizer(lease_sentences(300, seed=1), vocab_size=500)
    for i, token in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(token) == i
    ids = special_ids(tok)
    assert ids.mask == 1 and ids.eos == 2 and len(ids.questions) == len(ids.answers) == 8


def test_digits_are_single_tokens(tok) -> None:
    enc = tok.encode("Rent of 12345 euros, 2026-11-29")
    digit_tokens = [t for t in enc.tokens if any(c.isdigit() for c in t)]
    assert digit_tokens and all(len(t) == 1 for t in digit_tokens)


def test_token_bytes_roundtrip_text(tok) -> None:
    table = token_bytes(tok)
    for text in ["The tenant owes 1500 euros.", "naïve café — ünïcode ✓", " lead  spaces\n"]:
        ids = tok.encode(text).ids
        assert b"".join(table[i] for i in ids).decode("utf-8") == text
        assert tok.decode(ids) == text
    assert all(table[tok.token_to_id(t)] is None for t in SPECIAL_TOKENS)


def test_vocabulary_has_eos_and_no_specials(tok) -> None:
    vocab = build_vocabulary(tok)
    ids = special_ids(tok)
    assert vocab.get_eos_token_id() == ids.eos
    assert vocab.get(b"[MASK]") is None
    assert vocab.get(b"7") == [tok.token_to_id("7")]


def test_rejects_tiny_vocab() -> None:
    with pytest.raises(DecisionInputError) as err:
        train_tokenizer(["a"], vocab_size=10)
    assert err.value.field == "vocab_size"


def test_token_bytes_takes_ids_with_gaps(tok) -> None:
    # sized by the token count, the table had no room for an id past it (an IndexError at the
    # first request to a model whose tokenizer's ids have a gap)
    from tokenizers import Tokenizer

    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    token = next(t for t, i in vocab.items() if i == max(vocab.values()))
    vocab[token] = len(vocab) + 100
    gapped = Tokenizer.from_str(json.dumps(data))
    table = token_bytes(gapped)
    assert len(table) == len(vocab) + 101 and table[len(vocab) + 100] is not None
