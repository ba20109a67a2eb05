"""Joint and standalone decoding: layout, constrained dynamic programmes, samplers, engine."""

from decision.joint.engine import (
    CheckedRequest,
    EngineConfig,
    check_request,
    decide,
    decide_many,
)
from decision.joint.layout import Layout, SlotSpan, build_layout
from decision.joint.result import Answer, Decision, DecisionRequest
from decision.joint.sampler import (
    BlockState,
    ConstrainedThresholdSampler,
    Sampler,
    StepReport,
    ThresholdSamplerConfig,
)

__all__ = [
    "Answer",
    "BlockState",
    "CheckedRequest",
    "ConstrainedThresholdSampler",
    "Decision",
    "DecisionRequest",
    "EngineConfig",
    "Layout",
    "Sampler",
    "SlotSpan",
    "StepReport",
    "ThresholdSamplerConfig",
    "build_layout",
    "check_request",
    "decide",
    "decide_many",
]
