"""Read and write checkpoint directories: config.json, safetensors (optionally sharded with
model.safetensors.index.json) and an optional tokenizer.json.

Accepted tensor names: Qwen3.5-MoE / Qwen3.5 (prefix ``model.`` or ``model.language_model.``),
per-expert ``mlp.experts.J.{gate,up,down}_proj.weight`` or packed ``mlp.experts.gate_up_proj`` /
``mlp.experts.down_proj``, ``lm_head.weight`` or tied embeddings, and Qwen3-Next's fused
``in_proj_qkvz`` / ``in_proj_ba``. Every failure is one CheckpointError naming file and tensor.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import struct
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from decision.errors import CheckpointError, DecisionInputError
from decision.files import fsync_dir, fsync_file
from decision.model.backbone import DecisionModel
from decision.model.config import DecisionConfig
from decision.model.gdn import BLOCK_PARAM_NAMES

logger = logging.getLogger(__name__)

DEFAULT_MODEL_DIR = Path(__file__).resolve().parents[2] / "models" / "default"
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
IGNORED_PREFIXES = ("mtp.", "model.visual.", "visual.", "model.rotary_emb.")
DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
# valid safetensors dtypes this loader does not read (8/6/4-bit floats, unsigned, complex)
UNSUPPORTED_DTYPES = {"F8_E5M2", "F8_E4M3", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "U16", "U32",
                      "U64", "C64"}
DTYPE_NAMES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
               "float64": torch.float64}
# where the model runs: torch's generic devices whose availability torch can tell
DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")

_EXPERT = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


# ---------------------------------------------------------------------------- reading files
def _inspect_safetensors(file: Path) -> dict[str, tuple[str, list[int]]]:
    """Validate a safetensors file's header against its size; return name -> (dtype, shape).

    Layout (safetensors spec): u64 little-endian header length n, n bytes of JSON, then the data
    buffer; each tensor's ``data_offsets`` are relative to the buffer start.
    """
    header, n, size = _read_header(file)
    out: dict[str, tuple[str, list[int]]] = {}
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, stop = _header_entry(file, name, info)
        out[name] = (dtype, shape)
        end = max(end, stop)
    if 8 + n + end > size:
        raise CheckpointError(
            f"{file}: truncated safetensors file: tensors need {8 + n + end} bytes, the file has "
            f"{size}"
        )
    return out


def _read_header(file: Path) -> tuple[dict[str, Any], int, int]:
    """The parsed JSON header of a safetensors file, its length and the file's size."""
    if not file.is_file():
        raise CheckpointError(f"{file}: not a regular file")
    try:
        size = file.stat().st_size
        with file.open("rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise CheckpointError(
                    f"{file}: truncated safetensors file ({size} bytes, no header)"
                )
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                raise CheckpointError(
                    f"{file}: corrupted or truncated safetensors header (header says {n} bytes, "
                    f"file has {size - 8} after the length field)"
                )
            raw = fh.read(n)
    except OSError as exc:
        raise CheckpointError(f"{file}: cannot read ({exc.strerror or exc})") from None
    try:
        header = json.loads(raw.decode("utf-8"))
        if not isinstance(header, dict):
            raise ValueError("header is not a JSON object")
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: nesting
        raise CheckpointError(f"{file}: corrupted safetensors header ({exc})") from None
    return header, n, size


def _sizes(value: Any, length: int | None = None) -> bool:
    """Whether ``value`` is a list of ``length`` (any if None) non-negative JSON integers."""
    return (isinstance(value, list) and (length is None or len(value) == length)
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value))


def _header_entry(file: Path, name: str, info: Any) -> tuple[str, list[int], int]:
    """One tensor's header entry as (dtype, shape, end offset), checked for types and size."""
    corrupted = CheckpointError(f"{file}: corrupted header entry for tensor {name!r}")
    if not isinstance(info, dict):
        raise corrupted
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str) or not _sizes(shape) or not _sizes(offsets, 2):
        raise corrupted
    start, stop = offsets
    if dtype in UNSUPPORTED_DTYPES:
        raise CheckpointError(
            f"{file}: tensor {name!r} has unsupported dtype {dtype} (supported: "
            f"{', '.join(DTYPES)})"
        )
    if dtype not in DTYPES:
        raise corrupted
    nbytes = math.prod(shape) * DTYPES[dtype].itemsize
    if stop - start != nbytes:
        raise CheckpointError(
            f"{file}: corrupted header entry for tensor {name!r}: {dtype} {shape} is {nbytes} "
            f"bytes, its data_offsets span {stop - start}"
        )
    return dtype, shape, stop


