"""Batch scoring: groups from the CSV through the engine, predictions written group by group.

Groups are decided a few at a time in one ``decide_many`` call (every mode asked for), then each
group's rows are written and flushed before the next batch, so an interrupted run loses at most
the batch in flight, and ``resume`` skips the groups already complete in the output. Batches are
formed by position in the input whether resumed or not (see ``score_csv``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from decision.errors import CompileBusyError, DecisionInputError
from decision.progress import Progress
from decision.scoring.gold import is_correct
from decision.scoring.groups import InputGroup, Problem, read_groups
from decision.scoring.output import (
    PredictionRow,
    PredictionWriter,
    locked,
    read_predictions,
    recover,
)
from decision.scoring.run_record import check_or_write, run_record
from decision.serve.api import DecideBody, DecideOptions
from decision.serve.service import ServiceEngine
from decision.tokenizer import MAX_QUESTIONS

# A schema compile the busy machine starved (CompileBusyError) is tried this many times in all
# before its group is skipped: the service answers it 503 and its client retries; a batch run
# has no client to do so, and skipping the group would leave a hole a retry may fill.
COMPILE_TRIES = 3

MODES: dict[str, tuple[str, ...]] = {
    "joint": ("joint",),
    "standalone": ("standalone",),
    "both": ("joint", "standalone"),
}


@dataclass
class ScoreResult:
    """What a run did: groups read, skipped by resume, scored now; rows and problems."""

    groups: list[InputGroup]
    modes: tuple[str, ...]
    resumed: int
    scored: int
    problems: list[Problem] = field(default_factory=list)
    predictions: list[PredictionRow] = field(default_factory=list)


def _body(group: InputGroup, mode: str, options: DecideOptions) -> DecideBody:
    return DecideBody(
        document=group.document,
        questions=[q.question for q in group.questions],
        mode=mode,  # type: ignore[arg-type]
        options=options,
    )


def _rows(group: InputGroup, mode: str, decision: Any) -> list[PredictionRow]:
    by_id = {a.id: a for a in decision.answers}
    rows = []
    for q in group.questions:
        answer = by_id[q.question.id]
        correct = None if q.gold is None else is_correct(q.question.answer, answer.value, q.gold)
        rows.append(
            PredictionRow(
                group_id=group.group_id,
                question_id=q.question.id,
                mode=mode,
                answer_type=q.question.answer.type,
                prediction=answer.text,
                confidence=float(answer.confidence),
                gold=q.gold_text,
                correct=correct,
                steps=int(decision.steps),
                tokens_per_forward=float(decision.tokens_per_forward),
            )
        )
    return rows


def _prepare(engine: ServiceEngine, body: DecideBody, progress: Progress) -> Any:
    """``engine.prepare(body)``, tried again (``COMPILE_TRIES`` in all) while a compile is
    starved by a busy machine; any other input error is raised at once."""
    for attempt in range(1, COMPILE_TRIES):
        try:
            return engine.prepare(body)
        except CompileBusyError as exc:
            progress.message(f"{exc.message}; trying again ({attempt + 1} of {COMPILE_TRIES})")
    return engine.prepare(body)  # the last try: its error, if any, skips the group


def _decide_all(engine: ServiceEngine, prepared: list[Any]) -> list[Any]:
    """One ``decide_many`` for the batch; on failure, one by one so only the culprit fails.

    A failed request's entry is its exception, whatever the batch size: a batch of one request
    (``--batch-groups 1``, or a last batch of one group) skips its group as a larger one would,
    rather than ending the run.
    """
    if not prepared:
        return []
    try:
        results = list(engine.decide_many(prepared))
        if len(results) == len(prepared):
            return results
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # noqa: BLE001 - isolate below
        if len(prepared) == 1:
            return [exc]  # already decided alone: no need to try it again
    out: list[Any] = []
    for item in prepared:
        try:
            out.append(engine.decide_many([item])[0])
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # noqa: BLE001 - reported as this group's problem
            out.append(exc)
    return out


def check_paths(input_path: Path, out_path: Path, *, resume: bool, overwrite: bool) -> None:
    """Refuse an ``out_path`` this run must not write: a folder, the input itself, or an existing
    non-empty file without ``resume`` (continue it) or ``overwrite`` (replace it), since it may
    be anything (another run's predictions, someone's notes). Cheap: called before the model
    loads, and again by ``score_csv``."""
    if resume and overwrite:
        raise DecisionInputError("--resume continues the predictions file and --overwrite "
                                 "replaces it: not both", "out")
    if out_path.is_dir():  # else refused only once the model loaded, its run record written
        raise DecisionInputError(f"{out_path}: is a folder; --out names the predictions file "
                                 "(OUT.csv)", "out")
    if out_path.resolve() == input_path.resolve() or (
        out_path.exists() and input_path.exists() and out_path.samefile(input_path)
    ):
        # the writer would truncate the input it was scoring (a hard link: another name)
        raise DecisionInputError(f"{out_path}: the predictions would overwrite the input", "out")
    if not (resume or overwrite) and out_path.is_file() and out_path.stat().st_size > 0:
        raise DecisionInputError(f"{out_path}: exists; pass --resume to continue it or "
                                 "--overwrite to replace it", "out")


def score_csv(
    input_path: Path,
    out_path: Path,
    engine: ServiceEngine,
    *,
    mode: str = "joint",
    resume: bool = False,
    overwrite: bool = False,
    strict: bool = False,
    batch_groups: int = 8,
    options: DecideOptions | None = None,
    progress_stream: TextIO | None = None,
    show_progress: bool = True,
) -> ScoreResult:
    """Score every group of ``input_path`` into ``out_path`` (see the module docstring).

    An existing non-empty ``out_path`` is refused unless ``resume`` or ``overwrite``
    (``check_paths``).
    """
    if mode not in MODES:
        raise DecisionInputError(f"mode must be one of {sorted(MODES)}, got {mode!r}", "mode")
    if batch_groups < 1:
        raise DecisionInputError("batch_groups must be at least 1", "batch_groups")
    check_paths(input_path, out_path, resume=resume, overwrite=overwrite)
    modes = MODES[mode]
    options = options or DecideOptions()
    stream = progress_stream if progress_stream is not None else sys.stderr
    groups, problems = read_groups(input_path, strict=strict)
    for problem in problems:
        print(f"{input_path}:{problem.line}: skipped: {problem.reason}", file=stream)
    expected = {g.group_id: len(g.questions) * len(modes) for g in groups}
    questions = {g.group_id: {q.question.id for q in g.questions} for g in groups}
    # one run at a time on a predictions file: from the run record to the last row read back
    with locked(out_path) as unlocked:
        if unlocked is not None:
            print(unlocked, file=stream)
        if not resume:
            # emptied before the new run record is written: a run that died between the two
            # left the old predictions under the new record, for a --resume to keep as its own
            out_path.write_bytes(b"")
        # the run record first: recover cuts off what it takes for incomplete groups before it
        # returns (with the same ids over another input, every group), and a refused resume
        # must leave the file as it was; recover's own refusals still cover files from before
        # records, and its refusal of a file that is no predictions file comes without the
        # record's warning
        warning = check_or_write(out_path, run_record(engine, input_path, mode, options,
                                                      batch_groups), resume=resume)
        done = recover(out_path, expected, modes, questions) if resume else set()
        if warning is not None:
            print(warning, file=stream)
        bar = Progress(len(groups), done=len(done), stream=stream, enabled=show_progress)
        try:
            scored = _score_batches(input_path, out_path, engine, groups, done, modes, options,
                                    resume=resume, strict=strict, batch_groups=batch_groups,
                                    problems=problems, bar=bar)
        finally:
            bar.close()  # ends the bar's line, also when interrupted or stopped by --strict
        predictions = read_predictions(out_path)
    return ScoreResult(
        groups=groups,
        modes=modes,
        resumed=len(done),
        scored=scored,
        problems=problems,
        predictions=predictions,
    )


def _score_batches(
    input_path: Path, out_path: Path, engine: ServiceEngine, groups: list[InputGroup],
    done: set[str], modes: tuple[str, ...], options: DecideOptions, *, resume: bool,
    strict: bool, batch_groups: int, problems: list[Problem], bar: Progress,
) -> int:
    """Decide and write the groups not ``done``; returns how many were written."""
    scored = 0
    with PredictionWriter(out_path, append=resume) as writer:
        # Batches are formed by position in the input, done or not, and a batch with any group
        # left is decided whole (the done ones are not written again): a batch's results may
        # depend on what it holds (padded forwards), so a resumed run decides every group in
        # the batch it had in one uninterrupted run with the same batch_groups, and writes the
        # same bytes. It costs at most the done part of one batch (or of a batch with a group
        # that was skipped).
        for start in range(0, len(groups), batch_groups):
            batch = groups[start : start + batch_groups]
            chunk = [g for g in batch if g.group_id not in done]
            if not chunk:
                continue
            jobs: list[tuple[InputGroup, str]] = []
            prepared: list[Any] = []
            failed: dict[str, str] = {}
            for group in batch:
                for m in modes:
                    if m == "joint" and len(group.questions) > MAX_QUESTIONS:
                        # the engine's own message suggests mode 'auto', which this command
                        # does not offer
                        failed.setdefault(group.group_id, (
                            f"joint: joint mode takes at most {MAX_QUESTIONS} questions, the "
                            f"group has {len(group.questions)}; split it into groups of at most "
                            f"{MAX_QUESTIONS}, or score it with --mode standalone"))
                        continue
                    try:
                        prepared.append(_prepare(engine, _body(group, m, options), bar))
                        jobs.append((group, m))
                    except DecisionInputError as exc:
                        where = f" ({exc.field})" if exc.field else ""
                        failed.setdefault(group.group_id, f"{m}: {exc.message}{where}")
            results = _decide_all(engine, prepared)
            per_group: dict[str, list[PredictionRow]] = {g.group_id: [] for g in batch}
            for (group, m), result in zip(jobs, results, strict=True):
                if isinstance(result, BaseException):
                    failed.setdefault(group.group_id, f"{m}: {type(result).__name__}: {result}")
                else:
                    per_group[group.group_id].extend(_rows(group, m, result))
            for group in chunk:
                if group.group_id in failed:
                    problem = Problem(group.line, group.group_id, failed[group.group_id])
                    if strict:
                        raise DecisionInputError(
                            f"{input_path}:{problem.line}: group {group.group_id!r}: "
                            f"{problem.reason}", f"line {problem.line}",
                        )
                    problems.append(problem)
                    bar.message(f"{input_path}:{problem.line}: group {group.group_id} skipped: "
                                f"{problem.reason}")
                else:
                    writer.write_group(per_group[group.group_id])
                    scored += 1
                bar.update()
    return scored
