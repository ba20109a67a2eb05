// Contract judgments playground. Sends the same request to the service's POST /decide twice
// (mode "joint", then "standalone", one after the other so each mode's time is its own), asks
// /api/contracts/check which of the preset's rules each mode's answers break, and shows the two
// columns side by side. Service errors ({"error": {type, message, field}}) are shown next to the
// field their dotted path names. No framework, no build step.
"use strict";

const MODES = ["joint", "standalone"];
const MODE_TITLES = { joint: "Joint", standalone: "Standalone" };
const ANSWER_TYPES = ["choice", "boolean", "integer", "number", "pattern", "json"];

// What the tests (and a curious reader in the console) can look at.
const demo = { busy: false, ready: false, presets: [], examples: [], results: null, error: null };
window.demo = demo;

const $ = (id) => document.getElementById(id);

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

async function getJson(url, options) {
  const response = await fetch(url, options);
  let data = null;
  try {
    data = await response.json();
  } catch (_) {
    data = null;
  }
  return { ok: response.ok, status: response.status, data };
}

// The service's error of a failed reply ({type, message, field}); the HTTP status stands in for
// a message the body did not carry (no JSON, or no error in it).
function replyError(reply) {
  const error = (reply.data && reply.data.error) || {};
  return { ...error, message: error.message || `the service answered HTTP ${reply.status}` };
}

// ------------------------------------------------------------------ question editor

function questionNodes() {
  return Array.from($("questions").querySelectorAll(".question"));
}

function renumber() {
  questionNodes().forEach((node, index) => {
    node.dataset.index = String(index);
    node.dataset.field = `questions.${index}`;
    node.querySelector(".q-number").textContent = `Question ${index + 1}`;
    // The dotted paths the service uses in its errors, so an error finds its field.
    const paths = {
      ".q-id-field": "id", ".q-text-field": "text", ".q-type-field": "answer",
      ".q-options-field": "answer.options", ".q-min-field": "answer.minimum",
      ".q-max-field": "answer.maximum", ".q-regex-field": "answer.regex",
      ".q-schema-field": "answer.schema", ".q-tokens-field": "answer.max_tokens",
    };
    for (const [selector, path] of Object.entries(paths)) {
      node.querySelector(selector).dataset.field = `questions.${index}.${path}`;
    }
  });
  $("add-question").disabled = questionNodes().length >= 8;
}

// The one-line summary of a collapsed question: id, answer type and text.
function summarize(node) {
  const type = node.querySelector(".q-type").selectedOptions[0].textContent;
  const id = node.querySelector(".q-id").value.trim() || "(no id)";
  const text = node.querySelector(".q-text").value.trim() || "(no text)";
  node.querySelector(".q-summary").textContent = `${id} · ${type} · ${text}`;
}

function showTypeFields(node) {
  const type = node.querySelector(".q-type").value;
  node.querySelectorAll("[data-for]").forEach((part) => {
    part.hidden = !part.dataset.for.split(" ").includes(type);
  });
}

// The id of a new question: the first of q1, q2, ... that no question has (the count plus one
// is taken after a removal: q1 q2 q3, remove q1, add -> a second q3, refused as a duplicate).
function freeId() {
  const taken = new Set(questionNodes().map((node) => node.querySelector(".q-id").value.trim()));
  let n = 1;
  while (taken.has(`q${n}`)) n += 1;
  return `q${n}`;
}

