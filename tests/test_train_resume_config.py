"""Resuming with an edited optimiser config, and config errors found before any file is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from decision.errors import DecisionInputError
from decision.train.config import TrainConfig, config_from_dict
from decision.train.recipe import train

TINY = Path(__file__).resolve().parents[1] / "configs" / "tiny.json"


def tiny_raw(out_dir: Path, **optim: Any) -> dict[str, Any]:
    """configs/tiny.json run in ``out_dir``, no validation, ``optim`` values on top."""
    raw = json.loads(TINY.read_text())
    raw["run"].update(out_dir=str(out_dir), eval_every=10_000)
    raw["optim"].update(optim)
    return raw


def stepped_state(model: Any, cfg: TrainConfig, steps: int) -> dict[str, Any]:
    """The trainer state's optimiser and scheduler after ``steps`` updates under ``cfg``."""
    from decision.train.optimizer import make_optimizer

    opt, sched = make_optimizer(model, cfg)
    for _ in range(steps):
        for p in model.parameters():
            p.grad = torch.full_like(p, 1e-3)
        opt.step()
        sched.step()
    return {"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}


def test_a_resumed_optimiser_takes_the_new_config_from_its_first_step(tmp_path: Path) -> None:
    """torch's load_state_dict brought back the checkpoint's lr, betas, weight decay and base
    rates, so a run resumed with another learning rate went on with the old one."""
    from decision.model.testing import tiny_model
    from decision.train.optimizer import load_optimizer, lr_lambda, make_optimizer

    model = tiny_model(seed=0)
    old = config_from_dict(tiny_raw(tmp_path, lr=1e-2, warmup_steps=0))
    state = stepped_state(model, old, 3)
    new = config_from_dict(tiny_raw(tmp_path, lr=1e-3, warmup_steps=0, betas=[0.5, 0.6],
                                    weight_decay=0.5))
    opt, sched = make_optimizer(model, new)
    load_optimizer(opt, sched, state, new, tmp_path / "checkpoint")
    assert sched.last_epoch == 3
    scale = lr_lambda(new)(3)
    decays, vectors = opt.param_groups
    for group in (decays, vectors):
        assert group["initial_lr"] == pytest.approx(1e-3)
        assert group["lr"] == pytest.approx(1e-3 * scale)  # before any resumed step
        assert group["betas"] == (0.5, 0.6)
    assert (decays["weight_decay"], vectors["weight_decay"]) == (0.5, 0.0)
    assert sched.base_lrs == pytest.approx([1e-3, 1e-3])
    assert opt.state_dict()["state"] == state["optimizer"]["state"]  # the moments carry over
    opt.step()
    sched.step()
    assert sched.get_last_lr() == pytest.approx([1e-3 * lr_lambda(new)(4)] * 2)


def test_a_resumed_optimiser_scales_its_groups_by_the_new_factor(tmp_path: Path) -> None:
    """A scaled group's base rate is the new lr times the new scaled_lr_factor."""
    from decision.model.testing import tiny_model
    from decision.train.optimizer import load_optimizer, lr_lambda, make_optimizer

    model = tiny_model(seed=0)
    names = ["mlp.experts."]
    old = config_from_dict(tiny_raw(tmp_path, warmup_steps=2, scaled_lr_params=names,
                                    scaled_lr_factor=10.0))
    state = stepped_state(model, old, 1)
    new = config_from_dict(tiny_raw(tmp_path, lr=2e-3, warmup_steps=4, scaled_lr_params=names,
                                    scaled_lr_factor=3.0))
    opt, sched = make_optimizer(model, new)
    load_optimizer(opt, sched, state, new, tmp_path / "checkpoint")
    bases = [2e-3, 2e-3, 6e-3, 6e-3]
    assert sched.base_lrs == pytest.approx(bases)
    scale = lr_lambda(new)(1)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([b * scale for b in bases])


def test_a_resumed_run_trains_with_the_new_optimiser_values(tmp_path: Path) -> None:
    """The whole path: the checkpoint of a run resumed with another lr, betas and weight decay
    holds the new values (and the schedule over the new base rate)."""
    from decision.train.checkpoint import load_trainer_state
    from decision.train.optimizer import lr_lambda

    train(config_from_dict(tiny_raw(tmp_path, lr=1e-2, warmup_steps=0)), max_steps=2)
    raw = tiny_raw(tmp_path, lr=1e-3, warmup_steps=0, betas=[0.5, 0.6], weight_decay=0.5)
    cfg = config_from_dict(raw)
    train(cfg, resume=True, max_steps=3)
    state = load_trainer_state(tmp_path / "checkpoint")
    groups = state["optimizer"]["param_groups"]
    assert [g["initial_lr"] for g in groups] == pytest.approx([1e-3, 1e-3])
    assert [g["lr"] for g in groups] == pytest.approx([1e-3 * lr_lambda(cfg)(3)] * 2)
    assert [tuple(g["betas"]) for g in groups] == [(0.5, 0.6)] * 2
    assert [g["weight_decay"] for g in groups] == [0.5, 0.0]
    assert state["scheduler"]["base_lrs"] == pytest.approx([1e-3, 1e-3])


def test_resume_refuses_another_optimiser_group_layout_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Adding optim.scaled_lr_params on --resume ended in torch's ValueError traceback."""
    from decision.train.checkpoint import load_trainer_state
    from decision.train.cli import main

    run = tmp_path / "run"
    train(config_from_dict(tiny_raw(run)), max_steps=2)
    scaled = tmp_path / "scaled.json"
    scaled.write_text(json.dumps(tiny_raw(run, scaled_lr_params=["mlp."], scaled_lr_factor=2.0)))
    capsys.readouterr()
    assert main(["--config", str(scaled), "--resume"]) == 2
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]  # after the progress lines, no traceback
    assert "Traceback" not in err
    assert line.startswith("error: cannot resume: optim.scaled_lr_params ['mlp.']")
    assert f"--init-from {run / 'checkpoint'}" in line
    assert load_trainer_state(run / "checkpoint")["step"] == 2