class _Tensors:
    """Lazy access to every tensor of a checkpoint directory, by raw name."""

    def __init__(self, directory: Path, stack: ExitStack) -> None:
        self.directory = directory
        self.where: dict[str, Path] = {}
        self.meta: dict[str, tuple[str, list[int]]] = {}
        self._handles: dict[Path, Any] = {}
        self._stack = stack
        self._listed: dict[str, str] | None = None  # the index's weight_map, where there is one
        self.files = self._files()
        for file in self.files:
            for name, meta in _inspect_safetensors(file).items():
                if name in self.where:  # which copy holds the weights is anybody's guess
                    raise CheckpointError(
                        f"{file}: tensor {name!r} is also in {self.where[name]} (a tensor "
                        f"belongs to one file)"
                    )
                self.where[name] = file
                self.meta[name] = meta
        self._check_index()

    def _check_index(self) -> None:
        """The index's weight_map names where each tensor is, as the shards' headers do: a shard
        from another save (or an index edited by hand) loads here but not in other tools."""
        listed = self._listed
        if listed is None:
            return
        index = self.directory / INDEX_NAME
        for name, file in self.where.items():
            if listed.get(name) != file.name:
                where = f"under {listed[name]}" if name in listed else "nowhere"
                raise CheckpointError(
                    f"{index}: its weight_map lists tensor {name!r} {where}, but {file.name} "
                    f"holds it (the index and the shards are from different saves?)"
                )
        for name in listed.keys() - self.where.keys():
            raise CheckpointError(
                f"{index}: its weight_map lists tensor {name!r} in {listed[name]}, which does "
                f"not hold it"
            )

    def _files(self) -> list[Path]:
        index = self.directory / INDEX_NAME
        if index.exists():
            self._listed = _weight_map(index)
            files = [self.directory / n for n in sorted(set(self._listed.values()))]
            if not files:
                raise CheckpointError(f"{index}: invalid index (its weight_map lists no shard)")
            for f in files:
                if not f.exists():
                    raise CheckpointError(f"{index}: lists shard {f.name}, which is missing")
            return files
        files = sorted(self.directory.glob("*.safetensors"))
        if not files:
            raise CheckpointError(f"{self.directory}: no *.safetensors weights found")
        return files

    def get(self, name: str) -> torch.Tensor:
        """The tensor ``name`` read from its file (CheckpointError naming both when it fails)."""
        file = self.where[name]
        try:
            if file not in self._handles:
                self._handles[file] = self._stack.enter_context(
                    safe_open(str(file), framework="pt")
                )
            return self._handles[file].get_tensor(name)
        except Exception as exc:  # safetensors raises its own error types
            raise CheckpointError(f"{file}: cannot read tensor {name!r}: {exc}") from None

    def shape(self, name: str) -> list[int]:
        """The shape its file's header gives tensor ``name``."""
        return self.meta[name][1]

    def float_dtype(self) -> torch.dtype | None:
        """Most common floating dtype among the stored tensors (the checkpoint's dtype)."""
        counts: dict[torch.dtype, int] = {}
        for dtype, _ in self.meta.values():
            t = DTYPES[dtype]
            if t.is_floating_point:
                counts[t] = counts.get(t, 0) + 1
        return max(counts, key=lambda t: counts[t]) if counts else None


