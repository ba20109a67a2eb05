"""How training configs and the command lines' flags are read and checked: every bad value is one
line that names it, before the run writes a file; docs/training.md lists every key the code
reads, with the code's defaults."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from decision.errors import DecisionInputError
from decision.train.config import _SECTIONS, config_from_dict, load_config

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "tiny.json"
VALID = REPO.parent / "shared" / "data" / "xiangqi" / "valid-games.jsonl.gz"
needs_games = pytest.mark.skipif(not VALID.is_file(), reason=f"no game data at {VALID}")


def tiny_raw(out_dir: Path, **sections: dict[str, Any]) -> dict[str, Any]:
    """configs/tiny.json with its run in ``out_dir``, a small tokenizer corpus and ``sections``'
    values set."""
    raw = json.loads(TINY.read_text())
    raw["run"].update(out_dir=str(out_dir), eval_every=10_000)
    raw["tokenizer"]["corpus_groups"] = 10
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return raw


@pytest.mark.parametrize(("text", "field"), [
    ('{"run": {"threads": 1, "threads": 4}}', "run.threads"),  # took the last: 4
    ('{"run": {"threads": 1}, "run": {"seed": 5}}', "run"),  # dropped the first section
    ('{"model": {"layer_types": ["full_attention"]}, "optim": {"betas": [0.9, 0.9]},'
     ' "optim": {}}', "optim"),
])
def test_a_key_given_twice_is_refused(tmp_path: Path, text: str, field: str) -> None:
    """JSON's reader keeps the last of a repeated key without a word: an edited copy of a
    setting, or a second section of the same name, silently replaced the first."""
    path = tmp_path / "twice.json"
    path.write_text(text)
    with pytest.raises(DecisionInputError, match="more than once") as err:
        load_config(path)
    assert err.value.field == field


def test_config_file_encoding_and_emptiness(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A config that is not UTF-8 was a UnicodeDecodeError traceback; an empty TOML file read as
    {}, the whole default config (runs/default, 20,000 steps); a byte-order mark (Windows
    editors write one) was refused."""
    from decision.train.cli import main

    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"run": {"out_dir": "caf\xe9"}}')
    assert main(["--config", str(latin)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read config") and "UTF-8" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    for name in ("empty.toml", "empty.json"):
        (tmp_path / name).write_text("\n")
        with pytest.raises(DecisionInputError, match="is empty"):
            load_config(tmp_path / name)
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + TINY.read_bytes())
    assert load_config(bom) == load_config(TINY)


def test_unparsable_configs_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 5,000-digit number (a ValueError, not a JSONDecodeError) and nesting deeper than the
    recursion limit were tracebacks; a Xiangqi player config given to ``decision train`` now
    says where it belongs."""
    from decision.train.cli import main

    cases = [('{"run": {"seed": ' + "9" * 5000 + "}}", "Exceeds the limit"),
             ("[" * 100_000, "recursion"),
             ('{"train": {}, "xiangqi": {}}', "apps.xiangqi.train_player")]
    for text, words in cases:
        path = tmp_path / "bad.json"
        path.write_text(text)
        assert main(["--config", str(path)]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("error: ") and words in line


@pytest.mark.parametrize(("section", "key", "value", "field"), [
    ("run", "out_dir", "", "run.out_dir"),  # trained into the working directory
    ("run", "out_dir", "  ", "run.out_dir"),
    ("run", "seed", 2**64, "run.seed"),  # a ValueError from torch.manual_seed
    ("run", "seed", -1, "run.seed"),
    ("data", "max_level", 0, "data.max_level"),  # silently level 1 only
    ("data", "max_level", 3, "data.max_level"),  # silently the same as 2
    ("tokenizer", "vocab_size", 2**40, "tokenizer.vocab_size"),  # aborted the process
    ("tokenizer", "vocab_size", 100, "tokenizer.vocab_size"),
    ("tokenizer", "corpus_groups", 0, "tokenizer.corpus_groups"),  # a bytes-only tokenizer
    ("tokenizer", "seed", -1, "tokenizer.seed"),  # refused at the first group, naming no key
])
def test_config_refuses_more_nonsense(
    tmp_path: Path, section: str, key: str, value: object, field: str
) -> None:
    with pytest.raises(DecisionInputError) as err:
        config_from_dict(tiny_raw(tmp_path, **{section: {key: value}}))
    assert err.value.field == field


def test_val_groups_beyond_the_split_are_refused_before_any_file(tmp_path: Path) -> None:
    """Refused only when the validation set was built, after the tokenizer was written, in a
    line that named no key ("validation: offset 0 + count ... exceeds")."""
    from decision.train.recipe import train

    cfg = config_from_dict(tiny_raw(tmp_path / "run", data={"val_groups": 100_001}))
    with pytest.raises(DecisionInputError, match="data.val_groups") as err:
        train(cfg, max_steps=1)
    assert err.value.field == "data.val_groups"
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("tokenizer", [
    {"seed": 10_000_000},  # the VALIDATION split's first groups
    {"seed": 20_000_000},  # the TEST split's
    {"seed": 9_999_995},  # runs from TRAIN into VALIDATION
])
def test_tokenizer_seeds_outside_the_train_split_are_refused_before_any_file(
    tmp_path: Path, tokenizer: dict[str, int]
) -> None:
    """The BPE was trained on whatever groups tokenizer.seed named, the held-out groups that
    select (VALIDATION) and report (TEST) the model included, without a word."""
    from decision.train.recipe import train

    cfg = config_from_dict(tiny_raw(tmp_path / "run", tokenizer=tokenizer))
    with pytest.raises(DecisionInputError, match="TRAIN split") as err:
        train(cfg, max_steps=1)
    assert err.value.field == "tokenizer.seed"
    assert not (tmp_path / "run").exists()
    last = config_from_dict(tiny_raw(tmp_path / "run", tokenizer={"seed": 9_999_990}))
    assert train(last, max_steps=1).loop.step == 1  # the TRAIN split's last 10 groups: fine


# Sizes and counts past their bound: each was accepted when the config was read, then failed
# late (after the tokenizer was written) or never finished.
@pytest.mark.parametrize(("section", "key", "value", "bound"), [
    ("run", "threads", 2**31, "1,024"),  # torch.set_num_threads: an overflow, after the tokenizer
    ("run", "threads", 100_000, "1,024"),  # a panic of the tokenizer's thread pool
    ("optim", "batch_size", 10**30, "1,048,576"),  # building the first batch never finished
    ("run", "length_window", 10**30, "1,048,576"),  # nor the first window
    ("run", "denoise_draws", 10**30, "1,024"),  # nor the first step's draws
    ("run", "max_steps", 10**30, "1,000,000,000,000"),
    ("run", "log_every", 10**30, "1,000,000,000,000"),
    ("run", "eval_every", 10**30, "1,000,000,000,000"),
    ("run", "early_stop_step", 10**30, "1,000,000,000,000"),
    ("run", "early_stop_step", -1, "[0, 1,000,000,000,000]"),
    ("optim", "warmup_steps", 10**30, "1,000,000,000,000"),  # an lr of 1e-30 throughout
    ("data", "level1_steps", 10**30, "1,000,000,000,000"),
    ("data", "curriculum_ramp_steps", -1, "[0, 1,000,000,000,000]"),
    ("data", "doc_block_max", 10**30, "1,048,576"),
    ("tokenizer", "corpus_groups", 10**30, "10,000,000"),  # generating the corpus never finished
    ("model", "hidden_size", 2**62, "1,048,576"),  # a storage-size overflow in torch
    ("model", "num_segments", 2**62, "1,048,576"),
    ("model", "num_experts", 2**31, "1,048,576"),  # an allocation error
    ("model", "num_hidden_layers", 10**30, "10,000"),  # reading the config never finished
    ("model", "max_position_embeddings", 2**31, "2,147,483,647"),
])
def test_sizes_past_their_bound_are_refused_in_one_line_naming_it(
    tmp_path: Path, section: str, key: str, value: int, bound: str
) -> None:
    with pytest.raises(DecisionInputError) as err:
        config_from_dict(tiny_raw(tmp_path, **{section: {key: value}}))
    assert err.value.field == f"{section}.{key}"
    message = str(err.value)
    assert message.startswith(f"{section}.{key} must ") and bound in message
    assert str(value) in message and "\n" not in message


def test_the_bounds_themselves_and_large_real_runs_load(tmp_path: Path) -> None:
    """The bounds refuse no run that could work: a GPU run of large batches and a run of years
    load, as do the values at each bound."""
    from decision.train.config import (
        MAX_BLOCK,
        MAX_CORPUS,
        MAX_DRAWS,
        MAX_POSITIONS,
        MAX_ROWS,
        MAX_STEPS,
        MAX_THREADS,
        MAX_WIDTH,
    )

    big = tiny_raw(tmp_path, run={"threads": MAX_THREADS, "max_steps": MAX_STEPS,
                                  "log_every": MAX_STEPS, "eval_every": MAX_STEPS,
                                  "early_stop_step": MAX_STEPS, "denoise_draws": MAX_DRAWS,
                                  "length_window": 1},
                   optim={"batch_size": MAX_ROWS, "warmup_steps": MAX_STEPS},
                   data={"level1_steps": MAX_STEPS, "curriculum_ramp_steps": MAX_STEPS,
                         "doc_block_min": MAX_BLOCK, "doc_block_max": MAX_BLOCK},
                   tokenizer={"corpus_groups": MAX_CORPUS})
    cfg = config_from_dict(big)
    assert (cfg.optim.batch_size, cfg.run.threads) == (MAX_ROWS, MAX_THREADS)
    gpu = tiny_raw(tmp_path, optim={"batch_size": 4096}, run={"length_window": 256},
                   model={"max_position_embeddings": 10_485_760, "intermediate_size": 53_248})
    assert config_from_dict(gpu).run.length_window == 256
    for key in ("hidden_size", "num_segments", "right_conv_kernel"):
        config_from_dict(tiny_raw(tmp_path, model={key: MAX_WIDTH}))
    config_from_dict(tiny_raw(tmp_path, model={"max_position_embeddings": MAX_POSITIONS}))


def test_a_config_of_too_many_layers_is_refused_before_its_layer_list_is_built() -> None:
    """Without ``layer_types``, DecisionConfig builds one entry a layer before it checks the
    count: reading ``num_hidden_layers = 10**30`` never finished."""
    with pytest.raises(DecisionInputError, match=r"^model.num_hidden_layers must be at most "
                       r"10,000, got 10{30}$") as err:
        config_from_dict({"model": {"num_hidden_layers": 10**30}})
    assert err.value.field == "model.num_hidden_layers"


def test_rows_sorted_together_are_bounded(tmp_path: Path) -> None:
    """A length-sorted window builds batch_size * length_window rows before its first step."""
    raw = tiny_raw(tmp_path, optim={"batch_size": 2**12}, run={"length_window": 2**9})
    with pytest.raises(DecisionInputError, match=r"^optim.batch_size \* run.length_window .* "
                       r"at most 1,048,576, got 2,097,152$") as err:
        config_from_dict(raw)
    assert err.value.field == "run.length_window"


def test_max_steps_flag_is_bounded() -> None:
    """``--max-steps 10**30`` was taken: a run that never stopped on its own."""
    from decision.train.config import check_max_steps

    assert check_max_steps(10**12) == 10**12
    with pytest.raises(DecisionInputError, match="--max-steps must be at most 1,000,000,000,000"):
        check_max_steps(10**30)


def test_too_many_threads_is_one_line_before_any_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``run.threads`` 2**31 was a ValueError traceback from torch.set_num_threads, after the
    run directory and its tokenizer had been written."""
    from decision.train.cli import main

    config = tmp_path / "threads.json"
    config.write_text(json.dumps(tiny_raw(tmp_path / "run", run={"threads": 2**31})))
    assert main(["--config", str(config)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == "error: run.threads must be at most 1,024, got 2147483648"
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("flag", "what"), [
    ("--out-dir", "a run directory"), ("--init-from", "a model directory"),
    ("--export", "a directory"), ("--device", "a device"),
])
def test_an_empty_flag_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    flag: str, what: str,
) -> None:
    """``--out-dir ""`` (an unset shell variable) was taken as absent: the run trained into the
    config's directory; ``--export ""`` skipped the export; ``--init-from ""`` read the working
    directory as a model."""
    from decision.train.cli import main

    monkeypatch.chdir(tmp_path)
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_raw(tmp_path / "run", run={"max_steps": 1})))
    assert main(["--config", str(config), flag, ""]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == f"error: {flag} is empty: give {what}, or leave the flag out"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.json"]


@pytest.mark.parametrize(("out_dir", "words"), [
    ("afile", "run directory afile is a file, not a directory"),
    ("afile/run", "is under "),
])
def test_a_run_directory_that_cannot_be_made_is_refused_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    out_dir: str, words: str,
) -> None:
    """A run directory that is a file, or under one, was a FileExistsError (NotADirectoryError)
    traceback from mkdir once the tokenizer had been trained."""
    from decision.train.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("not a directory")
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_raw(tmp_path / "unused", run={"max_steps": 1})))
    assert main(["--config", str(config), "--out-dir", out_dir]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()  # no tokenizer line: not trained
    assert line.startswith("error: run directory ") and words in line


def test_init_from_a_model_of_too_few_segments_is_refused_before_any_file(tmp_path: Path) -> None:
    """A config that does not set model.num_segments passed its check (the default, 9) while
    the loaded model had 2: the run failed at its first step ("segment_ids must lie in
    [0, 2)"), after writing its tokenizer."""
    from decision.train.recipe import build_model, build_tokenizer, train

    few = config_from_dict(tiny_raw(tmp_path / "a", model={"num_segments": 2}))
    model = build_model(few, build_tokenizer(few))
    model.save(tmp_path / "model")
    cfg = config_from_dict(tiny_raw(tmp_path / "run"))
    with pytest.raises(DecisionInputError, match="has num_segments 2: .* need 9") as err:
        train(cfg, init_from=tmp_path / "model", max_steps=1)
    assert err.value.field == "model.num_segments"
    assert not (tmp_path / "run").exists()


def test_resume_notes_say_a_tokenizer_change_takes_no_effect(tmp_path: Path) -> None:
    """A resume with another tokenizer.vocab_size said "the run goes on with the new values",
    while it keeps the checkpoint's tokenizer."""
    from decision.train.checkpoint import resume_notes

    cfg = config_from_dict(tiny_raw(tmp_path))
    path = tmp_path / "train_config.json"
    path.write_text(json.dumps(cfg.to_dict()))
    cfg.tokenizer.vocab_size += 100
    changes, kept = resume_notes(path, cfg)
    assert "tokenizer.vocab_size 400 -> 500" in changes
    assert kept.startswith("tokenizer.vocab_size changed: no effect")


def player_config(tmp_path: Path, train: dict[str, Any] | None = None, **xiangqi: Any) -> Path:
    """A tiny Xiangqi player run on the validation games, with ``xiangqi`` values set."""
    raw: dict[str, Any] = {
        "train": {"model": json.loads(TINY.read_text())["model"],
                  "tokenizer": {"vocab_size": 420}, "data": {"task": "xiangqi"},
                  "optim": {"batch_size": 2},
                  "run": {"out_dir": str(tmp_path / "run"), "max_steps": 1, "threads": 1,
                          "eval_every": 1000}},
        "xiangqi": {"train_games": str(VALID), "valid_games": str(VALID), "train_positions": 8,
                    "val_positions": 2, "tokenizer_positions": 30, **xiangqi},
    }
    for name, values in (train or {}).items():
        raw["train"].setdefault(name, {}).update(values)
    path = tmp_path / "player.json"
    path.write_text(json.dumps(raw))
    return path


@pytest.mark.parametrize(("text", "field"), [
    ('{"xiangqi": {"seed": 1, "seed": 2}}', "xiangqi.seed"),
    ('{"xiangqi": {"fragment_weight": Infinity}}', "xiangqi.fragment_weight"),  # a ValueError
    ('{"xiangqi": {"aux": "replies"}}', "xiangqi.aux"),  # the typo was ignored at share 0
    ('{"xiangqi": {}}\xff', "config"),
])
def test_player_config_refuses(tmp_path: Path, text: str, field: str) -> None:
    """(An infinite fragment weight was a traceback from random.choices as the rows were drawn,
    after the tokenizer was written.)"""
    from apps.xiangqi.train_player import load_player_config

    path = tmp_path / "bad.json"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(DecisionInputError) as err:
        load_player_config(path)
    assert err.value.field == field


@pytest.mark.parametrize(("key", "bound"), [
    ("train_positions", "1,000,000,000"),  # an OverflowError from random.choices, late
    ("tokenizer_positions", "10,000,000"),
    ("val_positions", "100,000"),
])
def test_player_position_counts_are_bounded(tmp_path: Path, key: str, bound: str) -> None:
    from apps.xiangqi.train_player import load_player_config

    with pytest.raises(DecisionInputError) as err:
        load_player_config(player_config(tmp_path, **{key: 10**30}))
    assert err.value.field == f"xiangqi.{key}"
    assert str(err.value) == f"xiangqi.{key} must be at most {bound}, got {10**30}"
    load_player_config(player_config(tmp_path, train_positions=10**9, val_positions=100_000,
                                      tokenizer_positions=10_000_000))


@pytest.mark.parametrize(("section", "key", "value"), [
    ("data", "p_copy", 0.2), ("data", "focus_qtypes", ["notice_days"]),
    ("data", "p_extraction_visible", 1.0), ("data", "val_groups", 8),
    ("tokenizer", "corpus_groups", 100),
])
def test_player_config_refuses_contract_settings(
    tmp_path: Path, section: str, key: str, value: object
) -> None:
    """The contract recipe's row kinds, curriculum, validation groups and tokenizer corpus set
    in a Xiangqi config were accepted and changed nothing."""
    from apps.xiangqi.train_player import CONTRACT_KEYS, load_player_config

    assert f"{section}.{key}" in CONTRACT_KEYS
    with pytest.raises(DecisionInputError, match="setting of the contract recipe") as err:
        load_player_config(player_config(tmp_path, {section: {key: value}}))
    assert err.value.field == f"{section}.{key}"
    load_player_config(player_config(tmp_path, {"data": {"t_min": 0.05}}))  # read by both


@needs_games
def test_player_export_only_needs_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--export-only`` without ``--export`` did nothing and exited 0."""
    from apps.xiangqi.train_player import main

    assert main(["--config", str(player_config(tmp_path)), "--export-only"]) == 2
    assert capsys.readouterr().err.strip() == "error: --export-only needs --export DIR"
    assert main(["--config", str(player_config(tmp_path)), "--out-dir", ""]) == 2
    assert "--out-dir is empty" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@needs_games
@pytest.mark.parametrize("key", ["valid_games", "teacher_games"])
def test_player_missing_input_file_names_its_key_before_the_games_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """A missing valid_games (or teacher_games) was found only after the training games had
    been read, in a line that named the path but not the key."""
    from apps.xiangqi import train_player

    def no_games(path: str | Path, limit: int | None = None) -> Any:
        raise AssertionError(f"read {path} before the files were checked")

    monkeypatch.setattr(train_player, "load_games", no_games)
    missing = str(tmp_path / "none.jsonl.gz")
    config = player_config(tmp_path, **{key: missing},
                           **({"teacher_share": 0.5} if key == "teacher_games" else {}))
    assert train_player.main(["--config", str(config)]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == f"error: cannot read games file {missing} (xiangqi.{key}): no such file"
    assert not (tmp_path / "run").exists()


# --- docs/training.md, "Config keys" -------------------------------------------------------

def documented_keys() -> dict[str, tuple[str, str]]:
    """``section.key`` -> the default and meaning cells of docs/training.md's "Config keys"
    table."""
    text = (REPO / "docs" / "training.md").read_text()
    part = text[text.index("\n## Config keys\n"):]
    part = part[:part.index("\n## ", 1)]
    rows = re.findall(r"^\| `([a-z_]+\.[a-z_0-9]+)` \| (.+?) \| (.+) \|$", part, re.M)
    keys = {key: (default, meaning) for key, default, meaning in rows}
    assert len(keys) == len(rows), "a key listed twice"
    return keys


def code_defaults() -> dict[str, Any]:
    from apps.xiangqi.train_player import XiangqiSection

    sections = {**_SECTIONS, "xiangqi": XiangqiSection}
    return {f"{name}.{f.name}": getattr(cls(), f.name)
            for name, cls in sections.items() for f in dataclasses.fields(cls)}


def test_docs_list_every_config_key_with_its_default() -> None:
    """docs/training.md named about two thirds of the keys (not tokenizer.corpus_groups,
    data.max_level, optim.warmup_steps, run.max_minutes, ...), with no defaults."""
    from apps.xiangqi.train_player import CONTRACT_KEYS

    docs, code = documented_keys(), code_defaults()
    assert sorted(docs) == sorted(code)
    assert sorted(CONTRACT_KEYS) == sorted(k for k, (_, m) in docs.items()
                                           if m.endswith("; contracts only"))
    for key, default in code.items():
        cell = docs[key][0].strip("`")
        if key in ("xiangqi.train_games", "xiangqi.valid_games"):  # machine paths
            assert Path(default).as_posix().endswith("/" + cell), key
            continue
        value = json.loads(cell)
        assert value == (list(default) if isinstance(default, tuple) else default), key
        assert type(value) is type(default) or isinstance(default, tuple), key


def test_every_shipped_config_loads() -> None:
    from apps.xiangqi.train_player import load_player_config

    paths = sorted((REPO / "configs").glob("*.json"))
    assert len(paths) >= 60
    for path in paths:
        if "train" in json.loads(path.read_text()):
            cfg, _ = load_player_config(path)
            assert cfg.data.task in ("contracts", "xiangqi")
        else:
            assert load_config(path).data.task == "contracts"