function addQuestion(question) {
  const fragment = $("question-template").content.cloneNode(true);
  const node = fragment.querySelector(".question");
  const answer = (question && question.answer) || { type: "boolean" };
  node.querySelector(".q-id").value = question ? question.id : freeId();
  node.querySelector(".q-text").value = question ? question.text : "";
  node.querySelector(".q-type").value = ANSWER_TYPES.includes(answer.type) ? answer.type : "boolean";
  node.querySelector(".q-options").value = (answer.options || ["yes", "no", "not stated"]).join(", ");
  node.querySelector(".q-min").value = answer.minimum ?? "";
  node.querySelector(".q-max").value = answer.maximum ?? "";
  node.querySelector(".q-regex").value = answer.regex ?? "";
  node.querySelector(".q-schema").value = answer.schema ? JSON.stringify(answer.schema) : "";
  node.querySelector(".q-tokens").value = answer.max_tokens ?? "";
  node.querySelector(".q-type").addEventListener("change", () => {
    showTypeFields(node);
    summarize(node);
  });
  node.addEventListener("input", () => summarize(node));
  node.querySelector(".remove").addEventListener("click", () => {
    // Keyboard users keep their place: focus moves to the question that takes this one's place
    // (or the one before it, or "Add a question"), not to the top of the page.
    const nodes = questionNodes();
    const at = nodes.indexOf(node);
    const next = nodes[at + 1] || nodes[at - 1];
    node.remove();
    renumber();
    (next ? next.querySelector(".remove") : $("add-question")).focus();
  });
  node.querySelector(".q-details").open = !question;  // a new, empty question opens to edit
  showTypeFields(node);
  summarize(node);
  $("questions").appendChild(node);
  renumber();
}

function setQuestions(questions) {
  $("questions").replaceChildren();
  questions.forEach((q) => addQuestion(q));
}

// A number box's value: undefined when empty. What the browser cannot read as a number ("0.5e",
// "-") also reads as an empty value; it is reported at its field, never sent as "not set".
function readNumber(input, field) {
  if (input.validity && input.validity.badInput) {
    throw { field, message: "this is not a number" };
  }
  const raw = input.value.trim();
  return raw === "" ? undefined : Number(raw);
}

// The answer schema of one editor row; a JSON schema that does not parse, or a number box that
// does not hold a number, is reported at once.
function readAnswer(node, index) {
  const type = node.querySelector(".q-type").value;
  const answer = { type };
  const number = (selector, key) => readNumber(node.querySelector(selector),
                                               `questions.${index}.answer.${key}`);
  if (type === "choice") {
    answer.options = node.querySelector(".q-options").value.split(",").map((o) => o.trim())
      .filter((o) => o !== "");
  } else if (type === "integer") {
    const min = number(".q-min", "minimum");
    const max = number(".q-max", "maximum");
    if (min !== undefined) answer.minimum = min;
    if (max !== undefined) answer.maximum = max;
  } else if (type === "pattern") {
    answer.regex = node.querySelector(".q-regex").value;
  } else if (type === "json") {
    const raw = node.querySelector(".q-schema").value.trim() || "{}";
    try {
      answer.schema = JSON.parse(raw);
    } catch (exc) {
      throw { field: `questions.${index}.answer.schema`,
              message: `the JSON schema is not valid JSON: ${exc.message}` };
    }
  }
  if (["number", "pattern", "json"].includes(type)) {
    const tokens = number(".q-tokens", "max_tokens");
    if (tokens !== undefined) answer.max_tokens = tokens;
  }
  return answer;
}

function readRequest() {
  const questions = questionNodes().map((node, index) => ({
    id: node.querySelector(".q-id").value.trim(),
    text: node.querySelector(".q-text").value.trim(),
    answer: readAnswer(node, index),
  }));
  const options = { return_probabilities: true };
  const threshold = readNumber($("threshold"), "options.threshold");
  const maxSteps = readNumber($("max-steps"), "options.max_steps");
  if (threshold !== undefined) options.threshold = threshold;
  if (maxSteps !== undefined) options.max_steps = maxSteps;
  return { document: $("document").value, questions, options };
}

// ------------------------------------------------------------------ errors next to fields

function clearErrors() {
  document.querySelectorAll(".field-error").forEach((node) => node.remove());
  document.querySelectorAll(".has-error").forEach((node) => node.classList.remove("has-error"));
  $("error-general").hidden = true;
  demo.error = null;
}

