"""The model behind the service and the batch scorer: request checks up front, batched decoding.

``prepare`` runs the decoder's own validation (schemas compiled, cached; question count; the
document's length with the layout the decoder will build) *before* a request is queued, so bad
input is answered 422 at once and never reaches the worker. ``decide_many`` then decodes a batch
of prepared requests in one ``DecisionModel.decide_many`` call.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decision.errors import DecisionInputError
from decision.serve.api import DecideBody, ModelInfo
from decision.tokenizer import MAX_QUESTIONS

ANSWER_TYPES = ["choice", "boolean", "integer", "number", "pattern", "json"]


@dataclass(frozen=True)
class Prepared:
    """A validated request, ready for the worker: ``checked`` holds its compiled automata
    (``decision.joint.CheckedRequest``), so the worker decodes it without compiling again."""

    request: Any  # decision.joint.result.DecisionRequest
    checked: Any  # decision.joint.CheckedRequest


_ANSWER_FIELD = re.compile(r"questions\.(\d+)\.answer(?=\.|$)")


def _tagged_field(field: str | None, body: DecideBody) -> str | None:
    """``questions.0.answer.regex`` as ``questions.0.answer.pattern.regex``: a field inside an
    answer named as the request model's validation names it, with the answer type pydantic puts
    after ``answer`` (docs/service.md), so one field has one name whichever check found it."""
    match = _ANSWER_FIELD.match(field or "")
    if match is None or int(match.group(1)) >= len(body.questions):
        return field
    kind = body.questions[int(match.group(1))].answer.type
    rest = field[match.end():] if field else ""
    if rest == f".{kind}" or rest.startswith(f".{kind}."):
        return field  # tagged already
    return f"{match.group(0)}.{kind}{rest}"


class ModelEngine:
    """A loaded ``DecisionModel`` with the checks and batching the service needs."""

    def __init__(self, model: Any, name: str, path: str | None = None) -> None:
        from decision.joint.engine import EngineConfig

        if model.tokenizer is None:
            where = f"{path}: " if path else ""
            raise DecisionInputError(f"{where}the model has no tokenizer (tokenizer.json)", "model")
        self.model = model
        self.name = name
        self.path = path
        self._config = EngineConfig()
        self._parameters = sum(p.numel() for p in model.parameters())
        self._lock = threading.Lock()  # decide_many is only ever run by one thread at a time

    @functools.cached_property
    def fingerprint(self) -> str:
        """SHA-256 of the model's weights (``weights_fingerprint``): two engines give the same
        answers where it is the same (``decision score --resume`` checks it)."""
        from decision.model.checkpoint import weights_fingerprint

        return weights_fingerprint(self.model)

    @property
    def device(self) -> str:
        """Where the model's weights are (``cpu``, ``cuda:0``)."""
        return str(next(self.model.parameters()).device)

    @classmethod
    def load(cls, path: str | None, device: str = "cpu") -> ModelEngine:
        """Load a checkpoint directory (None: the shipped default); raises ``CheckpointError``."""
        from decision.model import load_model
        from decision.model.checkpoint import DEFAULT_MODEL_DIR, check_decoding_tokenizer

        model = load_model(path, device=device)
        directory = Path(path) if path is not None else DEFAULT_MODEL_DIR
        # the tokenizer checks the first request would make, now: a tokenizer.json the decoder
        # cannot use (no [MASK]) started a healthy service that answered every request 422, and
        # `decision score` skipped every group and exited 0
        engine = cls(model, name=directory.resolve().name, path=str(directory))  # has a tokenizer
        check_decoding_tokenizer(directory, model.tokenizer)
        return engine

    def prepare(self, body: DecideBody) -> Prepared:
        """Validate ``body`` as the decoder will, without decoding; raise
        ``DecisionInputError`` naming the field."""
        try:
            return self._prepare(body)
        except DecisionInputError as exc:
            exc.field = _tagged_field(exc.field, body)  # the same error (a CompileBusyError: 503)
            raise

    def _prepare(self, body: DecideBody) -> Prepared:
        from decision.joint import check_request
        from decision.joint.result import DecisionRequest

        for i, question in enumerate(body.questions):
            try:
                question.answer.regex()
            except DecisionInputError as exc:
                # json_regex names its field relative to the answer ("answer.schema"): anchor it
                # to the question, so the client learns which question is at fault.
                field = exc.field or "answer"
                if not field.startswith("questions."):
                    field = f"questions.{i}.{field}"
                raise DecisionInputError(exc.message, field) from None

        request = DecisionRequest(
            document=body.document,
            questions=list(body.questions),
            mode=body.mode,
            threshold=body.options.threshold,
            max_steps=body.options.max_steps,
            return_probabilities=body.options.return_probabilities,
            commit=body.options.commit,
            score_options=body.options.score_options,
        )
        # The decoder's checks: mode, options, question count (8 at most in joint mode), each
        # schema compiled to its automaton (held for the decode), then the layout of every
        # pass against the model's positions (a document too long, with both numbers).
        return Prepared(request, check_request(self.model, request, self._config))

    def decide_many(
        self, prepared: Sequence[Prepared], abandoned: Callable[[int], bool] | None = None
    ) -> list[Any]:
        """Decode prepared requests together (one batch of forwards). ``abandoned(i)``: request
        ``i``'s caller gave up; the decoder stops spending steps on it, and raises
        ``DecodeAbandonedError`` once all are (``decision.joint.decide_many``)."""
        with self._lock:
            return self.model.decide_many(
                [p.checked for p in prepared], config=self._config, abandoned=abandoned
            )

    def info(self) -> ModelInfo:
        return ModelInfo(
            name=self.name,
            path=self.path,
            parameters=self._parameters,
            max_questions=MAX_QUESTIONS,
            max_document_tokens=int(self.model.config.max_position_embeddings),
            modes=["joint", "standalone", "auto"],
            answer_types=ANSWER_TYPES,
        )
