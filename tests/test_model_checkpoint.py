"""Checkpoint round trips (single file, sharded, bf16, fp32) and one clear error per bad kind."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import decision
from decision.errors import CheckpointError
from decision.model import checkpoint, device_dtype, weight_mapping
from decision.model.testing import tiny_model

BLOCK = torch.tensor([[5, 6, 7, 96, 96, 8]])
HISTORY = torch.tensor([[3, 4, 9, 10, 11, 12, 13, 2, 40, 41]])


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return tiny_model(seed=5, random_block=True)


@pytest.fixture()
def saved(model: torch.nn.Module, tmp_path: Path) -> Path:
    model.save(tmp_path / "ckpt")
    return tmp_path / "ckpt"


def _logits(m: torch.nn.Module) -> torch.Tensor:
    with torch.inference_mode():
        return m.denoise(BLOCK, m.prefill(HISTORY))


def _same_params(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k].to(sa[k].dtype)) for k in sa)


def test_round_trip_single_file_fp32(model: torch.nn.Module, saved: Path) -> None:
    assert (saved / "model.safetensors").exists() and not (saved / "tokenizer.json").exists()
    loaded = decision.load_model(saved)
    assert loaded.dtype == torch.float32 and loaded.tokenizer is None
    assert loaded.missing_block_params == []
    assert _same_params(model, loaded)
    assert torch.equal(_logits(model), _logits(loaded))


def test_round_trip_sharded_bf16_and_upcast(model: torch.nn.Module, tmp_path: Path) -> None:
    bf16 = tiny_model(seed=5, random_block=True).to(torch.bfloat16)
    bf16.save(tmp_path, max_shard_size="20KB")
    shards = sorted(tmp_path.glob("model-*-of-*.safetensors"))
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(shards) > 1 and set(index["weight_map"].values()) == {s.name for s in shards}
    assert all(t.dtype == torch.bfloat16 for t in load_file(str(shards[0])).values()
               if t.is_floating_point())
    loaded = decision.load_model(tmp_path, dtype=None)  # None keeps the checkpoint's dtype
    assert loaded.dtype == torch.bfloat16 and _same_params(bf16, loaded)
    assert decision.load_model(tmp_path).dtype == torch.float32  # "auto" upcasts on the CPU
    up = decision.load_model(tmp_path, dtype=torch.float32)
    assert up.dtype == torch.float32 and _same_params(up, bf16)
    # bf16 weights, computed in fp32: logits close to the bf16 model's, far from nonsense
    torch.testing.assert_close(_logits(up), _logits(loaded).float(), atol=0.05, rtol=0.05)


def test_tokenizer_and_tied_embeddings_round_trip(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models

    tied = tiny_model(seed=6, tie_word_embeddings=True)
    tied.tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "yes": 1}, unk_token="[UNK]"))
    tied.save(tmp_path)
    assert "lm_head.weight" not in load_file(str(tmp_path / "model.safetensors"))
    loaded = decision.load_model(tmp_path)
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    assert loaded.tokenizer is not None and loaded.tokenizer.token_to_id("yes") == 1
    assert torch.equal(_logits(tied), _logits(loaded))


def test_missing_block_params_take_neutral_values(saved: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    file = saved / "model.safetensors"
    state = load_file(str(file))
    dropped = [k for k in state if "right_conv" in k or "block_" in k or "history_logit" in k
               or "segment_embed" in k]
    save_file({k: v for k, v in state.items() if k not in dropped}, str(file))
    with caplog.at_level(logging.WARNING, logger="decision.model.checkpoint"):
        loaded = decision.load_model(saved)
    assert sorted(loaded.missing_block_params) == sorted(dropped)
    assert "model.layers.0.linear_attn.right_conv.weight" in caplog.text
    gdn = loaded.model.layers[0].linear_attn
    assert torch.equal(gdn.right_conv.weight, torch.zeros_like(gdn.right_conv.weight))
    assert torch.equal(gdn.block_calibration, torch.ones_like(gdn.block_calibration))
    assert not loaded.model.segment_embed.weight.any()


# ---------------------------------------------------------------------------- errors
def _rewrite(saved: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    file = saved / "model.safetensors"
    state = load_file(str(file))
    edit(state)
    save_file(state, str(file))
    return file


def test_missing_tensor(saved: Path) -> None:
    name = "model.layers.1.linear_attn.in_proj_z.weight"
    _rewrite(saved, lambda s: s.pop(name))
    with pytest.raises(CheckpointError, match="missing tensor") as err:
        decision.load_model(saved)
    assert name in str(err.value) and str(saved) in str(err.value)


def test_wrong_shape(saved: Path) -> None:
    name = "model.layers.3.self_attn.k_proj.weight"
    file = _rewrite(saved, lambda s: s.__setitem__(name, torch.zeros(3, 32)))
    with pytest.raises(CheckpointError, match="shape") as err:
        decision.load_model(saved)
    assert name in str(err.value) and str(file) in str(err.value)


def test_truncated_file(saved: Path) -> None:
    file = saved / "model.safetensors"
    data = file.read_bytes()
    file.write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointError, match="truncated") as err:
        decision.load_model(saved)
    assert str(file) in str(err.value)


def test_corrupted_header(saved: Path) -> None:
    file = saved / "model.safetensors"
    data = bytearray(file.read_bytes())
    data[8:20] = b"\x00garbage!\xff\xfe\x01"
    file.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupted") as err:
        decision.load_model(saved)
    assert str(file) in str(err.value)


def test_missing_config(saved: Path) -> None:
    (saved / "config.json").unlink()
    with pytest.raises(CheckpointError, match="config.json") as err:
        decision.load_model(saved)
    assert str(saved / "config.json") in str(err.value)


def test_invalid_config_json(saved: Path) -> None:
    (saved / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="invalid JSON"):
        decision.load_model(saved)


@pytest.mark.parametrize("field,value", [("model_type", "llama"),
                                         ("architectures", ["LlamaForCausalLM"])])
def test_unknown_architecture(saved: Path, field: str, value: object) -> None:
    cfg = json.loads((saved / "config.json").read_text())
    cfg[field] = value
    (saved / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="unknown") as err:
        decision.load_model(saved)
    assert "config.json" in str(err.value) and "lama" in str(err.value)


def test_missing_shard_listed_in_index(model: torch.nn.Module, tmp_path: Path) -> None:
    model.save(tmp_path, max_shard_size=30_000)
    shard = sorted(tmp_path.glob("model-*.safetensors"))[-1]
    shard.unlink()
    with pytest.raises(CheckpointError, match=shard.name):
        decision.load_model(tmp_path)


def test_no_default_model_yet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(checkpoint, "DEFAULT_MODEL_DIR", tmp_path / "models" / "default")
    with pytest.raises(CheckpointError, match="no default model yet: train one or pass a path"):
        decision.load_model()


def test_mtp_tensors_ignored_unknown_ones_warned(saved: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    def add(state: dict[str, torch.Tensor]) -> None:
        state["mtp.layers.0.fc.weight"] = torch.zeros(2, 2)
        state["model.weird.weight"] = torch.zeros(2)

    _rewrite(saved, add)
    with caplog.at_level(logging.WARNING, logger="decision.model.checkpoint"):
        decision.load_model(saved)
    assert "model.weird.weight" in caplog.text and "mtp." not in caplog.text


@pytest.mark.parametrize("extra", ["model.layers.4.mlp.gate.weight",  # a layer past the config's
                                   "model.layers.0.weird.weight"])  # a part the layer lacks
def test_layer_tensors_the_model_does_not_read_are_refused(saved: Path, extra: str) -> None:
    """A checkpoint with more layers than config.json's num_hidden_layers (4) loaded the first
    four with only a warning: a different network than the weights describe."""
    _rewrite(saved, lambda s: s.__setitem__(extra, torch.zeros(2, 2)))
    with pytest.raises(CheckpointError, match="num_hidden_layers 4") as err:
        decision.load_model(saved)
    assert extra in str(err.value) and str(saved) in str(err.value)


@pytest.mark.parametrize(
    ("device", "words"),
    [("banana", "not a torch device"), ("cuda", "CUDA GPU"), ("cuda:99", "CUDA GPU")],
)
def test_an_unusable_device_is_one_clear_error(saved: Path, device: str, words: str) -> None:
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(CheckpointError, match=words):
        checkpoint.load_model(saved, device=device)


@pytest.mark.parametrize("edit", ["num_hidden_layers", "dtype", "device", "tokenizer"])
def test_every_load_error_names_the_directory(saved: Path, edit: str) -> None:
    """DecisionConfig's own checks said only "config.json: ...", an unknown dtype or device and
    a model without tokenizer.json (decision serve) did not say which model."""
    from decision.errors import DecisionInputError
    from decision.serve.engine import ModelEngine

    kwargs: dict[str, object] = {}
    if edit == "num_hidden_layers":
        cfg = json.loads((saved / "config.json").read_text())
        cfg["num_hidden_layers"] = 0
        (saved / "config.json").write_text(json.dumps(cfg))
    elif edit == "dtype":
        kwargs["dtype"] = "float8"
    elif edit == "device":
        kwargs["device"] = "banana"
    error = DecisionInputError if edit == "tokenizer" else CheckpointError
    with pytest.raises(error) as err:
        ModelEngine.load(str(saved), **kwargs) if edit == "tokenizer" else (
            decision.load_model(saved, **kwargs))
    assert str(saved) in str(err.value)


def test_a_tokenizer_larger_than_the_embedding_is_refused(tmp_path: Path) -> None:
    """decision serve started healthy with another model's tokenizer.json (more ids than
    vocab_size), then answered every /decide with 422."""
    from tokenizers import Tokenizer, models

    small = tiny_model(seed=7)
    vocab = {f"t{i}": i for i in range(small.config.vocab_size + 5)}
    small.tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    small.save(tmp_path)
    with pytest.raises(CheckpointError, match=f"vocab_size is {small.config.vocab_size}") as err:
        decision.load_model(tmp_path)
    assert str(tmp_path) in str(err.value)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused(saved: Path, value: float) -> None:
    """NaN or inf weights loaded silently; the first decode then failed with a traceback."""
    name = "model.layers.1.mlp.shared_expert.down_proj.weight"

    def poison(state: dict[str, torch.Tensor]) -> None:
        state[name][0, 0] = value

    file = _rewrite(saved, poison)
    with pytest.raises(CheckpointError, match="NaN or infinite") as err:
        decision.load_model(saved)
    assert name in str(err.value) and str(file) in str(err.value)


def test_a_tokenizer_with_an_id_past_the_embedding_is_refused(tmp_path: Path) -> None:
    """The check counted tokens: three tokens passed vocab_size 97 although one had id 100, and
    every request meeting that token failed with an IndexError."""
    from tokenizers import Tokenizer, models

    small = tiny_model(seed=7)
    vocab = {"[UNK]": 0, "yes": 1, "far": small.config.vocab_size + 3}
    small.tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    small.save(tmp_path)
    with pytest.raises(CheckpointError, match="token id 100 but config.json vocab_size is 97"):
        decision.load_model(tmp_path)


def test_a_config_check_the_loader_lacks_is_still_one_clear_error(
        saved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """config.json's "Infinity" gave an OverflowError; any arithmetic or value error left in
    parsing a config becomes a CheckpointError naming the file."""
    cfg = json.loads((saved / "config.json").read_text())
    cfg["hidden_size"] = float("inf")
    (saved / "config.json").write_text(json.dumps(cfg))  # writes the JSON token Infinity
    with pytest.raises(CheckpointError, match="hidden_size"):
        decision.load_model(saved)

    def unforeseen(raw: object, source: str) -> None:
        raise ZeroDivisionError("integer division or modulo by zero")

    monkeypatch.setattr(checkpoint.DecisionConfig, "from_dict", unforeseen)
    with pytest.raises(CheckpointError, match="invalid field") as err:
        checkpoint.read_config(saved)
    assert str(saved / "config.json") in str(err.value)


@pytest.mark.parametrize(("device", "kind"), [("meta", None), ("hpu", None), ("mps", "mps"),
                                              ("xpu", "xpu")])
def test_devices_the_model_cannot_use_are_refused_before_reading(saved: Path, device: str,
                                                                 kind: str | None) -> None:
    """mps, xpu and hpu gave tracebacks after every weight was read; meta loaded and failed at
    the first decode. Refused before any weight file is opened (here there is none)."""
    if kind is not None and device_dtype.device_count(kind):
        pytest.skip(f"this machine has a {kind} device")
    (saved / "model.safetensors").unlink()
    words = "does not run on" if kind is None else f"no {kind.upper()} GPU"
    with pytest.raises(CheckpointError, match=words) as err:
        decision.load_model(saved, device=device)
    assert str(saved) in str(err.value)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float8_e4m3fn, 5])
def test_a_dtype_that_is_not_a_supported_float_is_refused_before_reading(
        saved: Path, dtype: object) -> None:
    """int64 and 5 gave TypeErrors from ``nn.Module.to``; float8 loaded a model nothing runs."""
    (saved / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="unsupported dtype") as err:
        decision.load_model(saved, dtype=dtype)  # type: ignore[arg-type]
    assert str(saved) in str(err.value)


@pytest.mark.parametrize(("name", "dtype"), [("lm_head.weight", torch.int32),
                                             ("model.embed_tokens.weight", torch.bool)])
def test_an_integer_or_bool_tensor_for_a_float_parameter_is_refused(
        saved: Path, name: str, dtype: torch.dtype) -> None:
    """Integer and bool tensors were cast silently into the float parameters."""
    file = _rewrite(saved, lambda s: s.__setitem__(name, s[name].to(dtype)))
    dtype_name = str(dtype).removeprefix("torch.")
    with pytest.raises(CheckpointError, match=f"dtype {dtype_name}, not a floating") as err:
        decision.load_model(saved)
    assert name in str(err.value) and str(file) in str(err.value)


def test_saving_without_a_tokenizer_removes_an_older_tokenizer_json(tmp_path: Path) -> None:
    """The older model's tokenizer.json stayed and loaded beside the new weights."""
    from tokenizers import Tokenizer, models

    first = tiny_model(seed=1)
    first.tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "yes": 1}, unk_token="[UNK]"))
    first.save(tmp_path)
    tiny_model(seed=2).save(tmp_path)
    assert not (tmp_path / "tokenizer.json").exists()
    assert decision.load_model(tmp_path).tokenizer is None