def test_group_layout_is_compared_by_parameter_names(tmp_path: Path) -> None:
    """Groups of equal sizes but other members load without a word from torch (the moments
    would land on other parameters): the saved scaled_lr_params decide; names that group the
    parameters as before resume."""
    from decision.model.testing import tiny_model
    from decision.train.optimizer import check_group_layout, load_optimizer, make_optimizer

    model = tiny_model(seed=0)
    ckpt = tmp_path / "checkpoint"
    saved = {"optim": {"scaled_lr_params": ["in_proj_a"]}}
    moved = config_from_dict(tiny_raw(tmp_path, scaled_lr_params=["in_proj_b"]))
    with pytest.raises(DecisionInputError, match="groups the parameters otherwise") as err:
        check_group_layout(model, moved, saved, ckpt)
    assert err.value.field == "optim.scaled_lr_params"
    same = config_from_dict(tiny_raw(tmp_path, scaled_lr_params=["in_proj_a", "no_such"]))
    check_group_layout(model, same, saved, ckpt)
    check_group_layout(model, moved, None, ckpt)  # nothing saved to compare with
    plain = config_from_dict(tiny_raw(tmp_path))
    opt, sched = make_optimizer(model, same)
    with pytest.raises(DecisionInputError, match="the optimiser groups differ"):
        load_optimizer(opt, sched, stepped_state(model, plain, 1), same, ckpt)


def test_config_errors_of_the_recipe_come_before_any_file(tmp_path: Path) -> None:
    """A focus type with a typo and a model.num_segments below a group's questions were found
    after tokenizer.json was written (or at step 1), and the corrected rerun was refused."""
    typo = tiny_raw(tmp_path / "typo")
    typo["data"].update(focus_qtypes=["due_dya"], p_focus=0.2)
    with pytest.raises(DecisionInputError, match="unknown question types") as err:
        train(config_from_dict(typo))
    assert err.value.field == "data.focus_qtypes"
    short = tiny_raw(tmp_path / "short")
    short["model"]["num_segments"] = 8
    with pytest.raises(DecisionInputError, match="num_segments is 8: .* need 9") as err:
        train(config_from_dict(short))
    assert err.value.field == "model.num_segments"
    assert not (tmp_path / "typo").exists() and not (tmp_path / "short").exists()


