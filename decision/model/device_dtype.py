"""The device and dtype a loaded model computes in: ``load_model``'s ``device`` and ``dtype``
arguments checked before any weight is read (a CheckpointError saying why one cannot be used),
and the dtype that "auto" resolves to for a checkpoint on a device. It knows torch's devices and
where half precision is slow, nothing of checkpoint files (checkpoint.py reads those).
"""

from __future__ import annotations

import torch

from decision.errors import CheckpointError

DTYPE_NAMES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
               "float64": torch.float64}
# where the model runs: torch's generic devices whose availability torch can tell
DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")


def requested_dtype(dtype: object) -> torch.dtype | str | None:
    """``load_model``'s dtype argument, checked before any weight is read: "auto", None, or a
    supported floating dtype (given as a torch dtype or its name)."""
    if dtype is None or dtype == "auto":
        return dtype  # type: ignore[return-value]
    if isinstance(dtype, str) and dtype in DTYPE_NAMES:
        return DTYPE_NAMES[dtype]
    if isinstance(dtype, torch.dtype) and dtype in DTYPE_NAMES.values():
        return dtype
    kind = "unknown" if isinstance(dtype, str) else "unsupported"
    raise CheckpointError(f"{kind} dtype {dtype!r}; use one of {sorted(DTYPE_NAMES)}")


def resolve_dtype(
    dtype: torch.dtype | str | None, fallback: torch.dtype | None, device: torch.device
) -> torch.dtype:
    """The dtype to compute in: ``dtype`` as checked by ``requested_dtype``; ``fallback`` is
    the checkpoint's own."""
    if dtype == "auto":
        # CPUs without bf16/fp16 matrix units run half-precision matmuls far slower than
        # float32 (on the AVX2 development machine a bf16 contracts decode took 1.8x as long, a
        # bf16-autocast training step 12x), so weights are upcast there; accelerators compute in
        # the checkpoint's own dtype.
        if device.type == "cpu" and fallback in (torch.bfloat16, torch.float16):
            return torch.float32
        return fallback or torch.float32
    if dtype is None:
        return fallback or torch.float32
    return requested_dtype(dtype)  # type: ignore[return-value]


def device_count(kind: str) -> int:
    """How many devices of type ``kind`` (cuda, mps, xpu) this torch can use; 0 when none."""
    try:
        if kind == "mps":
            return int(torch.backends.mps.is_available())
        module = getattr(torch, kind, None)
        return module.device_count() if module is not None and module.is_available() else 0
    except (RuntimeError, AssertionError):  # torch built without the backend
        return 0


def usable_device(device: str | torch.device) -> torch.device:
    """``device`` as a torch device, or a :class:`CheckpointError` saying why it cannot be used
    (not a device name; a type the model does not run on, such as meta or hpu; an accelerator
    this torch has none of, or fewer than the index asks for). Checked before weights are read."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise CheckpointError(f"{device!r} is not a torch device ({exc})") from None
    if dev.type not in DEVICE_TYPES:
        raise CheckpointError(
            f"device {device!r}: the model does not run on {dev.type} devices; use one of "
            f"{', '.join(DEVICE_TYPES)}"
        )
    if dev.type == "cpu":
        return dev
    count = device_count(dev.type)
    name = dev.type.upper()
    if count == 0:
        raise CheckpointError(f"device {device!r}: this torch sees no {name} GPU")
    if dev.index is not None and dev.index >= count:
        raise CheckpointError(f"device {device!r}: this torch sees {count} {name} GPU(s)")
    return dev