// Pydantic names the variant of a discriminated union in the path
// ("questions.2.answer.choice.options"): drop it, the editor has one field per schema key.
function normalizeField(field) {
  const parts = String(field).split(".");
  const answerAt = parts.indexOf("answer");
  if (answerAt >= 0 && ANSWER_TYPES.includes(parts[answerAt + 1])) parts.splice(answerAt + 1, 1);
  return parts;
}

// The closest element for a dotted path: the field itself, else its nearest named ancestor.
function fieldElement(field) {
  const parts = normalizeField(field);
  if (parts[0] === "options") document.querySelector("details.options").open = true;
  const question = parts[0] === "questions" && parts.length > 2 ? questionNodes()[Number(parts[1])]
    : null;
  if (question) question.querySelector(".q-details").open = true;  // its fields must be visible
  while (parts.length) {
    const path = parts.join(".");
    const found = Array.from(document.querySelectorAll("[data-field]")).find(
      (node) => node.dataset.field === path && !node.hidden && node.offsetParent !== null);
    if (found) return found;
    parts.pop();
  }
  return null;
}

// The service prefixes pydantic's messages with the field path and "Value error, ": next to
// the field both are noise.
function readableMessage(error) {
  let message = String(error.message || "the request failed");
  if (error.field && message.startsWith(`${error.field}: `)) {
    message = message.slice(error.field.length + 2);
  }
  message = message.replace(/^Value error, /, "");
  return message.charAt(0).toUpperCase() + message.slice(1);
}

function showError(error) {
  demo.error = error;
  const message = readableMessage(error);
  const target = error.field ? fieldElement(error.field) : null;
  if (target) {
    target.classList.add("has-error");
    const note = el("p", "field-error", message);
    note.setAttribute("role", "alert");
    note.dataset.errorFor = error.field;
    target.appendChild(note);
    const input = target.querySelector("input, textarea, select");
    target.scrollIntoView({ block: "center", behavior: "instant" });
    if (input) input.focus({ preventScroll: true });
    // The service's errors have a type; the page's own checks (readRequest) have none and
    // never reached the service.
    setStatus(error.type ? "The service refused the request: see the marked field."
      : "The request was not sent: see the marked field.");
  } else {
    const banner = $("error-general");
    banner.textContent = error.field ? `${error.field}: ${message}` : message;
    banner.hidden = false;
    setStatus("");
  }
}

function setStatus(text) {
  $("status").textContent = text;
}

// ------------------------------------------------------------------ running

function currentPreset() {
  return demo.presets.find((p) => p.id === $("preset").value) || null;
}

function currentExample() {
  return demo.examples.find((e) => e.id === $("example").value) || null;
}

// A value with its object keys sorted, so two answer schemas compare by content.
function canonical(value) {
  if (Array.isArray(value)) return value.map(canonical);
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.keys(value).sort().map((k) => [k, canonical(value[k])]));
  }
  return value;
}

function sameSchema(a, b) {
  return JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));
}

// The example's expected answers apply only while its document and question are unchanged: id,
// text and the whole answer schema (options renamed or a range edited: the answer may no longer
// be comparable with what the text says). No prototype: a question id such as "constructor" or
// "toString" must not find an inherited member and show it as what the text says.
function expectedFor(request) {
  const example = currentExample();
  const expected = Object.create(null);
  if (!example || request.document !== example.document) return expected;
  for (const q of request.questions) {
    const original = example.questions.find((o) => o.id === q.id);
    if (original && original.text === q.text && sameSchema(original.answer, q.answer) &&
        Object.prototype.hasOwnProperty.call(example.expected, q.id)) {
      expected[q.id] = example.expected[q.id];
    }
  }
  return expected;
}

