"""The contract judgments playground in Debian's headless Chromium, against the real service.

A real uvicorn server (``decision.serve.testing.running_server``) runs the full app with a tiny
random-weight model; the page at /contracts/ runs a preset in both modes through POST /decide,
shows every answer and each mode's time, marks a service validation error at its field, and does
not scroll sideways at a phone width (375 px) or a desktop width. Screenshots go to test-output/.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from decision.serve import ServeSettings, create_app
from decision.serve.testing import running_server

CHROMIUM = "/usr/bin/chromium"
OUT = Path(__file__).resolve().parent.parent / "test-output"
RUN_TIMEOUT_MS = 300_000  # two decodes with a tiny model on a busy 2-core machine

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing (Debian "
                       "package 'chromium'); the playground is tested only in a browser"),
]
pytest.importorskip("playwright.sync_api", reason="playwright is not installed")


@pytest.fixture(scope="module")
def server(tiny_checkpoint_dir: Path) -> Iterator[str]:
    settings = ServeSettings(model_path=str(tiny_checkpoint_dir), request_timeout_s=300)
    with running_server(create_app(settings)) as url:
        yield url


def _open(browser: Any, base: str, width: int, height: int) -> tuple[Any, list[str]]:
    page = browser.new_page(viewport={"width": width, "height": height})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{base}/contracts/")
    page.wait_for_function("window.demo && window.demo.ready", timeout=30_000)
    return page, errors


def _run_and_wait(page: Any) -> None:
    page.evaluate("window.demo.results = null; window.demo.error = null")
    page.click("#run")
    page.wait_for_function(
        "!window.demo.busy && (window.demo.results !== null || window.demo.error !== null)",
        timeout=RUN_TIMEOUT_MS)


def _no_sideways_scroll(page: Any) -> None:
    scroll, inner = page.evaluate(
        "[document.scrollingElement.scrollWidth, window.innerWidth]")
    assert scroll <= inner, f"the page scrolls sideways: scrollWidth {scroll} > {inner}"


def test_a_preset_runs_in_both_modes_and_errors_show_at_their_field(server: str, browser: Any
                                                                     ) -> None:
    OUT.mkdir(exist_ok=True)
    page, errors = _open(browser, server, 1280, 900)
    assert page.locator("#example option").count() == 1 + 9  # "your own" and 9 examples
    assert "RESIDENTIAL LEASE" in page.input_value("#document")
    assert page.locator(".question").count() == 8 and page.input_value("#preset") == "lease"
    assert page.inner_text("#preset-note").startswith("7 rules between these questions")
    # Few steps keep the tiny model fast; the page sends the option through to /decide.
    page.click("details.options summary")
    page.fill("#max-steps", "2")

    _run_and_wait(page)
    assert page.evaluate("window.demo.error") is None, page.evaluate("window.demo.error")
    for mode in ("joint", "standalone"):
        values = page.locator(f".cell.{mode} .value").all_inner_texts()
        assert len(values) == 8 and all(v.strip() and v != "—" for v in values), values
        confidences = page.locator(f".cell.{mode} .conf").all_inner_texts()
        assert len(confidences) == 8 and all(c.endswith("%") for c in confidences)
        card = page.locator(f".mode-card.{mode}")
        assert card.locator(".time").inner_text().endswith(" ms")
        assert int(card.locator(".time").inner_text().split()[0]) > 0
        assert "denoising step" in card.locator(".stats").inner_text()
        # Option bars under the choice answers (4 of the lease preset's 8 questions).
        assert page.locator(f".cell.{mode} .bars").count() == 4
    assert page.locator("#warnings h3").count() == 2  # one rules block per mode
    assert page.locator(".expected").count() == 8  # the example's answers from the text
    _no_sideways_scroll(page)
    page.screenshot(path=str(OUT / "contracts-desktop.png"), full_page=True)

    # A bad schema: repeated options. The service's error lands next to the options field.
    assert not page.locator(".question").nth(2).locator(".q-options").is_visible()  # collapsed
    page.locator(".question").nth(2).locator(".q-summary").click()
    options = page.locator('[data-field="questions.2.answer.options"]')
    options.locator("input").fill("yes, yes")
    page.locator(".question").nth(2).locator(".q-summary").click()  # folded: the error opens it
    assert not options.is_visible()
    _run_and_wait(page)
    error = page.evaluate("window.demo.error")
    assert error["field"] == "questions.2.answer.choice.options"
    note = options.locator(".field-error")
    assert note.is_visible() and "distinct" in note.inner_text()
    assert page.locator(".field-error").count() == 1
    assert page.inner_text("#status") == "The service refused the request: see the marked field."
    page.screenshot(path=str(OUT / "contracts-error.png"))

    # A document too long for the model: the message sits under the document.
    options.locator("input").fill("yes, no, not stated")
    page.fill("#document", "The Tenant gave notice on March 3, 2025. " * 800)
    _run_and_wait(page)
    note = page.locator('[data-field="document"] .field-error')
    assert note.is_visible() and "4096" in note.inner_text(), note.inner_text()
    assert options.locator(".field-error").count() == 0  # the earlier error was cleared
    assert not errors, errors
    page.close()


def _decided(answers: dict[str, Any], mode: str) -> dict[str, Any]:
    """A POST /decide response with these answers (values as the lease preset types them)."""
    out = []
    for qid, value in answers.items():
        probs = ({"yes": 0.7, "no": 0.2, "not stated": 0.1} if isinstance(value, str) else None)
        out.append({"id": qid, "value": value, "text": str(value), "confidence": 0.8,
                    "option_probabilities": probs})
    return {"model": "stub", "mode": mode, "answers": out, "steps": 3 if mode == "joint" else 8,
            "tokens_per_forward": 2.5, "timings": {"total_ms": 123.0}}


def test_a_broken_rule_is_flagged_at_phone_width(server: str, browser: Any) -> None:
    """Fixed answers (the POST /decide route is answered by the test) with "notice late" and "the
    deposit must be returned" in standalone mode only: the page flags that pair there."""
    OUT.mkdir(exist_ok=True)
    page, errors = _open(browser, server, 375, 800)
    consistent = {"required": 10, "given": 9, "timely": "no", "deposit": "yes", "renews": "no",
                  "late": 0, "threshold": 3, "terminate": "no"}
    broken = {**consistent, "deposit": "no"}

    def answer(route: Any) -> None:
        request = json.loads(route.request.post_data)
        fixed = consistent if request["mode"] == "joint" else broken
        answers = {q["id"]: fixed.get(q["id"], True) for q in request["questions"]}
        body = _decided(answers, request["mode"])
        route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    page.route("**/decide", answer)
    _run_and_wait(page)
    assert page.locator(".warning").count() == 1
    warning = page.locator('.warning[data-mode="standalone"]')
    assert warning.get_attribute("data-rule") == "late-notice-outcome"
    assert "timely = no, deposit = no" in warning.inner_text()
    assert page.locator(".cell.standalone.broken").count() == 2  # timely and deposit
    assert page.locator(".cell.joint.broken").count() == 0
    assert "1 of 7 rules broken" in page.inner_text(".mode-card.standalone")
    assert "all 7 rules kept" in page.inner_text(".mode-card.joint")
    assert page.inner_text(".mode-card.joint .time") == "123 ms"
    _no_sideways_scroll(page)
    # The two answer columns sit side by side under the question at this width.
    joint = page.locator('.arow[data-question="timely"] .cell.joint').bounding_box()
    alone = page.locator('.arow[data-question="timely"] .cell.standalone').bounding_box()
    assert abs(joint["y"] - alone["y"]) < 2 and joint["x"] < alone["x"]
    assert alone["x"] + alone["width"] <= 375
    page.screenshot(path=str(OUT / "contracts-phone.png"), full_page=True)
    page.locator("#results").screenshot(path=str(OUT / "contracts-phone-results.png"))
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(OUT / "contracts-phone-top.png"))

    # Your own document and question set: paste, drop a question, add one; no rules then.
    page.select_option("#example", "")
    assert page.input_value("#document") == ""
    page.fill("#document", "The Tenant paid the rent on March 3.")
    page.select_option("#preset", "")
    page.locator(".question").nth(7).locator(".remove").click()
    page.click("#add-question")
    new = page.locator(".question").nth(7)
    assert new.locator(".q-text").is_visible()  # a new question opens for editing
    new.locator(".q-id").fill("paid")
    new.locator(".q-text").fill("Was the rent paid?")
    assert page.locator("#add-question").is_disabled()  # 8 questions at most
    _run_and_wait(page)
    sent = page.evaluate("window.demo.results.request")
    assert sent["document"] == "The Tenant paid the rent on March 3."
    assert sent["questions"][7] == {"id": "paid", "text": "Was the rent paid?",
                                    "answer": {"type": "boolean"}}
    assert page.locator('.arow[data-question="paid"] .cell .value').all_inner_texts() == [
        "yes", "yes"]
    assert "no rules declared" in page.inner_text("#warnings")
    assert page.locator(".expected").count() == 0  # not the example's text any more
    _no_sideways_scroll(page)
    assert not errors, errors
    page.close()


