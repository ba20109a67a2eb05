"""A model directory that is wrong, as a user who trained or copied one meets it: one clear error
that names the file, never a model that loads and then answers every request with an error or
with another model's answers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

import decision
from decision.cli import main
from decision.errors import CheckpointError
from decision.model.testing import tiny_model


def _without_mask_token(directory: Path) -> None:
    """tokenizer.json without the layout's [MASK] (a tokenizer edited, or of another project)."""
    file = directory / "tokenizer.json"
    raw = json.loads(file.read_text())
    raw["added_tokens"] = [t for t in raw["added_tokens"] if t["content"] != "[MASK]"]
    raw["model"]["vocab"].pop("[MASK]", None)
    file.write_text(json.dumps(raw))


def test_serve_refuses_a_tokenizer_the_decoder_cannot_use(
    tiny_checkpoint_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`decision serve` started healthy on a tokenizer.json without [MASK], then answered every
    request 422 "tokenizer has no special token '[MASK]'", the client's fault by its status."""
    from decision.serve.app import ServiceServer

    def run(self: object, *args: object, **kwargs: object) -> None:
        raise AssertionError("the server started")

    monkeypatch.setattr(ServiceServer, "run", run)
    model = shutil.copytree(tiny_checkpoint_dir, tmp_path / "model")
    _without_mask_token(model)
    assert main(["serve", "--no-apps", "--port", "0", "--model", str(model)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("decision serve: cannot load the model: ") and err.count("\n") == 1
    assert str(model / "tokenizer.json") in err and "[MASK]" in err


@pytest.mark.parametrize("command", ["decide", "score"])
def test_decide_and_score_refuse_a_tokenizer_the_decoder_cannot_use(
    command: str, tiny_checkpoint_dir: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`decision score` scored nothing ("2 rows/groups skipped", each group blamed) and exited
    0; `decision decide` did not name the file."""
    model = shutil.copytree(tiny_checkpoint_dir, tmp_path / "model")
    _without_mask_token(model)
    questions = tmp_path / "q.json"
    questions.write_text(json.dumps([{"id": "a", "text": "Timely?",
                                      "answer": {"type": "boolean"}}]))
    groups = tmp_path / "groups.csv"
    groups.write_text("group_id,document,question_id,question,answer_type,options\n"
                      "g1,The notice came late.,a,Timely?,boolean,\n")
    document = tmp_path / "doc.txt"
    document.write_text("The notice came late.")
    args = (["decide", "--document", str(document), "--questions", str(questions)]
            if command == "decide" else ["score", str(groups), "--out", str(tmp_path / "o.csv")])
    assert main([*args, "--model", str(model)]) == 2
    err = capsys.readouterr().err
    assert str(model / "tokenizer.json") in err and "[MASK]" in err, err


def _untied_saved_as_tied(directory: Path, head: str) -> Path:
    """An untied model whose config.json says tie_word_embeddings: its own trained head, or a copy
    of the embedding (as some exporters write beside a tied config)."""
    tiny_model(seed=3).save(directory)
    config = directory / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "tie_word_embeddings": True}))
    weights = directory / "model.safetensors"
    tensors = load_file(str(weights))
    if head == "copy":
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
    save_file(tensors, str(weights), metadata={"format": "pt"})
    return directory


def test_a_tied_config_beside_a_head_of_its_own_is_refused(tmp_path: Path) -> None:
    """config.json saying tie_word_embeddings beside weights with their own lm_head.weight (a
    config of another run, a flag flipped) loaded without a word: the trained head was dropped
    for the embedding, and the model answered with another network's output layer."""
    directory = _untied_saved_as_tied(tmp_path / "own", "own")
    with pytest.raises(CheckpointError, match="tie_word_embeddings") as err:
        decision.load_model(directory)
    assert str(directory / "model.safetensors") in str(err.value)
    assert "'lm_head.weight'" in str(err.value)


def test_a_tied_config_beside_a_copy_of_the_embedding_loads(tmp_path: Path) -> None:
    directory = _untied_saved_as_tied(tmp_path / "copy", "copy")
    model = decision.load_model(directory)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert torch.equal(model.lm_head.weight, load_file(str(directory / "model.safetensors"))[
        "model.embed_tokens.weight"])


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    tiny_model(seed=4).save(tmp_path / "model")
    return tmp_path / "model"


def test_a_config_json_that_cannot_be_read_is_not_called_invalid_json(
    saved: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An unreadable config.json (no permission, an I/O error) was reported "invalid JSON
    ([Errno 13] Permission denied ...)": the user went looking for a syntax error."""
    file = saved / "config.json"
    open_ = Path.open

    def denied(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self == file:
            raise PermissionError(13, "Permission denied", str(self))
        return open_(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", denied)
    with pytest.raises(CheckpointError) as err:
        decision.load_model(saved)
    assert str(err.value) == f"{file}: cannot read (Permission denied)"


def test_a_config_json_that_is_no_file_is_not_called_missing(saved: Path) -> None:
    """A folder named config.json (an unpacked archive, a copy gone wrong) was "missing"."""
    file = saved / "config.json"
    file.unlink()
    file.mkdir()
    with pytest.raises(CheckpointError) as err:
        decision.load_model(saved)
    assert str(err.value) == f"{file}: not a regular file"
