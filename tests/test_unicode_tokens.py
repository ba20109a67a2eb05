"""Non-ASCII answers over a tokenizer whose merges hold partial UTF-8 sequences.

Invariants: every answer the engine gives is UTF-8 text of the schema's language, every text of
the language within the budget has a token path (its canonical encoding), and the canonical
encoding spells a text's own bytes (a tokenizer that does not is refused).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer

from decision.errors import DecisionInputError
from decision.joint.engine import EngineConfig, decide
from decision.joint.toy import lease_sentences
from decision.schemas import Question, compile_answer, tokenizer_context
from decision.tokenizer import special_ids, train_tokenizer

SHIPPED = Path(__file__).resolve().parents[1] / "models" / "default" / "tokenizer.json"
UNICODE_TEXTS = ("café crème brûlée", "Straße größer Fuß", "中文 中国 中心 文字", "😀😁😂 🙏🙏",
                 "e\u0301 e\u0301 cafe\u0301", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𐍈 𐍈", "naïve façade Ærø", "日本語 日本 本")
# characters the options and documents are drawn from: composed and decomposed accents, CJK,
# emoji, characters outside the BMP, NUL and CR/LF, full-width brackets and special spellings
ALPHABET = "aeé\u0301ß中文字😀🙏𐍈𝔘\x00\r\n Ææ日本［］<>[]"
PATTERNS = (".", "[^a]", "[^a]{2}", ".{1,3}", "(?s).", "[é-ü]+", "[^\\x00-\\x7f]+", "[😀-🙏]+",
            "e\u0301|é", "[\U00010000-\U0010FFFF]", "[\\u0300-\\u036f]", "\\D", "(中|文)+",
            "[^a-z]{1,3}x")


def _unicode_tokenizer() -> Tokenizer:
    rng = random.Random(0)
    texts = lease_sentences(200) + [" ".join(rng.choice(UNICODE_TEXTS) for _ in range(3))
                                    for _ in range(200)]
    return train_tokenizer(texts, vocab_size=600)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    tok = _unicode_tokenizer()
    pieces = tokenizer_context(tok).pieces
    partial = [p for p in pieces if p and len(p) > 1 and not _decodes(p)]
    assert len(partial) > 10  # tokens that end (or start) inside a character
    return tok


@pytest.fixture(scope="module")
def ctx(tok):
    return tokenizer_context(tok)


@pytest.fixture(scope="module")
def model(tok):
    """A random-weight model over the tokenizer (as ``decision.joint.toy.toy_model``)."""
    from decision.model import DecisionConfig, DecisionModel
    from decision.model.testing import randomize_block_params

    sp = special_ids(tok)
    config = DecisionConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
        layer_types=["linear_attention", "full_attention"], num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, linear_num_key_heads=1, linear_num_value_heads=2,
        linear_key_head_dim=16, linear_value_head_dim=16, intermediate_size=64,
        mask_token_id=sp.mask, pad_token_id=sp.pad, eos_token_id=sp.eos,
        max_position_embeddings=512, num_segments=9,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        model = DecisionModel(config, tok).eval()
    randomize_block_params(model, torch.Generator().manual_seed(4))
    return model


def _decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _answer(schema: dict):
    return Question.model_validate({"id": "x", "text": "t", "answer": schema}).answer


def _accepts(automaton, ids: list[int]) -> bool:
    step = {(s, t): d for s, t, d in zip(automaton.src.tolist(), automaton.tok.tolist(),
                                         automaton.dst.tolist(), strict=True)}
    state: int | None = 0
    for token in ids:
        state = step.get((state, token))
        if state is None:
            return False
    return bool(automaton.accept[state])


# ------------------------------------------------------------------ tokenizers that are refused
def _patched(**fields) -> Tokenizer:
    data = json.loads(SHIPPED.read_text(encoding="utf-8"))
    data.update(fields)
    return Tokenizer.from_str(json.dumps(data))


@pytest.mark.parametrize("normalizer", [{"type": "NFKC"}, {"type": "NFC"}, {"type": "Lowercase"}])
def test_tokenizer_with_normalizer_refused(normalizer) -> None:
    # NFKC encoded the option "ﬁ" as "fi": its budget (2 tokens) was too short for its own
    # bytes (3), so a valid choice was refused; "e\u0301" came back as "é"
    with pytest.raises(DecisionInputError) as err:
        tokenizer_context(_patched(normalizer=normalizer))
    assert err.value.field == "tokenizer" and "normalizer" in err.value.message


def test_tokenizer_adding_prefix_space_refused() -> None:
    # its canonical "yes" was " yes": budgets and scored options counted another text
    pre = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]}
    with pytest.raises(DecisionInputError) as err:
        tokenizer_context(_patched(pre_tokenizer=pre))
    assert err.value.field == "tokenizer" and "own bytes" in err.value.message


def test_tokenizer_missing_a_byte_refused() -> None:
    # without the byte 0xC3 ("Ã" in the byte-level alphabet) BPE dropped it: "café" was spelled
    # b"caf\xa9", which does not decode
    data = json.loads(SHIPPED.read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    for token in [t for t in vocab if "Ã" in t]:
        del vocab[token]
    data["model"]["merges"] = [m for m in data["model"]["merges"]
                               if "Ã" not in (m if isinstance(m, str) else " ".join(m))]
    with pytest.raises(DecisionInputError) as err:
        tokenizer_context(Tokenizer.from_str(json.dumps(data)))
    assert err.value.field == "tokenizer" and "0xc3" in err.value.message


@pytest.mark.parametrize("content", ["\u00fc", "\u0100"])
def test_added_token_spelling_a_byte_symbol_refused(content) -> None:
    # an added (non-special) token "ü" is matched before the byte-level model, and its text
    # is byte 0xFC's symbol: "ü" read as the lone byte 0xFC (a choice ["ü"] got a 1-token slot
    # for its 2 bytes and was refused), "Ā" as NUL
    tok = Tokenizer.from_file(str(SHIPPED))
    tok.add_tokens([AddedToken(content, normalized=False)])
    with pytest.raises(DecisionInputError) as err:
        tokenizer_context(tok)
    assert err.value.field == "tokenizer"


def test_added_ascii_token_accepted() -> None:
    tok = Tokenizer.from_file(str(SHIPPED))
    tok.add_tokens([AddedToken("hello", normalized=False)])
    ctx = tokenizer_context(tok)
    assert ctx.text(ctx.canonical_ids("othello!")) == "othello!"


# ------------------------------------------------------------------ canonical encoding
@pytest.fixture(scope="module")
def shipped():
    return tokenizer_context(Tokenizer.from_file(str(SHIPPED)))


@settings(max_examples=200, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=40) | st.text(alphabet=ALPHABET, max_size=20))
def test_canonical_ids_round_trip(ctx, shipped, text) -> None:
    for c in (ctx, shipped):
        ids = c.canonical_ids(text)
        assert c.text(ids) == text
        assert c.tokenizer.decode(ids) == text
        assert not set(ids) & c.special.all  # "[EOS]", "<a1>" are text, never special tokens


def test_special_token_lookalikes_are_text(ctx) -> None:
    for text in ("［MASK］", "<ａ1>", "[EOS]", "<doc>", "\uff1cq1\uff1e"):
        ids = ctx.canonical_ids(text)
        assert ctx.text(ids) == text and not set(ids) & ctx.special.all


# ------------------------------------------------------------------ automata
@pytest.mark.parametrize("regex", PATTERNS)
def test_pattern_paths_decode_and_match(ctx, regex) -> None:
    """Random accepted token paths (partial-UTF-8 tokens included) are UTF-8 text the regex
    matches; a lone continuation byte or a cut sequence never reaches acceptance."""
    automaton = compile_answer(_answer({"type": "pattern", "regex": regex, "max_tokens": 8}), ctx)
    out: dict[int, list[tuple[int, int]]] = {}
    for s, t, d in zip(automaton.src.tolist(), automaton.tok.tolist(), automaton.dst.tolist(),
                       strict=True):
        if t != ctx.special.eos:
            out.setdefault(s, []).append((t, d))
    accept = automaton.accept.tolist()
    rng = random.Random(regex)
    for _ in range(300):
        state, ids = 0, []
        while len(ids) < automaton.budget and out.get(state):
            if accept[state] and rng.random() < 0.3:
                break
            token, state = rng.choice(out[state])
            ids.append(token)
        if accept[state]:
            data = b"".join(ctx.pieces[i] for i in ids)
            assert _decodes(data), (regex, data)
            assert re.fullmatch(regex, data.decode("utf-8")), (regex, data)


def test_choice_options_by_normalisation_kept_apart(ctx) -> None:
    options = ["é", "e\u0301", "café", "cafe\u0301", "中文", "😀", "𐍈", "\x00", "\r\n", "［］"]
    answer = _answer({"type": "choice", "options": options})
    automaton = compile_answer(answer, ctx)
    for option in options:
        ids = ctx.canonical_ids(option)
        assert ctx.text(ids) == option
        assert len(ids) <= automaton.budget and _accepts(automaton, ids)


# ------------------------------------------------------------------ the engine
WORDS = st.text(alphabet=ALPHABET, min_size=1, max_size=5)


@st.composite
def _schemas(draw) -> dict:
    if draw(st.booleans()):
        return {"type": "choice", "options": draw(st.lists(WORDS, min_size=1, max_size=5,
                                                           unique=True))}
    return {"type": "pattern", "regex": draw(st.sampled_from(PATTERNS)),
            "max_tokens": draw(st.integers(4, 10))}


@settings(max_examples=25, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])
@given(schemas=st.lists(_schemas(), min_size=1, max_size=3),
       document=st.text(alphabet=ALPHABET + "abc", min_size=1, max_size=30).filter(str.strip),
       threshold=st.sampled_from([0.3, 0.9]), scored=st.booleans(),
       policy=st.sampled_from([EngineConfig(), EngineConfig(commit="token")]))
def test_engine_answers_are_text_of_the_language(model, schemas, document, threshold, scored,
                                                 policy) -> None:
    questions = [{"id": f"q{i}", "text": "質問 ［MASK］ <ａ1>?", "answer": s}
                 for i, s in enumerate(schemas)]
    for mode in ("joint", "standalone"):
        decision = decide(model, document, questions, mode=mode, threshold=threshold,
                          config=policy, return_probabilities=True, score_options=scored)
        for schema, answer in zip(schemas, decision.answers, strict=True):
            answer.text.encode("utf-8")  # no lone surrogate
            if schema["type"] == "choice":
                assert answer.text in schema["options"]  # byte-exact, not a normalised twin
                assert set(answer.option_probabilities) == set(schema["options"])
            else:
                assert re.fullmatch(schema["regex"], answer.text), (schema, answer.text)
