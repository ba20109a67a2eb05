"""Training recipe: config checks, a tiny run whose loss falls, exact resume, the shipped model."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from decision.errors import DecisionInputError
from decision.train.config import TrainConfig, config_from_dict, load_config
from decision.train.data import Encoder, RowSource, slot_roles
from decision.train.masking import ROLE_EXTRACTION, ROLE_PLAIN
from decision.train.recipe import train
from decision.train.rows import KIND_DOCUMENT, KIND_JOINT, KIND_STANDALONE

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "tiny.json"


def tiny_config(out_dir: Path, **run: object) -> TrainConfig:
    raw = json.loads(TINY.read_text())
    raw["run"].update({"out_dir": str(out_dir), "eval_every": 10_000, **run})
    return config_from_dict(raw)


def test_config_rejects_unknown_keys_and_wrong_types(tmp_path: Path) -> None:
    with pytest.raises(DecisionInputError) as err:
        config_from_dict({"optim": {"learning_rate": 0.1}})
    assert err.value.field == "optim.learning_rate"
    with pytest.raises(DecisionInputError):
        config_from_dict({"run": {"max_steps": "many"}})
    with pytest.raises(DecisionInputError):
        config_from_dict({"data": {"p_joint": -1.0}})
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DecisionInputError):
        load_config(bad)
    with pytest.raises(DecisionInputError):
        load_config(tmp_path / "missing.toml")


def test_shipped_configs_load() -> None:
    for path in (REPO / "configs" / "default.json", TINY):
        cfg = load_config(path)
        assert cfg.run.max_steps >= 1


def test_rows_follow_the_layout_and_dependencies() -> None:
    from apps.contracts.generator import generate_group
    from decision.tokenizer import train_tokenizer

    cfg = tiny_config(Path("unused"))
    texts = [generate_group(s, 2).document for s in range(30)]
    tok = train_tokenizer(texts, 400)
    enc = Encoder(tok)
    group = next(g for g in (generate_group(s, 2) for s in range(200))
                 if any(q.is_derived for q in g.questions) and len(g.questions) >= 3)
    row = enc.group_row(group, list(range(len(group.questions))), KIND_JOINT)
    assert len(row.roles) == len(group.questions)
    read = {d for q in group.questions for d in q.depends_on}
    for q, role in zip(group.questions, row.roles, strict=True):
        assert role == (ROLE_EXTRACTION if q.qtype in read else ROLE_PLAIN)
    # slot tokens hold the gold answer then [EOS] padding; markers are never maskable
    special = enc.special
    for k in range(len(group.questions)):
        pos = [j for j, s in enumerate(row.slot_of) if s == k]
        assert row.block_ids[pos[0] - 1] == special.answers[k]
        text = tok.decode([row.block_ids[j] for j in pos if row.block_ids[j] != special.eos])
        assert text == row.meta["gold"][k]
        assert all(row.block_segments[j] == k + 1 for j in pos)
    assert slot_roles(group.questions[:1]) == [ROLE_PLAIN]
    # text spelling a special token is text, as the decoder reads it (decision.joint.engine)
    odd = replace(group, document=group.document + " [MASK] <a1> <doc>")
    odd_row = enc.group_row(odd, [0], KIND_JOINT)
    history = odd_row.history_ids
    assert history.count(special.doc) == 1 and special.mask not in history
    assert special.answers[0] not in history
    source = RowSource(cfg, tok)
    kinds = {source.row(i).kind for i in range(40)}
    assert KIND_DOCUMENT in kinds and KIND_JOINT in kinds
    assert source.row(7).block_ids == source.row(7).block_ids  # deterministic


def test_reshaped_integer_bounds_hold_the_gold_answer() -> None:
    import random

    from decision.train.data import reshaped_integer

    rng = random.Random(3)
    answer = {"type": "integer", "minimum": 0, "maximum": 1000}
    seen = {reshaped_integer(answer, 25, rng)["maximum"] for _ in range(200)}
    assert seen == {99, 999, 9999, 99999, 999999}  # narrower and wider than 1000, all >= 25
    day = {"type": "integer", "minimum": 1, "maximum": 31}
    assert reshaped_integer(day, 0, rng)["maximum"] >= 1


def test_copy_questions_ask_the_number_after_a_unique_cue() -> None:
    import random

    from apps.contracts.generator import generate_group
    from decision.train.data import copy_question

    rng = random.Random(5)
    for seed in range(30):
        group = copy_question(generate_group(seed, 2), rng)
        assert group is not None
        (q,) = group.questions
        cue = q.text.split('"')[1]
        assert group.document.count(cue) == 1
        after = group.document.split(cue, 1)[1].lstrip(" $")
        assert after.startswith(str(q.gold)) and not after[len(str(q.gold))].isdigit()
        assert q.gold <= q.answer["maximum"]


def test_focus_rows_ask_the_focus_types() -> None:
    from apps.contracts.generator import generate_group
    from decision.tokenizer import train_tokenizer

    texts = [generate_group(s, 2).document for s in range(30)]
    tok = train_tokenizer(texts, 400)
    raw = json.loads(TINY.read_text())
    raw["data"].update({"p_focus": 0.5, "focus_qtypes": ["monthly_payment", "late_fee_amount"]})
    source = RowSource(config_from_dict(raw), tok)
    rows = [source.row(i) for i in range(60)]
    focus = [r for r in rows if r.kind == KIND_STANDALONE
             and r.meta["qtypes"][0] in ("monthly_payment", "late_fee_amount")]
    # about half the rows (binomial, n=60, p>=0.5): far above the few a plain draw gives
    assert 15 <= len(focus) <= 45
    assert [r.block_ids for r in rows[:5]] == [source.row(i).block_ids for i in range(5)]
    raw["data"]["focus_qtypes"] = ["no_such_type"]
    with pytest.raises(DecisionInputError, match="no_such_type"):
        RowSource(config_from_dict(raw), tok)
    raw["data"]["focus_qtypes"] = []
    with pytest.raises(DecisionInputError, match="focus_qtypes"):
        config_from_dict(raw)


def test_days_between_rows_subtract_two_stated_dates() -> None:
    import calendar
    import random

    from apps.contracts.generator import generate_group
    from decision.train.data import days_between_question

    months = {name: i for i, name in enumerate(calendar.month_name) if name}
    rng = random.Random(3)
    asked = 0
    for seed in range(40):
        group = days_between_question(generate_group(seed, 2), rng)
        if group is None:
            continue
        asked += 1
        (q,) = group.questions
        first, second = re.fullmatch(r"How many days after (.+) is (.+)\?", q.text).groups()
        assert first in group.document and second in group.document
        # an independent count: day numbers from the proleptic calendar
        ordinal = [calendar.timegm((int(y), months[m], int(d.rstrip(",")), 0, 0, 0)) // 86400
                   for m, d, y in (first.split(), second.split())]
        assert q.gold == ordinal[1] - ordinal[0] and 0 < q.gold <= q.answer["maximum"]
    assert asked >= 30


def test_event_day_rows_read_the_days_taken_off_one_event_line() -> None:
    import calendar
    import random

    from apps.contracts.generator import generate_group
    from decision.train.data import event_day_questions

    months = "|".join(name for name in calendar.month_name if name)
    rng = random.Random(5)
    asked = 0
    for seed in range(120):
        group = generate_group(seed, 2)
        event = event_day_questions(group, rng)
        taken = [q for q in group.questions if q.qtype.endswith("_days_taken")]
        assert (event is None) == (not taken)
        if event is None:
            continue
        asked += 1
        start, done, days = event.questions
        assert days.qtype in {q.qtype for q in taken} and days.depends_on == ("event_day",)
        assert [q.id for q in event.questions] == ["q1", "q2", "q3"]
        # independently: the event line names its obligation and holds the two dates, in order
        word = "return" if days.qtype.startswith("return") else "disclosure"
        lines = [re.findall(rf"(?:{months}) (\d{{1,2}}), \d{{4}}", line)
                 for line in group.document.splitlines() if word in line.lower()]
        assert [str(start.gold), str(done.gold)] in lines
        assert days.gold == done.gold - start.gold >= 0
    assert asked >= 20


def test_event_day_rows_enter_the_stream() -> None:
    from apps.contracts.generator import generate_group
    from decision.tokenizer import train_tokenizer

    texts = [generate_group(s, 2).document for s in range(30)]
    tok = train_tokenizer(texts, 400)
    raw = json.loads(TINY.read_text())
    raw["data"]["p_event_days"] = 0.5
    source = RowSource(config_from_dict(raw), tok)
    rows = [source.row(i) for i in range(60)]
    events = [r for r in rows if r.kind != KIND_DOCUMENT and "event_day" in r.meta["qtypes"]]
    joint = [r for r in events if r.kind == KIND_JOINT]
    # about half the rows (binomial, n=60, p=0.5), about half of those joint
    assert 15 <= len(events) <= 45 and 0 < len(joint) < len(events)
    for r in joint:
        assert r.meta["qtypes"][:2] == ["event_day", "event_day"]
        assert r.meta["qtypes"][2].endswith("_days_taken")
        start, done, taken = (int(g) for g in r.meta["gold"])
        assert taken == done - start
    assert [r.block_ids for r in rows[:5]] == [source.row(i).block_ids for i in range(5)]
    raw["data"]["p_event_days"] = 1.0
    with pytest.raises(DecisionInputError, match="p_event_days"):
        config_from_dict(raw)


def test_joint_focus_rows_hold_a_decided_rule_with_its_inputs() -> None:
    from apps.contracts.generator import generate_group
    from apps.contracts.questions import DEPENDS_ON
    from decision.tokenizer import train_tokenizer
    from decision.train.data import rule_with_inputs

    texts = [generate_group(s, 2).document for s in range(30)]
    tok = train_tokenizer(texts, 400)
    raw = json.loads(TINY.read_text())
    rules = ["notice_timely", "renews", "damages_owed"]
    raw["data"].update({"p_focus": 0.9, "p_focus_joint": 1.0, "focus_qtypes": rules})
    source = RowSource(config_from_dict(raw), tok)
    rows = [r for r in (source.row(i) for i in range(40)) if r.kind == KIND_JOINT
            and r.meta["qtypes"][-1] in rules]
    assert len(rows) >= 25  # ~0.9 * 40 focus rows; the rest are ordinary draws
    for r in rows:
        *inputs, rule = r.meta["qtypes"]
        assert inputs and set(inputs) & set(DEPENDS_ON[rule])  # a direct input is there
        assert r.meta["gold"][-1] in ("yes", "no")
        assert r.roles[:-1] == [ROLE_EXTRACTION] * len(inputs) and r.roles[-1] == ROLE_PLAIN
    # transitive closure, inputs first: renews <- notice_timely <- given / required days
    group = generate_group(0, 2)
    group = replace(group, questions=[
        replace(group.questions[0], qtype=t, depends_on=DEPENDS_ON.get(t, ()))
        for t in ("renews", "notice_given_days", "due_day", "notice_timely")])
    assert rule_with_inputs(group, 0) == [1, 3, 0]
    assert rule_with_inputs(group, 2) == [2]
    raw["data"]["p_focus_joint"] = 1.5
    with pytest.raises(DecisionInputError, match="p_focus_joint"):
        config_from_dict(raw)


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """One uninterrupted tiny run of 24 steps, and one stopped at 12 and resumed."""
    base = tmp_path_factory.mktemp("train")
    full = train(tiny_config(base / "full", max_steps=24, log_every=4))
    part1 = train(tiny_config(base / "split", max_steps=24, log_every=4), max_steps=12)
    part2 = train(tiny_config(base / "split", max_steps=24, log_every=4), resume=True)
    return {"full": full, "part1": part1, "part2": part2, "dir": base}


def fixed_batch_loss(model: object, cfg: TrainConfig) -> float:
    """The objective on a fixed batch under a fixed noise draw (rows no training step uses)."""
    from decision.tokenizer import special_ids
    from decision.train.rows import collate
    from decision.train.step_loss import batch_loss

    tok = model.tokenizer  # type: ignore[attr-defined]
    ids = special_ids(tok)
    source = RowSource(cfg, tok)
    batch = collate([source.row(50_000 + i) for i in range(16)], ids.pad)
    with torch.no_grad():
        loss = batch_loss(model, batch, cfg, ids.mask, torch.Generator().manual_seed(5))  # type: ignore[arg-type]
    return float(loss)


def test_tiny_run_loss_is_finite_and_falls(tiny_runs: dict[str, object]) -> None:
    from decision.model import load_model
    from decision.train.recipe import build_model

    losses = tiny_runs["full"].loop.losses  # type: ignore[attr-defined]
    assert len(losses) == 24
    assert all(torch.isfinite(torch.tensor(losses)))
    cfg = tiny_config(Path("unused"))
    trained = load_model(tiny_runs["full"].checkpoint)  # type: ignore[attr-defined]
    fresh = build_model(cfg, trained.tokenizer)  # the same initial weights (seeded)
    before, after = fixed_batch_loss(fresh, cfg), fixed_batch_loss(trained, cfg)
    assert after < 0.85 * before, (before, after)


def test_init_from_starts_a_fresh_run_from_a_model(
    tiny_runs: dict[str, object], tmp_path: Path
) -> None:
    from decision.model import load_model
    from decision.train.recipe import build_model

    source = load_model(tiny_runs["full"].checkpoint)  # type: ignore[attr-defined]
    cfg = tiny_config(tmp_path / "continued", max_steps=4, log_every=2)
    result = train(cfg, init_from=tiny_runs["full"].checkpoint)  # type: ignore[attr-defined]
    assert result.loop.step == 4
    continued = load_model(result.checkpoint)
    # the source's tokenizer, and weights that start where the source ended, not a fresh init
    assert continued.tokenizer.to_str() == source.tokenizer.to_str()
    fresh = build_model(cfg, source.tokenizer)
    assert fixed_batch_loss(continued, cfg) < fixed_batch_loss(fresh, cfg)


def test_resume_continues_exactly(tiny_runs: dict[str, object]) -> None:
    full = tiny_runs["full"].loop.losses  # type: ignore[attr-defined]
    p1 = tiny_runs["part1"].loop  # type: ignore[attr-defined]
    p2 = tiny_runs["part2"].loop  # type: ignore[attr-defined]
    assert p1.step == 12 and p2.step == 24
    assert p1.losses + p2.losses == pytest.approx(full, rel=1e-5, abs=1e-6)
    from decision.model import load_model

    a = load_model(tiny_runs["full"].checkpoint)  # type: ignore[attr-defined]
    b = load_model(tiny_runs["part2"].checkpoint)  # type: ignore[attr-defined]
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.allclose(x, y, atol=1e-5), name


def test_checkpoint_loads_with_tokenizer_and_exports_bf16(tiny_runs: dict[str, object]) -> None:
    from decision.model import load_model
    from decision.train.export import export_checkpoint

    ckpt = tiny_runs["full"].checkpoint  # type: ignore[attr-defined]
    out = export_checkpoint(ckpt, Path(tiny_runs["dir"]) / "export")  # type: ignore[arg-type]
    model = load_model(out, dtype=None)
    assert model.tokenizer is not None
    assert model.dtype == torch.bfloat16
    assert not (out / "trainer_state.pt").exists()


DEFAULT = REPO / "models" / "default"


@pytest.mark.skipif(not (DEFAULT / "config.json").is_file(),
                    reason="models/default not trained yet (the shipped checkpoint is absent)")
def test_shipped_model_answers_a_group_in_both_modes() -> None:
    from apps.contracts.generator import generate_group
    from decision.model import load_model
    from decision.schemas.models import Question

    total = sum(f.stat().st_size for f in DEFAULT.iterdir())
    assert total <= 40 * 2**20
    model = load_model()
    group = generate_group(20_000_123, 2)
    questions = [{"id": q.id, "text": q.text, "answer": q.answer} for q in group.questions]
    for mode in ("joint", "standalone"):
        decision = model.decide(group.document, questions, mode=mode)
        assert [a.id for a in decision.answers] == [q.id for q in group.questions]
        for q, a in zip(group.questions, decision.answers, strict=True):
            schema = Question(id=q.id, text=q.text, answer=q.answer).answer
            assert a.value == schema.parse(a.text)
            if q.answer["type"] == "integer":
                assert q.answer["minimum"] <= a.value <= q.answer["maximum"]
            elif q.answer["type"] == "choice":
                assert a.value in q.answer["options"]
            else:
                assert isinstance(a.value, bool)


def test_sigterm_stops_after_the_step_with_a_checkpoint(tmp_path: Path) -> None:
    import os
    import signal

    from decision.tokenizer import special_ids, train_tokenizer
    from decision.train.checkpoint import CHECKPOINT_DIR, load_trainer_state
    from decision.train.loop import LoopHooks, train_loop
    from decision.train.recipe import build_model

    cfg = tiny_config(tmp_path, max_steps=50)
    tok = train_tokenizer([generate_text(s) for s in range(20)], 400)
    model = build_model(cfg, tok)
    source = RowSource(cfg, tok)
    ids = special_ids(tok)

    def rows(i: int):  # noqa: ANN202 - the hook's row type
        if i == 2 * cfg.optim.batch_size:
            os.kill(os.getpid(), signal.SIGTERM)
        return source.row(i)

    result = train_loop(model, cfg, LoopHooks(rows, ids.pad, ids.mask, log=lambda s: None),
                        tmp_path)
    assert result.stopped_because == f"signal {int(signal.SIGTERM)}"
    assert result.step == 3
    assert load_trainer_state(tmp_path / CHECKPOINT_DIR)["step"] == 3
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def generate_text(seed: int) -> str:
    from apps.contracts.generator import generate_group

    return generate_group(seed, 1).document


def test_progress_line_of_a_validation_record() -> None:
    from decision.train.loop import format_eval

    contracts = {"step": 200, "joint": 0.5, "standalone": 0.25, "majority": 0.4,
                 "per_type": {"renews": {"joint": 0.75, "majority": 0.5}}}
    assert format_eval(contracts) == (
        "eval step 200: joint 0.500 standalone 0.250 majority 0.400 | joint/majority: "
        "renews=0.75/0.50")
    assert format_eval({"step": 500, "top1": 0.0625, "n": 32, "eval_s": 1.3}) == (
        "eval step 500: top1 0.062 n 32 eval_s 1.300")


def test_hard_copy_questions_ask_values_the_document_states_once() -> None:
    import random

    from apps.contracts.generator import generate_group
    from decision.train.data import copy_question

    rng = random.Random(6)
    lengths = []
    for seed in range(40):
        group = copy_question(generate_group(seed, 2), rng, hard=True)
        assert group is not None
        (q,) = group.questions
        assert len(re.findall(rf"(?<!\d){q.gold}(?!\d)", group.document)) == 1
        lengths.append(len(str(q.gold)))
    assert max(lengths) >= 4  # the long amounts are drawn, not only days


def test_compare_questions_follow_from_the_two_copied_numbers() -> None:
    import random

    from apps.contracts.generator import generate_group
    from decision.train.data import compare_question

    rng = random.Random(7)
    answers, asked = set(), 0
    for seed in range(40):
        group = compare_question(generate_group(seed, 2), rng, with_sources=seed % 2 == 0)
        if group is None:  # fewer than two values with a unique cue
            continue
        asked += 1
        *sources, compare = group.questions
        cue_a, cue_b = compare.text.split('"')[1::2]
        a, b = (int(re.match(r"\$?(\d+)", group.document.split(cue, 1)[1].lstrip()).group(1))
                for cue in (cue_a, cue_b))
        assert a != b and compare.gold == (a >= b)
        answers.add(compare.gold)
        if sources:
            assert [s.gold for s in sources] == [a, b]
            assert compare.depends_on == (sources[0].qtype,)
    assert answers == {True, False} and asked >= 30


def test_resume_inside_a_length_window_continues_exactly(tmp_path: Path) -> None:
    """Stopped mid-window (step 7 of windows of 5), the resumed run matches an unbroken one."""
    full = train(tiny_config(tmp_path / "full", max_steps=12, length_window=5))
    train(tiny_config(tmp_path / "split", max_steps=12, length_window=5), max_steps=7)
    part2 = train(tiny_config(tmp_path / "split", max_steps=12, length_window=5), resume=True)
    assert part2.loop.step == 12
    assert part2.loop.losses == pytest.approx(full.loop.losses[7:], rel=1e-5, abs=1e-6)


def test_resume_after_a_crash_keeps_one_validation_record_a_step(tmp_path: Path) -> None:
    """A run killed after a validation but before its next checkpoint validates that step
    again when resumed: evals.jsonl keeps one record a step, the resumed run's."""
    import shutil

    def cfg() -> TrainConfig:
        config = tiny_config(tmp_path / "run", max_steps=4, eval_every=2)
        return replace(config, data=replace(config.data, val_groups=1))

    train(cfg(), max_steps=2)
    shutil.copytree(tmp_path / "run" / "checkpoint", tmp_path / "at2")
    train(cfg(), resume=True)  # validates step 4, then checkpoints it
    shutil.rmtree(tmp_path / "run" / "checkpoint")  # killed before that checkpoint
    shutil.copytree(tmp_path / "at2", tmp_path / "run" / "checkpoint")
    result = train(cfg(), resume=True)
    lines = (tmp_path / "run" / "evals.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [2, 4]
    assert [json.loads(line) for line in lines] == result.loop.evals
    shutil.rmtree(tmp_path / "run" / "checkpoint")  # killed before the first checkpoint
    train(cfg(), resume=True)  # no checkpoint: a fresh run from step 0
    lines = (tmp_path / "run" / "evals.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [2, 4]


@pytest.mark.parametrize(("section", "key", "value", "field"), [
    ("model", "hidden_sise", 32, "model.hidden_sise"),  # a typo: was a TypeError after the BPE
    ("model", "num_hidden_layers", 3, "model"),  # 3 layers, 2 layer_types
    ("optim", "betas", 0.9, "optim.betas"),  # was a TypeError traceback
    ("optim", "betas", [0.9], "optim.betas"),
    ("optim", "betas", [1.5, 0.9], "optim.betas"),
    ("data", "focus_qtypes", "notice_days", "data.focus_qtypes"),  # was split into letters
    ("optim", "grad_clip", -1.0, "optim.grad_clip"),  # flips every gradient: ascent
    ("optim", "grad_clip", 0.0, "optim.grad_clip"),  # zeroes every gradient
    ("optim", "min_lr_ratio", 5.0, "optim.min_lr_ratio"),
    ("optim", "weight_decay", -0.1, "optim"),
    ("optim", "warmup_steps", -5, "optim"),
    ("run", "threads", 0, "run.threads"),  # was a RuntimeError from torch
    ("run", "max_minutes", -1.0, "run"),
    ("run", "checkpoint_minutes", -1.0, "run"),
    ("data", "level1_final_share", 3.0, "data"),
    ("data", "val_groups", 0, "data.val_groups"),
    ("data", "task", "contrcts", "data.task"),
    ("optim", "lr", float("nan"), "optim.lr"),  # was NaN weights, then a traceback
    ("optim", "lr", 1e30, "optim.lr"),  # was a non-finite loss traceback
    ("optim", "lr", float("inf"), "optim.lr"),
    ("run", "checkpoint_minutes", float("nan"), "run.checkpoint_minutes"),  # never checkpointed
    ("run", "max_minutes", float("nan"), "run.max_minutes"),  # no budget
    ("run", "min_gain", float("nan"), "run.min_gain"),  # never stopped early
    ("data", "p_joint", float("nan"), "data.p_joint"),  # passed the share check
    ("optim", "weight_decay", float("inf"), "optim.weight_decay"),
    ("optim", "betas", [0.9, float("nan")], "optim.betas"),
    ("optim", "scaled_lr_params", "mlp.experts.", "optim.scaled_lr_params"),  # not a list
    ("optim", "scaled_lr_params", [""], "optim.scaled_lr_params"),  # would match every name
    ("optim", "scaled_lr_factor", 0.0, "optim.scaled_lr_factor"),
    ("optim", "scaled_lr_factor", 1e9, "optim.scaled_lr_factor"),  # lr * factor above 1
    ("optim", "scaled_lr_factor", float("nan"), "optim.scaled_lr_factor"),
])
def test_config_refuses_nonsense_values(section: str, key: str, value: object, field: str) -> None:
    raw = json.loads(TINY.read_text())
    raw[section][key] = value
    with pytest.raises(DecisionInputError) as err:
        config_from_dict(raw)
    assert err.value.field == field


def test_config_list_values_keep_their_meaning() -> None:
    raw = json.loads(TINY.read_text())
    raw["optim"]["betas"] = [0, 0.99]
    raw["data"].update(focus_qtypes=["notice_days"], p_focus=0.1)
    cfg = config_from_dict(raw)
    assert cfg.optim.betas == (0.0, 0.99) and cfg.data.focus_qtypes == ("notice_days",)


def test_scaled_lr_params_train_at_their_own_rate() -> None:
    """Named parameters get groups at lr * factor that the schedule scales like the rest; with
    no names the optimiser keeps its two groups (older checkpoints resume)."""
    from decision.model.testing import tiny_model
    from decision.train.optimizer import make_optimizer

    raw = json.loads(TINY.read_text())
    raw["optim"].update(lr=1e-3, warmup_steps=0, scaled_lr_params=["mlp.experts."],
                        scaled_lr_factor=10.0)
    cfg = config_from_dict(raw)
    model = tiny_model(seed=0)
    opt, sched = make_optimizer(model, cfg)
    experts = {id(p) for n, p in model.named_parameters() if "mlp.experts." in n}
    assert experts
    for group in opt.param_groups:
        ids = {id(p) for p in group["params"]}
        if ids:
            assert ids <= experts or not ids & experts  # never mixed
            assert group["lr"] == pytest.approx(1e-2 if ids <= experts else 1e-3)
    opt.step()  # no gradients: changes nothing, keeps the order torch expects
    sched.step()
    rates = sorted({round(g["lr"] / g["initial_lr"], 12) for g in opt.param_groups})
    assert len(rates) == 1  # one schedule for every group
    grouped = {id(p) for g in opt.param_groups for p in g["params"]}
    assert grouped == {id(p) for p in model.parameters()}
    plain = config_from_dict(json.loads(TINY.read_text()))
    assert len(make_optimizer(model, plain)[0].param_groups) == 2


def test_command_line_config_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from decision.train.cli import main

    raw = json.loads(TINY.read_text())
    raw["run"]["threads"] = 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw))
    out = str(tmp_path / "run")
    assert main(["--config", str(bad), "--out-dir", out]) == 2
    assert capsys.readouterr().err.strip() == "error: run.threads must be >= 1"
    assert main(["--config", str(TINY), "--out-dir", out, "--max-minutes", "-1"]) == 2
    assert "--max-minutes must be >= 0" in capsys.readouterr().err
    xiangqi = json.loads(TINY.read_text())
    xiangqi["data"]["task"] = "xiangqi"  # would have trained contract rows
    bad.write_text(json.dumps(xiangqi))
    assert main(["--config", str(bad), "--out-dir", out]) == 2
    assert "apps.xiangqi.train_player" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_resume_after_a_kill_between_the_checkpoint_renames(tmp_path: Path) -> None:
    """save_checkpoint renames checkpoint -> checkpoint.old, then checkpoint.tmp -> checkpoint; a
    run killed between the two left no checkpoint, and --resume started again from step 0."""
    import shutil

    train(tiny_config(tmp_path, max_steps=2))
    ckpt = tmp_path / "checkpoint"
    shutil.copytree(ckpt, tmp_path / "checkpoint.tmp")  # the next, complete checkpoint
    ckpt.rename(tmp_path / "checkpoint.old")  # killed here
    resumed = train(tiny_config(tmp_path, max_steps=3), resume=True)
    assert resumed.loop.step == 3 and len(resumed.loop.losses) == 1  # one step, not three
    assert not (tmp_path / "checkpoint.old").exists()
    # a temp directory that was not finished is not taken: the old checkpoint is
    shutil.copytree(ckpt, tmp_path / "checkpoint.tmp")
    (tmp_path / "checkpoint.tmp" / "trainer_state.pt").unlink()
    ckpt.rename(tmp_path / "checkpoint.old")
    again = train(tiny_config(tmp_path, max_steps=4), resume=True)
    assert again.loop.step == 4 and len(again.loop.losses) == 1