@pytest.mark.parametrize("shard_size", [None, "20KB"])
def test_weight_files_get_the_mode_of_the_umask(model: torch.nn.Module, tmp_path: Path,
                                                shard_size: str | None) -> None:
    """safetensors wrote its files 0600 while config.json was 0644: a group that could read the
    config could not read the weights."""
    import os

    for umask, mode in ((0o022, 0o644), (0o077, 0o600)):
        old = os.umask(umask)
        try:
            model.save(tmp_path / oct(umask), max_shard_size=shard_size)
        finally:
            os.umask(old)
        files = sorted((tmp_path / oct(umask)).iterdir())
        assert len(files) >= 2 and all(f.stat().st_mode & 0o777 == mode for f in files)


# ---------------------------------------------------------------------------- damaged files
def _edit_header(file: Path, edit) -> None:  # type: ignore[no-untyped-def]
    """Rewrite one safetensors file's JSON header with ``edit`` (the data stays as it is)."""
    import struct

    data = file.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    edit(header)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    file.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n:])


@pytest.mark.parametrize(("field", "value", "words"), [
    ("dtype", ["F32"], "corrupted header entry"),  # was TypeError: unhashable type
    ("data_offsets", ["0", "9"], "corrupted header entry"),  # was TypeError: '>' not supported
    ("shape", [97, 31], "data_offsets span"),  # the error named another tensor
    ("dtype", "F8_E4M3", "unsupported dtype F8_E4M3"),  # was "corrupted"
])
def test_header_entries_of_wrong_types_or_sizes_are_one_clear_error(
        saved: Path, field: str, value: object, words: str) -> None:
    file = saved / "model.safetensors"
    _edit_header(file, lambda h: h["lm_head.weight"].__setitem__(field, value))
    with pytest.raises(CheckpointError, match=words) as err:
        decision.load_model(saved)
    assert "lm_head.weight" in str(err.value) and str(file) in str(err.value)