async function run(event) {
  if (event) event.preventDefault();
  if (demo.busy) return;
  clearErrors();
  let request;
  try {
    request = readRequest();
  } catch (error) {
    showError(error);
    return;
  }
  // The preset whose rules are checked and the example whose answers are shown are read now,
  // with the request: the user may pick another while the two modes run.
  const preset = currentPreset();
  const expected = expectedFor(request);
  demo.busy = true;
  $("run").disabled = true;
  $("results").classList.add("stale");  // until this run's answers replace them
  const results = {};
  try {
    for (const mode of MODES) {
      setStatus(mode === "joint" ? "Answering jointly…" : "Answering one question at a time…");
      const started = performance.now();
      const reply = await getJson("/decide", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ ...request, mode }),
      });
      if (!reply.ok) {
        showError(replyError(reply));
        return;
      }
      results[mode] = { ...reply.data, client_ms: performance.now() - started };
    }
    for (const mode of MODES) {
      results[mode].checks = [];
      if (!preset) continue;
      const answers = {};
      for (const a of results[mode].answers) answers[a.id] = a.value;
      let reply;
      try {
        reply = await getJson("/api/contracts/check", {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ preset: preset.id, answers }),
        });
      } catch (exc) {  // the answers are in: show them, and say why the rules are not
        reply = { ok: false, data: { error: {
          message: `cannot reach the service (${exc.message || exc})` } } };
      }
      if (reply.ok) {
        results[mode].checks = reply.data.checks;
      } else {  // say so: an empty list would read as "no rule broken"
        results[mode].checkError = replyError(reply).message;
      }
    }
    demo.results = { request, preset: preset ? preset.id : null, modes: results, expected };
    render(demo.results);
    setStatus("Done.");
  } catch (exc) {
    showError({ message: `cannot reach the service: ${exc.message || exc}` });
  } finally {
    demo.busy = false;
    $("run").disabled = false;
  }
}

// ------------------------------------------------------------------ results