def _weight_map(index: Path) -> dict[str, str]:
    """An index's weight_map (tensor name -> shard file): plain names in the same directory."""
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        items = list(weight_map.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise CheckpointError(f"{index}: invalid index ({exc})") from None
    for _, value in items:
        if not isinstance(value, str) or Path(value).name != value or value in ("", ".", ".."):
            raise CheckpointError(
                f"{index}: invalid index (weight_map value {value!r} is not a file name in "
                f"the checkpoint directory)"
            )
    return dict(items)


# ---------------------------------------------------------------------------- name mapping
def _canonical(name: str) -> str | None:
    """Map a raw checkpoint name to our prefix convention; None for tensors we ignore."""
    if name.startswith("model.language_model."):
        name = "model." + name[len("model.language_model."):]
    elif name.startswith("language_model."):
        name = "model." + name[len("language_model."):]
    if name.startswith(IGNORED_PREFIXES):
        return None
    return name


Getter = Callable[[], torch.Tensor]
# our parameter name -> (function reading it, where it comes from, its shape as the file headers
# give it, or None where only reading tells: a split of a fused tensor of the wrong size)
Source = tuple[Getter, str, list[int] | None]


def _sources(tensors: _Tensors, config: DecisionConfig) -> dict[str, Source]:
    """Every parameter the checkpoint provides, by our name. Two tensors that give one parameter
    (``model.X`` and ``model.language_model.X``, packed and per-expert experts, fused and split
    GDN projections) are refused: which one the model would hold is anybody's guess."""
    out: dict[str, Source] = {}
    origin: dict[str, str] = {}  # our name -> the raw tensor it came from
    experts: dict[str, dict[int, dict[str, str]]] = {}

    def add(name: str, raw: str, source: Source) -> None:
        if name in origin:
            raise CheckpointError(
                f"{tensors.where[raw]}: tensor {raw!r} and tensor {origin[name]!r} of "
                f"{tensors.where[origin[name]]} both give {name!r}"
            )
        origin[name] = raw
        out[name] = source

    for raw in tensors.where:
        name = _canonical(raw)
        if name is None:
            continue
        where = f"{tensors.where[raw]}: tensor {raw!r}"
        match = _EXPERT.match(name)
        if match:
            parts = experts.setdefault(match[1], {}).setdefault(int(match[2]), {})
            if match[3] in parts:
                first = parts[match[3]]
                raise CheckpointError(
                    f"{where} and tensor {first!r} of {tensors.where[first]} both give {name!r}"
                )
            parts[match[3]] = raw
        elif name.endswith("linear_attn.in_proj_qkvz.weight"):
            base = name[: -len("in_proj_qkvz.weight")]
            qkv, z = _split_qkvz(tensors, raw, config)
            add(base + "in_proj_qkv.weight", raw, (qkv[0], where, _shape(tensors, raw, qkv[1])))
            add(base + "in_proj_z.weight", raw, (z[0], where, _shape(tensors, raw, z[1])))
        elif name.endswith("linear_attn.in_proj_ba.weight"):
            base = name[: -len("in_proj_ba.weight")]
            b, a = _split_ba(tensors, raw, config)
            add(base + "in_proj_b.weight", raw, (b[0], where, _shape(tensors, raw, b[1])))
            add(base + "in_proj_a.weight", raw, (a[0], where, _shape(tensors, raw, a[1])))
        else:
            add(name, raw, (_getter(tensors, raw), where, tensors.shape(raw)))
    for prefix, per_expert in experts.items():
        for name, raw, source in _pack_experts(tensors, prefix, per_expert, config):
            add(name, raw, source)
    return out


def _shape(tensors: _Tensors, raw: str, rows: int) -> list[int] | None:
    """The shape of ``rows`` rows of the fused 2-D tensor ``raw``; None when it is not 2-D."""
    shape = tensors.shape(raw)
    return [rows, shape[1]] if len(shape) == 2 else None


def _getter(tensors: _Tensors, raw: str) -> Getter:
    return lambda: tensors.get(raw)


def _split_qkvz(
    tensors: _Tensors, raw: str, config: DecisionConfig
) -> tuple[tuple[Getter, int], tuple[Getter, int]]:
    """Qwen3-Next ``in_proj_qkvz``: rows grouped per key head as [q (Dk), k (Dk), v (r*Dv),
    z (r*Dv)] with r = Hv / Hk (``fix_query_key_value_ordering`` in modeling_qwen3_next.py).
    Returns (getter, rows) for qkv and for z."""
    hk, dk = config.linear_num_key_heads, config.linear_key_head_dim
    dv = config.linear_value_head_dim
    r = config.linear_num_value_heads // hk

    def parts() -> tuple[torch.Tensor, torch.Tensor]:
        w = tensors.get(raw)
        group = 2 * dk + 2 * r * dv
        if w.dim() != 2 or w.shape[0] != hk * group:
            raise CheckpointError(
                f"{tensors.where[raw]}: tensor {raw!r} has shape {list(w.shape)}, expected "
                f"[{hk * group}, hidden]"
            )
        g = w.view(hk, group, -1)
        q, k, v, z = torch.split(g, [dk, dk, r * dv, r * dv], dim=1)
        hidden = w.shape[1]
        qkv = torch.cat([q.reshape(-1, hidden), k.reshape(-1, hidden), v.reshape(-1, hidden)])
        return qkv, z.reshape(-1, hidden)

    return ((lambda: parts()[0]), hk * (2 * dk + r * dv)), ((lambda: parts()[1]), hk * r * dv)


def _split_ba(
    tensors: _Tensors, raw: str, config: DecisionConfig
) -> tuple[tuple[Getter, int], tuple[Getter, int]]:
    """Qwen3-Next ``in_proj_ba``: rows grouped per key head as [b (r), a (r)]."""
    hk = config.linear_num_key_heads
    r = config.linear_num_value_heads // hk

    def parts() -> tuple[torch.Tensor, torch.Tensor]:
        w = tensors.get(raw)
        if w.dim() != 2 or w.shape[0] != 2 * r * hk:
            raise CheckpointError(
                f"{tensors.where[raw]}: tensor {raw!r} has shape {list(w.shape)}, expected "
                f"[{2 * r * hk}, hidden]"
            )
        b, a = torch.split(w.view(hk, 2 * r, -1), [r, r], dim=1)
        return b.reshape(hk * r, -1), a.reshape(hk * r, -1)

    return ((lambda: parts()[0]), hk * r), ((lambda: parts()[1]), hk * r)


def _pack_experts(
    tensors: _Tensors, prefix: str, per_expert: dict[int, dict[str, str]], config: DecisionConfig,
) -> list[tuple[str, str, Source]]:
    """Per-expert gate/up/down weights -> packed gate_up_proj [E, 2I, H] and down_proj [E, H, I]:
    (our name, the first raw tensor, source) for each."""
    first = next(iter(per_expert.values()))
    file = tensors.where[next(iter(first.values()))]
    extra = sorted(e for e in per_expert if e >= config.num_experts)
    if extra:
        raise CheckpointError(
            f"{file}: tensors '{prefix}.{extra[0]}.*_proj.weight' of an expert past "
            f"config.json's num_experts={config.num_experts}"
        )
    for e in range(config.num_experts):
        for part in ("gate_proj", "up_proj", "down_proj"):
            if part not in per_expert.get(e, {}):
                raise CheckpointError(
                    f"{file}: missing tensor '{prefix}.{e}.{part}.weight' "
                    f"(config.json says num_experts={config.num_experts})"
                )
    _check_expert_shapes(tensors, per_expert, config.num_experts)

    def gate_up() -> torch.Tensor:
        return torch.stack([
            torch.cat([tensors.get(per_expert[e]["gate_proj"]),
                       tensors.get(per_expert[e]["up_proj"])])
            for e in range(config.num_experts)
        ])

    def down() -> torch.Tensor:
        return torch.stack(
            [tensors.get(per_expert[e]["down_proj"]) for e in range(config.num_experts)]
        )

    where = f"{file}: tensors '{prefix}.J.*_proj.weight'"
    gate, down_shape = tensors.shape(per_expert[0]["gate_proj"]), tensors.shape(
        per_expert[0]["down_proj"])
    e = config.num_experts
    return [
        (prefix + ".gate_up_proj", per_expert[0]["gate_proj"],
         (gate_up, where, [e, 2 * gate[0], *gate[1:]])),
        (prefix + ".down_proj", per_expert[0]["down_proj"], (down, where, [e, *down_shape])),
    ]


def _check_expert_shapes(
    tensors: _Tensors, per_expert: dict[int, dict[str, str]], num_experts: int
) -> None:
    """Per-expert tensors are stacked into one: every expert's gate, up and down weight must be
    2-D and of the first expert's shapes, with gate and up of one shape."""
    first = {part: tensors.shape(per_expert[0][part]) for part in per_expert[0]}
    if len(first["gate_proj"]) != 2 or first["up_proj"] != first["gate_proj"]:
        raw = per_expert[0]["up_proj"]
        raise CheckpointError(
            f"{tensors.where[raw]}: tensor {raw!r} has shape {tensors.shape(raw)}, gate_proj "
            f"{first['gate_proj']} (expected both [moe_intermediate_size, hidden])"
        )
    for e in range(1, num_experts):
        for part, shape in first.items():
            raw = per_expert[e][part]
            if tensors.shape(raw) != shape:
                raise CheckpointError(
                    f"{tensors.where[raw]}: tensor {raw!r} has shape {tensors.shape(raw)}, "
                    f"expert 0's has {shape} (every expert of a layer has one shape)"
                )


def _is_block_param(name: str) -> bool:
    if name == "model.segment_embed.weight":
        return True
    return ".linear_attn." in name and name.split(".linear_attn.", 1)[1] in BLOCK_PARAM_NAMES


# ---------------------------------------------------------------------------- public entry points
def read_config(directory: Path) -> DecisionConfig:
    """Parse ``directory/config.json`` into a DecisionConfig (CheckpointError when bad)."""
    file = directory / "config.json"
    if not file.is_file():
        # a folder of that name, or a dangling link, is there but no file: "missing" misled
        if os.path.lexists(file):
            raise CheckpointError(f"{file}: not a regular file")
        raise CheckpointError(f"{file}: missing config.json")
    try:
        data = file.read_bytes()
    except OSError as exc:  # no permission, an I/O error: not "invalid JSON"
        raise CheckpointError(f"{file}: cannot read ({exc.strerror or exc})") from None
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # deep nesting
        raise CheckpointError(f"{file}: invalid JSON ({exc})") from None
    try:
        return DecisionConfig.from_dict(raw, source=str(file))
    except (TypeError, ValueError, ArithmeticError) as exc:  # a check the config lacks
        raise CheckpointError(f"{file}: invalid field ({exc})") from None


def _requested_dtype(dtype: object) -> torch.dtype | str | None:
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


def _resolve_dtype(
    dtype: torch.dtype | str | None, fallback: torch.dtype | None, device: torch.device
) -> torch.dtype:
    """The dtype to compute in: ``dtype`` as checked by ``_requested_dtype``; ``fallback`` is
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
    return _requested_dtype(dtype)  # type: ignore[return-value]


def _device_count(kind: str) -> int:
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
    count = _device_count(dev.type)
    name = dev.type.upper()
    if count == 0:
        raise CheckpointError(f"device {device!r}: this torch sees no {name} GPU")
    if dev.index is not None and dev.index >= count:
        raise CheckpointError(f"device {device!r}: this torch sees {count} {name} GPU(s)")
    return dev


def load_model(
    path: str | Path | None = None, device: str | torch.device = "cpu",
    dtype: torch.dtype | str | None = "auto",
) -> DecisionModel:
    """Load a checkpoint directory (None: the shipped default at <repo>/models/default).

    ``dtype`` "auto" computes in the checkpoint's dtype on accelerators and in float32 on the CPU
    (a bf16 checkpoint is upcast there); None always keeps the checkpoint's dtype; a dtype or its
    name ("float32", "bfloat16", ...) is used as given.
    Block-path parameters absent from the checkpoint keep their neutral initial values; their
    names are logged and kept in ``model.missing_block_params``.
    """
    if path is None:
        if not DEFAULT_MODEL_DIR.is_dir():
            raise CheckpointError(
                f"{DEFAULT_MODEL_DIR}: no default model yet: train one or pass a path"
            )
        path = DEFAULT_MODEL_DIR
    directory = Path(path)
    try:
        device = usable_device(device)
        dtype = _requested_dtype(dtype)
    except CheckpointError as exc:
        raise CheckpointError(f"{directory}: {exc}") from None
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: not a checkpoint directory")
    config = read_config(directory)
    tokenizer = _read_tokenizer(directory)
    if tokenizer is not None:
        _check_tokenizer(directory, tokenizer, config.vocab_size)
    with ExitStack() as stack:
        tensors = _Tensors(directory, stack)
        target = _resolve_dtype(dtype, tensors.float_dtype(), device)
        sources = _sources(tensors, config)
        # every name and header shape is checked on a model without storage before one is
        # built: a config.json that disagrees with the weights (hidden_size 10**9) would
        # otherwise allocate its model, or fail to, before any check
        missing_block = _plan(config, sources, directory, tensors.files)
        try:
            # in the dtype it computes in before the weights are copied in: a float64 checkpoint
            # read through float32 parameters lost its low bits
            model = DecisionModel(config).to(dtype=target)
        except (RuntimeError, MemoryError) as exc:
            raise CheckpointError(f"{directory}: cannot build the model of config.json "
                                  f"({str(exc).splitlines()[0]})") from None
        _fill(model, sources)
    model.to(device=device)
    model.eval()
    model.missing_block_params = missing_block
    if missing_block:
        logger.warning(
            "%s: %d block-path parameters not in the checkpoint, set to neutral values: %s",
            directory, len(missing_block), ", ".join(missing_block),
        )
    model.tokenizer = tokenizer
    return model


def _check_tokenizer(directory: Path, tokenizer: Any, vocab_size: int) -> None:
    """Every id of the tokenizer indexes the embedding: its largest id is below vocab_size.

    Counting tokens is not enough: a tokenizer's ids may leave gaps, so a small one can still
    hold an id past the embedding, and every request that meets it fails."""
    ids = tokenizer.get_vocab(with_added_tokens=True).values()
    largest = max(ids, default=-1)
    if largest >= vocab_size:
        raise CheckpointError(
            f"{directory}: tokenizer.json has token id {largest} but config.json vocab_size "
            f"is {vocab_size} (a tokenizer of another model?)"
        )


def weights_fingerprint(model: torch.nn.Module) -> str:
    """SHA-256 of a model's weights (names, dtypes, shapes and bytes): two models give the same
    answers where it is the same. ``decision score`` records it (``--resume`` checks it) and
    ``decision eval`` too. Of the weights as loaded: on a CPU a bf16 checkpoint is upcast to
    float32 (``dtype="auto"``), as eval loads it, so the two agree there."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}:{flat.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def check_decoding_tokenizer(directory: str | Path, tokenizer: Any) -> None:
    """The decoder's own checks of a tokenizer (the layout's special tokens, a byte-level piece
    for every byte, text encoded as its own bytes), made now, as a :class:`CheckpointError`
    naming ``directory/tokenizer.json``. ``load_model`` takes any tokenizer; a service that
    only found out at the first request answered every request 422, the client's fault."""
    from decision.schemas.compile import tokenizer_context  # cached: the first request reuses it

    try:
        tokenizer_context(tokenizer)
    except DecisionInputError as exc:
        raise CheckpointError(f"{Path(directory) / 'tokenizer.json'}: the decoder cannot use "
                              f"this tokenizer ({exc.message})") from None


def _plan(
    config: DecisionConfig, sources: dict[str, Source], directory: Path, files_read: list[Path],
) -> list[str]:
    """Check the checkpoint's names and header shapes against the model of ``config`` (built on
    the meta device: no storage) before any weight is read; returns the block-path parameters
    that are absent and keep their initial values."""
    try:
        with torch.device("meta"):
            skeleton = DecisionModel(config)
    except (RuntimeError, TypeError, ValueError, OverflowError) as exc:  # sizes past int64
        raise CheckpointError(f"{directory}: config.json describes a model torch cannot build "
                              f"({str(exc).splitlines()[0]})") from None
    tied = config.tie_word_embeddings
    missing_block: list[str] = []
    used: set[str] = set()
    present = absent = 0  # numbers in the parameters read, in those left at their initial values
    for name, param in skeleton.state_dict().items():
        if tied and name == "lm_head.weight":
            continue
        if name not in sources:
            if _is_block_param(name):
                missing_block.append(name)
                absent += param.numel()
                continue
            files = ", ".join(sorted({p.name for p in files_read}))
            raise CheckpointError(f"{directory}: missing tensor {name!r} (not in {files})")
        _, where, shape = sources[name]
        if shape is not None:
            _check_shape(where, shape, list(param.shape), name)
        used.add(name)
        present += param.numel()
    if absent > present:  # only config.json sizes them: num_segments, right_conv_kernel
        raise CheckpointError(
            f"{directory}: the block-path parameters that the weights lack would hold {absent:,} "
            f"numbers, more than the {present:,} of the weights (config.json's num_segments "
            f"{config.num_segments} or right_conv_kernel {config.right_conv_kernel} too large?)"
        )
    unused = sorted(n for n in sources if n not in used and not (tied and n == "lm_head.weight"))
    # A layer's tensor that no parameter takes (a layer past num_hidden_layers, a part this
    # backbone lacks) means the weights describe another network than config.json: loading the
    # rest would compute something else. Rotary inv_freq buffers are derived from the config.
    dropped = [n for n in unused if n.startswith("model.layers.") and not n.endswith(".inv_freq")]
    if dropped:
        more = ", ..." if len(dropped) > 5 else ""
        raise CheckpointError(
            f"{directory}: {len(dropped)} layer tensors that the model of config.json "
            f"(num_hidden_layers {config.num_hidden_layers}) does not have: "
            f"{', '.join(dropped[:5])}{more} (config.json and weights disagree)"
        )
    if unused:
        logger.warning("%s: ignoring %d unknown tensors: %s", directory, len(unused),
                       ", ".join(unused[:10]))
    return missing_block


def _check_shape(where: str, shape: list[int], expected: list[int], name: str) -> None:
    if shape != expected:
        raise CheckpointError(
            f"{where} has shape {shape}, expected {expected} for {name!r} (config.json and "
            f"weights disagree)"
        )


def _fill(model: DecisionModel, sources: dict[str, Source]) -> None:
    """Copy every parameter that ``sources`` has (``_plan`` checked names and shapes)."""
    tied = model.config.tie_word_embeddings
    for name, param in model.state_dict().items():
        if (tied and name == "lm_head.weight") or name not in sources:
            continue
        getter, where, _ = sources[name]
        tensor = _read_source(getter, where)
        if param.is_floating_point() and not tensor.is_floating_point():
            raise CheckpointError(
                f"{where} has dtype {str(tensor.dtype).removeprefix('torch.')}, not a floating "
                f"dtype, for the floating parameter {name!r}"
            )
        _check_shape(where, list(tensor.shape), list(param.shape), name)
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise CheckpointError(
                f"{where} holds {bad} NaN or infinite values (for {name!r}): a diverged or "
                f"corrupted checkpoint"
            )
        cast = tensor.to(param.dtype)
        if cast.is_floating_point() and not bool(torch.isfinite(cast).all()):
            bad = int((~torch.isfinite(cast)).sum())
            kind = str(param.dtype).removeprefix("torch.")
            raise CheckpointError(
                f"{where} holds {bad} values outside the range of {kind} (for {name!r}): load "
                f"it in a wider dtype"
            )
        with torch.no_grad():
            param.copy_(cast)
    if tied and "lm_head.weight" in sources:
        _check_tied_head(model, sources["lm_head.weight"])


def _check_tied_head(model: DecisionModel, source: Source) -> None:
    """With tie_word_embeddings the output head is the embedding, and an ``lm_head.weight``
    beside it is taken for a copy: one that differs is a head trained on its own (a config.json
    of an untied run, the flag flipped), and the model answered with the embedding in its place."""
    getter, where, _ = source
    head = _read_source(getter, where)
    embedding = model.model.embed_tokens.weight
    if head.shape != embedding.shape or not torch.equal(head.to(embedding.dtype), embedding):
        raise CheckpointError(
            f"{where} is not the embedding 'model.embed_tokens.weight', but config.json says "
            f"tie_word_embeddings true, which would drop it for the embedding (set it false for "
            f"a head of its own)"
        )


def _read_source(getter: Getter, where: str) -> torch.Tensor:
    """Run one source's getter; an error assembling its tensor (a split or stack the checks
    before did not foresee) becomes a CheckpointError naming the source."""
    try:
        return getter()
    except RuntimeError as exc:
        raise CheckpointError(f"{where}: cannot assemble the tensor ({exc})") from None


def _read_tokenizer(directory: Path) -> Any:
    """``directory/tokenizer.json`` loaded with ``tokenizers``; None when there is none."""
    file = directory / "tokenizer.json"
    if not os.path.lexists(file):  # a dangling link is a tokenizer.json that cannot be read
        return None
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(file))
    except Exception as exc:  # tokenizers raises a bare Exception subclass
        raise CheckpointError(f"{file}: cannot load tokenizer ({exc})") from None


