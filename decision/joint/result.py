"""What ``decide`` returns, and the request object of ``decide_many``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Mode = Literal["joint", "standalone", "auto"]


class Answer(BaseModel):
    """One question's answer: typed value, its text and how sure the decoder was."""

    id: str
    value: Any
    text: str
    confidence: float = Field(ge=0.0, le=1.0)
    option_probabilities: dict[str, float] | None = None
    mode: Literal["joint", "standalone"]


class Decision(BaseModel):
    """All answers of one request, with per-request decoding statistics."""

    answers: list[Answer]
    mode: str  # "joint", "standalone", or "joint+standalone" (auto with fallbacks)
    steps: int  # denoising forwards this request took part in
    tokens_per_forward: float  # slot tokens decoded / steps
    timings: dict[str, float]  # ms: prefill, denoise, sampler, constraint, total

    def by_id(self) -> dict[str, Answer]:
        return {a.id: a for a in self.answers}


class DecisionRequest(BaseModel):
    """One ``decide`` call's arguments, for ``decide_many``."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    document: Any
    questions: Any
    mode: Any = "joint"
    threshold: Any = 0.9
    max_steps: Any = None
    return_probabilities: bool = False
    commit: Any = None  # "answer" | "token"; None: the engine's (EngineConfig.commit)
    score_options: bool = False  # choice/boolean: score every option (decision.joint.scoring)
    # after the other questions are denoised