def test_a_directory_named_like_a_weight_file_is_refused(saved: Path) -> None:
    """A directory extra.safetensors gave an IsADirectoryError."""
    (saved / "extra.safetensors").mkdir()
    with pytest.raises(CheckpointError, match="not a regular file") as err:
        decision.load_model(saved)
    assert str(saved / "extra.safetensors") in str(err.value)


@pytest.mark.parametrize("value", [1, None, "sub", "../other/model.safetensors"])
def test_an_index_naming_no_shard_file_of_the_directory_is_refused(
        model: torch.nn.Module, tmp_path: Path, value: object) -> None:
    """A number gave a TypeError, a directory an IsADirectoryError, and a name outside the
    checkpoint directory loaded another checkpoint's weights."""
    model.save(tmp_path / "other")
    model.save(tmp_path / "ckpt", max_shard_size="20KB")
    (tmp_path / "ckpt" / "sub").mkdir()
    index = tmp_path / "ckpt" / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"] = {name: value for name in data["weight_map"]}
    index.write_text(json.dumps(data))
    with pytest.raises(CheckpointError) as err:
        decision.load_model(tmp_path / "ckpt")
    assert str(tmp_path / "ckpt") in str(err.value)


@pytest.mark.parametrize("edit", ["moved", "unlisted", "phantom"])
def test_an_index_that_disagrees_with_its_shards_is_refused(
        model: torch.nn.Module, tmp_path: Path, edit: str) -> None:
    """The weight_map was not compared with where the tensors are: an index from another save
    (a tensor listed under the wrong shard, left out, or listed where no shard holds it) loaded."""
    model.save(tmp_path, max_shard_size="20KB")
    index = tmp_path / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    weight_map = data["weight_map"]
    shards = sorted(set(weight_map.values()))
    # a tensor whose shard holds others too, so the shard stays listed without it
    name = next(n for n in sorted(weight_map)
                if list(weight_map.values()).count(weight_map[n]) > 1)
    if edit == "moved":
        weight_map[name] = next(s for s in shards if s != weight_map[name])
    elif edit == "unlisted":
        del weight_map[name]
    else:
        weight_map["model.layers.0.not_saved.weight"] = shards[0]
        name = "model.layers.0.not_saved.weight"
    index.write_text(json.dumps(data))
    with pytest.raises(CheckpointError) as err:
        decision.load_model(tmp_path)
    assert str(index) in str(err.value) and repr(name) in str(err.value)


