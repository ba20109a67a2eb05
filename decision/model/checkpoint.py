"""Load and save checkpoint directories: config.json, safetensors weights (optionally sharded
with model.safetensors.index.json) and an optional tokenizer.json.

The entry points (``load_model``, ``save_checkpoint``, ``read_config``, ``weights_fingerprint``)
and the directory's layout are here; the safetensors format is safetensors_files.py, which tensor
gives which parameter (Qwen3.5 and Qwen3-Next names included) weight_mapping.py, and the device
and dtype a model computes in device_dtype.py. Every failure is one CheckpointError naming the
directory or the file and tensor.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch

from decision.errors import CheckpointError, DecisionInputError
from decision.files import fsync_dir, fsync_file
from decision.model.backbone import DecisionModel
from decision.model.config import DecisionConfig
from decision.model.device_dtype import requested_dtype, resolve_dtype, usable_device
from decision.model.safetensors_files import (
    INDEX_NAME,
    SINGLE_NAME,
    CheckpointTensors,
    write_safetensors,
)
from decision.model.weight_mapping import fill_model, plan_load, tensor_sources

logger = logging.getLogger(__name__)

DEFAULT_MODEL_DIR = Path(__file__).resolve().parents[2] / "models" / "default"


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
        dtype = requested_dtype(dtype)
    except CheckpointError as exc:
        raise CheckpointError(f"{directory}: {exc}") from None
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: not a checkpoint directory")
    config = read_config(directory)
    tokenizer = _read_tokenizer(directory)
    if tokenizer is not None:
        _check_tokenizer(directory, tokenizer, config.vocab_size)
    with ExitStack() as stack:
        tensors = CheckpointTensors(directory, stack)
        target = resolve_dtype(dtype, tensors.float_dtype(), device)
        sources = tensor_sources(tensors, config)
        # every name and header shape is checked on a model without storage before one is
        # built: a config.json that disagrees with the weights (hidden_size 10**9) would
        # otherwise allocate its model, or fail to, before any check
        missing_block, unused = plan_load(config, sources, directory, tensors.files)
        if unused:
            logger.warning("%s: ignoring %d unknown tensors: %s", directory, len(unused),
                           ", ".join(unused[:10]))
        try:
            # in the dtype it computes in before the weights are copied in: a float64 checkpoint
            # read through float32 parameters lost its low bits
            model = DecisionModel(config).to(dtype=target)
        except (RuntimeError, MemoryError) as exc:
            raise CheckpointError(f"{directory}: cannot build the model of config.json "
                                  f"({str(exc).splitlines()[0]})") from None
        fill_model(model, sources)
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
            write_safetensors(shards[0], stage(SINGLE_NAME))
        else:
            weight_map: dict[str, str] = {}
            for i, shard in enumerate(shards, 1):
                fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
                write_safetensors(shard, stage(fname))
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
    # config.json goes first and comes back last: a save killed between two moves (new weights
    # beside the old tokenizer.json, which loaded without a word) leaves a directory without
    # config.json, which refuses to load ("missing config.json") until a save completes.
    (directory / "config.json").unlink(missing_ok=True)
    fsync_dir(directory)  # gone on the disk before any new file is there
    stale = {p.name for p in directory.glob("model*.safetensors")} | {INDEX_NAME}
    if model.tokenizer is None:  # an older model's tokenizer.json would load beside these weights
        stale.add("tokenizer.json")
    for name in stale - set(staged):
        (directory / name).unlink(missing_ok=True)
    for name, part in sorted(staged.items(), key=lambda item: item[0] == "config.json"):
        os.replace(part, directory / name)
    fsync_dir(directory)  # the renames themselves
    for part in [*directory.glob("model*.safetensors.part"),  # a save killed outright (SIGKILL)
                 *(directory / (name + ".part") for name in _SAVED_FILES)]:
        part.unlink(missing_ok=True)


_SAVED_FILES = (INDEX_NAME, "config.json", "tokenizer.json")