def test_rules_not_checked_are_never_reported_kept(server: str, browser: Any) -> None:
    """Answers outside the preset's options (its options edited) make /api/contracts/check skip
    every rule: the page says none was checked, not "all 0 rules kept" / "No rule broken"; a
    check the service refuses says the rules could not be checked."""
    page, errors = _open(browser, server, 1280, 900)
    outside = {"required": 10, "given": 9, "timely": "alpha", "deposit": "alpha",
               "renews": "alpha", "late": 0, "threshold": 3, "terminate": "alpha"}

    def answer(route: Any) -> None:
        request = json.loads(route.request.post_data)
        answers = {q["id"]: outside.get(q["id"], True) for q in request["questions"]}
        body = _decided(answers, request["mode"])
        route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    page.route("**/decide", answer)
    _run_and_wait(page)
    for mode in ("joint", "standalone"):
        line = page.inner_text(f".mode-card.{mode} .rules-line")
        assert line == "none of 7 rules checked", line
    warnings = page.inner_text("#warnings")
    assert "No rule broken" not in warnings and "Not checked: timely-by-days" in warnings

    page.route("**/api/contracts/check", lambda route: route.fulfill(
        status=500, content_type="application/json",
        body='{"error": {"type": "internal_error", "message": "boom", "field": null}}'))
    _run_and_wait(page)
    for mode in ("joint", "standalone"):
        assert page.inner_text(f".mode-card.{mode} .rules-line") == "rules not checked"
    warnings = page.inner_text("#warnings")
    assert "No rule broken" not in warnings
    assert warnings.count("The rules could not be checked: boom") == 2

    # No answer at all from /check: the answers are still shown, with why the rules are not.
    page.unroute("**/api/contracts/check")
    page.route("**/api/contracts/check", lambda route: route.abort("failed"))
    _run_and_wait(page)
    assert page.evaluate("window.demo.error") is None, page.evaluate("window.demo.error")
    assert page.locator(".cell.joint .value").count() == 8
    for mode in ("joint", "standalone"):
        assert page.inner_text(f".mode-card.{mode} .rules-line") == "rules not checked"
    assert page.inner_text("#warnings").count(
        "The rules could not be checked: cannot reach the service") == 2
    assert not errors, errors
    page.close()