def _per_expert(state: dict[str, torch.Tensor]) -> None:
    """Packed experts -> per-expert ``experts.J.{gate,up,down}_proj.weight`` (the HF layout)."""
    for name in [n for n in state if n.endswith(".experts.gate_up_proj")]:
        prefix = name.removesuffix(".gate_up_proj")
        gate_up, down = state.pop(name), state.pop(prefix + ".down_proj")
        gate, up = gate_up.chunk(2, dim=1)
        for e in range(gate_up.shape[0]):
            state[f"{prefix}.{e}.gate_proj.weight"] = gate[e].contiguous()
            state[f"{prefix}.{e}.up_proj.weight"] = up[e].contiguous()
            state[f"{prefix}.{e}.down_proj.weight"] = down[e].contiguous()


@pytest.mark.parametrize(("damage", "words"), [
    ("short", "has shape \\[15, 32\\], expert 0's has \\[16, 32\\]"),  # was a torch.stack error
    ("extra", "past config.json's num_experts=4"),  # was ignored silently
])
def test_per_expert_tensors_of_another_shape_or_number_are_refused(
        model: torch.nn.Module, saved: Path, damage: str, words: str) -> None:
    prefix = "model.layers.0.mlp.experts"

    def edit(state: dict[str, torch.Tensor]) -> None:
        if damage == "short":
            state[f"{prefix}.1.gate_proj.weight"] = state[f"{prefix}.1.gate_proj.weight"][:-1]
        else:
            for part in ("gate_proj", "up_proj", "down_proj"):
                state[f"{prefix}.4.{part}.weight"] = state[f"{prefix}.0.{part}.weight"].clone()

    _rewrite(saved, _per_expert)
    assert _same_params(model, decision.load_model(saved))  # undamaged, the layout loads
    file = _rewrite(saved, edit)
    with pytest.raises(CheckpointError, match=words) as err:
        decision.load_model(saved)
    assert prefix in str(err.value) and str(file) in str(err.value)


