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
    this.classList = { add: (c) => classes.add(c), remove: (c) => classes.delete(c) };
  }
  setAttribute(k, v) { this.attrs[k] = String(v); }
  appendChild(c) { this.children.push(c); return c; }
  replaceChildren(...cs) { this.children = cs; }
  addEventListener() {}
}
const PAGE = {};
for (const id of ["summary", "answers", "warnings", "results", "example", "preset", "status"]) {
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