def test_init_from_and_resume_refuse_a_model_of_another_shape(tmp_path: Path) -> None:
    """The config's [model] section was ignored: the loaded shape trained, while the run's
    train_config.json claimed the configured one."""
    from decision.train.recipe import build_model, build_tokenizer

    cfg = tiny_config(tmp_path / "run")
    start = tmp_path / "start"
    build_model(cfg, build_tokenizer(cfg)).save(start)
    wider = json.loads(TINY.read_text())
    wider["model"].update(hidden_size=48, intermediate_size=96)
    wider["run"]["out_dir"] = str(tmp_path / "run")
    with pytest.raises(DecisionInputError, match="hidden_size 48 in the config, 32 in the model"):
        train(config_from_dict(wider), init_from=start)
    assert not (tmp_path / "run").exists()
    train(tiny_config(tmp_path / "run", max_steps=1), init_from=start)  # the same shape: fine
    with pytest.raises(DecisionInputError, match="does not match config section"):
        train(config_from_dict(wider), resume=True)


def test_an_interrupted_export_keeps_the_previous_one(
    tiny_runs: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from decision.model import DecisionModel, load_model
    from decision.model.testing import save_killed_midway
    from decision.train.export import export_checkpoint

    ckpt = tiny_runs["full"].checkpoint  # type: ignore[attr-defined]
    dest = export_checkpoint(ckpt, tmp_path / "export")

    monkeypatch.setattr(DecisionModel, "save", save_killed_midway)
    with pytest.raises(KeyboardInterrupt):
        export_checkpoint(ckpt, dest)
    monkeypatch.undo()
    assert load_model(dest, dtype=None).dtype == torch.bfloat16  # still whole
    assert export_checkpoint(ckpt, dest) == dest and sorted(p.name for p in tmp_path.iterdir()) == [
        "export"]


def test_a_step_that_raises_gives_the_signal_handlers_back(tmp_path: Path) -> None:
    """The loop's SIGTERM/SIGINT handlers (stop after the step) stayed installed when a step
    raised: the process then swallowed every later Ctrl-C and SIGTERM."""
    import signal

    from decision.tokenizer import special_ids, train_tokenizer
    from decision.train.loop import LoopHooks, train_loop
    from decision.train.recipe import build_model

    cfg = tiny_config(tmp_path, max_steps=5)
    tok = train_tokenizer([generate_text(s) for s in range(20)], 400)
    ids = special_ids(tok)

    def rows(i: int):  # noqa: ANN202 - the hook's row type
        raise RuntimeError("a row that cannot be built")

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with pytest.raises(RuntimeError, match="cannot be built"):
        train_loop(build_model(cfg, tok), cfg, LoopHooks(rows, ids.pad, ids.mask,
                                                          log=lambda s: None), tmp_path)
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_init_from_refuses_a_tokenizer_larger_than_the_embedding(tmp_path: Path) -> None:
    """A model directory whose tokenizer.json is another model's (more ids than embedding rows)
    loaded silently; its ids past the embedding then fail inside a training step."""
    from decision.errors import CheckpointError
    from decision.tokenizer import train_tokenizer
    from decision.train.recipe import build_model, load_trainable

    cfg = tiny_config(tmp_path / "run")
    small = train_tokenizer([generate_text(s) for s in range(20)], 320)
    start = tmp_path / "start"
    build_model(cfg, small).save(start)
    train_tokenizer([generate_text(s) for s in range(40)], 400).save(str(start / "tokenizer.json"))
    with pytest.raises(CheckpointError, match="vocab_size is 320"):
        load_trainable(start, "train with")


def test_resume_with_an_edited_config_says_what_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A resumed run silently mixed two recipes when the config had been edited in between."""
    train(tiny_config(tmp_path, max_steps=2))
    capsys.readouterr()
    train(tiny_config(tmp_path, max_steps=3), resume=True)
    out = capsys.readouterr()
    said = out.out + out.err
    assert "the config differs from the checkpoint's" in said
    assert "run.max_steps 2 -> 3" in said and "optim.lr" not in said
    assert "rows of the steps" not in said  # max_steps does not change the data
    train(tiny_config(tmp_path, max_steps=3), max_steps=3, resume=True)  # unchanged: no line
    out = capsys.readouterr()
    assert "differs" not in out.out + out.err


def test_resume_says_when_the_data_order_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The log said "the seed and the data order stay those of step 0" whatever changed, though
    run.seed and optim.batch_size decide which rows the next steps take."""
    train(tiny_config(tmp_path, max_steps=2))
    capsys.readouterr()
    raw = json.loads(TINY.read_text())
    raw["run"].update(out_dir=str(tmp_path), eval_every=10_000, max_steps=3, seed=5)
    raw["optim"]["batch_size"] = 3
    train(config_from_dict(raw), resume=True)
    said = capsys.readouterr().err
    assert "stay those of step 0" not in said
    assert "optim.batch_size, run.seed changed: the rows of the steps from here on" in said


def test_resume_notes_take_the_changed_keys_whole(tmp_path: Path) -> None:
    """The resume read each changed key back from its log text (the first word of "key saved
    -> now"): a saved key with a space in it, "run.seed note", was taken for run.seed (the rows
    change), and a train_config.json that is not an object crashed the resume."""
    from decision.train.checkpoint import resume_notes

    cfg = tiny_config(tmp_path)
    saved = json.loads(json.dumps(cfg.to_dict()))
    saved["run"]["seed note"] = "kept"  # extra keys: one with a space, one a prefix of run.seed
    saved["run"]["see"] = 1
    saved["data"]["p_joint_x"] = 0.5
    path = tmp_path / "train_config.json"
    path.write_text(json.dumps(saved))
    changes, data = resume_notes(path, cfg)
    assert "run.seed note 'kept' -> '(unset)'" in changes and "run.see 1 -> '(unset)'" in changes
    assert data.startswith("data.p_joint_x changed: the rows of the steps from here on")
    saved["data"].pop("p_joint_x")
    path.write_text(json.dumps(saved))
    (changes,) = resume_notes(path, cfg)  # no key that changes the rows: no second line
    assert "run.seed note" in changes
    path.write_text(json.dumps(saved)[:-20])  # truncated: nothing to compare with
    assert resume_notes(path, cfg) == []
    path.write_text("[]")
    assert resume_notes(path, cfg) == []
    path.write_text(json.dumps(cfg.to_dict()))
    assert resume_notes(path, cfg) == []


def test_nan_from_a_json_config_file_is_refused(tmp_path: Path) -> None:
    """Python's JSON reader takes NaN and Infinity; TOML spells nan and inf."""
    raw = json.loads(TINY.read_text())
    raw["optim"]["lr"] = float("nan")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw))  # writes NaN
    with pytest.raises(DecisionInputError, match="optim.lr must be a finite number"):
        load_config(bad)
    toml = tmp_path / "bad.toml"
    toml.write_text("[run]\ncheckpoint_minutes = nan\n")
    with pytest.raises(DecisionInputError, match="run.checkpoint_minutes must be a finite"):
        load_config(toml)
    from decision.train.config import check_minutes

    with pytest.raises(DecisionInputError, match="--max-minutes"):
        check_minutes(float("inf"))


