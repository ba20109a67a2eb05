"""The contract judgments playground: its JSON endpoints and its static page.

The service (``decision.serve.app``) includes ``router`` and mounts ``static_dir`` at
``static_url`` (``/contracts``). The page answers through the service's own ``POST /decide``
(once in joint mode, once standalone); these routes only serve what the page needs besides:

- ``GET /api/contracts/presets``: the preset question sets with the rules they declare;
- ``GET /api/contracts/examples``: the shipped example contracts (generated, validation seeds);
- ``POST /api/contracts/check``: which of a preset's rules a set of answers breaks, so the page
  and the terminal demo share one implementation of the rules (``apps.contracts.presets``).

Bad input raises ``DecisionInputError``; the service's handlers answer it as
``{"error": {"type", "message", "field", "request_id"}}`` with status 422.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from apps.contracts.examples import load_examples
from apps.contracts.presets import PRESETS, check_rules, get_preset
from decision.serve.api import INVALID_REQUEST_RESPONSES

static_dir = Path(__file__).resolve().parent / "static"
static_url = "/contracts"

router = APIRouter(prefix="/api/contracts", tags=["contracts demo"],
                   responses=INVALID_REQUEST_RESPONSES)


class CheckBody(BaseModel):
    """``POST /api/contracts/check``: a preset and the answers of one mode, by question id."""

    model_config = ConfigDict(extra="forbid")

    preset: str = Field(description="Preset id (GET /api/contracts/presets).")
    answers: dict[str, Any] = Field(
        description="Question id -> typed answer value, as POST /decide returned it.")


@router.get("/presets")
def presets() -> dict[str, Any]:
    """The preset question sets, each with its questions and the rules between them."""
    return {"presets": [p.to_json() for p in PRESETS.values()]}


@router.get("/examples")
def examples() -> dict[str, Any]:
    """The example contracts: document, kind, seed, preset id and the checker's answers."""
    return {"examples": [e.to_json() for e in load_examples()]}


@router.post("/check")
def check(body: CheckBody) -> dict[str, Any]:
    """Each rule of the preset on the answers: kept, broken or skipped (its questions not asked,
    of another answer type, or answered outside the preset's options), with the answers it
    read."""
    preset = get_preset(body.preset)
    checks = [c.to_json() for c in check_rules(preset, body.answers)]
    return {
        "preset": preset.id,
        "checks": checks,
        "broken": sum(c["status"] == "broken" for c in checks),
        "skipped": sum(c["status"] == "skipped" for c in checks),
    }
