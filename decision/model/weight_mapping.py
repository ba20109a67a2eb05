"""Map a checkpoint's tensors onto the model's parameters: which tensor gives which parameter,
checked by name and header shape against the model of config.json before any weight is read,
then read, checked and copied in.

Accepted tensor names: Qwen3.5-MoE / Qwen3.5 (prefix ``model.`` or ``model.language_model.``),
per-expert ``mlp.experts.J.{gate,up,down}_proj.weight`` or packed ``mlp.experts.gate_up_proj`` /
``mlp.experts.down_proj``, ``lm_head.weight`` or tied embeddings, and Qwen3-Next's fused
``in_proj_qkvz`` / ``in_proj_ba``. This is where other tools' checkpoints meet our layout; the
file format is safetensors_files.py. Every failure is one CheckpointError naming file and tensor.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import torch

from decision.errors import CheckpointError
from decision.model.backbone import DecisionModel
from decision.model.config import DecisionConfig
from decision.model.gdn import BLOCK_PARAM_NAMES
from decision.model.safetensors_files import CheckpointTensors

IGNORED_PREFIXES = ("mtp.", "model.visual.", "visual.", "model.rotary_emb.")

_EXPERT = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


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


def tensor_sources(tensors: CheckpointTensors, config: DecisionConfig) -> dict[str, Source]:
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


def _shape(tensors: CheckpointTensors, raw: str, rows: int) -> list[int] | None:
    """The shape of ``rows`` rows of the fused 2-D tensor ``raw``; None when it is not 2-D."""
    shape = tensors.shape(raw)
    return [rows, shape[1]] if len(shape) == 2 else None


def _getter(tensors: CheckpointTensors, raw: str) -> Getter:
    return lambda: tensors.get(raw)


def _split_qkvz(
    tensors: CheckpointTensors, raw: str, config: DecisionConfig
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
    tensors: CheckpointTensors, raw: str, config: DecisionConfig
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
    tensors: CheckpointTensors, prefix: str, per_expert: dict[int, dict[str, str]],
    config: DecisionConfig,
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
    tensors: CheckpointTensors, per_expert: dict[int, dict[str, str]], num_experts: int
) -> None:
    """Per-expert tensors are stacked into one: expert 0's gate and up weights must be 2-D and
    of one shape, and every expert's gate, up and down weights of expert 0's shapes (down's own
    shape is checked against the model's once packed, in :func:`plan_load`)."""
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


# ---------------------------------------------------------------------------- checking, copying in
def plan_load(
    config: DecisionConfig, sources: dict[str, Source], directory: Path, files_read: list[Path],
) -> tuple[list[str], list[str]]:
    """Check the checkpoint's names and header shapes against the model of ``config`` (built on
    the meta device: no storage) before any weight is read; returns the block-path parameters
    that are absent and keep their initial values, and the unknown tensors that no parameter
    takes (sorted; the loader warns of them)."""
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
    return missing_block, unused


def _check_shape(where: str, shape: list[int], expected: list[int], name: str) -> None:
    if shape != expected:
        raise CheckpointError(
            f"{where} has shape {shape}, expected {expected} for {name!r} (config.json and "
            f"weights disagree)"
        )


def fill_model(model: DecisionModel, sources: dict[str, Source]) -> None:
    """Copy every parameter that ``sources`` has (``plan_load`` checked names and shapes)."""
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