def test_a_non_finite_loss_is_one_line_with_its_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A diverged run ended in a FloatingPointError traceback."""
    from decision import cli
    from decision.train import loop

    real = loop.batch_loss
    calls = []

    def diverging(*args: object, **kwargs: object) -> torch.Tensor:
        calls.append(1)
        loss = real(*args, **kwargs)  # type: ignore[arg-type]
        return loss * float("nan") if len(calls) == 3 else loss

    monkeypatch.setattr(loop, "batch_loss", diverging)
    out = tmp_path / "run"
    assert cli.main(["train", "--config", str(TINY), "--out-dir", str(out),
                     "--max-steps", "5"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("decision train: error: the training loss is nan at step 3:")
    assert "Traceback" not in "\n".join(err)


def test_a_non_finite_gradient_stops_the_run_before_the_update(tmp_path: Path) -> None:
    """A finite loss with an infinite gradient (the kernels' backward can give one where the
    forward is finite) passed the loss check: clipping turned it into NaN, the update wrote NaN
    weights, the checkpoint after that step held them, and neither --resume nor --export could
    load it (the loader refuses NaN weights); the next step's loss then stopped the run, with
    that checkpoint as its last."""
    from decision.errors import TrainingError
    from decision.model import load_model
    from decision.tokenizer import special_ids, train_tokenizer
    from decision.train.checkpoint import CHECKPOINT_DIR, load_trainer_state
    from decision.train.loop import LoopHooks, train_loop
    from decision.train.recipe import build_model

    cfg = tiny_config(tmp_path, max_steps=4, checkpoint_minutes=0.0)  # a checkpoint every step
    tok = train_tokenizer([generate_text(s) for s in range(20)], 400)
    model = build_model(cfg, tok)
    source = RowSource(cfg, tok)
    ids = special_ids(tok)
    step_of_row: list[int] = []

    def rows(i: int):  # noqa: ANN202 - the hook's row type
        step_of_row.append(i // cfg.optim.batch_size + 1)
        return source.row(i)

    def poison(grad: torch.Tensor) -> torch.Tensor:
        return grad * float("inf") if step_of_row[-1] == 2 else grad

    model.model.norm.weight.register_hook(poison)
    with pytest.raises(TrainingError, match="gradient norm is (inf|nan) at step 2"):
        train_loop(model, cfg, LoopHooks(rows, ids.pad, ids.mask, log=lambda s: None), tmp_path)
    assert load_trainer_state(tmp_path / CHECKPOINT_DIR)["step"] == 1  # the last good one
    assert load_model(tmp_path / CHECKPOINT_DIR).tokenizer is not None  # finite weights: loads


def test_resume_refuses_a_checkpoint_without_trainer_state(tmp_path: Path) -> None:
    """--resume over a checkpoint lacking trainer_state.pt started a fresh run and overwrote it."""
    from decision.errors import CheckpointError

    train(tiny_config(tmp_path, max_steps=1))
    ckpt = tmp_path / "checkpoint"
    (ckpt / "trainer_state.pt").unlink()
    weights = (ckpt / "model.safetensors").read_bytes()
    with pytest.raises(CheckpointError, match="no trainer_state.pt") as err:
        train(tiny_config(tmp_path, max_steps=2), resume=True)
    assert str(ckpt) in str(err.value) and "--init-from" in str(err.value)
    assert (ckpt / "model.safetensors").read_bytes() == weights


def test_a_fresh_run_refuses_a_directory_that_holds_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run started again without --resume overwrote the directory's checkpoint silently."""
    from decision.train.checkpoint import load_trainer_state
    from decision.train.cli import main

    train(tiny_config(tmp_path, max_steps=2))
    with pytest.raises(DecisionInputError, match="already holds a run .*--resume") as err:
        train(tiny_config(tmp_path, max_steps=2))
    assert err.value.field == "run.out_dir"
    assert load_trainer_state(tmp_path / "checkpoint")["step"] == 2
    capsys.readouterr()
    assert main(["--config", str(TINY), "--out-dir", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {tmp_path} already holds a run (checkpoint, tokenizer.json")


def test_max_steps_below_one_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--max-steps -3 was accepted: a run of no step that wrote a checkpoint at step 0."""
    from decision.train.cli import main

    out = tmp_path / "run"
    assert main(["--config", str(TINY), "--out-dir", str(out), "--max-steps", "-3"]) == 2
    assert capsys.readouterr().err.strip() == "error: --max-steps must be >= 1, got -3"
    assert not out.exists()


def test_export_refuses_a_directory_it_would_destroy(
    tiny_runs: dict[str, object], tmp_path: Path
) -> None:
    """export_checkpoint replaced its destination whole: the run directory itself (checkpoint
    included), or any directory of the user's, was deleted."""
    from decision.train.export import export_checkpoint

    ckpt = tiny_runs["full"].checkpoint  # type: ignore[attr-defined]
    run = ckpt.parent
    for dest, words in [(run, "holds the run directory"), (run.parent, "holds the run directory"),
                        (ckpt, "the run's own checkpoint"),
                        (ckpt / "export", "the run's own checkpoint")]:
        with pytest.raises(DecisionInputError, match=words) as err:
            export_checkpoint(ckpt, dest)
        assert err.value.field == "export"
    assert (ckpt / "trainer_state.pt").is_file()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(DecisionInputError, match="'notes.txt', which is not an exported model"):
        export_checkpoint(ckpt, mine)
    assert (mine / "notes.txt").read_text() == "keep"
    (tmp_path / "file").write_text("keep")
    with pytest.raises(DecisionInputError, match="a file"):
        export_checkpoint(ckpt, tmp_path / "file")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert export_checkpoint(ckpt, empty) == empty.resolve()  # empty: taken
    assert export_checkpoint(ckpt, empty) == empty.resolve()  # a previous export: replaced


def test_command_line_export_is_checked_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--export . trained, then crashed (or deleted the run directory holding it)."""
    from decision.model import load_model
    from decision.train.cli import main

    monkeypatch.chdir(tmp_path)
    for dest in (".", "runs/x", "runs"):
        assert main(["--config", str(TINY), "--out-dir", "runs/x", "--export", dest]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"error: --export {dest}: the export replaces ")
        assert not (tmp_path / "runs").exists()  # refused before any training
    assert main(["--config", str(TINY), "--out-dir", "runs/x", "--max-steps", "1",
                 "--export", "runs/x/export"]) == 0  # the documented layout
    assert load_model(tmp_path / "runs/x/export", dtype=None).dtype == torch.bfloat16


def test_ctrl_c_checkpoints_skips_the_export_and_exits_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGINT stopped the loop with a checkpoint, but the command then exported the interrupted
    run and exited 0, and nothing was logged when the signal came."""
    import os
    import signal

    from decision import cli
    from decision.train.checkpoint import load_trainer_state

    real = RowSource.row

    def row(self: RowSource, i: int):  # noqa: ANN202 - the hook's row type
        if i == 2 * self.cfg.optim.batch_size:  # during step 3
            os.kill(os.getpid(), signal.SIGINT)
        return real(self, i)

    monkeypatch.setattr(RowSource, "row", row)
    before = signal.getsignal(signal.SIGINT)
    out = tmp_path / "run"
    assert cli.main(["train", "--config", str(TINY), "--out-dir", str(out),
                     "--export", str(out / "export")]) == 130
    err = capsys.readouterr().err
    assert "SIGINT received: stopping at step 3, with a checkpoint" in err
    assert err.strip().splitlines()[-1] == (
        f"interrupted by SIGINT at step 3: checkpoint saved in {out / 'checkpoint'}; "
        "not exported; continue with --resume")
    assert load_trainer_state(out / "checkpoint")["step"] == 3
    assert not (out / "export").exists()
    # the handler the run found is back (SIG_IGN where the tests run as a background job)
    assert signal.getsignal(signal.SIGINT) == before


def test_rows_longer_than_the_model_serves_are_warned_of_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``model.max_position_embeddings`` bounds the requests the service takes, not training: a
    model trained on rows longer than it would then refuse every request like them, unsaid."""
    raw = json.loads(TINY.read_text())
    raw["run"].update(out_dir=str(tmp_path / "short"), eval_every=10_000, max_steps=3)
    raw["model"]["max_position_embeddings"] = 64
    train(config_from_dict(raw))
    err = capsys.readouterr().err
    assert err.count("warning: a row of step 1 needs") == 1, err
    assert "but the model serves at most 64 (model.max_position_embeddings)" in err
    train(tiny_config(tmp_path / "long", max_steps=3))  # tiny.json's own 32768: no warning
    assert "warning" not in capsys.readouterr().err