def test_an_added_question_never_takes_an_id_in_use(server: str, browser: Any) -> None:
    """A new question's default id is the first free q1, q2, ...: after q1 q2 q3 lose q1, the
    next is q1, not a second q3 that the service refuses as a duplicate."""
    page, errors = _open(browser, server, 1280, 900)
    page.select_option("#preset", "")
    while page.locator(".question").count():
        page.locator(".question .remove").first.click()
    for _ in range(3):
        page.click("#add-question")
    page.locator(".question").nth(0).locator(".remove").click()
    page.click("#add-question")
    page.click("#add-question")
    ids = [page.locator(".q-id").nth(i).input_value() for i in range(4)]
    assert ids == ["q2", "q3", "q1", "q4"], ids

    # Removed from the keyboard, a question hands the focus to the one taking its place (the
    # last one to the one before it; none left: "Add a question"), not to the page's top.
    active = ("(() => { const a = document.activeElement; const q = a.closest('.question');"
              " return q ? `${a.className} ${q.querySelector('.q-id').value}` : a.id; })()")
    page.locator(".question").nth(1).locator(".remove").focus()
    page.keyboard.press("Enter")
    assert page.evaluate(active) == "remove q1"
    page.locator(".question").nth(2).locator(".remove").focus()
    page.keyboard.press("Enter")
    assert page.evaluate(active) == "remove q1"
    page.keyboard.press("Enter")
    page.keyboard.press("Enter")
    assert page.locator(".question").count() == 0
    assert page.evaluate(active) == "add-question"
    assert not errors, errors
    page.close()