function showValue(value) {
  if (value === true) return "yes";
  if (value === false) return "no";
  if (value !== null && typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function sameValue(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

function percent(p) {
  return `${Math.round(p * 100)}%`;
}

function brokenQuestions(checks) {
  const ids = new Set();
  for (const c of checks) if (c.status === "broken") c.questions.forEach((q) => ids.add(q));
  return ids;
}

function modeCard(mode, result, expected) {
  const card = el("div", `mode-card ${mode}`);
  card.dataset.mode = mode;
  card.appendChild(el("h3", null, MODE_TITLES[mode]));
  const total = result.timings.total_ms ?? result.client_ms;
  card.appendChild(el("div", "time", `${Math.round(total)} ms`));
  const steps = `${result.steps} denoising step${result.steps === 1 ? "" : "s"}`;
  card.appendChild(el("div", "stats",
    `${steps} · ${result.tokens_per_forward.toFixed(1)} tokens/forward`));
  const phases = ["prefill", "denoise", "sampler", "constraint"]
    .filter((k) => k in result.timings)
    .map((k) => `${k} ${Math.round(result.timings[k])}`).join(" · ");
  if (phases) card.appendChild(el("div", "phases", `${phases} ms`));
  const broken = result.checks.filter((c) => c.status === "broken").length;
  const checked = result.checks.filter((c) => c.status !== "skipped").length;
  const skipped = result.checks.length - checked;
  if (result.checkError) {
    card.appendChild(el("div", "rules-line unchecked", "rules not checked"));
  } else if (result.checks.length && !checked) {
    card.appendChild(el("div", "rules-line unchecked", `none of ${skipped} rules checked`));
  } else if (result.checks.length) {
    const line = el("div", `rules-line ${broken ? "bad" : "good"}`,
      broken ? `⚠ ${broken} of ${checked} rules broken` : `all ${checked} rules kept`);
    if (skipped) line.textContent += `, ${skipped} not checked`;
    card.appendChild(line);
  }
  const known = result.answers.filter((a) => expected[a.id] !== undefined && expected[a.id] !== null);
  if (known.length) {
    const right = known.filter((a) => sameValue(a.value, expected[a.id])).length;
    card.appendChild(el("div", "score", `${right}/${known.length} match the text`));
  }
  return card;
}

function answerCell(mode, answer, broken, expected) {
  const cell = el("div", `cell ${mode}`);
  cell.setAttribute("role", "cell");
  cell.dataset.mode = mode;
  if (!answer) {
    cell.appendChild(el("span", "value missing", "—"));
    return cell;
  }
  cell.dataset.question = answer.id;
  if (broken.has(answer.id)) {
    cell.classList.add("broken");
    cell.title = "This answer takes part in a broken rule";
  }
  cell.appendChild(el("span", "value", showValue(answer.value)));
  cell.appendChild(el("span", "conf", percent(answer.confidence)));
  if (expected !== undefined && expected !== null) {
    const right = sameValue(answer.value, expected);
    cell.appendChild(el("span", `mark ${right ? "right" : "wrong"}`, right ? "✓" : "✗"));
  }
  if (answer.option_probabilities) {
    const bars = el("ul", "bars");
    const chosen = showValue(answer.value);
    for (const [option, p] of Object.entries(answer.option_probabilities)) {
      const item = el("li", option === chosen ? "chosen" : "");
      item.title = `${option}: ${(p * 100).toFixed(1)}%`;
      item.appendChild(el("span", "opt", option));
      const track = el("span", "track");
      const fill = el("span", "fill");
      fill.style.display = "block";
      fill.style.width = `${Math.max(0, Math.min(1, p)) * 100}%`;
      track.appendChild(fill);
      item.appendChild(track);
      item.appendChild(el("span", "pct", percent(p)));
      bars.appendChild(item);
    }
    cell.appendChild(bars);
  }
  return cell;
}

function render(results) {
  const { request, modes, expected } = results;
  const summary = $("summary");
  summary.replaceChildren(...MODES.map((m) => modeCard(m, modes[m], expected)));

  const table = $("answers");
  const head = el("div", "arow head");
  head.setAttribute("role", "row");
  head.appendChild(el("div", "qcell", "Question"));
  for (const mode of MODES) head.appendChild(el("div", mode, MODE_TITLES[mode]));
  const rows = [head];
  const byId = Object.fromEntries(MODES.map((m) => [m, Object.fromEntries(
    modes[m].answers.map((a) => [a.id, a]))]));
  const broken = Object.fromEntries(MODES.map((m) => [m, brokenQuestions(modes[m].checks)]));
  for (const q of request.questions) {
    const row = el("div", "arow");
    row.setAttribute("role", "row");
    row.dataset.question = q.id;
    const qcell = el("div", "qcell");
    qcell.setAttribute("role", "rowheader");
    qcell.appendChild(el("div", "qid", q.id));
    qcell.appendChild(el("div", "qtext", q.text));
    if (q.id in expected) {
      const value = expected[q.id];
      qcell.appendChild(el("div", "expected", value === null
        ? "the text does not state it" : `from the text: ${showValue(value)}`));
    }
    row.appendChild(qcell);
    for (const mode of MODES) {
      row.appendChild(answerCell(mode, byId[mode][q.id], broken[mode], expected[q.id]));
    }
    rows.push(row);
  }
  table.replaceChildren(...rows);

  const warnings = $("warnings");
  const parts = [];
  if (results.preset) {
    for (const mode of MODES) {
      parts.push(el("h3", null, `Rules, ${MODE_TITLES[mode].toLowerCase()}`));
      const checks = modes[mode].checks;
      if (modes[mode].checkError) {
        parts.push(el("p", "skipped unchecked",
          `The rules could not be checked: ${modes[mode].checkError}`));
        continue;
      }
      const bad = checks.filter((c) => c.status === "broken");
      for (const c of bad) {
        const item = el("div", "warning", `⚠ ${c.description}`);
        item.dataset.mode = mode;
        item.dataset.rule = c.rule;
        item.appendChild(el("span", "detail", c.detail));
        parts.push(item);
      }
      if (!bad.length && checks.some((c) => c.status !== "skipped")) {
        parts.push(el("p", "none", "No rule broken."));
      }
      const skipped = checks.filter((c) => c.status === "skipped");
      if (skipped.length) {
        parts.push(el("p", "skipped", `Not checked: ${skipped.map((c) => `${c.rule} (${c.detail})`)
          .join("; ")}`));
      }
    }
  } else {
    parts.push(el("p", "skipped", "Custom question set: no rules declared."));
  }
  warnings.replaceChildren(...parts);
  $("results").hidden = false;
  $("results").classList.remove("stale");
}

// ------------------------------------------------------------------ set-up

function selectPreset(id) {
  $("preset").value = id;
  const preset = currentPreset();
  if (preset) {
    setQuestions(preset.questions);
    $("preset-note").textContent =
      `${preset.rules.length} rules between these questions are checked in each mode.`;
  } else {
    $("preset-note").textContent = "No rules are checked for a custom question set.";
  }
}

function selectExample(id) {
  $("example").value = id;
  const example = currentExample();
  if (!example) {  // "Your own document": an empty box to paste into; the questions stay
    $("document").value = "";
    $("document").focus();
    return;
  }
  $("document").value = example.document;
  selectPreset(example.preset);
  // The presets did not load (the banner says so): the example carries its questions itself.
  if (!currentPreset()) setQuestions(example.questions);
}

// One set-up request: its JSON, or why it failed (the service's message, its HTTP status, or no
// answer at all), so a failed load is said instead of leaving the dropdowns empty.
async function load(url) {
  try {
    const reply = await getJson(url);
    if (reply.ok) return { data: reply.data };
    return { failure: replyError(reply).message, answered: true };
  } catch (exc) {
    return { failure: `cannot reach the service (${exc.message || exc})`, answered: false };
  }
}

async function init() {
  $("request").addEventListener("submit", run);
  $("add-question").addEventListener("click", () => addQuestion(null));
  $("example").addEventListener("change", () => selectExample($("example").value));
  $("preset").addEventListener("change", () => selectPreset($("preset").value));

  const [presets, examples, health] = await Promise.all([
    load("/api/contracts/presets"), load("/api/contracts/examples"), load("/health"),
  ]);
  demo.presets = presets.data ? presets.data.presets : [];
  demo.examples = examples.data ? examples.data.examples : [];
  for (const p of demo.presets) {
    const option = el("option", null, p.title);
    option.value = p.id;
    $("preset").appendChild(option);
  }
  const custom = el("option", null, "Custom (no rules)");
  custom.value = "";
  $("preset").appendChild(custom);
  for (const e of demo.examples) {
    const option = el("option", null, e.title);
    option.value = e.id;
    $("example").appendChild(option);
  }
  if (health.data) {
    $("model-line").textContent = health.data.model_loaded
      ? `Model: ${health.data.model}` : "The model is not loaded yet: answers will fail.";
  } else {
    // No answer, a network error or a 5xx: the model line stayed empty without a word.
    $("model-line").textContent = health.answered
      ? "The service is not healthy: answers may fail."
      : "The service cannot be reached: answers will fail.";
  }
  const failed = [];
  if (presets.failure) failed.push(`the question sets (${presets.failure})`);
  if (examples.failure) failed.push(`the example contracts (${examples.failure})`);
  if (health.failure) failed.push(`the service's health (${health.failure})`);
  if (failed.length) {
    showError({ message: `could not load ${failed.join(" or ")}; reload the page to try again.` });
  }
  if (demo.examples.length) {
    selectExample(demo.examples[0].id);
  } else if (demo.presets.length) {
    selectPreset(demo.presets[0].id);
  }
  demo.ready = true;
}

document.addEventListener("DOMContentLoaded", () => {
  init().catch((exc) => showError({ message: `cannot load the demo: ${exc.message || exc}` }));
});
