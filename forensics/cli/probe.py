"""``hsf probe --draft DIR --data PATH [--model PATH] [--candidates auto|LIST] [--steps K] [--engine E] [--json]``:
which wiring does this trained draft actually expect, and what does the served one cost?

Drafts greedy chains of ``--steps`` tokens under candidate wirings of the captured slots (plus a shift and a
random control) and ranks them by mean acceptance length against the verifier's prediction (with ``--model``)
or the actual next token. The exit code is the result's verdict (``ProbeResult.verdict``): 0 pass, 1 fail (the
declared or served wiring clearly beaten), 3 cannot tell (a tie, the best not clearly above the controls, or
no interval), 2 on unreadable input.
"""

from __future__ import annotations

from forensics.cli._common import (
    add_engine_arguments,
    add_model_arguments,
    add_stamp_argument,
    positive_int,
    print_json,
    target_of,
)


def add_arguments(p) -> None:
    p.add_argument("--draft", required=True, metavar="DIR", help="EAGLE-3 draft folder (config.json + weights; "
                   "speculators layers.0.* or EAGLE/SGLang/SpecForge midlayer.* names)")
    p.add_argument("--data", required=True, metavar="PATH", help="capture file or folder (slots named by r)")
    add_model_arguments(p, "verifier (HF folder or .gguf; 'default' = packaged SmolLM2): scores against its "
                           "prediction and supplies the embedding; without it the target is the next token")
    p.add_argument("--candidates", default="auto", metavar="auto|LIST",
                   help="'auto' (declared, trainer's view, shifts, permutations; at most 24) or wirings as "
                        "r lists, e.g. '0,3,16;3,16,28' or 'embed,L3,L16;L3,L16,L28'")
    p.add_argument("--topk", type=positive_int, default=None, help="k of the top-k agreement (default 5)")
    p.add_argument("--samples", type=positive_int, default=None, metavar="N", help="use at most N capture files")
    p.add_argument("--loss-mask", action="store_true", help="start chains only at positions with loss_mask set")
    p.add_argument("--steps", type=positive_int, default=None, metavar="K",
                   help="draft tokens per chain (default 3): acceptance length lies in [1, K + 1]")
    add_engine_arguments(p, "the serving engine whose wiring (from the draft config) is compared with the best")
    add_stamp_argument(p)
    p.add_argument("--draft-cost", type=float, default=None, metavar="C",
                   help="draft cost per token over the target's, for the expected speed-up τ / (1 + K·C) "
                        "(default 0.05)")


def run(args) -> int:
    from forensics.analysis.acceptance import DRAFT_COST
    from forensics.analysis.probe import STEPS, TOPK, probe

    with args.console.progress("wirings × files") as step:
        res = probe(args.draft, args.data, candidates=args.candidates, model=target_of(args),
                    topk=TOPK if args.topk is None else args.topk, max_samples=args.samples,
                    use_loss_mask=args.loss_mask, progress=lambda done, total: step(done=done, total=total),
                    steps=STEPS if args.steps is None else args.steps, engine=args.engine_system,
                    engine_version=args.engine_version,
                    draft_cost=DRAFT_COST if args.draft_cost is None else args.draft_cost,
                    stamp_check=args.stamp_check)
    if args.json:
        print_json(res.to_dict())
    else:
        from forensics.views.probe import text

        args.console.text(text(res, width=args.console.width, verbose=args.console.verbose))
    from forensics.findings import exit_code

    return exit_code([], [res.verdict])  # the result's verdict, decided once in analysis/probe.py
