"""``hsf capture`` on the real SmolLM2: ground truth of every slot, the writers' layouts, regeneration of a
committed sample, and bad input (clear error, nothing written)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
import torch

import forensics
from forensics.cli import main
from forensics.errors import ForensicsError
from forensics.layers import FINAL_POST
from forensics.models.recorder import capture, slot_states

pytestmark = pytest.mark.model
L, H = 30, 576
# --- comparing bf16 states at the scale the arithmetic supports ----------------------------------------------
# A stored bf16 slot and a reference computed on another machine differ by two things:
#  1. rounding to bf16 (8 significand bits): up to one bf16 ulp of the element itself — a whole ulp when the two
#     machines' fp32 values fall on either side of a rounding boundary;
#  2. the fp32 forward: CPUs and torch's kernels (AVX-512, AVX2, NEON, scalar) sum the matmuls and reductions in
#     different orders, an error that is absolute on the scale of the row (the dot products' inputs), not of the
#     element — an element that is small by cancellation gets as large an error as a big one, so a tolerance
#     relative to the element alone fails on another CPU (here 0.03-0.04 % of the ladder's elements and 0.10-0.11 %
#     of a regenerated sample's once torch runs its AVX2 or scalar kernels instead of AVX-512:
#     ATEN_CPU_CAPABILITY=avx2|default).
# Each element may differ by its own bf16 ulp plus ROW_ULPS bf16 ulps (2^-8 relative) of its row's RMS.
# Measured against fp32 references under AVX-512, AVX2 and scalar kernels (ladder and regenerated sample): the part
# beyond the element's own ulp is <= 5e-6 of the row RMS; on another x86-64 CPU model |diff| stayed <= 0.8 % of the
# row RMS in total. ROW_ULPS = 4 (1.6 % of the RMS) covers twice that, while a neighbouring layer exceeds the same
# tolerance >= 140x in its worst element and in >= 98.5 % of rows (each test below checks that a one-layer shift
# fails).
BF16_ULP = 2.0 ** -8  # relative spacing of bf16 (8 significand bits incl. the implicit one), lower bound
ROW_ULPS = 4
SHIFT_ROWS = 0.9  # the fraction of rows in which a one-layer shift must exceed the tolerance (measured: >= 0.985)


def bf16_ulp(x: torch.Tensor) -> torch.Tensor:
    """The spacing of bf16 numbers at ``|x|``: 2^(floor(log2|x|) - 7)."""
    exponent = torch.frexp(x.float()).exponent  # x = m * 2^e, 0.5 <= |m| < 1, so floor(log2|x|) = e - 1
    return torch.ldexp(torch.ones_like(x, dtype=torch.float64), (exponent - 8).to(torch.float64))


def row_excess(stored: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Per row, in units of the reference row's RMS: the largest difference beyond the element's own bf16 ulp."""
    a, b = stored.double(), ref.double()
    rms = b.pow(2).mean(-1, keepdim=True).sqrt().clamp_min(torch.finfo(torch.float32).tiny)
    return (((a - b).abs() - bf16_ulp(b)) / rms).amax(-1)


def within_bf16(stored: torch.Tensor, ref: torch.Tensor, row_ulps: int = ROW_ULPS) -> bool:
    """``stored`` (bf16) equals ``ref`` up to bf16 rounding and ``row_ulps`` bf16 ulps of each row's RMS."""
    return bool((row_excess(stored, ref) <= row_ulps * BF16_ULP).all())


def shift_fails(stored: torch.Tensor, neighbour: torch.Tensor) -> bool:
    """The neighbouring layer fails the same tolerance, and not by a hair: in most rows (>= SHIFT_ROWS of them)."""
    return float((row_excess(stored, neighbour) > ROW_ULPS * BF16_ULP).double().mean()) >= SHIFT_ROWS


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    d = tmp_path_factory.mktemp("texts")
    (d / "raw.txt").write_text("The river flows to the sea. Water, sand and stones move with it.\n")
    (d / "chat.json").write_text(json.dumps([{"role": "user", "content": "Say hello."},
                                             {"role": "assistant", "content": "Hello there!"}]))
    (d / "empty.txt").write_text("  \n")
    return d


