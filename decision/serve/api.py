"""JSON bodies of the decide endpoint: what a client sends and what it gets back."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from decision.errors import DecisionInputError
from decision.schemas.models import Question

Mode = Literal["joint", "standalone", "auto"]

# A question of a request: ``decision.schemas.Question`` (id, text, answer schema), so the service
# validates exactly as the decoder does. Kept under this name for the demo apps that import it.
QuestionIn = Question


def _nulls_as_left_out(model: type[BaseModel], payload: Any) -> Any:
    """A ``null`` for a field with a default is that field left out: clients that serialise
    their unset optional fields as ``null`` get the defaults, as for ``commit`` and
    ``max_steps`` (a required field's ``null`` stays an error)."""
    if not isinstance(payload, dict):
        return payload
    optional = {name for name, field in model.model_fields.items() if not field.is_required()}
    return {key: value for key, value in payload.items()
            if value is not None or key not in optional}


def _declare_nulls(schema: dict[str, Any]) -> None:
    """Say in the JSON schema what ``_nulls_as_left_out`` accepts: ``null`` for every field
    that has a default."""
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        if name in required or {"type": "null"} in prop.get("anyOf", ()):
            continue
        keep = {k: prop.pop(k) for k in ("title", "description", "default") if k in prop}
        inner = dict(prop)
        prop.clear()
        prop.update(anyOf=[inner, {"type": "null"}], **keep)


class DecideOptions(BaseModel):
    """Decoding options of one request. Strict types, as ``decide`` has them: ``true`` is not a
    threshold of 1, nor ``"0.5"`` one of 0.5, nor ``"yes"`` a flag."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_declare_nulls)

    @model_validator(mode="before")
    @classmethod
    def _nulls(cls, payload: Any) -> Any:
        return _nulls_as_left_out(cls, payload)

    threshold: float = Field(
        0.9, gt=0.0, le=1.0, strict=True, allow_inf_nan=False,
        description="Fix every masked token whose probability passes this (at least one a step).",
    )
    commit: Literal["answer", "token"] | None = Field(
        None,
        description="When no token passes the threshold, the most confident one is fixed with "
        "the rest of its answer ('answer') or alone ('token'). None: the service's default "
        "('answer').",
    )
    max_steps: int | None = Field(
        None, ge=1, le=4096, strict=True,
        description="At most this many denoising steps (None: as needed)."
    )
    return_probabilities: bool = Field(
        False, strict=True,
        description="Also return each option's probability (choice and boolean answers)."
    )
    score_options: bool = Field(
        False, strict=True,
        description="Answer choice and boolean questions by scoring every option with the "
        "chain rule over its tokens (averaged over two decoding orders) instead of denoising "
        "them; other questions are denoised first (those slots masked) and the options scored "
        "given their answers.",
    )


_DECIDE_EXAMPLE = {
                    "document": "The tenant gave 20 days of notice; the lease requires 30.",
                    "questions": [
                        {"id": "timely", "text": "Was notice timely?",
                         "answer": {"type": "boolean"}},
                        {"id": "required", "text": "Notice required in days?",
                         "answer": {"type": "integer", "minimum": 0, "maximum": 365}},
                    ],
                    "mode": "joint",
                    "options": {"threshold": 0.9, "return_probabilities": True},
                }


def _body_schema_extra(schema: dict[str, Any]) -> None:
    schema["examples"] = [_DECIDE_EXAMPLE]
    _declare_nulls(schema)


class DecideBody(BaseModel):
    """``POST /decide``: one document and the questions to answer about it."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_body_schema_extra)

    document: str = Field(description="The material the questions are about.")
    questions: list[Question] = Field(
        min_length=1,
        description='At most 8 in joint mode. Each: id, text and an answer schema discriminated by '
        '"type": choice (options), boolean, integer (minimum, maximum), number, pattern (regex, '
        'max_tokens) or json (schema, max_tokens).',
    )
    mode: Mode = Field(
        "joint",
        description="joint: one pass for all (at most 8); standalone: one pass per question; "
        "auto: joint passes of up to 8, standalone for a slot too large.",
    )
    options: DecideOptions = Field(default_factory=DecideOptions)

    @model_validator(mode="before")
    @classmethod
    def _nulls(cls, payload: Any) -> Any:
        return _nulls_as_left_out(cls, payload)


def check_unique_ids(body: DecideBody) -> None:
    """Question ids must be unique: answers are returned by id."""
    seen: set[str] = set()
    for index, question in enumerate(body.questions):
        if question.id in seen:
            raise DecisionInputError(
                f"duplicate question id {question.id!r}", f"questions.{index}.id"
            )
        seen.add(question.id)


class AnswerOut(BaseModel):
    """One answer: the typed value, the text the model wrote, and how sure it was."""

    id: str
    value: Any
    text: str
    confidence: float
    option_probabilities: dict[str, float] | None = None


class DecideResponse(BaseModel):
    """The answers of one request with how they were decoded."""

    model: str
    mode: str = Field(description='Passes used: "joint", "standalone" or "joint+standalone".')
    answers: list[AnswerOut]
    steps: int
    tokens_per_forward: float
    timings: dict[str, float] = Field(description="Milliseconds per phase, queue and total.")


class ErrorDetail(BaseModel):
    type: str
    message: str
    field: str | None = None
    request_id: str | None = Field(
        default=None, description="The response's X-Request-ID, to find the request in the log."
    )


class ErrorBody(BaseModel):
    """Every error the service returns has this shape."""

    error: ErrorDetail


# An app router's ``responses``: its 422 in the OpenAPI schema is this shape, not FastAPI's
# default HTTPValidationError ({"detail": [...]}), which the service never sends.
INVALID_REQUEST_RESPONSES: dict[int | str, dict[str, Any]] = {
    422: {"model": ErrorBody, "description": "Invalid request; `error.field` names the field."},
}


class HealthBody(BaseModel):
    status: Literal["ok", "degraded"]
    model_loaded: bool
    model: str | None
    queue_depth: int


class ModelInfo(BaseModel):
    name: str
    path: str | None
    parameters: int | None
    max_questions: int
    max_document_tokens: int | None
    modes: list[str]
    answer_types: list[str]


class ModelsBody(BaseModel):
    models: list[ModelInfo]


def parse_decide_body(payload: dict[str, Any]) -> DecideBody:
    """Validate a ``/decide`` payload built outside HTTP (the CLIs), as one clear error."""
    try:
        return DecideBody.model_validate(payload)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err.get("loc", ())) or None
        raise DecisionInputError(f"{field}: {err.get('msg')}", field) from None
