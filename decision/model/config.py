"""DecisionConfig: the Qwen3.5-MoE / Qwen3.5 / Qwen3-Next text fields plus our diffusion fields.

It reads the ``config.json`` that ``transformers`` writes for these families (flat text configs,
or a top-level multimodal config with a nested ``text_config``), including the transformers-5
``rope_parameters`` dict and the older ``rope_scaling`` / ``rope_theta`` forms.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from decision.errors import CheckpointError

LINEAR = "linear_attention"
FULL = "full_attention"

# model_type values whose text part we can run, and the architectures that carry them.
TEXT_MODEL_TYPES = {
    "qwen3_5_moe_text",
    "qwen3_5_text",
    "qwen3_next",
    "decision",
}
NESTED_MODEL_TYPES = {"qwen3_5_moe", "qwen3_5"}
# special token ids: an int, or (transformers) a list whose first entry counts, or null
TOKEN_ID_FIELDS = ("mask_token_id", "pad_token_id", "eos_token_id", "bos_token_id")
KNOWN_ARCHITECTURES = {
    "Qwen3_5MoeForCausalLM",
    "Qwen3_5MoeForConditionalGeneration",
    "Qwen3_5MoeTextModel",
    "Qwen3_5MoeModel",
    "Qwen3_5ForCausalLM",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5TextModel",
    "Qwen3_5Model",
    "Qwen3NextForCausalLM",
    "Qwen3NextModel",
    "DecisionModel",
}


@dataclass
class DecisionConfig:
    """Hyper-parameters of the backbone (field names follow the Qwen3.5-MoE text config)."""

    vocab_size: int = 256
    hidden_size: int = 64
    num_hidden_layers: int = 4
    layer_types: list[str] = field(default_factory=list)
    # gated softmax attention
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 16
    partial_rotary_factor: float = 0.25
    rope_theta: float = 10000.0
    attention_bias: bool = False
    max_position_embeddings: int = 32768
    # Gated DeltaNet
    linear_num_key_heads: int = 2
    linear_num_value_heads: int = 4
    linear_key_head_dim: int = 16
    linear_value_head_dim: int = 16
    linear_conv_kernel_dim: int = 4
    # feed-forward: MoE when num_experts > 0, else a dense MLP of intermediate_size
    num_experts: int = 0
    num_experts_per_tok: int = 2
    moe_intermediate_size: int = 64
    shared_expert_intermediate_size: int = 64
    norm_topk_prob: bool = True
    intermediate_size: int = 128
    decoder_sparse_step: int = 1  # Qwen3-Next: MoE on layers with (i + 1) % step == 0
    mlp_only_layers: list[int] = field(default_factory=list)  # Qwen3-Next: dense on these
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    # diffusion fields (ours)
    mask_token_id: int | None = None
    pad_token_id: int | None = None
    eos_token_id: int | None = None
    bos_token_id: int | None = None
    num_segments: int = 9
    right_conv_kernel: int = 4
    # block-path options: initial values of the learnable block parameters
    block_scale_init: float | None = None  # per-head in-block logit scale; None = sqrt(Dk)
    block_calibration_init: float = 1.0  # c_h: 1.0 keeps the history weight independent of L
    block_history_bias_init: float = 0.0  # b_h of the history logit
    # where the checkpoint came from (written back on save)
    source_model_type: str = "decision"

    def __post_init__(self) -> None:
        if not self.layer_types:
            self.layer_types = default_layer_types(self.num_hidden_layers, 4)
        self.validate()

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        """Raise CheckpointError for inconsistent sizes, so a bad config fails at load time."""
        self._check_sizes()
        self._check_layers()
        self._check_feed_forward()
        self._check_numbers()
        self._check_token_ids()

    def _check_sizes(self) -> None:
        """Every dimension a tensor of the backbone is built with is positive."""
        sizes = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "linear_num_key_heads",
                 "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
                 "linear_conv_kernel_dim")
        for name in sizes:
            if getattr(self, name) < 1:
                raise CheckpointError(f"config.json: {name} must be >= 1")
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise CheckpointError(
                "config.json: linear_num_value_heads must be a multiple of linear_num_key_heads"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise CheckpointError(
                "config.json: num_attention_heads must be a multiple of num_key_value_heads"
            )
        if self.num_segments < 1 or self.right_conv_kernel < 1:
            raise CheckpointError("config.json: num_segments and right_conv_kernel must be >= 1")
        if self.num_hidden_layers > MAX_LAYERS:
            raise CheckpointError(
                f"config.json: num_hidden_layers {self.num_hidden_layers} is above {MAX_LAYERS:,}"
            )
        if self.max_position_embeddings < 1:  # the longest request a model takes
            raise CheckpointError(
                f"config.json: max_position_embeddings must be >= 1, got "
                f"{self.max_position_embeddings}"
            )

    def _check_layers(self) -> None:
        """layer_types has one known type per layer; mlp_only_layers holds layer numbers."""
        if len(self.layer_types) != self.num_hidden_layers:
            raise CheckpointError(
                f"config.json: layer_types has {len(self.layer_types)} entries but "
                f"num_hidden_layers is {self.num_hidden_layers}"
            )
        bad = sorted({str(t) for t in self.layer_types if t not in (LINEAR, FULL)})
        if bad:
            raise CheckpointError(f"config.json: unknown layer type(s) {bad} in layer_types")
        if any(isinstance(i, bool) or not isinstance(i, int) for i in self.mlp_only_layers):
            raise CheckpointError(
                f"config.json: mlp_only_layers must be a list of layer numbers, got "
                f"{self.mlp_only_layers!r}"
            )

    def _check_feed_forward(self) -> None:
        """MoE sizes and the widths of the feed-forward blocks the layers use: a zero width
        computes nothing, a negative one cannot be built."""
        if self.hidden_act != "silu":
            raise CheckpointError(f"config.json: hidden_act {self.hidden_act!r} unsupported")
        if self.num_experts < 0:
            raise CheckpointError(f"config.json: num_experts must be >= 0, got {self.num_experts}")
        if self.decoder_sparse_step < 1:  # transformers divides by it
            raise CheckpointError(
                f"config.json: decoder_sparse_step must be >= 1, got {self.decoder_sparse_step}"
            )
        moe = self.num_experts > 0
        if moe and not 1 <= self.num_experts_per_tok <= self.num_experts:
            raise CheckpointError(
                f"config.json: num_experts_per_tok must lie in [1, num_experts "
                f"{self.num_experts}], got {self.num_experts_per_tok}"
            )
        dense = any(not self.layer_is_moe(i) for i in range(self.num_hidden_layers))
        widths = {"intermediate_size": dense, "moe_intermediate_size": moe,
                  "shared_expert_intermediate_size": moe}
        for name, used in widths.items():
            least = 1 if used else 0
            if getattr(self, name) < least:
                raise CheckpointError(
                    f"config.json: {name} must be >= {least}, got {getattr(self, name)}"
                )

    def _check_numbers(self) -> None:
        """Rotary and normalisation constants and block-path initial values in range."""
        if not 0.0 <= self.partial_rotary_factor <= 1.0:
            raise CheckpointError(
                f"config.json: partial_rotary_factor must lie in [0, 1], got "
                f"{self.partial_rotary_factor}"
            )
        for name in ("rope_theta", "rms_norm_eps"):
            value = getattr(self, name)
            if not 0.0 < value < math.inf:
                raise CheckpointError(f"config.json: {name} must be > 0 and finite, got {value}")
        if self.block_scale_init is not None and not self.block_scale_init > 0:
            raise CheckpointError(
                f"config.json: block_scale_init must be > 0 (or null for sqrt(Dk)), got "
                f"{self.block_scale_init}"
            )

    def _check_token_ids(self) -> None:
        """The special token ids index the embedding, so they lie inside the vocabulary."""
        for name in TOKEN_ID_FIELDS:
            value = getattr(self, name)
            if value is not None and not 0 <= value < self.vocab_size:
                raise CheckpointError(
                    f"config.json: {name} {value} is outside the vocabulary "
                    f"[0, {self.vocab_size})"
                )

    # ------------------------------------------------------------------ derived
    @property
    def rotary_dim(self) -> int:
        """Number of leading head dimensions that RoPE rotates (partial rotary)."""
        return int(self.head_dim * self.partial_rotary_factor)

    def layer_is_moe(self, layer: int) -> bool:
        """Whether layer ``layer`` has the sparse MoE block (else a dense MLP)."""
        if self.num_experts <= 0 or layer in self.mlp_only_layers:
            return False
        return (layer + 1) % max(self.decoder_sparse_step, 1) == 0

    # ------------------------------------------------------------------ io
    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "config.json") -> DecisionConfig:
        """Build from a transformers-style config dict; unknown architectures raise."""
        if not isinstance(raw, dict):
            raise CheckpointError(f"{source}: expected a JSON object")
        archs = raw.get("architectures") or []
        model_type = raw.get("model_type")
        if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
            raise _invalid("architectures", archs, source)
        if model_type is not None and not isinstance(model_type, str):
            raise _invalid("model_type", model_type, source)
        if model_type in NESTED_MODEL_TYPES or "text_config" in raw:
            text = raw.get("text_config")
            if not isinstance(text, dict):
                raise CheckpointError(f"{source}: model_type {model_type!r} needs a text_config")
            text = dict(text)
            text.setdefault("tie_word_embeddings", raw.get("tie_word_embeddings", False))
            for key in DIFFUSION_FIELDS:
                if key in raw and key not in text:
                    text[key] = raw[key]
            model_type = text.get("model_type", f"{model_type}_text")
            if not isinstance(model_type, str):
                raise _invalid("text_config.model_type", model_type, source)
            raw = text
        if model_type not in TEXT_MODEL_TYPES:
            raise CheckpointError(
                f"{source}: unknown model_type {model_type!r}; supported: "
                f"{sorted(TEXT_MODEL_TYPES | NESTED_MODEL_TYPES)}"
            )
        unknown_archs = [a for a in archs if a not in KNOWN_ARCHITECTURES]
        if unknown_archs:
            raise CheckpointError(
                f"{source}: unknown architecture {unknown_archs[0]!r}; supported: "
                f"{sorted(KNOWN_ARCHITECTURES)}"
            )
        fields = _text_fields(raw, model_type, source)
        try:
            return cls(**fields)
        except CheckpointError as exc:  # validate() knows no file: it says "config.json: ..."
            raise CheckpointError(f"{source}: {str(exc).removeprefix('config.json: ')}") from None

    def to_dict(self) -> dict[str, Any]:
        """A config.json dict readable by this loader and, for the Qwen fields, by transformers."""
        out = dataclasses.asdict(self)
        src = out.pop("source_model_type")
        own_type = "qwen3_5_moe_text" if self.num_experts else "qwen3_5_text"
        # the source's type unless it would read back as dense (a dense source upcycled to MoE)
        keep = src in TEXT_MODEL_TYPES and src != "decision" and not (
            self.num_experts and src == "qwen3_5_text")
        out["model_type"] = src if keep else own_type
        out["architectures"] = ["DecisionModel"]
        out["rope_parameters"] = {
            "rope_type": "default",
            "rope_theta": out.pop("rope_theta"),
            "partial_rotary_factor": out.pop("partial_rotary_factor"),
        }
        return out


DIFFUSION_FIELDS = (
    "mask_token_id",
    "num_segments",
    "right_conv_kernel",
    "block_scale_init",
    "block_calibration_init",
    "block_history_bias_init",
)


def default_layer_types(num_layers: int, interval: int) -> list[str]:
    """Qwen3.5 default: every ``interval``-th layer is full attention, the rest GDN."""
    return [LINEAR if (i + 1) % interval else FULL for i in range(num_layers)]


# experts per token where a config.json leaves it out: transformers 5's default per family
FAMILY_TOP_K = {"qwen3_5_moe_text": 8, "qwen3_next": 10}
# a sanity bound: the largest Qwen3.5 / Qwen3-Next models have 60-some layers, and a config
# with 10**8 took 90 s (and gigabytes) to parse before anything could tell it was wrong
MAX_LAYERS = 10_000
REQUIRED_INTS = {"num_hidden_layers", "hidden_size", "vocab_size"}
LIST_FIELDS = {"layer_types": str, "mlp_only_layers": int}


def _invalid(name: str, value: Any, source: str) -> CheckpointError:
    return CheckpointError(f"{source}: field {name!r} has invalid value {value!r}")


def _coerce(name: str, value: Any, type_name: str, source: str) -> Any:
    """Check one scalar field's type (int / float / bool) so that errors name the field.

    JSON numbers only (no strings, no booleans as numbers); floats must be finite, since
    ``Infinity`` and ``NaN`` are JSON that Python reads and no size or constant can be either.
    """
    base = type_name.split("|")[0].strip()
    try:
        if base in ("int", "float") and isinstance(value, (bool, str)):
            raise ValueError
        if base == "int":
            if int(value) != value:
                raise ValueError
            return int(value)
        if base == "float":
            if not math.isfinite(float(value)):
                raise ValueError
            return float(value)
        if base == "bool" and not isinstance(value, bool):
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise _invalid(name, value, source) from None
    return value


def _coerce_list(name: str, value: Any, item: type, source: str) -> list[Any]:
    """A list field (layer_types, mlp_only_layers): a JSON list of ``item`` values."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _invalid(name, value, source)
    if item is int:
        return [_coerce(name, v, "int", source) for v in value]
    if not all(isinstance(v, item) for v in value):
        raise _invalid(name, value, source)
    return value


