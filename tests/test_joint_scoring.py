"""Option scoring (decision.joint.scoring): against the naive chain rule, and through decide."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from decision.joint.engine import EngineConfig, decide, decide_many
from decision.joint.scoring import (
    ORDERS,
    SlotOptions,
    naive_score_options,
    order_positions,
    score_options,
)
from decision.joint.toy import lease_document, toy_model
from decision.schemas.compile import tokenizer_context

MASK, VOCAB = 0, 12
DOC = lease_document(2, seed=3)
CHOICE = {"id": "payer", "text": "Who pays for repairs?",
          "answer": {"type": "choice", "options": ["tenant", "landlord", "not stated"]}}
BOOLEAN = {"id": "timely", "text": "Is the notice timely?", "answer": {"type": "boolean"}}
INTEGER = {"id": "days", "text": "How many days?",
           "answer": {"type": "integer", "minimum": 0, "maximum": 120}}


def context_denoiser(seed: int):
    """Logits that depend on every token of the row and on the position (so the order of
    scoring matters), counting the calls and rows it serves."""
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(VOCAB, 8, generator=g, dtype=torch.float64)
    pos = torch.randn(16, 8, generator=g, dtype=torch.float64)
    out = torch.randn(8, VOCAB, generator=g, dtype=torch.float64)
    calls: list[int] = []

    def denoise(ids: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        calls.append(ids.shape[0])
        h = emb[ids] + pos[: ids.shape[1]]  # [N, L, 8]
        mixed = torch.tanh(h + h.mean(1, keepdim=True) + rows[:, None, None].double())
        return mixed @ out

    return denoise, calls


@st.composite
def problems(draw):
    """Blocks of up to 3 rows with up to 3 slots of up to 4 tokens; distinct options each."""
    rows = draw(st.integers(1, 3))
    width = 14
    blocks = torch.full((rows, width), 5, dtype=torch.long)
    slots = []
    for row in range(rows):
        start = 0
        for _ in range(draw(st.integers(1, 2))):
            length = draw(st.integers(1, 4))
            if start + length > width:
                break
            options = draw(st.lists(st.tuples(*[st.integers(1, VOCAB - 1)] * length),
                                    min_size=1, max_size=7, unique=True))
            blocks[row, start : start + length] = MASK
            slots.append(SlotOptions(row, start, tuple(options)))
            start += length + 1
    orders = draw(st.sampled_from([ORDERS, ("left_to_right",), ("right_to_left",),
                                   ("positions:2,0,3,1",), ("positions:1", "positions:3,2")]))
    return blocks, slots, orders, draw(st.integers(0, 2**16)), draw(st.integers(1, 9))


@settings(max_examples=60, deadline=None)
@given(problems())
def test_equals_the_naive_chain_rule(problem) -> None:
    blocks, slots, orders, seed, max_rows = problem
    denoise, _ = context_denoiser(seed)
    fast = score_options(denoise, blocks, slots, orders, max_rows=max_rows)
    naive = naive_score_options(denoise, blocks, slots, orders)
    for got, want in zip(fast.probabilities, naive, strict=True):
        assert torch.allclose(got, want, atol=1e-6)
        assert abs(float(got.sum()) - 1.0) < 1e-5
        assert bool((got >= 0).all())


@settings(max_examples=40, deadline=None)
@given(problems())
def test_a_rows_forwards_do_not_depend_on_its_batch(problem) -> None:
    # a level split into several calls by max_rows is still one step of every row in it
    blocks, slots, orders, seed, max_rows = problem
    denoise, _ = context_denoiser(seed)
    together = score_options(denoise, blocks, slots, orders, max_rows=max_rows).row_forwards
    for row in range(blocks.shape[0]):
        own = [slot for slot in slots if slot.row == row]
        alone = score_options(denoise, blocks, own, orders).row_forwards
        assert int(together[row]) == int(alone[row]) <= max(s.length for s in own)


def test_forwards_one_per_level_and_none_where_nothing_differs() -> None:
    denoise, calls = context_denoiser(0)
    blocks = torch.full((1, 6), MASK, dtype=torch.long)
    # every option starts with token 3 and ends with 4: the first and last positions are given
    slot = SlotOptions(0, 1, ((3, 1, 4), (3, 2, 4), (3, 5, 4)))
    scored = score_options(denoise, blocks, [slot], ORDERS)
    assert calls == [2]  # the middle position, once per order, in one batched forward
    assert scored.row_forwards.tolist() == [1]
    single = score_options(denoise, blocks, [SlotOptions(0, 0, ((7, 7),))], ORDERS)
    assert single.probabilities[0].tolist() == [1.0] and single.row_forwards.tolist() == [0]


def test_orders_and_bad_slots() -> None:
    assert order_positions("left_to_right", 3) == [0, 1, 2]
    assert order_positions("right_to_left", 3) == [2, 1, 0]
    with pytest.raises(ValueError, match="unknown scoring order"):
        order_positions("middle_out", 3)
    assert order_positions("positions:2,0,1", 3) == [2, 0, 1]
    # positions the slot lacks are skipped; those the order does not name follow, left to right
    assert order_positions("positions:3,1", 2) == [1, 0]
    assert order_positions("positions:2", 4) == [2, 0, 1, 3]
    for bad in ("positions:", "positions:1,1", "positions:-1,0", "positions:a,b"):
        with pytest.raises(ValueError, match="distinct non-negative positions"):
            order_positions(bad, 3)
    with pytest.raises(ValueError, match="one length"):
        SlotOptions(0, 0, ((1, 2), (3,)))
    with pytest.raises(ValueError, match="same tokens"):
        SlotOptions(0, 0, ((1, 2), (1, 2)))


# ---------------------------------------------------------------------- through the engine


@pytest.fixture(scope="module")
def model():
    return toy_model()


def test_answer_is_the_most_probable_option(model) -> None:
    d = decide(model, DOC, [CHOICE, BOOLEAN], return_probabilities=True, score_options=True)
    assert d.mode == "joint" and d.steps >= 1
    for answer, question in zip(d.answers, [CHOICE, BOOLEAN], strict=True):
        probs = answer.option_probabilities
        assert probs is not None and abs(sum(probs.values()) - 1.0) < 1e-5
        best = max(probs, key=probs.get)
        assert answer.text == best and answer.confidence == pytest.approx(probs[best])
        if question is BOOLEAN:
            assert answer.value is (best == "yes")
        else:
            assert answer.value == best
    quiet = decide(model, DOC, [CHOICE], score_options=True)
    assert quiet.answers[0].option_probabilities is None


def full_forward_reference(model, questions: list[dict]):
    """The pass layout of ``questions`` about DOC, a denoiser that runs the model's full forward
    on it (history prefilled anew each call, no cache) and each slot's options in canonical
    tokens (``SlotOptions``; None for an open question): what the naive chain rule needs."""
    from decision.joint.layout import build_layout
    from decision.schemas.compile import compile_answer
    from decision.schemas.models import Question

    ctx = tokenizer_context(model.tokenizer)
    enc = ctx.tokenizer.encode
    parsed = [Question.model_validate(q) for q in questions]
    budgets = [compile_answer(q.answer, ctx).budget for q in parsed]
    layout = build_layout(ctx.special, enc(DOC, add_special_tokens=False).ids,
                          [enc(q.text, add_special_tokens=False).ids for q in parsed], budgets)
    history = torch.tensor([layout.history_ids])
    history_seg = torch.tensor([layout.history_segments])
    block_seg = torch.tensor([layout.block_segments])

    def full_forward(ids: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        n = ids.shape[0]
        with torch.inference_mode():
            return model(history.expand(n, -1), ids, None, None, history_seg.expand(n, -1),
                         block_seg.expand(n, -1))

    eos = ctx.special.eos
    slots = []
    for q, span in zip(parsed, layout.block_slots(), strict=True):
        options = q.answer.options()
        slots.append(None if options is None else SlotOptions(0, span.start, tuple(
            tuple(enc(o, add_special_tokens=False).ids) + (eos,) * (span.length
                                                                     - ctx.count_tokens(o))
            for o in options)))
    return layout, full_forward, slots


def test_engine_equals_the_chain_rule_without_a_cache(model) -> None:
    """Through the history cache and the batched levels, the same numbers as full forwards of
    each prefix (model.forward: history prefilled anew) in the naive reference."""
    layout, full_forward, (slot,) = full_forward_reference(model, [CHOICE])
    want = naive_score_options(full_forward, torch.tensor([layout.block]), [slot])[0]
    got = decide(model, DOC, [CHOICE], return_probabilities=True, score_options=True)
    probs = got.answers[0].option_probabilities
    assert [probs[o] for o in CHOICE["answer"]["options"]] == pytest.approx(want.tolist(),
                                                                           abs=1e-5)


def test_joint_one_question_equals_standalone_and_deterministic(model) -> None:
    joint = decide(model, DOC, [CHOICE], mode="joint", return_probabilities=True,
                   score_options=True)
    alone = decide(model, DOC, [CHOICE], mode="standalone", return_probabilities=True,
                   score_options=True)
    again = decide(model, DOC, [CHOICE], mode="joint", return_probabilities=True,
                   score_options=True)
    assert alone.mode == "standalone"
    assert joint.answers[0].value == alone.answers[0].value == again.answers[0].value
    for o, p in joint.answers[0].option_probabilities.items():
        assert alone.answers[0].option_probabilities[o] == pytest.approx(p, abs=1e-5)
        assert again.answers[0].option_probabilities[o] == p


def test_one_order_is_a_config_choice(model) -> None:
    config = EngineConfig(scoring_orders=("left_to_right",))
    d = decide(model, DOC, [CHOICE], return_probabilities=True, score_options=True,
               config=config)
    assert abs(sum(d.answers[0].option_probabilities.values()) - 1.0) < 1e-5


def test_orders_mix_as_the_mean_of_their_probabilities(model) -> None:
    # what benchmarks/xiangqi_option_mixtures.py relies on: scoring one order at a time and
    # averaging gives the engine's answer over those orders
    orders = ("left_to_right", "right_to_left", "positions:1,0")
    singles = [decide(model, DOC, [CHOICE], return_probabilities=True, score_options=True,
                      config=EngineConfig(scoring_orders=(order,))).answers[0]
               for order in orders]
    mixed = decide(model, DOC, [CHOICE], return_probabilities=True, score_options=True,
                   config=EngineConfig(scoring_orders=orders)).answers[0]
    for option, p in mixed.option_probabilities.items():
        mean = sum(s.option_probabilities[option] for s in singles) / len(orders)
        assert p == pytest.approx(mean, abs=1e-6)


def test_mixed_batch_keeps_request_order(model) -> None:
    scored = {"document": DOC, "questions": [CHOICE], "score_options": True,
              "return_probabilities": True}
    denoised = {"document": DOC, "questions": [CHOICE, INTEGER], "threshold": 0.5}
    out = decide_many(model, [denoised, scored, denoised])
    solo_scored = decide_many(model, [scored])[0]
    solo_denoised = decide_many(model, [denoised])[0]
    assert [len(d.answers) for d in out] == [2, 1, 2]
    assert out[1].answers[0].option_probabilities == pytest.approx(
        solo_scored.answers[0].option_probabilities)
    assert [a.value for a in out[0].answers] == [a.value for a in solo_denoised.answers]


DIGIT = {"id": "digit", "text": "Which digit?",
         "answer": {"type": "integer", "minimum": 0, "maximum": 9}}


@pytest.fixture(scope="module")
def trained():
    """The shipped contracts model: the random toy's slots barely see one another (a change
    of one slot moves the others' logits by about 3e-4), the trained model's do."""
    from decision.model import load_model

    return load_model(None, dtype=torch.float32)


def test_open_questions_are_denoised_first_and_options_scored_given_them(trained) -> None:
    """A mixed request: the open question is denoised (the closed slot masked), then the
    options are scored with its answer in the block: the naive chain rule over full forwards
    of that block gives the same numbers (and not those with the digit's slot masked)."""
    model = trained
    got = decide(model, DOC, [CHOICE, DIGIT], return_probabilities=True, score_options=True)
    choice, digit = got.answers
    assert isinstance(digit.value, int) and 0 <= digit.value <= 9
    assert digit.option_probabilities is None and choice.option_probabilities is not None

    layout, full_forward, (slot, _) = full_forward_reference(model, [CHOICE, DIGIT])
    ctx = tokenizer_context(model.tokenizer)
    digit_span = layout.block_slots()[1]
    digit_tokens = ctx.tokenizer.encode(str(digit.value), add_special_tokens=False).ids
    digit_tokens += [ctx.special.eos] * (digit_span.length - len(digit_tokens))  # one character
    block = torch.tensor([layout.block])
    block[0, digit_span.start : digit_span.start + digit_span.length] = torch.tensor(digit_tokens)
    want = naive_score_options(full_forward, block, [slot])[0]
    options = CHOICE["answer"]["options"]
    probs = choice.option_probabilities
    assert [probs[o] for o in options] == pytest.approx(want.tolist(), abs=1e-5)
    assert choice.text == options[int(torch.argmax(want))]
    # and the digit's answer matters: with its slot masked the numbers differ
    masked = naive_score_options(full_forward, torch.tensor([layout.block]), [slot])[0]
    assert (masked - want).abs().max() > 1e-4


def test_scored_answers_are_fixed_surest_first_and_seen_by_the_rest(trained) -> None:
    """Two closed questions in one pass, threshold 1.0: round one scores both with the block
    masked and fixes the surer; round two scores the other with that option's tokens in the
    block. Both equal the naive chain rule over full forwards of those blocks."""
    model = trained
    pair = [CHOICE, BOOLEAN]
    got = decide(model, DOC, pair, threshold=1.0, return_probabilities=True, score_options=True)

    layout, full_forward, slots = full_forward_reference(model, pair)
    block = torch.tensor([layout.block])
    first_round = naive_score_options(full_forward, block, slots)
    first = max(range(2), key=lambda i: float(first_round[i].max()))
    second = 1 - first
    fixed = slots[first].sequences[int(torch.argmax(first_round[first]))]
    block[0, slots[first].start : slots[first].start + slots[first].length] = torch.tensor(fixed)
    second_round = naive_score_options(full_forward, block, [slots[second]])[0]

    for i, want in ((first, first_round[first]), (second, second_round)):
        probs = got.answers[i].option_probabilities
        options = list(probs)  # in the question's order
        assert [probs[o] for o in options] == pytest.approx(want.tolist(), abs=1e-5)
    # the second answer saw the first: its numbers differ from round one's
    assert (second_round - first_round[second]).abs().max() > 1e-4


def test_steps_count_every_forward_a_request_took_part_in(model, monkeypatch) -> None:
    """A request's ``steps`` are the forwards any of its passes took part in. They were the
    most any one pass took: a standalone request whose open answer took 3 denoising forwards
    and whose scored answer 1 more reported 3 (and a pass scored at level 0 beside one scored
    at level 1, one forward each, reported 1)."""
    calls: list[int] = []
    denoise = model.denoise

    def counting(*args, **kwargs):
        calls.append(1)
        return denoise(*args, **kwargs)

    monkeypatch.setattr(model, "denoise", counting)
    first = {"id": "first", "text": "Which code?",  # the options differ at their first token
             "answer": {"type": "choice", "options": ["x1", "y1"]}}
    second = {"id": "second", "text": "Which other code?",  # and at their second
              "answer": {"type": "choice", "options": ["1x", "1y"]}}
    one_order = EngineConfig(scoring_orders=("left_to_right",))
    for mode in ("joint", "standalone", "auto"):
        for questions in ([INTEGER, BOOLEAN, CHOICE], [first, second], [INTEGER, first, second]):
            for config in (EngineConfig(), one_order):
                for score in (False, True):
                    calls.clear()
                    d = decide(model, DOC, questions, mode=mode, threshold=1.0, commit="token",
                               score_options=score, config=config)
                    assert d.steps == len(calls), (mode, questions, config, score)


def test_a_round_fixes_each_rows_surest_first_of_equals_and_those_reaching_the_threshold() -> None:
    from decision.joint.scoring_rounds import surest_slots

    options = ((1,), (2,))
    slots = {k: SlotOptions(row, k, options) for k, row in enumerate([0, 0, 1, 1])}
    probabilities = {
        0: torch.tensor([0.625, 0.375]),  # row 0: two equally sure slots below its threshold
        1: torch.tensor([0.375, 0.625]),
        2: torch.tensor([0.875, 0.125]),  # row 1: the surest, and one exactly at the threshold
        3: torch.tensor([0.25, 0.75]),
    }
    assert surest_slots(slots, probabilities, [0.875, 0.75]) == [0, 2, 3]


def test_scored_answers_count_in_the_tokens_per_forward(model) -> None:
    from decision.schemas.compile import compile_answer
    from decision.schemas.models import Question

    ctx = tokenizer_context(model.tokenizer)
    questions = [CHOICE, BOOLEAN]
    tokens = sum(compile_answer(Question.model_validate(q).answer, ctx).budget for q in questions)
    d = decide(model, DOC, questions, score_options=True)
    assert d.steps >= 1
    assert d.tokens_per_forward == pytest.approx(tokens / d.steps)