# ---------------------------------------------------------------------------- loader review
def test_a_tensor_in_two_shards_is_refused(model: torch.nn.Module, tmp_path: Path) -> None:
    """A tensor stored in two shards with different values loaded silently from the last one."""
    model.save(tmp_path, max_shard_size="20KB")
    first, second = sorted(tmp_path.glob("model-*-of-*.safetensors"))[:2]
    a, b = load_file(str(first)), load_file(str(second))
    name = next(iter(a))
    save_file({**b, name: a[name] * 2}, str(second))
    with pytest.raises(CheckpointError, match="is also in") as err:
        decision.load_model(tmp_path)
    assert name in str(err.value) and str(first) in str(err.value) and str(second) in str(err.value)


@pytest.mark.parametrize("twin", ["prefix", "experts", "one_expert"])
def test_two_tensors_for_one_parameter_are_refused(saved: Path, twin: str) -> None:
    """``model.norm.weight`` beside ``model.language_model.norm.weight``, packed beside
    per-expert experts, one expert's weight under both prefixes: one of the two was dropped
    silently, whichever came last."""
    def edit(state: dict[str, torch.Tensor]) -> None:
        if twin == "prefix":
            state["model.language_model.norm.weight"] = state["model.norm.weight"] + 1
        elif twin == "one_expert":
            _per_expert(state)
            name = "layers.0.mlp.experts.1.up_proj.weight"
            state[f"model.language_model.{name}"] = state[f"model.{name}"] + 1
        else:
            packed = {n: t.clone() for n, t in state.items()
                      if n.startswith("model.layers.0.mlp.experts")}
            _per_expert(state)
            state.update(packed)

    _rewrite(saved, edit)
    with pytest.raises(CheckpointError, match="both give") as err:
        decision.load_model(saved)
    assert str(saved / "model.safetensors") in str(err.value)