def _token_id(name: str, value: Any, source: str) -> int | None:
    """A special token id; eos_token_id may be a list in transformers configs: keep the first."""
    if isinstance(value, list):
        value = value[0] if value else None
    return None if value is None else _coerce(name, value, "int", source)


def _text_fields(raw: dict[str, Any], model_type: str, source: str) -> dict[str, Any]:
    """Map a flat text config dict onto DecisionConfig keyword arguments."""
    names = {f.name for f in dataclasses.fields(DecisionConfig)}
    kw: dict[str, Any] = {k: v for k, v in raw.items() if k in names}
    for key in ("num_hidden_layers", "hidden_size", "vocab_size"):
        if key not in raw:
            raise CheckpointError(f"{source}: missing field {key!r}")
    for f in dataclasses.fields(DecisionConfig):
        if f.name in TOKEN_ID_FIELDS:
            kw[f.name] = _token_id(f.name, kw.get(f.name), source)
        elif f.name in LIST_FIELDS:
            kw[f.name] = _coerce_list(f.name, kw.get(f.name), LIST_FIELDS[f.name], source)
        elif f.name in kw and kw[f.name] is not None or f.name in REQUIRED_INTS:
            kw[f.name] = _coerce(f.name, kw.get(f.name), str(f.type), source)
        elif f.name in kw and "None" not in str(f.type):
            del kw[f.name]  # null where a value belongs: as if absent, the default applies
    if kw["num_hidden_layers"] > MAX_LAYERS:  # before a list of that many layer types is built
        raise CheckpointError(
            f"{source}: num_hidden_layers {kw['num_hidden_layers']} is above {MAX_LAYERS:,}"
        )
    if not kw["layer_types"]:
        interval = _coerce("full_attention_interval", raw.get("full_attention_interval", 4),
                           "int", source)
        if interval < 1:
            raise _invalid("full_attention_interval", interval, source)
        kw["layer_types"] = default_layer_types(kw["num_hidden_layers"], interval)
    if kw.get("head_dim") is None:
        kw.pop("head_dim", None)
        heads = kw.get("num_attention_heads", 1)
        if heads >= 1:  # else validate() names num_attention_heads
            kw["head_dim"] = kw["hidden_size"] // heads
    kw.update(_rope_fields(raw, source))
    if model_type == "qwen3_5_text":
        kw["num_experts"] = 0
    if model_type == "qwen3_5_moe_text" and "norm_topk_prob" not in raw:
        kw["norm_topk_prob"] = True  # Qwen3.5-MoE always re-normalises the top-k weights
    if model_type in FAMILY_TOP_K and kw.get("num_experts_per_tok") is None:
        # transformers' default for the family, which a config without the field runs with
        kw["num_experts_per_tok"] = FAMILY_TOP_K[model_type]
    kw["num_experts"] = kw.get("num_experts") or 0
    kw["source_model_type"] = model_type
    return kw


def _rope_fields(raw: dict[str, Any], source: str) -> dict[str, float]:
    """RoPE: transformers 5 writes rope_parameters; older files rope_scaling + rope_theta."""
    rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    if not isinstance(rope, dict):
        raise CheckpointError(f"{source}: rope_parameters must be an object")
    if rope.keys() & {LINEAR, FULL}:
        # transformers 5 also nests them per layer type; only the attention layers rotate
        rope = rope.get(FULL) or {}
        if not isinstance(rope, dict):
            raise CheckpointError(f"{source}: rope_parameters.{FULL} must be an object")
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", None):
        raise CheckpointError(f"{source}: rope_type {rope_type!r} is not supported")
    out = {}
    for name, default in (("rope_theta", 10000.0), ("partial_rotary_factor", 0.25)):
        out[name] = _coerce(name, rope.get(name, raw.get(name, default)), "float", source)
    return out