def test_presets_or_examples_that_fail_to_load_are_reported(server: str, browser: Any) -> None:
    """The presets or examples request failing at page load (a service error, no answer at all)
    says so in the error banner with the reason, instead of leaving the dropdowns empty."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route("**/api/contracts/presets", lambda route: route.fulfill(
        status=500, content_type="application/json",
        body='{"error": {"type": "internal_error", "message": "boom", "field": null}}'))
    page.route("**/api/contracts/examples", lambda route: route.abort("failed"))
    page.goto(f"{server}/contracts/")
    page.wait_for_function("window.demo && window.demo.ready", timeout=30_000)
    assert page.is_visible("#error-general")
    banner = page.inner_text("#error-general")
    assert banner.startswith("Could not load the question sets (boom)"), banner
    assert "the example contracts (cannot reach the service" in banner, banner
    assert page.locator("#preset option").count() == 1  # only "Custom (no rules)"

    page.unroute("**/api/contracts/presets")
    page.unroute("**/api/contracts/examples")
    page.route("**/api/contracts/examples", lambda route: route.fulfill(status=503, body=""))
    page.reload()
    page.wait_for_function("window.demo && window.demo.ready", timeout=30_000)
    banner = page.inner_text("#error-general")
    assert banner.startswith("Could not load the example contracts (the service answered HTTP "
                             "503)"), banner
    assert "question sets" not in banner
    assert page.locator("#preset option").count() > 1  # the presets loaded this time

    # The presets fail and the examples load: the first example comes with its own questions
    # (no rules to check), not with an empty question list.
    page.unroute("**/api/contracts/examples")
    page.route("**/api/contracts/presets", lambda route: route.fulfill(status=503, body=""))
    page.reload()
    page.wait_for_function("window.demo && window.demo.ready", timeout=30_000)
    assert page.inner_text("#error-general").startswith("Could not load the question sets")
    assert "RESIDENTIAL LEASE" in page.input_value("#document")
    ids = page.locator(".q-id").evaluate_all("nodes => nodes.map((n) => n.value)")
    assert ids == ["required", "given", "timely", "deposit", "renews", "late", "threshold",
                   "terminate"], ids
    page.select_option("#example", "nda-1")
    assert page.locator(".q-id").first.input_value() == "return_deadline"
    assert not errors, errors
    page.close()


def test_a_health_request_that_fails_says_the_service_cannot_be_reached(
        server: str, browser: Any) -> None:
    """/health failing at page load (no answer at all, a 503) left the model line empty and said
    nothing; it is named in the error banner with the reason, as the presets and examples are,
    and the model line says whether the service answered at all."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route("**/health", lambda route: route.abort("failed"))
    page.goto(f"{server}/contracts/")
    page.wait_for_function("window.demo && window.demo.ready", timeout=30_000)
    assert page.inner_text("#model-line") == "The service cannot be reached: answers will fail."
    assert page.is_visible("#error-general")
    banner = page.inner_text("#error-general")
    assert banner.startswith("Could not load the service's health (cannot reach the service"), (
        banner)
    assert page.locator("#preset option").count() > 1  # the presets loaded all the same

    page.unroute("**/health")
    page.route("**/health", lambda route: route.fulfill(status=503, body=""))
    page.reload()
    page.wait_for_function("window.demo && window.demo.ready", timeout=30_000)
    assert page.inner_text("#model-line") == "The service is not healthy: answers may fail."
    assert page.inner_text("#error-general").startswith(
        "Could not load the service's health (the service answered HTTP 503)")

    page.unroute("**/health")  # a healthy service: the model's name, no banner
    page.reload()
    page.wait_for_function("window.demo && window.demo.ready", timeout=30_000)
    assert page.inner_text("#model-line").startswith("Model: ")
    assert not page.is_visible("#error-general")
    assert not errors, errors
    page.close()


