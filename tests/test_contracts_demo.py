"""The contracts demo's presets, rules, examples and JSON routes (no model needed)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from apps.contracts import checker, generate_group
from apps.contracts.examples import EXAMPLES_DIR, get_example, load_examples
from apps.contracts.examples.build import expected_answers, select
from apps.contracts.generator import KINDS
from apps.contracts.presets import (
    LEASE,
    NDA,
    PRESET_FOR_KIND,
    PRESETS,
    SERVICES,
    Condition,
    Equation,
    Implies,
    Verdict,
    check_rule,
    check_rules,
    get_preset,
    same_value,
)
from apps.contracts.questions import SCHEMAS, question_text
from apps.contracts.splits import VALIDATION
from decision.errors import DecisionInputError
from decision.serve.api import ModelInfo
from decision.serve.errors import install_error_handlers


def _status(preset_id: str, answers: dict[str, Any]) -> dict[str, str]:
    return {c.rule: c.status for c in check_rules(get_preset(preset_id), answers)}


# ---------------------------------------------------------------------- rules flag what they must


def test_notice_late_with_deposit_returned_is_flagged_and_the_consistent_pair_is_not() -> None:
    late_returned = _status("lease", {"timely": "no", "deposit": "no"})
    assert late_returned["late-notice-outcome"] == "broken"
    assert [r for r, s in late_returned.items() if s == "broken"] == ["late-notice-outcome"]
    for deposit in ("yes", "not stated"):  # kept, or the deposit clause is absent
        assert "broken" not in _status("lease", {"timely": "no", "deposit": deposit}).values()
    assert _status("lease", {"timely": "yes", "deposit": "yes"})["timely-notice-outcome"] == \
        "broken"
    assert _status("lease", {"timely": "not stated", "deposit": "yes"})[
        "no-renewal-clause-outcome"] == "broken"
    # the services agreement's cancellation fee follows the same rule
    assert _status("services", {"timely": "no", "cancel_fee": "no"})["late-notice-outcome"] == \
        "broken"
    assert _status("services", {"timely": "no", "cancel_fee": "yes"})["late-notice-outcome"] == \
        "kept"


@pytest.mark.parametrize(("timely", "given", "required", "status"), [
    ("yes", 12, 10, "kept"), ("yes", 10, 10, "kept"), ("no", 9, 10, "kept"),
    ("yes", 9, 10, "broken"), ("no", 10, 10, "broken"), ("no", 30, 10, "broken"),
    ("not stated", 9, 10, "kept"),  # an integer answer cannot say its clause is missing
])
def test_timeliness_verdict_against_the_day_counts(timely: str, given: int, required: int,
                                                   status: str) -> None:
    got = _status("lease", {"timely": timely, "given": given, "required": required})
    assert got["timely-by-days"] == status


def test_renewal_stated_together_with_timeliness() -> None:
    assert _status("lease", {"timely": "not stated", "renews": "yes"})[
        "renewal-clause-missing"] == "broken"
    assert _status("lease", {"timely": "no", "renews": "not stated"})[
        "renewal-clause-present"] == "broken"
    for timely, renews in (("no", "yes"), ("no", "no"), ("yes", "no"), ("not stated",
                                                                          "not stated")):
        assert "broken" not in _status("lease", {"timely": timely, "renews": renews}).values()


def test_late_fee_rules_keep_booleans_apart_from_numbers() -> None:
    ok = {"late": 3, "fee": 25, "owed": 75, "fee_due": True}
    assert set(_status("services", ok).values()) >= {"kept"}
    assert "broken" not in _status("services", ok).values()
    assert _status("services", {**ok, "owed": 70})["total-fees"] == "broken"
    assert _status("services", {**ok, "fee_due": False})["fee-due-by-count"] == "broken"
    none_late = {"late": 0, "fee": 25, "owed": 0, "fee_due": False}
    assert "broken" not in _status("services", none_late).values()
    assert _status("services", {**none_late, "owed": 25})["fee-due-by-total"] == "broken"
    # A question edited into another answer type is skipped, never judged (1 is not True).
    changed = _status("services", {**ok, "fee_due": 1, "late": True})
    assert changed["fee-due-by-count"] == "skipped" and changed["total-fees"] == "skipped"


def test_nda_damages_rules_over_two_obligations() -> None:
    base = {"return_timely": "yes", "report_timely": "yes", "damages": "no"}
    assert "broken" not in _status("nda", base).values()
    assert _status("nda", {**base, "damages": "yes"})["nothing-late-no-damages"] == "broken"
    late_report = {**base, "report_timely": "no"}
    assert _status("nda", late_report)["late-report-damages"] == "broken"
    assert "broken" not in _status("nda", {**late_report, "damages": "yes"}).values()
    assert "broken" not in _status("nda", {**late_report, "damages": "not stated"}).values()
    neither = {"return_timely": "not stated", "report_timely": "not stated"}
    assert _status("nda", {**neither, "damages": "no"})["no-obligation-no-damages"] == "broken"
    assert _status("nda", {"return_timely": "yes", "return_taken": 9,
                           "return_deadline": 7})["return-by-days"] == "broken"


def test_missing_questions_and_changed_types_are_skipped_with_the_reason() -> None:
    checks = {c.rule: c for c in check_rules(LEASE, {"timely": "no"})}
    assert all(c.status == "skipped" for c in checks.values())
    assert checks["late-notice-outcome"].detail == "not asked: deposit"
    edited = {c.rule: c for c in check_rules(LEASE, {"timely": False, "deposit": "no"})}
    assert edited["late-notice-outcome"].status == "skipped"
    assert "answer type changed" in edited["late-notice-outcome"].detail


def test_answers_outside_the_presets_options_are_skipped_not_kept() -> None:
    # A choice answer the preset's question does not offer (its options edited on the page) says
    # nothing the rules can read: it used to count as kept (not triggered / unconstrained), or as
    # broken when it stood in a rule's conclusion.
    edited = {c.rule: c for c in check_rules(LEASE, {"timely": "maybe", "deposit": "no",
                                                     "renews": "yes", "given": 9,
                                                     "required": 10})}
    for rule in ("timely-by-days", "late-notice-outcome", "timely-notice-outcome",
                 "no-renewal-clause-outcome", "renewal-clause-missing",
                 "renewal-clause-present"):
        assert edited[rule].status == "skipped", rule
    assert edited["late-notice-outcome"].detail == (
        "timely = 'maybe' is not one of its options (yes, no, not stated)")
    concluded = _status("lease", {"timely": "no", "deposit": "perhaps"})
    assert concluded["late-notice-outcome"] == "skipped"
    assert concluded["timely-notice-outcome"] == "skipped"
    # "not stated" is one of the options: a verdict leaves it unconstrained, as before
    assert _status("lease", {"timely": "not stated", "given": 9, "required": 10})[
        "timely-by-days"] == "kept"


def test_rule_kinds_directly() -> None:
    rule = Implies("r", "d", (Condition("a", ("x",)), Condition("b", ("y",))),
                   Condition("c", ("z",)))
    assert check_rule(rule, {"a": "x", "b": "y", "c": "w"}).status == "broken"
    assert check_rule(rule, {"a": "x", "b": "n", "c": "w"}).status == "kept"  # not triggered
    verdict = Verdict("v", "d", "ok", "n", "<", 5, if_true=True, if_false=False)
    assert check_rule(verdict, {"ok": True, "n": 4}).status == "kept"
    assert check_rule(verdict, {"ok": True, "n": 5}).status == "broken"
    assert check_rule(verdict, {"ok": True, "n": "5"}).status == "skipped"
    eq = Equation("e", "d", "s", "+", ("a", "b"))
    assert check_rule(eq, {"s": 5, "a": 2, "b": 3}).status == "kept"
    assert check_rule(eq, {"s": 6, "a": 2, "b": 3}).detail == "s = 6, a + b = 2 + 3 = 5"
    assert same_value(1, 1.0) and not same_value(True, 1) and not same_value(0, False)


def _gold_by_preset_id(seed: int) -> tuple[str, dict[str, Any]]:
    """The generator's own gold answers of a group, keyed by the preset's question ids."""
    group = generate_group(seed)
    preset = PRESETS[PRESET_FOR_KIND[group.kind]]
    ids = {q.qtype: q.id for q in preset.questions}
    return preset.id, {ids[q.qtype]: q.gold for q in group.questions if q.qtype in ids}


def test_the_generators_gold_answers_never_break_a_rule() -> None:
    """The rules are true of the task: over 600 validation groups no gold answer set breaks one,
    and every rule is actually exercised (all its questions present, at least 10 times)."""
    kept: dict[str, int] = {}
    for seed in VALIDATION.seeds(600):
        preset_id, gold = _gold_by_preset_id(seed)
        for check in check_rules(get_preset(preset_id), gold):
            assert check.status != "broken", (seed, check)
            kept[check.rule] = kept.get(check.rule, 0) + (check.status == "kept")
    rules = {r.id for p in PRESETS.values() for r in p.rules}
    assert set(kept) == rules and min(kept.values()) >= 10, kept


def test_the_checkers_answers_to_whole_presets_never_break_a_rule() -> None:
    for seed in VALIDATION.seeds(150, offset=1000):
        group = generate_group(seed)
        preset = PRESETS[PRESET_FOR_KIND[group.kind]]
        expected = {k: v for k, v in expected_answers(group.document, preset).items()
                    if v is not None}
        assert "broken" not in {c.status for c in check_rules(preset, expected)}, seed


# ---------------------------------------------------------------------- presets are well formed


@pytest.mark.parametrize("preset", [LEASE, SERVICES, NDA], ids=lambda p: p.id)
def test_preset_questions_use_the_generators_wording_and_schemas(preset: Any) -> None:
    assert 1 <= len(preset.questions) <= 8
    ids = [q.id for q in preset.questions]
    assert len(set(ids)) == len(ids)
    for q in preset.questions:
        wordings = {question_text(q.qtype, preset.kind, random.Random(s)) for s in range(40)}
        assert q.text in wordings, q.text
        assert checker.classify_question(q.text) == q.qtype
        assert q.request()["answer"] == SCHEMAS[q.qtype]
    q0 = preset.questions[0]
    q0.request()["answer"]["type"] = "edited"  # callers get copies
    assert SCHEMAS[q0.qtype]["type"] != "edited"


@pytest.mark.parametrize("preset", [LEASE, SERVICES, NDA], ids=lambda p: p.id)
def test_rules_name_only_preset_questions_and_valid_answers(preset: Any) -> None:
    schemas = {q.id: q.request()["answer"] for q in preset.questions}
    for rule in preset.rules:
        assert set(rule.questions) <= set(schemas), rule.id
        conditions = ((*rule.when, rule.then) if isinstance(rule, Implies) else ())
        for c in conditions:
            assert set(c.values) <= set(schemas[c.question]["options"]), (rule.id, c)
        if isinstance(rule, Verdict):
            answer = schemas[rule.question]
            allowed = answer.get("options", [True, False])
            assert rule.if_true in allowed and rule.if_false in allowed
    assert json.loads(json.dumps(preset.to_json()))["rules"][0]["id"] == preset.rules[0].id


def test_unknown_preset_names_the_field() -> None:
    with pytest.raises(DecisionInputError) as err:
        get_preset("lease2")
    assert err.value.field == "preset" and "lease" in err.value.message


# ---------------------------------------------------------------------- examples


def test_examples_are_what_the_build_script_writes() -> None:
    examples = load_examples()
    on_disk = {p.stem: json.loads(p.read_text()) for p in Path(EXAMPLES_DIR).glob("*.json")}
    rebuilt = {e["id"]: e for e in select(per_kind=3)}
    assert rebuilt == on_disk
    assert [e.kind for e in examples] == [k for k in KINDS for _ in range(3)]


def test_examples_come_from_validation_seeds_and_agree_with_the_generator() -> None:
    for example in load_examples():
        assert example.seed in VALIDATION and example.split == "validation"
        group = generate_group(example.seed, example.level)
        assert group.document == example.document and group.kind == example.kind
        preset = get_preset(example.preset)
        assert preset.kind == example.kind and example.questions == preset.requests()
        ids = {q.qtype: q.id for q in preset.questions}
        for q in group.questions:  # the checker's answers match the generator's gold
            if q.qtype in ids:
                assert same_value(example.expected[ids[q.qtype]], q.gold), (example.id, q)


def test_get_example_checks_its_number() -> None:
    assert get_example(1).id == "lease-1"
    for bad in (0, 10, True, "1"):
        with pytest.raises(DecisionInputError) as err:
            get_example(bad)  # type: ignore[arg-type]
        assert err.value.field == "example"


# ---------------------------------------------------------------------- routes


@pytest.fixture
def client() -> Iterator[TestClient]:
    from apps.contracts.web import router

    app = FastAPI()
    install_error_handlers(app)
    app.include_router(router)
    with TestClient(app) as c:
        yield c


def test_presets_and_examples_routes(client: TestClient) -> None:
    presets = client.get("/api/contracts/presets").json()["presets"]
    assert [p["id"] for p in presets] == ["lease", "services", "nda"]
    assert presets[0]["questions"][0]["answer"] == {"type": "integer", "minimum": 0,
                                                    "maximum": 90}
    assert any(r["kind"] == "implies" for r in presets[0]["rules"])
    examples = client.get("/api/contracts/examples").json()["examples"]
    assert len(examples) == 9 and examples[0]["preset"] == "lease"


def test_check_route_flags_the_broken_pair(client: TestClient) -> None:
    body = {"preset": "lease", "answers": {"timely": "no", "deposit": "no", "renews": "yes"}}
    out = client.post("/api/contracts/check", json=body).json()
    broken = [c for c in out["checks"] if c["status"] == "broken"]
    assert out["broken"] == 1 and broken[0]["rule"] == "late-notice-outcome"
    assert broken[0]["questions"] == ["timely", "deposit"]
    assert broken[0]["detail"] == "timely = no, deposit = no"
    ok = client.post("/api/contracts/check",
                     json={"preset": "lease", "answers": {"timely": "no", "deposit": "yes"}})
    assert ok.json()["broken"] == 0
    odd = client.post("/api/contracts/check", json={"preset": "lease", "answers": {
        "timely": "maybe", "deposit": "no", "renews": "yes"}}).json()
    assert {c["status"] for c in odd["checks"]} == {"skipped"}  # none counted as kept


@pytest.mark.parametrize("answers", [
    {"owed": 1, "late": 10**400, "fee": 0.5},  # OverflowError: a 500
    {"owed": 1, "late": 10**4000, "fee": 10**4000},  # a product past 4,300 digits: a 500
    {"owed": float("inf"), "late": 2, "fee": 3},
])
def test_check_route_skips_numbers_no_answer_gives(client: TestClient, answers: dict) -> None:
    import json

    body = json.dumps({"preset": "services", "answers": answers}, allow_nan=True)
    out = client.post("/api/contracts/check", content=body,
                      headers={"content-type": "application/json"})
    assert out.status_code == 200, out.text
    total = next(c for c in out.json()["checks"] if c["rule"] == "total-fees")
    assert total["status"] == "skipped" and "10^18" in total["detail"]


@pytest.mark.parametrize("answers", [
    # not one of its options: every rule reading it named it whole
    {"timely": "x" * 100_000, "given": 1, "required": 1, "deposit": "yes", "renews": "yes"},
    {"timely": "yes", "given": ["x" * 100_000], "required": 1, "deposit": ["y" * 100_000]},
])
def test_check_route_does_not_echo_a_huge_answer_into_every_rule(
        client: TestClient, answers: dict) -> None:
    # a 0.9 MB answer came back once per rule that reads it: a 5.4 MB response
    out = client.post("/api/contracts/check", json={"preset": "lease", "answers": answers})
    assert out.status_code == 200, out.text
    assert len(out.content) < 10_000
    details = [c["detail"] for c in out.json()["checks"] if c["status"] == "skipped"]
    assert details and all(len(d) < 300 for d in details)


@pytest.mark.parametrize(("body", "field"), [
    ({"preset": "nope", "answers": {}}, "preset"),
    ({"preset": "lease"}, "answers"),
    ({"preset": "lease", "answers": [1]}, "answers"),
    ({"preset": "lease", "answers": {}, "extra": 1}, "extra"),
])
def test_check_route_errors_name_the_field(client: TestClient, body: dict[str, Any],
                                           field: str) -> None:
    response = client.post("/api/contracts/check", json=body)
    assert response.status_code == 422
    assert response.json()["error"]["field"] == field


class _StubEngine:
    """Enough of a ``ServiceEngine`` to start the full app without a model."""

    name = "stub"

    def prepare(self, body: Any) -> Any:
        return body

    def decide_many(self, prepared: Any) -> list[Any]:
        raise AssertionError("not used")

    def info(self) -> ModelInfo:
        return ModelInfo(name="stub", path=None, parameters=None, max_questions=8,
                         max_document_tokens=None, modes=["joint"], answer_types=["choice"])


def test_the_service_mounts_the_page_and_the_routes() -> None:
    from decision.serve import ServeSettings, create_app

    with TestClient(create_app(ServeSettings(), engine=_StubEngine())) as c:  # type: ignore[arg-type]
        page = c.get("/contracts/")
        assert page.status_code == 200 and "Contract judgments" in page.text
        for asset in ("demo.js", "demo.css"):
            assert c.get(f"/contracts/{asset}").status_code == 200
        assert c.get("/api/contracts/presets").status_code == 200
        assert c.post("/api/contracts/check", json={"preset": "x", "answers": {}}).json() == {
            "error": {"type": "validation_error", "field": "preset", "request_id": ANY,
                      "message": "unknown preset 'x'; expected one of ['lease', 'nda', "
                                 "'services']"}}


def test_the_docs_list_every_preset_question_and_rule() -> None:
    docs = (Path(__file__).resolve().parent.parent / "docs" / "contracts-demo.md").read_text()
    for preset in PRESETS.values():
        section = docs.split(f"### `{preset.id}`", 1)[1].split("\n### ", 1)[0]
        for name in [q.id for q in preset.questions] + [r.id for r in preset.rules]:
            assert f"| `{name}` |" in section, (preset.id, name)
