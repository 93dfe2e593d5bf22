"""The streamed ladder (one decoder block at a time from safetensors shards) against transformers' own
whole-model forward: tiny random models of every architecture family it claims (fast), the routed-experts
subset of MoE blocks, early stopping, the memory budget, bad input, and the real SmolLM2 written as many
small shards (``model``)."""

from __future__ import annotations

import json
import os

import pytest
import torch

import forensics
from forensics.analysis.fingerprint.core import fingerprint
from forensics.errors import ForensicsError
from forensics.io.capture import Capture, Provenance, Slot
from forensics.layers import FINAL_POST
from forensics.models.stream import LayerStream
from forensics.models.target import Target, ladder, open_target, parse_memory

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

COMMON = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2)
CONFIGS = {
    "llama": lambda: transformers.LlamaConfig(**COMMON),
    "qwen3": lambda: transformers.Qwen3Config(**COMMON, head_dim=16),
    "gemma3_text": lambda: transformers.Gemma3TextConfig(
        **COMMON, head_dim=16, sliding_window=4,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"]),
    "gemma": lambda: transformers.GemmaConfig(**COMMON, head_dim=16),
    "qwen2": lambda: transformers.Qwen2Config(**COMMON),
    "mistral": lambda: transformers.MistralConfig(**COMMON, sliding_window=5),
    "qwen3_moe": lambda: transformers.Qwen3MoeConfig(**COMMON, head_dim=16, num_experts=8, num_experts_per_tok=2,
                                                     moe_intermediate_size=32),
    "mixtral": lambda: transformers.MixtralConfig(**COMMON, num_local_experts=6, num_experts_per_tok=2),
    "qwen2_moe": lambda: transformers.Qwen2MoeConfig(**COMMON, num_experts=8, num_experts_per_tok=2,
                                                     moe_intermediate_size=32, shared_expert_intermediate_size=48),
    "deepseek_v3": lambda: transformers.DeepseekV3Config(
        **{**COMMON, "num_key_value_heads": 4}, moe_intermediate_size=16, n_routed_experts=8, num_experts_per_tok=2,
        n_group=2, topk_group=1, first_k_dense_replace=1, q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=8,
        qk_nope_head_dim=8, v_head_dim=8),
}
FP32_NOISE = 1e-5  # relative error allowed between two float32 forwards of the same weights (summation order)


def _write(name: str, folder, seed: int = 0):
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS[name]()).eval()
    model.save_pretrained(folder, max_shard_size="30KB")  # many small shards
    return model


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def _mem_capture(tensors: list, ids) -> Capture:
    slots = [Slot(index=i, name=f"s{i}", key="x", shape=tuple(t.shape), dtype=t.dtype, getter=(lambda t=t: t))
             for i, t in enumerate(tensors)]
    return Capture(slots=slots, input_ids=ids, loss_mask=None,
                   provenance=Provenance(path="<memory>", format="generic", size_bytes=0))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_streamed_ladder_equals_whole_model(name, tmp_path):
    model = _write(name, tmp_path)
    ids = torch.randint(0, 300, (24,), generator=torch.Generator().manual_seed(1))
    ref = ladder(model, ids)
    stream = LayerStream(str(tmp_path))
    got = dict(stream.states(ids))
    assert list(got) == [*range(4), FINAL_POST]
    for r, x in got.items():
        assert _rel(x, ref[r]) <= FP32_NOISE, (name, r)
    assert len(stream.stats.bytes_by_shard) > 3  # read from many shards, each counted
    # the logit lens: lm_head read in row blocks gives the whole model's argmax
    rows = ref[FINAL_POST][:6]
    assert torch.equal(stream.top1(rows), model.get_output_embeddings()(rows).argmax(-1))


@pytest.mark.parametrize("name", ["mixtral", "deepseek_v3"])
def test_moe_reads_only_routed_experts(name, tmp_path, monkeypatch):
    model = _write(name, tmp_path)
    ids = torch.tensor([5, 17])  # 2 tokens × top-2: at most 4 of the 6 / 8 experts per block
    ref = ladder(model, ids)
    stream = LayerStream(str(tmp_path), expert_group_bytes=1)  # one expert at a time
    got = dict(stream.states(ids))
    for r, x in got.items():
        assert _rel(x, ref[r]) <= FP32_NOISE, (name, r)
    total = model.config.num_local_experts
    assert stream.stats.experts_read and all(n <= 4 < total for n in stream.stats.experts_read.values())
    assert stream.stats.bytes_read < stream.weights_bytes()


