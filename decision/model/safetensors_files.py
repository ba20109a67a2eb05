"""Read and write safetensors files, the weight files of a checkpoint directory.

Reading checks every file's header against the file's size (and an index's weight_map against
the shards' headers) before any tensor is read, then reads tensors lazily by name across the
directory's files; writing gives each weight file the mode the umask gives. This is the file
format alone: which tensor gives which parameter is weight_mapping.py, the directory's layout
and entry points checkpoint.py. Every failure is a CheckpointError naming the file (and tensor).
"""

from __future__ import annotations

import json
import math
import os
import struct
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from decision.errors import CheckpointError

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
# valid safetensors dtypes this loader does not read (8/6/4-bit floats, unsigned, complex)
UNSUPPORTED_DTYPES = {"F8_E5M2", "F8_E4M3", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "U16", "U32",
                      "U64", "C64"}


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


class CheckpointTensors:
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


# ---------------------------------------------------------------------------- writing files
def write_safetensors(tensors: dict[str, torch.Tensor], file: Path) -> None:
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