@pytest.fixture()
def no_real_build(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail the test if the loader builds a model with storage (a config of 10**9-wide layers
    would allocate hundreds of GB or be killed trying). The loader builds in two modules, each
    through its own name: weight_mapping.plan_load the skeleton it checks shapes on (the meta
    device), checkpoint.load_model the model it fills. Both are watched, and the skeleton must
    have come through the watch (patched in checkpoint alone, it saw no build at all)."""
    real = checkpoint.DecisionModel
    built: list[str] = []

    def only_meta(config: object) -> torch.nn.Module:
        built.append(torch.get_default_device().type)
        assert built[-1] == "meta", "a real model was built"
        return real(config)  # type: ignore[arg-type]

    for module in (checkpoint, weight_mapping):
        monkeypatch.setattr(module, "DecisionModel", only_meta)
    yield
    assert built, "the loader built no model through the watched names"


@pytest.mark.parametrize(("field", "value", "words"), [
    ("hidden_size", 10**9, "expected \\[97, 1000000000\\]"),
    ("vocab_size", 10**10, "expected \\[10000000000, 32\\]"),
    ("moe_intermediate_size", 10**9, "expected \\[4, 2000000000, 32\\]"),
    ("num_experts", 10**7, "expected \\[10000000, 32\\]"),
])
def test_a_config_too_large_for_its_weights_is_refused_before_building(
        saved: Path, no_real_build: None, field: str, value: int, words: str) -> None:
    """The model of config.json was built (allocated) before any shape was compared: a RuntimeError
    from the allocator, or an out-of-memory kill where the allocation succeeded."""
    cfg = json.loads((saved / "config.json").read_text())
    cfg[field] = value
    (saved / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=words) as err:
        decision.load_model(saved)
    assert "config.json and weights disagree" in str(err.value)


@pytest.mark.parametrize("field", ["num_segments", "right_conv_kernel"])
def test_huge_block_parameters_absent_from_the_weights_are_refused(
        saved: Path, no_real_build: None, field: str) -> None:
    """Without block-path tensors (a Qwen checkpoint) only config.json sizes them: num_segments
    10**9 allocated a [10**9, hidden] segment embedding."""
    from decision.model.gdn import BLOCK_PARAM_NAMES

    def strip(state: dict[str, torch.Tensor]) -> None:
        for name in list(state):
            if name == "model.segment_embed.weight" or (
                    name.split(".linear_attn.")[-1] in BLOCK_PARAM_NAMES):
                del state[name]

    _rewrite(saved, strip)
    cfg = json.loads((saved / "config.json").read_text())
    cfg[field] = 10**9
    (saved / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=f"{field} 1000000000") as err:
        decision.load_model(saved)
    assert str(saved) in str(err.value)


def test_a_dangling_tokenizer_link_is_refused(saved: Path) -> None:
    """A tokenizer.json symlink to a missing file loaded as a model without tokenizer."""
    (saved / "tokenizer.json").symlink_to(saved / "gone.json")
    with pytest.raises(CheckpointError, match="cannot load tokenizer") as err:
        decision.load_model(saved)
    assert str(saved / "tokenizer.json") in str(err.value)


def test_an_index_or_weight_file_with_nothing_in_it_is_named(saved: Path,
                                                             model: torch.nn.Module) -> None:
    """An empty weight_map and a header without tensors both said "missing tensor ... (not in )"."""
    import struct

    (saved / "model.safetensors").write_bytes(struct.pack("<Q", 2) + b"{}")
    with pytest.raises(CheckpointError, match=r"\(not in model.safetensors\)"):
        decision.load_model(saved)
    model.save(saved, max_shard_size="20KB")
    (saved / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))
    with pytest.raises(CheckpointError, match="weight_map lists no shard"):
        decision.load_model(saved)


def test_a_float64_checkpoint_loads_exactly(tmp_path: Path) -> None:
    """The weights went through the float32 parameters of a freshly built model before the model
    was cast to float64: every value lost its low bits."""
    wide = tiny_model(seed=6).double()
    with torch.no_grad():
        for p in wide.parameters():
            p.add_(torch.randn(p.shape, dtype=torch.float64) * 1e-9)
    wide.save(tmp_path)
    loaded = decision.load_model(tmp_path)
    assert loaded.dtype == torch.float64 and _same_params(wide, loaded)


@pytest.mark.parametrize(("stored", "dtype"), [(torch.float32, "float16"),
                                               (torch.float64, "float32")])
def test_weights_outside_the_range_of_the_dtype_asked_for_are_refused(
        saved: Path, stored: torch.dtype, dtype: str) -> None:
    """A weight of 1e6 loaded with dtype="float16" (1e300 in float64 loaded as float32) became
    inf silently, and every logit NaN."""
    name = "model.layers.1.mlp.shared_expert.down_proj.weight"

    def widen(state: dict[str, torch.Tensor]) -> None:
        for key in state:
            state[key] = state[key].to(stored)
        state[name][0, 0] = 1e6 if stored == torch.float32 else 1e300

    file = _rewrite(saved, widen)
    with pytest.raises(CheckpointError, match=f"outside the range of {dtype}") as err:
        decision.load_model(saved, dtype=dtype)
    assert name in str(err.value) and str(file) in str(err.value)


@pytest.mark.parametrize("file", ["config.json", "model.safetensors.index.json",
                                  "model.safetensors"])
def test_json_nested_too_deep_is_one_clear_error(model: torch.nn.Module, tmp_path: Path,
                                                 file: str) -> None:
    """json raised a RecursionError (not a ValueError) for "[[[[...", which passed every except."""
    import struct

    model.save(tmp_path, max_shard_size="20KB" if file.endswith("index.json") else None)
    deep = "[" * 100_000 + "]" * 100_000
    if file == "model.safetensors":
        raw = ('{"a": ' + deep + "}").encode()
        (tmp_path / file).write_bytes(struct.pack("<Q", len(raw)) + raw)
    else:
        (tmp_path / file).write_text(deep)
    with pytest.raises(CheckpointError) as err:
        decision.load_model(tmp_path)
    assert str(tmp_path / file) in str(err.value)


@pytest.mark.parametrize("field", ["hidden_size", "head_dim"])
def test_a_size_past_int64_is_one_clear_error(saved: Path, field: str) -> None:
    """A JSON integer of 2**63 passed the config checks and gave torch's TypeError ("Overflow
    when unpacking long long") when the model was built."""
    cfg = json.loads((saved / "config.json").read_text())
    cfg[field] = 2**63
    (saved / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="describes a model torch cannot build") as err:
        decision.load_model(saved)
    assert str(saved) in str(err.value)


def test_a_save_that_fails_midway_keeps_the_checkpoint_there(
    model: torch.nn.Module, saved: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """save removed the old weights first and wrote the new ones in place: a save that died
    while writing (minutes for a large model) left no checkpoint, or new weights under the old
    config. Every file is staged as NAME.part and moved into place once all are written."""
    other = tiny_model(seed=6, random_block=True)

    def killed(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(type(other.config), "to_dict", killed)  # after the weights are written
    with pytest.raises(KeyboardInterrupt):
        other.save(saved)
    monkeypatch.undo()
    assert _same_params(model, decision.load_model(saved))
    other.save(saved, max_shard_size="20KB")  # a whole save replaces it, shards and all
    assert _same_params(other, decision.load_model(saved))
    assert not list(saved.glob("*.part")) and not (saved / "model.safetensors").exists()


@pytest.mark.parametrize("moves", [0, 1, 2])
def test_a_save_killed_between_two_moves_leaves_no_mixed_model_that_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moves: int
) -> None:
    """The staged files were moved in one by one (weights, config.json, tokenizer.json): a save
    into a model's directory killed between two moves left new weights beside the old
    tokenizer.json, which loaded without a word. config.json is removed before the first move
    and comes back last: until then the directory refuses to load, and a full save mends it."""
    import os

    from tokenizers import Tokenizer, models

    def with_tokenizer(seed: int, words: list[str]) -> torch.nn.Module:
        m = tiny_model(seed=seed, random_block=True)
        vocab = {"[UNK]": 0} | {word: i for i, word in enumerate(words, 1)}
        m.tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        return m

    old, new = with_tokenizer(5, ["old"]), with_tokenizer(6, ["new"])
    directory = tmp_path / "m"
    old.save(directory)
    replace, done = os.replace, []

    def killed_after(src: object, dst: object) -> None:
        if len(done) == moves:
            raise KeyboardInterrupt
        replace(src, dst)  # type: ignore[arg-type]
        done.append(Path(str(dst)).name)

    monkeypatch.setattr(os, "replace", killed_after)
    with pytest.raises(KeyboardInterrupt):
        new.save(directory)
    monkeypatch.undo()
    assert len(done) == moves and "config.json" not in done
    with pytest.raises(CheckpointError, match="config.json"):
        decision.load_model(directory)
    new.save(directory)
    loaded = decision.load_model(directory)
    assert _same_params(new, loaded) and loaded.tokenizer.token_to_id("new") == 1


def test_every_saved_file_is_on_disk_before_it_is_moved_into_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The staged NAME.part files were renamed without being flushed: after a power loss (not a
    kill) a renamed file can be empty, and an export or a shipped model with it. Each part is
    fsynced before its rename, and the directory after the renames."""
    import os

    model = tiny_model(seed=6, random_block=True)
    events: list[tuple[str, str]] = []
    fsync, replace, open_ = os.fsync, os.replace, os.open
    names: dict[int, str] = {}

    def opened(path: object, *args: object, **kwargs: object) -> int:
        fd = open_(path, *args, **kwargs)  # type: ignore[arg-type]
        names[fd] = Path(str(path)).name
        return fd

    monkeypatch.setattr(os, "open", opened)
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", names.get(fd, "?"))),
                                                 fsync(fd)))
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("replace", Path(a).name)),
                                                     replace(a, b)))
    model.save(tmp_path / "m", max_shard_size="20KB")
    monkeypatch.undo()
    renamed = [name for kind, name in events if kind == "replace"]
    assert len(renamed) >= 4  # shards, the index, config, tokenizer
    for name in renamed:
        assert events.index(("fsync", name)) < events.index(("replace", name)), name
    assert events[-1] == ("fsync", "m")
    assert _same_params(model, decision.load_model(tmp_path / "m"))


@pytest.mark.parametrize("where", ["open", "fsync"])
def test_a_directory_the_file_system_cannot_fsync_still_saves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Some file systems (network, FUSE) cannot open a directory to fsync it, or refuse the
    fsync (EINVAL): the save, its files flushed and renamed into place, raised after the renames
    (a training checkpoint was then removed as not written, the run stopped at its first one)."""
    import errno
    import os
    import stat

    model = tiny_model(seed=6, random_block=True)
    fsync, open_ = os.fsync, os.open

    def opening(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if where == "open" and Path(str(path)).is_dir():
            raise OSError(errno.EACCES, "Permission denied", str(path))
        return open_(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    def syncing(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "Invalid argument")
        fsync(fd)

    monkeypatch.setattr(os, "open", opening)
    monkeypatch.setattr(os, "fsync", syncing)
    (tmp_path / "m").mkdir()
    model.save(tmp_path / "m")
    monkeypatch.undo()
    assert _same_params(model, decision.load_model(tmp_path / "m"))
    assert not list((tmp_path / "m").glob("*.part"))


def test_saving_onto_a_file_is_one_clear_error(model: torch.nn.Module, tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("")
    for target in (tmp_path / "taken", tmp_path / "taken" / "ckpt"):
        with pytest.raises(CheckpointError, match="cannot write a checkpoint to"):
            model.save(target)