def test_fingerprint_streams_and_stops_early(tmp_path, monkeypatch):
    model = _write("llama", tmp_path)
    ids = torch.randint(0, 300, (40,), generator=torch.Generator().manual_seed(2))
    states = ladder(model, ids)
    cap = _mem_capture([states[0].to(torch.bfloat16), states[1].to(torch.bfloat16)], ids)
    target = Target(path=str(tmp_path), max_memory=1, tokens=16)  # nothing fits: stream
    with pytest.raises(ForensicsError, match="max-memory"):
        fingerprint(cap, model=target)
    import forensics.models.target as tgt

    monkeypatch.setattr(tgt, "fits_in_memory", lambda *a: False)  # force the streamed path on this tiny model
    fp = fingerprint(cap, model=Target(path=str(tmp_path), max_memory=1 << 40, tokens=16))
    assert [s.r_exact for s in fp.slots] == [0, 1]
    prov = fp.exact.stream
    assert prov["blocks_run"] == 2 and not prov["complete"] and prov["stopped_at"] == 2  # r = 2 seen, then stop
    assert prov["tokens"] == 16 and prov["bytes_read"] < prov["weights_bytes"]
    assert prov["shards_read"] and sum(prov["bytes_by_shard"].values()) == prov["bytes_read"]
    m = fp.exact.slots[1].ladder
    assert m["tolerance"]["compute_dtype"] == "float32" and m["best_rel"] < 0.01 and m["runner_up_rel"] > 0.1


def test_unknown_architecture_is_one_line(tmp_path):
    _write("llama", tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["model_type"] = "no_such_arch"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ForensicsError, match="model_type 'no_such_arch'") as e:
        LayerStream(str(tmp_path))
    assert "\n" not in str(e.value)


def test_missing_block_tensor_is_named(tmp_path):
    _write("llama", tmp_path)
    stream = LayerStream(str(tmp_path))
    stream.index.pop("model.layers.1.mlp.up_proj.weight")  # as if the index left it out
    with pytest.raises(ForensicsError, match="block 1: the shards lack.*mlp.up_proj"):
        dict(stream.states(torch.tensor([1, 2, 3])))


@pytest.mark.parametrize("text,n", [("1GB", 10**9), ("512MiB", 512 * 2**20), ("1.5g", 1_500_000_000),
                                    ("2000000", 2_000_000), ("1MB", 10**6)])
def test_parse_memory(text, n):
    assert parse_memory(text) == n


@pytest.mark.parametrize("text", ["lots", "-1GB", "1 parsec", "", "0.5", "2000", "1KB", "999999", 0, 999_999])
def test_parse_memory_rejects(text):
    with pytest.raises(ForensicsError, match="max-memory"):
        parse_memory(text)


def test_open_target_resolves_default_and_paths(tmp_path):
    t = open_target(str(tmp_path), max_memory="2GB", tokens=64)
    assert isinstance(t, Target) and t.max_memory == 2 * 10**9 and t.tokens == 64 and os.fspath(t) == str(tmp_path)
    with pytest.raises(ForensicsError, match="not found"):
        open_target(str(tmp_path / "nope"))


# --- the real model ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2_sharded(smollm2, tmp_path_factory):
    folder = tmp_path_factory.mktemp("smollm2-sharded")
    model = smollm2[0]
    # A first load from the GGUF (no fp32 copy cached yet, as on a fresh machine) keeps transformers' gguf
    # quantizer, which refuses save_pretrained although the weights are already dequantized to fp32.
    quantizer = getattr(model, "hf_quantizer", None)
    model.hf_quantizer = None
    try:
        model.save_pretrained(folder, max_shard_size="20MB")  # fp32: ~27 shards
    finally:
        model.hf_quantizer = quantizer
    return folder


@pytest.mark.model
def test_smollm2_streamed_equals_whole_model(smollm2, smollm2_sharded, sample_data):
    cap = forensics.load(sample_data / "ladder" / "capture_0.safetensors")
    ids = cap.input_ids.reshape(-1)
    ref = ladder(smollm2[0], ids)
    stream = LayerStream(str(smollm2_sharded))
    got = dict(stream.states(ids))
    assert len([f for f in os.listdir(smollm2_sharded) if f.endswith(".safetensors")]) > 10
    for r, x in got.items():
        assert _rel(x, ref[r]) <= FP32_NOISE, r


