"""The ``decision`` command: dispatcher, ``serve`` failing cleanly, ``decide`` printing JSON."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from decision.cli import COMMAND_MODULES, build_parser, main


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoint_dir: Path) -> Path:
    return tiny_checkpoint_dir


def test_every_listed_module_registers_its_subcommand() -> None:
    parser = build_parser()
    choices = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert {"serve", "decide", "score"} <= set(choices)
    assert len(choices) >= len(COMMAND_MODULES)
    args = parser.parse_args(["serve", "--port", "9", "--no-batching"])
    assert args.port == 9 and args.no_batching and callable(args.func)


def test_no_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
    assert "COMMAND" in capsys.readouterr().err


def test_serve_without_a_model_prints_why_and_exits_nonzero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # fails while loading, before any port is bound
    assert main(["serve", "--model", str(tmp_path / "absent"), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "cannot load the model" in err and "absent" in err
    assert "Traceback" not in err


def test_serve_rejects_bad_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--max-batch-size", "0"]) == 2
    assert "--max-batch-size 0: must be at least 1" in capsys.readouterr().err
    # saying what the value must be: "max_body_bytes=100" alone left the 1024 minimum a guess;
    # and naming the flags typed, not the settings' fields (request_timeout_s for --timeout)
    assert main(["serve", "--max-body-bytes", "100", "--timeout", "0"]) == 2
    assert capsys.readouterr().err == (
        "decision serve: --timeout 0.0: must be a number > 0; "
        "--max-body-bytes 100: must be at least 1024\n")
    assert main(["serve", "--model", " "]) == 2
    assert "--model ' ': must be a checkpoint directory" in capsys.readouterr().err


def _refuse_to_load(monkeypatch: pytest.MonkeyPatch) -> None:
    from decision.serve.engine import ModelEngine

    def load(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(ModelEngine, "load", load)


def test_serve_refuses_a_port_in_use_before_it_loads_the_model(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A port in use was found only after the model had loaded: uvicorn's log lines (startup,
    the bind error, shutdown) and status 3, instead of one line and status 2."""
    _refuse_to_load(monkeypatch)
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert main(["serve", "--no-apps", "--port", str(port)]) == 2
    assert capsys.readouterr().err == (
        f"decision serve: cannot listen on 127.0.0.1:{port}: address already in use\n")


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--host", "", "--host '': must be an address"),  # bound every interface, silently
    ("--host", "  ", "--host '  ': must be an address"),
    # read as the working directory: "missing config.json"
    ("--model", "", "--model '': must be a checkpoint directory"),
    ("--host", "192.0.2.1", "cannot listen on 192.0.2.1:0: cannot assign requested address"),
])
def test_serve_refuses_an_empty_or_foreign_address_and_an_empty_model_before_loading(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    option: str, value: str, says: str,
) -> None:
    _refuse_to_load(monkeypatch)
    assert main(["serve", "--no-apps", "--port", "0", option, value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("decision serve: ") and says in err and err.count("\n") == 1


def test_decide_reads_the_document_or_the_questions_from_standard_input(
    tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--document -`` (a pipe: ``pdftotext x.pdf - | decision decide --document - ...``) was
    "cannot read -: No such file or directory"."""
    import io
    import sys

    document = "\ufeffThe tenant gave 20 days of notice; the lease requires 30 days."
    questions = [{"id": "timely", "text": "Was notice timely?", "answer": {"type": "boolean"}}]
    answers = []
    for piped in ("document", "questions"):
        files = {"document": tmp_path / "doc.txt", "questions": tmp_path / "q.json"}
        files["document"].write_text(document)
        files["questions"].write_text(json.dumps(questions))
        text = document if piped == "document" else json.dumps(questions)
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
        args = {name: "-" if name == piped else str(path) for name, path in files.items()}
        assert main(["decide", "--document", args["document"], "--questions",
                     args["questions"], "--model", str(checkpoint)]) == 0
        answers.append(json.loads(capsys.readouterr().out)["answers"])
    assert answers[0] == answers[1]  # the same request either way (the BOM no part of it)
    assert main(["decide", "--document", "-", "--questions", "-",
                 "--model", str(checkpoint)]) == 2
    assert "cannot both be '-'" in capsys.readouterr().err


def test_decide_reads_a_document_file_as_written(tmp_path: Path) -> None:
    """Text mode made the file's CR LF and CR into LF: the document decided was not the one
    written (nor the one a client sends over HTTP). A byte-order mark is still no text."""
    from decision.serve.decide_command import read_body

    document = tmp_path / "doc.txt"
    document.write_bytes("\ufeffClause 1.\r\nClause 2.\rEnd.".encode())
    questions = tmp_path / "q.json"
    questions.write_text(json.dumps([{"id": "a", "text": "Yes?", "answer": {"type": "boolean"}}]))
    args = build_parser().parse_args(["decide", "--document", str(document),
                                      "--questions", str(questions)])
    assert read_body(args).document == "Clause 1.\r\nClause 2.\rEnd."


def test_decide_prints_the_json_answer(
    tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = tmp_path / "lease.txt"
    document.write_text("The tenant gave 20 days of notice; the lease requires 30 days.")
    questions = tmp_path / "q.json"
    questions.write_text(json.dumps([
        {"id": "timely", "text": "Was notice timely?", "answer": {"type": "boolean"}},
        {"id": "days", "text": "Days required?",
         "answer": {"type": "integer", "minimum": 0, "maximum": 90}},
    ]))
    for mode in ("joint", "standalone"):
        status = main(["decide", "--document", str(document), "--questions", str(questions),
                       "--mode", mode, "--model", str(checkpoint), "--probabilities"])
        assert status == 0
        data = json.loads(capsys.readouterr().out)
        assert data["mode"] == mode and data["model"] == "tiny-model"
        assert [a["id"] for a in data["answers"]] == ["timely", "days"]
        assert isinstance(data["answers"][0]["value"], bool)
        assert set(data["answers"][0]["option_probabilities"]) == {"yes", "no"}
        assert 0 <= data["answers"][1]["value"] <= 90
    boolean = tmp_path / "boolean.json"
    boolean.write_text(json.dumps(json.loads(questions.read_text())[:1]))
    status = main(["decide", "--document", str(document), "--questions", str(boolean),
                   "--model", str(checkpoint), "--probabilities", "--score-options"])
    assert status == 0
    answer = json.loads(capsys.readouterr().out)["answers"][0]
    probs = answer["option_probabilities"]
    assert answer["text"] == max(probs, key=probs.get)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[1, 2", "is not JSON"),
        ('"just text"', "expected a list or an object"),
        ('[{"id": "a", "text": "Q?", "answer": {"type": "choice", "options": []}}]',
         "questions.0.answer"),
        ('{"questions": [{"id": "a", "text": "Q?", "answer": {"type": "boolean"}}], '
         '"options": {"threshold": 2}}', "threshold"),
        ('[{"id": "a", "text": "Q?", "answer": {"type": "boolean"}}, '
         '{"id": "a", "text": "R?", "answer": {"type": "boolean"}}]', "duplicate question id"),
        # options that are not an object: a one-line message, not a TypeError traceback
        ('{"questions": [{"id": "a", "text": "Q?", "answer": {"type": "boolean"}}], '
         '"options": [1, 2]}', "options must be an object"),
        ('{"questions": [{"id": "a", "text": "Q?", "answer": {"type": "boolean"}}], '
         '"options": "fast"}', "options must be an object"),
        # a key nobody reads (a POST /decide body's document) is refused, not ignored
        ('{"document": "Another.", "questions": [{"id": "a", "text": "Q?", '
         '"answer": {"type": "boolean"}}]}', "unknown key(s) 'document'"),
        ('{"questions": [{"id": "a", "text": "Q?", "answer": {"type": "boolean"}}], '
         '"mode": "both"}', "mode"),
        # a bound of "10" was read as 10: refused naming the field, as POST /decide does
        ('[{"id": "a", "text": "Q?", "answer": {"type": "integer", "maximum": "10"}}]',
         "questions.0.answer.integer.maximum: Input should be a valid integer"),
    ],
)
def test_decide_bad_input_exits_2_with_a_message(
    tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture[str], content: str,
    message: str,
) -> None:
    document = tmp_path / "doc.txt"
    document.write_text("Some document.")
    questions = tmp_path / "q.json"
    questions.write_text(content)
    status = main(["decide", "--document", str(document), "--questions", str(questions),
                   "--model", str(checkpoint)])
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith("decision decide: error") and message in err


def _one_question_files(folder: Path) -> tuple[Path, Path]:
    """A document and a questions file of one boolean question, for ``decision decide``."""
    document = folder / "doc.txt"
    document.write_text("The rent was late.")
    questions = folder / "q.json"
    questions.write_text('[{"id": "q", "text": "Late?", "answer": {"type": "boolean"}}]')
    return document, questions


def test_a_field_the_message_names_already_is_not_repeated(
    tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``error (options.threshold): options.threshold: Input should be ...``: once is enough."""
    document, questions = _one_question_files(tmp_path)
    assert main(["decide", "--document", str(document), "--questions", str(questions),
                 "--model", str(checkpoint), "--threshold", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("decision decide: error: options.threshold: ") and err.count(
        "options.threshold") == 1, err
    assert main(["decide", "--document", str(tmp_path / "absent.txt"), "--questions",
                 str(questions), "--model", str(checkpoint)]) == 2
    assert capsys.readouterr().err.startswith("decision decide: error (document): cannot read")


def test_decide_takes_the_mode_of_the_questions_file_unless_given(
    tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = tmp_path / "doc.txt"
    document.write_text("The tenant gave 20 days of notice.")
    questions = tmp_path / "q.json"
    questions.write_text(json.dumps({"mode": "standalone", "questions": [
        {"id": "a", "text": "Q?", "answer": {"type": "boolean"}}]}))
    for flag, mode in (([], "standalone"), (["--mode", "joint"], "joint")):
        status = main(["decide", "--document", str(document), "--questions", str(questions),
                       "--model", str(checkpoint), *flag])
        assert status == 0
        assert json.loads(capsys.readouterr().out)["mode"] == mode


def test_decide_missing_files_and_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["decide", "--document", str(tmp_path / "none.txt"), "--questions",
                 str(tmp_path / "none.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    document = tmp_path / "doc.txt"
    document.write_text("Some document.")
    questions = tmp_path / "q.json"
    questions.write_text('[{"id": "a", "text": "Q?", "answer": {"type": "boolean"}}]')
    assert main(["decide", "--document", str(document), "--questions", str(questions),
                 "--model", str(tmp_path / "no-model")]) == 2
    assert "cannot load the model" in capsys.readouterr().err


def test_decide_questions_file_not_utf8_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = tmp_path / "doc.txt"
    document.write_text("Some document.")
    questions = tmp_path / "q.json"
    questions.write_bytes(b"\xff\xfe[]")  # UTF-16 with its byte-order mark, say
    assert main(["decide", "--document", str(document), "--questions", str(questions),
                 "--model", str(tmp_path / "no-model")]) == 2
    err = capsys.readouterr().err
    assert "cannot read" in err and "q.json" in err


def test_serve_refuses_a_bad_app_setting_before_it_loads_the_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad DECISION_XIANGQI_SEARCH was found only at the first model move (a 503)."""
    monkeypatch.setenv("DECISION_XIANGQI_SEARCH", "5")
    assert main(["serve", "--model", str(tmp_path / "absent"), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "DECISION_XIANGQI_SEARCH" in err and "cannot load" not in err
    # without the apps their settings do not matter: it goes on to load the model
    assert main(["serve", "--no-apps", "--model", str(tmp_path / "absent"), "--port", "0"]) == 2
    assert "cannot load the model" in capsys.readouterr().err


def test_a_reader_that_goes_away_ends_the_command_quietly() -> None:
    """``decision xiangqi perft --divide | head`` printed a BrokenPipeError traceback (exit 1)
    once the reader had gone; now it stops without a word, 141 as for a program SIGPIPE ends."""
    import os
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line is written
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "decision.cli", "xiangqi", "perft", "--depth", "1",
             "--divide"],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
            cwd=Path(__file__).resolve().parents[1],
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == ""


def test_decide_reads_files_saved_with_a_byte_order_mark(tmp_path: Path) -> None:
    """A questions file an editor saved with a UTF-8 BOM was refused ("Unexpected UTF-8
    BOM"), and a document's BOM became its first character."""
    import argparse

    from decision.serve.decide_command import read_body

    document = tmp_path / "doc.txt"
    document.write_text("\ufeffThe tenant gave 20 days of notice.", encoding="utf-8")
    questions = tmp_path / "q.json"
    questions.write_text("\ufeff" + json.dumps(
        [{"id": "a", "text": "Q?", "answer": {"type": "boolean"}}]), encoding="utf-8")
    args = argparse.Namespace(document=str(document), questions=str(questions), mode=None,
                              threshold=None, max_steps=None, commit=None, probabilities=False,
                              score_options=False)
    body = read_body(args)
    assert body.document == "The tenant gave 20 days of notice."
    assert [q.id for q in body.questions] == ["a"]


@pytest.mark.parametrize("command", ["decide", "eval", "serve"])
def test_ctrl_c_while_the_model_loads_is_an_interruption_in_every_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    """A Ctrl-C that native code (safetensors reading a tensor) turned into a read error was
    reported "cannot load the model" (status 2) of a sound checkpoint."""
    import signal

    from decision.errors import CheckpointError
    from decision.serve.engine import ModelEngine

    def load(*args: Any, **kwargs: Any) -> Any:
        try:
            signal.raise_signal(signal.SIGINT)  # Ctrl-C, while a tensor is read
        except KeyboardInterrupt:
            raise CheckpointError("model.safetensors: cannot read tensor 'w'") from None
        raise AssertionError("no KeyboardInterrupt")

    monkeypatch.setattr(ModelEngine, "load", load)
    monkeypatch.setattr("decision.model.load_model", load)
    document, questions = tmp_path / "doc.txt", tmp_path / "q.json"
    document.write_text("A document.")
    questions.write_text(json.dumps([{"id": "a", "text": "Q?", "answer": {"type": "boolean"}}]))
    argv = {"decide": ["decide", "--document", str(document), "--questions", str(questions)],
            "eval": ["eval", "--seed-start", "20000000", "--groups", "1"],
            "serve": ["serve", "--no-apps", "--port", "0"]}[command]
    assert main(argv) == 130
    assert capsys.readouterr().err == f"decision {command}: interrupted\n"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


def test_a_broken_pipe_other_than_stdout_is_not_taken_for_a_reader_gone() -> None:
    """Any BrokenPipeError ended the command quietly with 141, as if stdout's reader had gone:
    one from another pipe (a FIFO given as an output file) was hidden."""
    import subprocess
    import sys

    script = ("from decision.cli import exit_status\n"
              "def fifo_reader_gone():\n"
              "    raise BrokenPipeError(32, 'Broken pipe')\n"
              "raise SystemExit(exit_status(fifo_reader_gone))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 1 and "BrokenPipeError" in proc.stderr  # stdout is fine


def test_ctrl_c_while_the_subcommands_load_is_an_interruption(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``decision`` imports every subcommand's module (FastAPI, torch: seconds) before
    ``exit_status`` runs: a Ctrl-C then printed a KeyboardInterrupt traceback, not one line."""
    import decision.cli as cli

    def build_parser() -> Any:
        raise KeyboardInterrupt  # Ctrl-C while torch is imported

    monkeypatch.setattr(cli, "build_parser", build_parser)
    try:
        status = main(["decide", "--help"])
    except KeyboardInterrupt:
        pytest.fail("the KeyboardInterrupt escaped main()")
    assert status == 130
    assert capsys.readouterr().err == "decision: interrupted\n"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_is_one_line_not_a_traceback() -> None:
    """``decision xiangqi perft > out.txt`` (or ``decide``, ``eval``) on a full disk printed an
    OSError traceback; now one line that says so, status 1."""
    import subprocess
    import sys

    with open("/dev/full", "w") as full:  # every write: ENOSPC
        proc = subprocess.run(
            [sys.executable, "-m", "decision.cli", "xiangqi", "perft", "--depth", "1"],
            stdout=full, stderr=subprocess.PIPE, text=True, timeout=120,
            cwd=Path(__file__).resolve().parents[1],
        )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == "decision xiangqi: error: cannot write: No space left on device\n"


def test_write_whole_that_fails_keeps_the_old_files_and_leaves_no_parts(tmp_path: Path) -> None:
    """A write that failed (a full disk; here text UTF-8 cannot hold) kept the old files but left
    the ``NAME.part`` files beside them (a score's ``OUT.summary.json.part``)."""
    from decision.files import write_whole

    json_path, md_path = tmp_path / "out.summary.json", tmp_path / "out.summary.md"
    json_path.write_text("old json")
    md_path.write_text("old md")
    with pytest.raises(UnicodeEncodeError):
        write_whole({json_path: "new json", md_path: "new md \ud800"})
    assert (json_path.read_text(), md_path.read_text()) == ("old json", "old md")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.summary.json", "out.summary.md"]


def test_decide_with_stdout_closed_is_no_traceback(tmp_path: Path) -> None:
    """``decision decide ... >&-``: sys.stdout is None, and writing the answer to it was an
    AttributeError traceback; the answer goes nowhere, as print's would."""
    import os
    import subprocess
    import sys

    document, questions = _one_question_files(tmp_path)
    model = Path(__file__).resolve().parents[1] / "models" / "default"
    code = ("import sys; from decision.cli import main; sys.exit(main(['decide', '--document', "
            f"{str(document)!r}, '--questions', {str(questions)!r}, '--model', {str(model)!r}]))")
    done = subprocess.run([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True,
                          preexec_fn=lambda: os.close(1), timeout=300, check=False,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


def test_the_parser_loads_neither_torch_nor_fastapi() -> None:
    """``decision --help`` took 2.5 s: building the parser imported the serve package's app
    (FastAPI, torch) and the schema compiler (torch, through the contracts demo's gold checks),
    though cli.py asks its command modules to stay light. It takes a fraction of that now."""
    import subprocess
    import sys

    code = ("import sys; from decision.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('torch', 'fastapi', 'triton') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_python_dash_m_decision_is_the_decision_command() -> None:
    """``python -m decision`` (where the ``decision`` script is not on the PATH) said "No module
    named decision.__main__"."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "decision", "--help"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ") and " serve " in done.stdout
    bad = subprocess.run([sys.executable, "-m", "decision", "no-such-command"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_every_serve_flag_sets_its_own_setting() -> None:
    """Each flag reaches the setting it names (a flag read into the wrong field, or dropped for
    the default, still parsed and started a server)."""
    from decision.serve.command import settings_from_args

    args = build_parser().parse_args([
        "serve", "--model", "m", "--device", "cuda:1", "--host", "::1", "--port", "8123",
        "--max-batch-size", "7", "--max-wait-ms", "2.5", "--queue-size", "33", "--timeout", "9.5",
        "--max-body-bytes", "4096", "--no-apps"])
    settings = settings_from_args(args)
    assert (settings.model_path, settings.device, settings.host, settings.port) == (
        "m", "cuda:1", "::1", 8123)
    assert (settings.max_batch_size, settings.max_wait_ms, settings.queue_size) == (7, 2.5, 33)
    assert (settings.request_timeout_s, settings.max_body_bytes) == (9.5, 4096)
    assert settings.include_apps is False
    # --no-batching wins over --max-batch-size: one request a batch
    args = build_parser().parse_args(["serve", "--max-batch-size", "7", "--no-batching"])
    assert settings_from_args(args).max_batch_size == 1
    assert settings_from_args(build_parser().parse_args(["serve"])).include_apps is True


@pytest.mark.parametrize("level", ["error", "debug"])
def test_serve_log_level_applies_to_the_service_loggers(level: str) -> None:
    from decision.serve.command import log_config

    logger = log_config(level)["loggers"]["decision"]
    assert logger == {"handlers": ["default"], "level": level.upper(), "propagate": False}


def test_decide_flags_override_the_options_of_the_questions_file(tmp_path: Path) -> None:
    """``--threshold`` (and the other option flags) win over FILE.json's ``options``."""
    from decision.serve.decide_command import read_body

    document, _ = _one_question_files(tmp_path)
    questions = tmp_path / "spec.json"
    questions.write_text(json.dumps({
        "questions": [{"id": "q", "text": "Late?", "answer": {"type": "boolean"}}],
        "options": {"threshold": 0.5, "max_steps": 3, "commit": "token"}}))
    base = ["decide", "--document", str(document), "--questions", str(questions)]
    body = read_body(build_parser().parse_args(base))
    assert (body.options.threshold, body.options.max_steps, body.options.commit) == (
        0.5, 3, "token")
    assert not body.options.return_probabilities and not body.options.score_options
    body = read_body(build_parser().parse_args([
        *base, "--threshold", "0.75", "--max-steps", "5", "--commit", "answer",
        "--probabilities", "--score-options"]))
    assert (body.options.threshold, body.options.max_steps, body.options.commit) == (
        0.75, 5, "answer")
    assert body.options.return_probabilities and body.options.score_options


def test_decide_refuses_duplicate_ids_before_it_loads_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _refuse_to_load(monkeypatch)
    document, questions = _one_question_files(tmp_path)
    questions.write_text(json.dumps([
        {"id": "a", "text": "Q?", "answer": {"type": "boolean"}},
        {"id": "a", "text": "R?", "answer": {"type": "boolean"}}]))
    assert main(["decide", "--document", str(document), "--questions", str(questions)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("decision decide: error") and "duplicate question id" in err
    assert err.count("\n") == 1


def test_train_stopped_by_sigterm_exits_143_and_says_so(
    capsys: pytest.CaptureFixture[str]
) -> None:
    """128 + the signal that stopped the run, as a shell reports it: 143 for SIGTERM, not the
    130 of Ctrl-C; and the export skipped is said only when one was asked for."""
    import signal
    from types import SimpleNamespace

    from decision.train.cli import interrupted

    result: Any = SimpleNamespace(loop=SimpleNamespace(signal=signal.SIGTERM, step=4),
                                  checkpoint=Path("run/checkpoint"))
    assert interrupted(result, None) == 143
    assert capsys.readouterr().err == (
        f"interrupted by SIGTERM at step 4: checkpoint saved in {Path('run/checkpoint')}; "
        "continue with --resume\n")
    assert interrupted(result, "out") == 143
    assert "; not exported; continue with --resume" in capsys.readouterr().err
    result.loop.signal = None
    assert interrupted(result, "out") is None
    assert capsys.readouterr().err == ""


def test_train_flags_override_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--out-dir and --device win over the config's run section, and the session flags reach
    the recipe (train itself replaced: this checks the command, not the training)."""
    from types import SimpleNamespace

    import decision.train.recipe as recipe

    seen: dict[str, Any] = {}

    def train(cfg: Any, **kwargs: Any) -> Any:
        seen.update(kwargs, out_dir=cfg.run.out_dir, device=cfg.run.device)
        return SimpleNamespace(loop=SimpleNamespace(signal=None), checkpoint=None)

    monkeypatch.setattr(recipe, "train", train)
    config = Path(__file__).resolve().parents[1] / "configs" / "tiny.json"
    out = str(tmp_path / "run")
    assert main(["train", "--config", str(config), "--out-dir", out, "--device", "cpu",
                 "--max-steps", "3", "--max-minutes", "0.5", "--resume"]) == 0
    assert seen == {"out_dir": out, "device": "cpu", "resume": True, "max_minutes": 0.5,
                    "max_steps": 3, "init_from": None, "export": None}


@pytest.mark.parametrize("value", ["", "  "])
def test_train_refuses_a_blank_out_dir_before_reading_the_config(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--out-dir "$OUT"`` with OUT unset, or blank, trained into the config's directory."""
    assert main(["train", "--config", str(tmp_path / "absent.json"), "--out-dir", value]) == 2
    assert capsys.readouterr().err == ("decision train: error (out-dir): --out-dir is empty: "
                                       "give a run directory, or leave the flag out\n")