def test_a_lone_tokenizer_is_not_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    """A run that failed before its first checkpoint left only tokenizer.json, and the rerun
    was refused as a run; with a checkpoint or evaluations beside it, it still is one."""
    from decision.train.run_dir import check_no_run

    (tmp_path / "tokenizer.json").write_text("{}")
    check_no_run(tmp_path)
    assert "tokenizer.json is from a run that left no checkpoint" in capsys.readouterr().err
    (tmp_path / "evals.jsonl").write_text("")
    with pytest.raises(DecisionInputError, match="already holds a run"):
        check_no_run(tmp_path)
    (tmp_path / "evals.jsonl").unlink()
    (tmp_path / "checkpoint").mkdir()
    with pytest.raises(DecisionInputError, match="already holds a run"):
        check_no_run(tmp_path)


@pytest.mark.parametrize(("key", "value"), [
    ("hidden_size", 32.0), ("hidden_size", True), ("num_segments", "9"),
    ("layer_types", "linear_attention"), ("mlp_only_layers", [1.0]),
    ("attention_bias", 1), ("block_scale_init", "1"),
])
def test_model_fields_of_another_type_are_refused(key: str, value: Any) -> None:
    """hidden_size 32.0 passed the config and crashed in torch with a TypeError traceback."""
    raw = json.loads(TINY.read_text())
    raw["model"][key] = value
    with pytest.raises(DecisionInputError, match=f"model.{key} must be") as err:
        config_from_dict(raw)
    assert err.value.field == f"model.{key}"


def test_model_fields_take_ints_for_floats_and_null_where_allowed() -> None:
    raw = json.loads(TINY.read_text())
    raw["model"].update(rope_theta=10000, block_scale_init=None, partial_rotary_factor=0.5,
                        mlp_only_layers=[1])
    cfg = config_from_dict(raw)
    assert cfg.model.fields["rope_theta"] == 10000


def test_resume_notes_report_the_task_sections(tmp_path: Path) -> None:
    """The Xiangqi driver's own section was never saved, so its changes went unreported."""
    from decision.train.checkpoint import resume_notes, saved_config

    cfg = config_from_dict(tiny_raw(tmp_path))
    path = tmp_path / "train_config.json"
    path.write_text(json.dumps(saved_config(cfg, {"task": {"seed": 1, "val": 2}})))
    assert resume_notes(path, cfg, {"task": {"seed": 1, "val": 2}}) == []
    only_val = resume_notes(path, cfg, {"task": {"seed": 1, "val": 3}},
                            frozenset({"task.val"}))
    assert len(only_val) == 1 and "task.val 2 -> 3" in only_val[0]
    changes, data = resume_notes(path, cfg, {"task": {"seed": 5, "val": 2}})
    assert "task.seed 1 -> 5" in changes
    assert data.startswith("task.seed changed: the rows of the steps from here on")
    path.write_text(json.dumps(cfg.to_dict()))  # saved before the section was kept
    (note,) = resume_notes(path, cfg, {"task": {"seed": 5}})
    assert "has no [task] section" in note


def test_the_schedule_warms_up_linearly_then_decays_to_the_floor(tmp_path: Path) -> None:
    """Linear warm-up whose first step already trains (lr/warm, not 0), then a cosine from the
    full rate down to ``min_lr_ratio`` at ``max_steps``, held there beyond it."""
    from decision.train.optimizer import lr_lambda

    raw = tiny_raw(tmp_path, warmup_steps=4, min_lr_ratio=0.1)
    raw["run"]["max_steps"] = 24
    f = lr_lambda(config_from_dict(raw))
    assert [f(s) for s in range(4)] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert f(4) == pytest.approx(1.0)  # the cosine starts at the full rate
    assert f(14) == pytest.approx(0.1 + 0.9 * 0.5)  # half-way down
    assert f(24) == pytest.approx(0.1) and f(100) == pytest.approx(0.1)
