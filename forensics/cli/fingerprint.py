"""``hsf fingerprint PATH… [--layers …|--expect …] [--model …] [--num-layers N] [--json]``.

Role, depth order, coarse r and (given an expected list) label of every slot, with the evidence that
decided each; ``--model`` adds the exact checks (embedding rows, final-norm γ, reference ladder).
Exit 1 when a finding contradicts the expectation (reordered, duplicate, missing embedding, post-norm,
off-by-one, non-finite), 2 when a file is unreadable.
"""

from __future__ import annotations

import sys

from forensics.cli._common import add_model_arguments, for_each_file, layer_count, print_json, target_of

FAIL_KINDS = {"reordered", "duplicate", "missing_embedding", "postnorm", "prenorm", "off_by_one", "wrong_layer",
              "nonfinite", "count_mismatch", "no_reference_match",
              "all_zero", "overflow"}



def add_arguments(p) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="capture files or directories")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--layers", help="expected r per stored slot, e.g. 0,3,16,28 (default: the r the capture "
                                    "declares in capture.json / data_config.json)")
    g.add_argument("--expect", help="same as --layers in labels, e.g. embed,L3,L16,L28,final_post")
    g.add_argument("--draft", help="take the expected layers from an EAGLE-3 draft's config ids "
                                   "(needs --trainer and the model's L)")
    p.add_argument("--trainer", help="the system whose numbering the draft's ids use (speculators, "
                                     "speculators-legacy, specforge, vllm, sglang) — with --draft")
    add_model_arguments(p, "exact mode: HF folder, safetensors checkpoint, .gguf, or a ladder capture with the "
                           "same input_ids ('default' = packaged SmolLM2)")
    p.add_argument("--num-layers", type=layer_count, help="L of the model (for the coarse r estimate)")


SPECULATORS_FORMATS = ("speculators-v1", "speculators", "speculators-v0")  # last slot = pre-norm target r = L


def _expected(args, capture_L: int | None, capture=None) -> tuple:
    """``(expected r list or None, where it came from)``."""
    from forensics.errors import ForensicsError

    if args.layers or args.expect:
        return (args.layers or args.expect), ("--layers" if args.layers else "--expect")
    if args.draft:
        from forensics.models.conventions import to_r
        from forensics.models.draft_config import read_draft

        if not args.trainer:
            raise ForensicsError("--draft needs --trainer (whose numbering the draft's ids use)", path=args.draft)
        L = args.num_layers or capture_L
        if not L:
            raise ForensicsError("--draft needs the model's L (--num-layers N, or a capture.json num_layers)",
                                 path=args.draft)
        info = read_draft(args.draft, read_vocab_maps=False)
        ids = info.ids_top if info.ids_top is not None else info.ids_nested
        rs, src = to_r(args.trainer, ids, L), f"draft config ids {ids} read as {args.trainer} numbering"
        if capture is not None and capture.format in SPECULATORS_FORMATS and len(capture.slots) == len(rs) + 1:
            # the ids cover the fc inputs; speculators stores its target last and trains against r = L pre-norm
            # (speculators#313), so that is what the last slot is expected to be (SpecForge's final_post target
            # is matched by the fingerprint itself)
            rs, src = [*rs, L], src + f" + speculators' target r = L = {L}"
        return rs, src
    return None, None


def run(args) -> int:
    from forensics.analysis.fingerprint.core import fingerprint
    from forensics.io.formats import load

    model = target_of(args)  # resolved once; streamed per file when it does not fit --max-memory
    results = {}

    def one(path: str) -> dict:
        cap = load(path)
        layers, source = _expected(args, cap.num_layers, cap)
        fp = fingerprint(cap, layers=layers, model=model, num_layers=args.num_layers, expected_source=source)
        results[fp.path] = fp
        return fp.to_dict()

    entries, code = for_each_file(args.paths, one)
    if any(f["kind"] in FAIL_KINDS for e in entries for f in e.get("findings") or []):
        code = max(code, 1)
    for e in entries:  # errors on stderr in both modes (the JSON document also carries them)
        if e.get("error"):
            print(f"hsf fingerprint: error: {e['error']}", file=sys.stderr)
    if args.json:
        print_json({"files": entries})
        return code
    for e in entries:
        if not e.get("error"):
            print(repr(results[e["path"]]))
            print()
    return code