def test_a_preset_or_example_picked_during_a_run_does_not_change_its_results(
        server: str, browser: Any) -> None:
    """The rules checked and the example's answers shown are those of the request as sent: the
    user picking another example (and with it another preset) while the modes run must not check
    the lease answers against the NDA's rules ("none of 6 rules checked") or drop the marks."""
    page, errors = _open(browser, server, 1280, 900)
    consistent = {"required": 10, "given": 9, "timely": "no", "deposit": "yes", "renews": "no",
                  "late": 0, "threshold": 3, "terminate": "no"}
    checked: list[str] = []
    page.on("request", lambda r: checked.append(json.loads(r.post_data)["preset"])
            if r.url.endswith("/api/contracts/check") else None)

    def answer(route: Any) -> None:
        request = json.loads(route.request.post_data)
        if request["mode"] == "joint":  # the user picks another example while this one runs
            page.select_option("#example", "nda-1")
        answers = {q["id"]: consistent.get(q["id"], True) for q in request["questions"]}
        route.fulfill(status=200, content_type="application/json",
                      body=json.dumps(_decided(answers, request["mode"])))

    page.route("**/decide", answer)
    _run_and_wait(page)
    assert page.input_value("#preset") == "nda"  # the pick itself took effect
    assert page.evaluate("window.demo.results.preset") == "lease"
    assert checked == ["lease", "lease"]
    for mode in ("joint", "standalone"):
        line = page.inner_text(f".mode-card.{mode} .rules-line")
        assert line == "all 7 rules kept", line
    assert page.locator(".expected").count() == 8  # lease 1's answers from its text
    assert page.locator('.arow[data-question="timely"] .qid').inner_text() == "timely"
    assert not errors, errors
    page.close()


def test_a_number_box_the_browser_cannot_read_is_marked_not_dropped(server: str, browser: Any
                                                                     ) -> None:
    """A number box holding what is not a number ("0.5e") has the value "" in the DOM: the page
    marks it instead of sending the request without it (the default threshold, no minimum), and
    does not say the service refused what was never sent."""
    page, errors = _open(browser, server, 1280, 900)
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if r.url.endswith("/decide") else None)
    page.click("details.options summary")
    page.fill("#threshold", "")
    page.locator("#threshold").press_sequentially("0.5e")
    page.click("details.options summary")  # folded away: the error opens it again
    assert not page.is_visible("#threshold")
    _run_and_wait(page)
    assert page.evaluate("window.demo.error.field") == "options.threshold"
    note = page.locator('[data-field="options.threshold"] .field-error')
    assert note.is_visible() and "not a number" in note.inner_text()
    assert page.inner_text("#status") == "The request was not sent: see the marked field."

    page.fill("#threshold", "0.9")
    question = page.locator(".question").nth(0)  # "required", an integer 0-90
    question.locator(".q-summary").click()
    question.locator(".q-min").fill("")
    question.locator(".q-min").press_sequentially("5e")
    _run_and_wait(page)
    assert page.evaluate("window.demo.error.field") == "questions.0.answer.minimum"
    note = page.locator('[data-field="questions.0.answer.minimum"] .field-error')
    assert note.is_visible() and "not a number" in note.inner_text()
    assert page.locator(".field-error").count() == 1  # the threshold's note was cleared
    assert sent == []  # nothing reached POST /decide
    assert not errors, errors
    page.close()


def test_the_page_loads_without_console_errors(server: str, browser: Any) -> None:
    """Opening the page logs no console error (the browser's request for /favicon.ico was a 404
    on every load). A browser of its own: Chromium remembers a failed favicon while it runs, so
    a page opened before this one would hide it."""
    fresh = browser.browser_type.launch(
        executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu",
                                        "--disable-background-networking", "--no-first-run"])
    page = fresh.new_page(viewport={"width": 1280, "height": 900})
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: console.append(str(e)))
    page.goto(f"{server}/contracts/", wait_until="networkidle")
    page.wait_for_function("window.demo && window.demo.ready", timeout=30_000)
    fresh.close()
    assert console == []
