"""Write a random-initialised causal LM as a sharded safetensors folder (for streaming tests and benchmarks).

    python scripts/make_random_model.py llama-1b /tmp/rand-llama-1b          # ~1.2 B params, 2.4 GB bf16
    python scripts/make_random_model.py mixtral-small /tmp/rand-mixtral      # MoE, ~0.73 B params, 1.5 GB
    python scripts/make_random_model.py smollm2 /tmp/smollm2-sharded --shard-size 20MB   # real SmolLM2 weights

Weights are bf16 on disk (``--dtype fp32`` for float32), the SmolLM2 tokenizer from ``sample_data/tokenizer``
is copied in (vocab 49152) so ``hsf capture --model FOLDER`` works, and the shards are small
(``--shard-size``) so a streamed reader has many files to choose from. Nothing here is committed:
write under /tmp and delete the folder afterwards. ``smollm2`` re-shards the packaged SmolLM2-135M (real
weights, dequantized from its GGUF by ``forensics.models.target.load_model``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NORM_GAIN_SPREAD = 0.5  # RMSNorm gains uniform in [0.5, 1.5]
VOCAB = 49152  # the SmolLM2 tokenizer's vocabulary (sample_data/tokenizer)
PRESETS = {
    # Llama-3.2-1B-like widths with SmolLM2's vocabulary: 16 blocks × 60.8 M + 2 × 100.7 M = 1.17 B parameters
    "llama-1b": ("LlamaConfig", dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                                     num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False,
                                     max_position_embeddings=4096, rope_theta=500000.0)),
    # Mixtral-shaped: 8 blocks, 48 experts (top-2) of width 512: 8 × 78.1 M + 2 × 50.3 M = 0.73 B parameters
    "mixtral-small": ("MixtralConfig", dict(hidden_size=1024, intermediate_size=512, num_hidden_layers=8,
                                            num_attention_heads=16, num_key_value_heads=4, num_local_experts=48,
                                            num_experts_per_tok=2, tie_word_embeddings=False,
                                            max_position_embeddings=4096)),
    # DeepSeek-V3/Kimi-shaped (MLA attention, sigmoid group routing, a shared expert, first block dense)
    "deepseek-small": ("DeepseekV3Config", dict(hidden_size=512, intermediate_size=1024, moe_intermediate_size=256,
                                                num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=8,
                                                n_routed_experts=32, num_experts_per_tok=4, n_group=4, topk_group=2,
                                                first_k_dense_replace=1, q_lora_rank=128, kv_lora_rank=64,
                                                qk_rope_head_dim=32, qk_nope_head_dim=32, v_head_dim=32,
                                                tie_word_embeddings=False, max_position_embeddings=4096)),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("preset", choices=[*PRESETS, "smollm2"])
    ap.add_argument("out", help="output folder (must not exist)")
    ap.add_argument("--shard-size", default="200MB", help="max shard size (transformers' max_shard_size)")
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if os.path.exists(a.out):
        print(f"{a.out}: exists; choose a new folder", file=sys.stderr)
        return 2
    import torch
    import transformers

    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    t0 = time.time()
    torch.manual_seed(a.seed)
    if a.preset == "smollm2":
        from forensics.models.target import load_model

        model, tok = load_model()
        model = model.to(dtype)
    else:
        cls, kw = PRESETS[a.preset]
        cfg = getattr(transformers, cls)(vocab_size=VOCAB, **kw)
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype)
        with torch.no_grad():  # norm gains drawn around 1 (init sets all to 1: then rms(h) ≈ 1 blurs pre/post-norm)
            for name, p in model.named_parameters():
                if p.ndim == 1 and name.endswith("norm.weight"):
                    p.copy_(1 + NORM_GAIN_SPREAD * (2 * torch.rand(p.shape) - 1))
        tok = None
    n = sum(p.numel() for p in model.parameters())
    model.save_pretrained(a.out, max_shard_size=a.shard_size)
    if tok is not None:
        tok.save_pretrained(a.out)
    else:
        src = os.path.join(ROOT, "sample_data", "tokenizer")
        for f in os.listdir(src):
            shutil.copy(os.path.join(src, f), os.path.join(a.out, f))
    shards = [f for f in os.listdir(a.out) if f.endswith(".safetensors")]
    size = sum(os.path.getsize(os.path.join(a.out, f)) for f in shards)
    print(f"{a.out}: {a.preset}, {n / 1e9:.3f} B parameters, {len(shards)} shards, {size / 1e9:.2f} GB {a.dtype} "
          f"on disk, {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