# ---------------------------------------------------------------------------- saving
def _parse_size(size: int | str | None) -> int | None:
    """``max_shard_size``: bytes, or a string like "500KB", "10MB", "2GB"."""
    if size is None or (isinstance(size, int) and not isinstance(size, bool) and size > 0):
        return size
    match = (re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]i?B|B)?\s*", size, flags=re.IGNORECASE)
             if isinstance(size, str) else None)
    if not match or float(match[1]) <= 0:
        raise DecisionInputError(f"max_shard_size {size!r}: use bytes (> 0) or e.g. '10MB'",
                                 "max_shard_size")
    unit = (match[2] or "B").upper()
    mult = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9,
            "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}[unit]
    return int(float(match[1]) * mult)


def save_checkpoint(
    model: DecisionModel, path: str | Path, max_shard_size: int | str | None = None
) -> None:
    """Write the model in its own dtype; shards (with an index) above ``max_shard_size`` bytes."""
    limit = _parse_size(max_shard_size)  # before anything is written
    directory = Path(path)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file there, or under one; no permission
        raise CheckpointError(f"cannot write a checkpoint to {directory}: "
                              f"{exc.strerror or exc}") from None
    state = {
        name: t.detach().to("cpu").contiguous()
        for name, t in model.state_dict().items()
        if not (model.config.tie_word_embeddings and name == "lm_head.weight")
    }
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in state.items():
        nbytes = t.numel() * t.element_size()
        if limit is not None and shards[-1] and size + nbytes > limit:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += nbytes
    # Every file is written whole beside its name first (NAME.part) and only then moved into
    # place: a save killed while writing (minutes for a large model) leaves the checkpoint that
    # was there whole, where removing its weights first left none.
    staged: dict[str, Path] = {}

    def stage(name: str) -> Path:
        staged[name] = directory / (name + ".part")
        return staged[name]

    try:
        if len(shards) == 1:
            _write_safetensors(shards[0], stage(SINGLE_NAME))
        else:
            weight_map: dict[str, str] = {}
            for i, shard in enumerate(shards, 1):
                fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
                _write_safetensors(shard, stage(fname))
                weight_map.update({name: fname for name in shard})
            total = sum(t.numel() * t.element_size() for t in state.values())
            index = {"metadata": {"total_size": total}, "weight_map": weight_map}
            stage(INDEX_NAME).write_text(json.dumps(index, indent=2))
        config = model.config.to_dict()
        config["dtype"] = str(model.dtype).removeprefix("torch.")
        stage("config.json").write_text(json.dumps(config, indent=2))
        if model.tokenizer is not None:
            model.tokenizer.save(str(stage("tokenizer.json")))
        for part in staged.values():  # on disk before a rename publishes it: after a power
            fsync_file(part)          # loss a renamed file may otherwise be empty
    except BaseException:  # nothing of this save is left behind
        for part in staged.values():
            part.unlink(missing_ok=True)
        raise
    stale = {p.name for p in directory.glob("model*.safetensors")} | {INDEX_NAME}
    if model.tokenizer is None:  # an older model's tokenizer.json would load beside these weights
        stale.add("tokenizer.json")
    for name in stale - set(staged):
        (directory / name).unlink(missing_ok=True)
    for name, part in staged.items():
        os.replace(part, directory / name)
    fsync_dir(directory)  # the renames themselves
    for part in [*directory.glob("model*.safetensors.part"),  # a save killed outright (SIGKILL)
                 *(directory / (name + ".part") for name in _SAVED_FILES)]:
        part.unlink(missing_ok=True)


_SAVED_FILES = (INDEX_NAME, "config.json", "tokenizer.json")


def _write_safetensors(tensors: dict[str, torch.Tensor], file: Path) -> None:
    """``save_file``, then the mode every other file of the directory gets (0666 less the
    umask): safetensors' writer creates its files 0600, unreadable to a group that can read
    config.json."""
    save_file(tensors, str(file), metadata={"format": "pt"})
    os.chmod(file, 0o666 & ~_umask())


def _umask() -> int:
    """The process umask, read from /proc where there is one (setting it to read it back would
    change it for a moment for every thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
