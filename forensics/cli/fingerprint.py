"""``hsf fingerprint PATH… [--layers …|--expect …|--draft …] [--model …] [--num-layers N] [--json]``.

Role, depth order, coarse r and label of every slot, with the evidence that decided each, and the verdict
of every slot's claim (PASS / FAIL / CANNOT TELL) — the claim being the user's list, a draft config's ids
(read through ``--trainer``'s convention, or as ``--engine`` would capture them), or the capture's own
sidecar and format. ``--model`` adds the exact checks (embedding rows, final-norm γ, reference ladder).
Exit codes (``forensics.findings``): 0 no fail, 1 a fail, 2 unreadable file or bad arguments, 3 cannot tell.
"""

from __future__ import annotations

from forensics.cli._common import (
    add_engine_arguments,
    add_ids_arguments,
    add_model_arguments,
    add_stamp_argument,
    add_trainer_argument,
    exit_code_of,
    for_each_file,
    ids_of,
    layer_count,
    print_json,
    target_of,
    verdict_of,
)


def add_arguments(p) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="capture files or directories")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--layers", help="claimed r per stored slot, e.g. 3,16,28,30 (default: the r the capture "
                                    "declares in capture.json / data_config.json, and its format's definition)")
    g.add_argument("--expect", help="same as --layers in labels, e.g. embed,L3,L16,L28,final_post")
    g.add_argument("--draft", help="claim the layers an EAGLE-3 draft's config ids name: as its trainer wrote them "
                                   "(--trainer) or as a serving engine captures them (--engine)")
    add_trainer_argument(p, "with --draft: the trainer that wrote the draft's ids")
    add_engine_arguments(p, "with --draft: read the ids as this engine captures them")
    add_model_arguments(p, "exact mode: HF folder, safetensors checkpoint, .gguf, or a ladder capture with the "
                           "same input_ids ('default' = packaged SmolLM2)")
    p.add_argument("--num-layers", type=layer_count, help="L of the model (for the coarse r estimate)")
    add_ids_arguments(p)
    add_stamp_argument(p)


def _claims(args, capture):
    """The claim list the user asked to check (None: the capture's own claims)."""
    from forensics.analysis.claims import Claim, Claims, ClaimSource, draft_claims, user_claims, with_format_target
    from forensics.errors import ForensicsError

    if args.layers or args.expect:
        return user_claims(args.layers or args.expect, "--layers" if args.layers else "--expect")
    if not args.draft:
        return None
    from forensics.models.draft_config import read_draft

    if not (args.trainer or args.engine):
        raise ForensicsError("--draft needs --trainer (who wrote the ids) or --engine (who reads them)",
                             path=args.draft)
    L = args.num_layers or capture.num_layers
    if not L:
        raise ForensicsError("--draft needs the model's L (--num-layers N, or a capture.json num_layers)",
                             path=args.draft)
    info = read_draft(args.draft, read_vocab_maps=False)
    if args.trainer:
        return draft_claims(info, args.trainer_system, L, capture)
    ec = args.engine_system.capture(info.config, L, args.engine_version)
    detail = (f"draft config `{ec.key}` = {ec.ids} as {args.engine} {ec.version} captures it"
              if ec.ids is not None else f"no ids under `{ec.key}`: {args.engine} {ec.version}'s default")
    served = Claims([Claim(r, ClaimSource.DRAFT, detail) for r in ec.r], ClaimSource.DRAFT, detail)
    return with_format_target(served, capture, L)


def run(args) -> int:
    from forensics.analysis.fingerprint.core import fingerprint
    from forensics.io.formats import load_all

    model = target_of(args)  # resolved once; streamed per file when it does not fit --max-memory
    ids = ids_of(args)  # one file's tokens (refused with several files)
    results = {}

    def fp_of(cap) -> dict:
        fp = fingerprint(cap, model=model, num_layers=args.num_layers, claims=_claims(args, cap),
                         stamp_check=args.stamp_check)
        results[fp.path] = fp  # FILE#i for one sample of a many-sample file
        d = fp.to_dict()
        d["path"] = fp.path
        return d

    def one(path: str) -> list[dict]:
        # every sample (TensorRT-LLM records, SGLang objects, [B, T] batch rows), the file read once; FILE#i: one
        return [fp_of(cap) for cap in load_all(path, input_ids=ids)]

    entries, code = for_each_file(args.paths, one, out=args.console, what="fingerprint")
    code = exit_code_of(entries, unreadable=code == 2)
    for e in entries:  # errors on stderr in both modes (the JSON document also carries them)
        if e.get("error"):
            args.console.error(e["error"])
    if args.json:
        print_json({"verdict": verdict_of(entries), "files": entries})
        return code
    from forensics.views.fingerprint import explain, files_summary, text, worst_first

    out = args.console
    fps = [results[e["path"]] for e in entries if not e.get("error")]
    if len(entries) > 1:
        out.text(files_summary(fps, unreadable=len(entries) - len(fps)))
    for k, fp in enumerate(worst_first(fps)):
        if k or len(entries) > 1:
            out.text("")
        out.text(text(fp, width=out.width))
        if out.verbose:
            out.text(explain(fp, width=out.width))
    return code
