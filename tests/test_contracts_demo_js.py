"""The contracts demo page's script (apps/contracts/static/demo.js) in Node with a fake DOM.

No browser: the elements are stand-ins that record what the script builds. This covers edge
cases of the results rendering that the Chromium test (test_contracts_browser.py) does not.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from apps.contracts.web import static_dir

NODE = shutil.which("node") or shutil.which("nodejs")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")

PRELUDE = r"""
class FakeElement {
  constructor(tag) {
    this.tagName = tag; this.children = []; this.attrs = {}; this.style = {}; this.dataset = {};
    this.textContent = ""; this.className = ""; this.hidden = false; this.value = "";
    this.title = "";
    const classes = new Set();
    this.classList = { add: (c) => classes.add(c), remove: (c) => classes.delete(c),
                       contains: (c) => classes.has(c) };
  }
  setAttribute(k, v) { this.attrs[k] = String(v); }
  appendChild(c) { this.children.push(c); return c; }
  replaceChildren(...cs) { this.children = cs; }
  addEventListener() {}
}
const PAGE = {};
for (const id of ["summary", "answers", "warnings", "results", "example", "preset", "status",
                  "questions", "document", "threshold", "max-steps"]) {
  PAGE[id] = new FakeElement(id);
}
globalThis.window = {};
globalThis.document = {
  getElementById: (id) => PAGE[id],
  createElement: (tag) => new FakeElement(tag),
  addEventListener() {},
};
function texts(node) {
  return [node.textContent, ...node.children.flatMap((c) => texts(c))].filter((t) => t);
}
// The nodes under ``node`` whose className has every class of ``classes`` ("cell joint").
function find(node, classes) {
  const want = classes.split(" ");
  const own = `${node.className || ""}`.split(" ");
  const hit = want.every((c) => own.includes(c)) ? [node] : [];
  return [...hit, ...node.children.flatMap((c) => find(c, classes))];
}
// A question of the editor, as readRequest reads it: its inputs by selector.
function fakeQuestion(values) {
  return {
    querySelector: (selector) => ({ value: values[selector] ?? "", validity: { badInput: false },
                                    selectedOptions: [{ textContent: values[selector] }] }),
  };
}
"""

SCENARIO = r"""
// A pasted document (no example selected) with question ids that are Object.prototype members.
demo.examples = [];
PAGE.example.value = "";
const ids = ["constructor", "toString", "valueOf"];
const request = {
  document: "My own lease.",
  questions: ids.map((id) => ({ id, text: `Question ${id}?`, answer: { type: "boolean" } })),
  options: {},
};
const expected = expectedFor(request);
const mode = () => ({
  answers: ids.map((id) => ({ id, value: true, confidence: 0.9, option_probabilities: null })),
  steps: 1, tokens_per_forward: 3, timings: { total_ms: 5 }, checks: [],
});
render({ request, preset: null, modes: { joint: mode(), standalone: mode() }, expected });
process.stdout.write(JSON.stringify({
  inExpected: ids.filter((id) => id in expected),
  summary: texts(PAGE.summary),
  answers: texts(PAGE.answers),
}));
"""


def test_prototype_named_question_ids_have_no_expected_answer() -> None:
    """Ids like "constructor" on a pasted document: no "from the text", no marks, no score."""
    script = PRELUDE + (static_dir / "demo.js").read_text(encoding="utf-8") + SCENARIO
    done = subprocess.run([NODE, "-"], input=script, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["inExpected"] == []
    assert not [t for t in out["summary"] if "match the text" in t]
    shown = " | ".join(out["answers"])
    assert "from the text" not in shown and "function" not in shown
    assert "✓" not in shown and "✗" not in shown
    assert "constructor" in shown and "yes" in shown  # the answers themselves are there


EDITED_SCENARIO = r"""
// A shipped example whose document is kept: only the questions left as they are (id, text and
// the whole answer schema) are compared with what the text says.
const TRI = ["yes", "no", "not stated"];
demo.examples = [{
  id: "lease-1", document: "The lease text.",
  questions: [
    { id: "timely", text: "On time?", answer: { type: "choice", options: TRI } },
    { id: "late", text: "How many late?", answer: { type: "integer", minimum: 0, maximum: 12 } },
    { id: "given", text: "Days given?", answer: { type: "integer", minimum: 0, maximum: 90 } },
    { id: "fee_due", text: "Fee due?", answer: { type: "boolean" } },
  ],
  expected: { timely: "no", late: 2, given: 9, fee_due: true },
}];
PAGE.example.value = "lease-1";
const request = {
  document: "The lease text.",
  questions: [
    // options renamed: "n" is not comparable with "no"
    { id: "timely", text: "On time?", answer: { type: "choice", options: ["y", "n", TRI[2]] } },
    // unchanged, keys in another order
    { id: "late", text: "How many late?", answer: { maximum: 12, type: "integer", minimum: 0 } },
    // range edited
    { id: "given", text: "Days given?", answer: { type: "integer", minimum: 0, maximum: 5 } },
    { id: "fee_due", text: "Fee due?", answer: { type: "boolean" } },
  ],
  options: {},
};
process.stdout.write(JSON.stringify(Object.keys(expectedFor(request)).sort()));
"""


def test_edited_answer_schemas_have_no_expected_answer() -> None:
    """The docs: "for a shipped example whose document and question are unchanged" the row says
    what the text says. A question whose options or range were edited (same id, text and type)
    is changed: comparing "n" with the example's "no" would mark a right answer wrong."""
    script = PRELUDE + (static_dir / "demo.js").read_text(encoding="utf-8") + EDITED_SCENARIO
    done = subprocess.run([NODE, "-"], input=script, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["fee_due", "late"]


def _run(scenario: str) -> object:
    script = PRELUDE + (static_dir / "demo.js").read_text(encoding="utf-8") + scenario
    done = subprocess.run([NODE, "-"], input=script, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


RENDER_SCENARIO = r"""
// An example whose text says timely = "no", fee = 2 and leaves "renews" unstated; joint answers
// timely right and fee wrong; standalone breaks a rule on timely and has no answer for fee.
const TRI = ["yes", "no", "not stated"];
const questions = [
  { id: "timely", text: "On time?", answer: { type: "choice", options: TRI } },
  { id: "renews", text: "Renews?", answer: { type: "boolean" } },
  { id: "fee", text: "Fee?", answer: { type: "integer" } },
];
const expected = { timely: "no", renews: null, fee: 2 };
const answer = (id, value) => ({ id, value, confidence: 0.8,
  option_probabilities: id === "timely" ? { yes: 0.15, no: 0.8, "not stated": 0.05 } : null });
const check = (status) => ({ rule: "r1", status, questions: ["timely"], description: "Rule one",
                             detail: "timely = no" });
const modes = {
  joint: { answers: [answer("timely", "no"), answer("renews", true), answer("fee", 3)],
           steps: 2, tokens_per_forward: 1.5, checks: [check("kept")],
           timings: { total_ms: 40, prefill: 12.4, denoise: 20 } },
  standalone: { answers: [answer("timely", "yes"), answer("renews", false)],
                steps: 6, tokens_per_forward: 1, checks: [check("broken")],
                timings: { total_ms: 90 } },
};
PAGE.results.classList.add("stale");
render({ request: { document: "", questions, options: {} }, preset: "lease", modes, expected });
const row = (id) => PAGE.answers.children.find((r) => r.dataset.question === id);
const cell = (id, mode) => find(row(id), `cell ${mode}`)[0];
process.stdout.write(JSON.stringify({
  rows: PAGE.answers.children.slice(1).map((r) => r.dataset.question),
  expectedLines: ["timely", "renews", "fee"].map((id) => find(row(id), "expected")
    .map((n) => n.textContent)),
  marks: ["timely", "fee"].map((id) => find(cell(id, "joint"), "mark")
    .map((n) => [n.className, n.textContent])),
  standaloneMarks: find(cell("timely", "standalone"), "mark").map((n) => n.className),
  missing: texts(cell("fee", "standalone")),
  conf: find(cell("timely", "joint"), "conf").map((n) => n.textContent),
  chosen: find(cell("timely", "joint"), "chosen").map((n) => n.title),
  broken: ["joint", "standalone"].map((m) => [cell("timely", m).classList.contains("broken"),
                                             cell("timely", m).title]),
  scores: ["joint", "standalone"].map((m) => find(PAGE.summary, `mode-card ${m}`)[0])
    .map((c) => find(c, "score").map((n) => n.textContent)),
  phases: find(PAGE.summary, "phases").map((n) => n.textContent),
  warnings: texts(PAGE.warnings),
  stale: PAGE.results.classList.contains("stale"),
  hidden: PAGE.results.hidden,
}));
"""


def test_results_show_marks_scores_and_rules_per_mode() -> None:
    """The answers table and the mode cards: one row per question in order, what the text says
    (or that it does not say it), a ✓ or ✗ per answer compared with it (none for an unstated
    one), each mode's score, the chosen option's bar, a broken rule's answers flagged in its
    mode only, "—" for an answer a mode did not give, and "No rule broken." for the mode that
    kept its rules; the results are no longer marked stale."""
    out = _run(RENDER_SCENARIO)
    assert isinstance(out, dict)
    assert out["rows"] == ["timely", "renews", "fee"]
    assert out["expectedLines"] == [["from the text: no"], ["the text does not state it"],
                                    ["from the text: 2"]]
    assert out["marks"] == [[["mark right", "✓"]], [["mark wrong", "✗"]]]
    assert out["standaloneMarks"] == ["mark wrong"]
    assert out["missing"] == ["—"]
    assert out["conf"] == ["80%"]
    assert out["chosen"] == ["no: 80.0%"]
    assert out["broken"] == [[False, ""], [True, "This answer takes part in a broken rule"]]
    assert out["scores"] == [["1/2 match the text"], ["0/1 match the text"]]
    assert out["phases"] == ["prefill 12 · denoise 20 ms"]
    warnings = " | ".join(out["warnings"])
    assert "Rules, joint | No rule broken. | Rules, standalone | ⚠ Rule one" in warnings
    assert warnings.count("No rule broken.") == 1
    assert out["stale"] is False and out["hidden"] is False


REQUEST_SCENARIO = r"""
PAGE.document.value = "The text.";
PAGE.threshold.value = "0.8";
PAGE["max-steps"].value = "4";
const nodes = [
  fakeQuestion({ ".q-id": " late ", ".q-text": " How many? ", ".q-type": "integer",
                 ".q-min": "0", ".q-max": "12" }),
  fakeQuestion({ ".q-id": "timely", ".q-text": "On time?", ".q-type": "choice",
                 ".q-options": "yes, no, , not stated," }),
  fakeQuestion({ ".q-id": "code", ".q-text": "Code?", ".q-type": "pattern",
                 ".q-regex": "[A-Z]+", ".q-tokens": "8" }),
];
PAGE.questions.querySelectorAll = () => nodes;
const request = readRequest();
nodes.push(fakeQuestion({ ".q-id": "meta", ".q-text": "Meta?", ".q-type": "json",
                          ".q-schema": "{not json" }));
let badSchema = null;
try { readRequest(); } catch (error) { badSchema = error; }
const summary = { textContent: "" };
const fee = fakeQuestion({ ".q-type": "yes/no", ".q-id": "fee", ".q-text": "Fee due?" });
const collapsed = { querySelector: (s) => (s === ".q-summary" ? summary : fee.querySelector(s)) };
summarize(collapsed);
process.stdout.write(JSON.stringify({
  request, badSchema, summary: summary.textContent,
  message: readableMessage({ field: "questions.2.answer.choice.options", message:
    "questions.2.answer.choice.options: Value error, options must be distinct" }),
}));
"""


def test_the_request_is_read_from_the_editor() -> None:
    """What the editor holds becomes the request: trimmed id and text, an integer range under
    its own keys, choice options without empty ones, a pattern's max_tokens, the threshold and
    step limit; a JSON schema that does not parse is reported at its own field; a collapsed
    question's summary names id, type and text; a service message loses its field prefix."""
    out = _run(REQUEST_SCENARIO)
    assert isinstance(out, dict)
    assert out["request"] == {
        "document": "The text.",
        "questions": [
            {"id": "late", "text": "How many?",
             "answer": {"type": "integer", "minimum": 0, "maximum": 12}},
            {"id": "timely", "text": "On time?",
             "answer": {"type": "choice", "options": ["yes", "no", "not stated"]}},
            {"id": "code", "text": "Code?",
             "answer": {"type": "pattern", "regex": "[A-Z]+", "max_tokens": 8}},
        ],
        "options": {"return_probabilities": True, "threshold": 0.8, "max_steps": 4},
    }
    assert out["badSchema"]["field"] == "questions.3.answer.schema"
    assert "not valid JSON" in out["badSchema"]["message"]
    assert out["summary"] == "fee · yes/no · Fee due?"
    assert out["message"] == "Options must be distinct"


def test_an_edited_document_has_no_expected_answers() -> None:
    """The example's answers are what its text says: once the document is edited (the example
    still picked), no question is compared with them."""
    scenario = EDITED_SCENARIO.replace(
        "process.stdout.write(JSON.stringify(Object.keys(expectedFor(request)).sort()));",
        "process.stdout.write(JSON.stringify([Object.keys(expectedFor(request)).sort(),"
        " Object.keys(expectedFor({ ...request, document: 'The lease text, edited.' }))]));")
    assert scenario != EDITED_SCENARIO
    assert _run(scenario) == [["fee_due", "late"], []]