@pytest.mark.model
@pytest.mark.parametrize("path", ["ladder/capture_0.safetensors", "speculators_v1/data_3.pt",
                                  "speculators/hidden_states/hs_0.safetensors", "specforge/rows_0-2000/data_0.ckpt"])
def test_smollm2_streamed_r_exact_of_committed_captures(smollm2_sharded, sample_data, path, monkeypatch):
    import forensics.models.target as tgt

    monkeypatch.setattr(tgt, "fits_in_memory", lambda *a: False)  # SmolLM2 fits anywhere: force the stream
    cap = forensics.load(sample_data / path)
    fp = fingerprint(cap, model=Target(path=str(smollm2_sharded), max_memory=8 << 30, tokens=128))
    assert [s.r_exact for s in fp.slots] == [s.declared_r for s in cap.slots]
    assert fp.exact.stream["bytes_read"] > 0 and fp.exact.stream["shards_read"]


def test_cli_fingerprint_streams_with_max_memory(tmp_path, monkeypatch, capsys):
    from safetensors.torch import save_file

    import forensics.models.target as tgt
    from forensics.cli import main

    folder = tmp_path / "model"
    model = _write("qwen2_moe", folder)
    ids = torch.randint(0, 300, (30,), generator=torch.Generator().manual_seed(3))
    states = ladder(model, ids)
    rs = [0, 2, 3, FINAL_POST]
    cap = tmp_path / "capture_0.safetensors"
    save_file({f"slot_{j}.{r if r == FINAL_POST else f'L{r}'}": states[r].to(torch.bfloat16).contiguous()
               for j, r in enumerate(rs)} | {"input_ids": ids}, str(cap), metadata={"r": json.dumps(rs)})
    monkeypatch.setattr(tgt, "fits_in_memory", lambda *a: False)  # tiny: force the stream
    assert main(["fingerprint", str(cap), "--model", str(folder), "--max-memory", "64GB", "--tokens", "20",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["files"][0]
    assert [s["r_exact"] for s in doc["slots"]] == rs
    s = doc["exact_stream"]
    assert s["complete"] and s["tokens"] == 20 and s["model_type"] == "qwen2_moe" and s["max_memory"] == 64 * 10**9
    assert main(["fingerprint", str(cap), "--model", str(folder), "--max-memory", "lots"]) == 2
    err = capsys.readouterr()
    assert "--max-memory 'lots'" in err.err + err.out


def test_bfloat16_stream_when_float32_blocks_do_not_fit(tmp_path, monkeypatch):
    import forensics.models.target as tgt
    from forensics.analysis.fingerprint.ladder import LADDER_MATCH_REL

    model = _write("llama", tmp_path)
    ids = torch.randint(0, 300, (32,), generator=torch.Generator().manual_seed(4))
    states = ladder(model, ids)
    rs = [1, 2, 3, FINAL_POST]
    cap = _mem_capture([states[r].to(torch.bfloat16) for r in rs], ids)

    def check_budget(self, tokens):  # as if one float32 block were over the budget
        if self.compute_dtype == "float32":
            raise ForensicsError("over budget")
        return 0

    monkeypatch.setattr(tgt, "fits_in_memory", lambda *a: False)
    monkeypatch.setattr(LayerStream, "check_budget", check_budget)
    fp = fingerprint(cap, model=Target(path=str(tmp_path), max_memory=1 << 40))
    assert [s.r_exact for s in fp.slots] == rs
    assert fp.exact.compute_dtype == "bfloat16" and fp.exact.stream["compute_dtype"] == "bfloat16"
    for x in fp.exact.slots:
        m = x.ladder
        assert m["tolerance"]["compute_dtype"] == "bfloat16" and m["best_rel"] <= LADDER_MATCH_REL


def test_resolve_model_keeps_a_target(tmp_path):
    from forensics.models.target import resolve_model

    t = Target(path=str(tmp_path), max_memory=123)
    assert resolve_model(t) is t  # a Target is os.PathLike; resolving it must not drop the budget