@pytest.fixture(scope="module")
def fp32_ladder(smollm2, texts, tmp_path_factory):
    """An fp32 capture of every r (0..L and final_post) of a raw text, in the safetensors layout."""
    out = tmp_path_factory.mktemp("ladder32")
    capture([str(texts / "raw.txt")], fmt="safetensors", out=str(out), dtype="fp32", progress=False)
    return forensics.load(str(out / "capture_0.safetensors"))


def hf_states(model, ids: torch.Tensor):
    """Independent references: HF ``hidden_states`` and each decoder block's output via its own hook."""
    blocks = {}

    def keep(k):
        def hook(_module, _inputs, output):
            blocks[k] = (output[0] if isinstance(output, tuple) else output)[0].detach()
        return hook

    hooks = [layer.register_forward_hook(keep(k)) for k, layer in enumerate(model.model.layers)]
    try:
        with torch.no_grad():
            out = model(input_ids=ids.reshape(1, -1), output_hidden_states=True, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    return [h[0] for h in out.hidden_states], blocks


def test_fp32_ladder_is_exact_ground_truth(smollm2, fp32_ladder):
    model, _ = smollm2
    cap = fp32_ladder
    assert [s.declared_r for s in cap.slots] == list(range(L + 1)) + [FINAL_POST]
    ids = cap.input_ids
    hs, blocks = hf_states(model, ids)
    t = [s.tensor() for s in cap.slots]
    assert all(x.dtype == torch.float32 and x.shape == (len(ids), H) for x in t)
    # r = 0 is the embedding lookup, bit for bit
    assert torch.equal(t[0], model.model.embed_tokens.weight.detach()[ids])
    # r = k is the output of block k (index k-1), and HF hidden_states[k] for k < L
    for k in range(1, L + 1):
        assert torch.equal(t[k], blocks[k - 1]), f"r={k}"
    for k in range(1, L):
        assert torch.allclose(t[k], hs[k], rtol=1e-6, atol=1e-5), f"r={k}"
    # r = L is PRE-norm: norm(r=L) is HF's post-norm last entry, and r=L itself is not
    normed = model.model.norm(t[L])
    assert torch.allclose(normed, hs[L], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(t[L], hs[L], rtol=1e-2, atol=1e-2)
    assert torch.allclose(t[L + 1], hs[L], rtol=1e-6, atol=1e-6)  # final_post


def test_committed_ladder_matches_hf_to_bf16(smollm2, sample_data):
    model, _ = smollm2
    cap = forensics.load(str(sample_data / "ladder" / "capture_0.safetensors"))
    assert len(cap.slots) == L + 2 and cap.slots[-1].declared_r == FINAL_POST
    ids = cap.input_ids
    hs, blocks = hf_states(model, ids)
    t = [s.tensor() for s in cap.slots]
    assert all(x.dtype == torch.bfloat16 for x in t)
    assert torch.equal(t[0], model.model.embed_tokens.weight.detach()[ids].to(torch.bfloat16))
    # fp32 references of every slot: r = 0..L-1 from HF, r = L the last block's own output (pre-norm), final_post
    refs = [model.model.embed_tokens.weight.detach()[ids], *hs[1:L], blocks[L - 1], hs[L]]
    for k in range(1, L + 2):
        assert within_bf16(t[k], refs[k]), f"r={k}: {row_excess(t[k], refs[k]).max():.2e} x RMS"
        # the same tolerance tells adjacent layers apart: r = k against r = k - 1 and r = k + 1 fails
        for j in (k - 1, k + 1):
            if j < len(refs):
                assert shift_fails(t[k], refs[j]), f"r={k} passes as r={j}"
    assert not within_bf16(t[L], hs[L], row_ulps=64)  # pre-norm r=L is not the post-norm output


def test_committed_samples_declare_their_ground_truth(sample_data):
    v1 = sorted((sample_data / "speculators_v1").glob("data_*.pt"))
    assert 4 <= len(v1) <= 6
    for p in v1:
        cap = forensics.load(str(p))
        assert cap.format == "speculators-v1" and [s.declared_r for s in cap.slots] == [0, 3, 16, 28]
        assert cap.num_tokens <= 256 and cap.slots[0].dtype == torch.bfloat16
        raw = torch.load(p, weights_only=True)
        assert set(raw) == {"input_ids", "hidden_states", "loss_mask"}
        assert raw["input_ids"].dtype == torch.long and raw["loss_mask"].dtype == torch.long
        assert isinstance(raw["hidden_states"], list) and len(raw["hidden_states"]) == 4
    cfg = json.loads((sample_data / "speculators_v1" / "data_config.json").read_text())
    assert cfg["hidden_states"]["layer_ids"] == [-1, 2, 15, 27] and cfg["version"] == "2.0"
    meta = json.loads((sample_data / "speculators_v1" / "capture.json").read_text())
    assert meta["r"] == [0, 3, 16, 28] and meta["num_layers"] == L and meta["hidden_size"] == H
    assert os.path.isfile(sample_data / "speculators_v1" / meta["tokenizer"] / "tokenizer.json")
    for s in meta["samples"]:  # the recorded text hashes match the committed texts
        text = (sample_data / "speculators_v1" / s["text_file"]).read_bytes()
        assert hashlib.sha256(text).hexdigest() == s["text_sha256"]
    cap = forensics.load(str(sample_data / "speculators" / "hidden_states" / "hs_0.safetensors"))
    assert cap.format == "speculators" and [s.declared_r for s in cap.slots] == [2, 15, 27, 30]
    cap = forensics.load(str(sample_data / "specforge" / "rows_0-2000" / "data_0.ckpt"))
    assert cap.format == "specforge" and [s.declared_r for s in cap.slots] == [2, 15, 27, FINAL_POST]
    raw = torch.load(sample_data / "specforge" / "rows_0-2000" / "data_0.ckpt", weights_only=True)
    T = raw["input_ids"].numel()
    assert raw["hidden_state"].shape == (1, T, H) and raw["aux_hidden_state"].shape == (1, T, 3 * H)
    # the captures have a 15 MB budget; the trained draft has its own (≤ 8 MB)
    draft = sample_data / "draft_eagle3"
    captures = sum(f.stat().st_size for f in sample_data.rglob("*") if f.is_file() and draft not in f.parents)
    assert captures <= 15 * 1024 * 1024
    assert sum(f.stat().st_size for f in draft.rglob("*") if f.is_file()) <= 8 * 1024 * 1024


def test_regenerates_committed_sample(smollm2, sample_data, tmp_path):
    """``speculators_v1/data_4.pt`` regenerated from its text: ids, mask and embedding slot identical, the
    other slots equal up to bf16 rounding and the fp32 differences between CPUs (``within_bf16``), and a
    capture one layer off does not pass."""
    model, _ = smollm2
    meta = json.loads((sample_data / "speculators_v1" / "capture.json").read_text())
    entry = meta["samples"][4]
    text = os.path.normpath(sample_data / "speculators_v1" / entry["text_file"])
    capture([text], layers=meta["r"], fmt="speculators-v1", out=str(tmp_path), max_tokens=256,
            chat=entry["chat"], progress=False)
    new = torch.load(tmp_path / "data_0.pt", weights_only=True)
    old = torch.load(sample_data / "speculators_v1" / entry["file"], weights_only=True)
    assert torch.equal(new["input_ids"], old["input_ids"]) and torch.equal(new["loss_mask"], old["loss_mask"])
    assert torch.equal(new["hidden_states"][0], old["hidden_states"][0])
    for a, b in zip(new["hidden_states"][1:], old["hidden_states"][1:], strict=True):
        assert a.dtype == b.dtype == torch.bfloat16 and within_bf16(a, b)
    rs = meta["r"][1:]
    assert rs == [3, 16, 28]
    shifted = slot_states(model, old["input_ids"].tolist(), [r + d for r in rs for d in (-1, 1)], "bf16")
    for i, b in enumerate(old["hidden_states"][1:]):
        assert shift_fails(shifted[2 * i], b) and shift_fails(shifted[2 * i + 1], b), f"r={rs[i]}"


def test_chat_loss_mask_covers_assistant_turn(smollm2, texts, tmp_path):
    _, tok = smollm2
    capture([str(texts / "chat.json"), str(texts / "raw.txt")], layers="embed,L3", out=str(tmp_path),
            max_tokens=256, progress=False)
    chat = torch.load(tmp_path / "data_0.pt", weights_only=True)
    assert tok.decode(chat["input_ids"][chat["loss_mask"].bool()]) == "Hello there!<|im_end|>\n"
    assert tok.decode(chat["input_ids"]).startswith("<|im_start|>")
    raw = torch.load(tmp_path / "data_1.pt", weights_only=True)
    assert raw["loss_mask"].all() and raw["input_ids"].tolist() == tok(
        (texts / "raw.txt").read_text(), add_special_tokens=False)["input_ids"]


def test_cli_writes_formats_and_truncates(smollm2, texts, tmp_path, capsys):
    out = tmp_path / "sf"
    code = main(["capture", "--text", str(texts / "raw.txt"), "--format", "specforge", "--out", str(out),
                 "--max-tokens", "5", "--no-progress", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["r"] == [2, 15, 27, FINAL_POST] and doc["layer_ids"] == [1, 14, 26]
    raw = torch.load(out / "rows_0-2000" / "data_0.ckpt", weights_only=True)
    assert raw["input_ids"].numel() == 5 and raw["aux_hidden_state"].shape == (1, 5, 3 * H)
    assert main(["capture", "--text", str(texts / "raw.txt"), "--format", "speculators", "--layers",
                 "2,15,27,30", "--out", str(tmp_path / "sp"), "--max-tokens", "5", "--no-progress"]) == 0
    cap = forensics.load(str(tmp_path / "sp" / "hidden_states" / "hs_0.safetensors"))
    assert [s.declared_r for s in cap.slots] == [2, 15, 27, 30]


@pytest.mark.parametrize("args, message", [
    (["--layers", "0,3,31"], "do not exist"),
    (["--layers", "0,L3,bogus"], "not an r value"),
    (["--layers", "2,15,final_post", "--format", "specforge"], "exactly 3 aux"),
    (["--model", "/nonexistent/model.gguf"], "not found"),
    (["--text", "EMPTY"], "empty"),
    (["--text", "/nonexistent/a.txt"], "text file not found"),
])
def test_bad_input_clear_error_nothing_written(smollm2, texts, tmp_path, capsys, args, message):
    args = [str(texts / "empty.txt") if a == "EMPTY" else a for a in args]
    out = tmp_path / "out"
    argv = ["capture", "--out", str(out), "--no-progress"]
    if "--text" not in args:
        argv += ["--text", str(texts / "raw.txt")]
    assert main(argv + args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists()


def test_api_rejects_unknown_format_and_existing_capture(texts, tmp_path):
    with pytest.raises(ForensicsError, match="unknown format"):
        capture([str(texts / "raw.txt")], fmt="parquet", out=str(tmp_path / "x"))
    assert not (tmp_path / "x").exists()
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "capture.json").write_text("{}")
    with pytest.raises(ForensicsError, match="already holds a capture"):
        capture([str(texts / "raw.txt")], out=str(tmp_path / "y"))
    assert os.listdir(tmp_path / "y") == ["capture.json"]


def test_hf_folder_model(smollm2, texts, tmp_path):
    """A Hugging Face folder (here a tiny random 2-block Llama with the SmolLM2 tokenizer) works too, and
    its r = L is pre-norm."""
    from transformers import LlamaConfig, LlamaForCausalLM

    _, tok = smollm2
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    folder = tmp_path / "tiny"
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    run = capture([str(texts / "raw.txt")], layers="embed,L1,L2,final_post", fmt="safetensors",
                  out=str(tmp_path / "o"), model=str(folder), dtype="fp32", progress=False)
    assert run.meta["num_layers"] == 2 and run.meta["hidden_size"] == 64
    cap = forensics.load(str(tmp_path / "o" / run.files[0]))
    model = LlamaForCausalLM.from_pretrained(folder).eval()
    hs, blocks = hf_states(model, cap.input_ids)
    t = [s.tensor() for s in cap.slots]
    assert torch.equal(t[0], model.model.embed_tokens.weight.detach()[cap.input_ids])
    assert torch.allclose(t[1], hs[1], atol=1e-6) and torch.allclose(t[2], blocks[1], atol=1e-6)
    assert torch.allclose(model.model.norm(t[2]), hs[2], atol=1e-5) and torch.allclose(t[3], hs[2], atol=1e-6)
