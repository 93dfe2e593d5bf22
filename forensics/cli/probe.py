"""``hsf probe --draft DIR --data PATH [--model PATH] [--candidates auto|LIST] [--json]``: which wiring
does this trained draft actually expect?

Runs the draft at training-time step 0 under candidate wirings of the captured slots and ranks them by
top-1 / top-k agreement with the verifier's prediction (with ``--model``) or the actual next token.
Exit 0 when the ranking is clear or no declared wiring exists; 1 when the draft's declared wiring is
clearly beaten by another (its 95 % CI lies below the best's); 2 on unreadable input.
"""

from __future__ import annotations

from forensics.cli._common import add_model_arguments, positive_int, print_json, target_of


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
    p.add_argument("--loss-mask", action="store_true", help="score only positions with loss_mask set")


def run(args) -> int:
    from forensics.analysis.probe import TOPK, probe

    with args.console.progress("wirings × files") as step:
        res = probe(args.draft, args.data, candidates=args.candidates, model=target_of(args),
                    topk=TOPK if args.topk is None else args.topk, max_samples=args.samples,
                    use_loss_mask=args.loss_mask, progress=lambda done, total: step(done=done, total=total))
    if args.json:
        print_json(res.to_dict())
    else:
        from forensics.views.probe import text

        args.console.text(text(res, width=args.console.width, verbose=args.console.verbose))
    from forensics.findings import Verdict, exit_code

    # the declared wiring is the claim: beaten outside the 95 % intervals FAIL, the clear winner PASS, else
    # the intervals overlap and the probe cannot tell (exit 3, the one table of every command)
    declared = next((r for r in res.rows if "declared" in r["tags"]), None)
    verdict = None
    if declared is not None:
        beaten = declared is not res.best and declared["top1_ci"][1] < res.best["top1_ci"][0]
        verdict = Verdict.FAIL if beaten else Verdict.PASS if declared is res.best and res.clear_winner \
            else Verdict.CANNOT_TELL
    return exit_code([], [verdict])
