"""How two results' ``setup`` blocks differ: ``decision eval``'s ``eval.json`` and the Xiangqi
evaluation's ``--out`` both record what made them (model, weights fingerprint, seeds, decoding
options), and a paired comparison of two models says what else differs between them, so that a
decoder change mixed into a model comparison is seen rather than refused."""

from __future__ import annotations

import json
from typing import Any

# setup keys that are the model itself or how the command was spelt, not compared
MODEL_KEYS = ("model", "model_fingerprint", "argv")
# how fast a run went rather than what it answered: said apart
RUN_SETTINGS = ("threads", "batch_size", "concurrency")
_ABSENT = object()


def _show(value: Any) -> str:
    return "absent" if value is _ABSENT else json.dumps(value)


def setup_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What differs between two setups besides the model: ``KEY A_VALUE in A, B_VALUE in B``,
    the run settings last under one ``run settings:``."""
    keys = [k for k in [*a, *(k for k in b if k not in a)] if k not in MODEL_KEYS]
    differ = [k for k in keys if a.get(k, _ABSENT) != b.get(k, _ABSENT)]
    said = [f"{k} {_show(a.get(k, _ABSENT))} in A, {_show(b.get(k, _ABSENT))} in B"
            for k in differ]
    main = [x for k, x in zip(differ, said, strict=True) if k not in RUN_SETTINGS]
    run = [x for k, x in zip(differ, said, strict=True) if k in RUN_SETTINGS]
    return main + ([f"run settings: {'; '.join(run)}"] if run else [])


def setup_lines(a: dict[str, Any] | None, b: dict[str, Any] | None, missing: str) -> list[str]:
    """The two models with their weights' fingerprints and, where the setups differ besides the
    model (or the weights are the same), a ``note:`` saying so; a side without a setup is
    ``no setup recorded (MISSING)``."""
    lines = []
    for side, setup in (("A", a), ("B", b)):
        if setup is None:
            lines.append(f"{side}: no setup recorded ({missing})")
        else:
            lines.append(f"{side}: model {setup.get('model')}, weights "
                         f"{setup.get('model_fingerprint') or 'not recorded'}")
    if a is None or b is None:
        return lines
    differ = setup_differences(a, b)
    fingerprint = a.get("model_fingerprint")
    if fingerprint and fingerprint == b.get("model_fingerprint"):
        lines.append("note: A and B have the same weights; "
                     + (f"the setups differ: {'; '.join(differ)}" if differ
                        else "the setups are the same too"))
    elif differ:
        lines.append(f"note: the setups differ besides the model: {'; '.join(differ)}")
    return lines
