"""``hsf audit``: does serving feed the EAGLE-3 draft what training fed it? Verdict, slices, fix.

Exit codes (``forensics.findings.exit_code``, as every command): 0 match and no fail; 1 mismatch or a fail
finding (a MATCH with a broken training target is still a fail); 2 unreadable input or bad arguments;
3 cannot-tell (non-zero so a CI gate never passes on an unproven wiring, and distinct from 1 so a script can
tell "proven wrong" from "not proven").
"""

from __future__ import annotations

from forensics.cli._common import (
    add_engine_arguments,
    add_model_arguments,
    add_stamp_argument,
    add_trainer_argument,
    layer_count,
    positive_int,
    print_json,
    target_of,
)


def add_arguments(p) -> None:
    p.add_argument("--data", metavar="PATH", help="training capture file or folder (its slots are fingerprinted)")
    p.add_argument("--trained-layout", metavar="R,R,...",
                   help="instead of --data: the stored slots as labels, e.g. embed,L3,L31,L59")
    p.add_argument("--draft", metavar="PATH", help="draft checkpoint folder (config.json [+ model.safetensors])")
    from forensics.models.conventions import FAMILIES

    add_engine_arguments(p)
    add_trainer_argument(p, "the trainer that consumed --data (default: from the data's format), or, with "
                            "--target-layer-ids, the trainer as it was invoked")
    p.add_argument("--target-layer-ids", metavar="I,I,...",
                   help="pre-flight without data: the ids the trainer was given, in its own numbering (speculators: "
                        "train.py --target-layer-ids, without the final layer)")
    p.add_argument("--include-last-layer", action="store_true",
                   help="the data was generated with speculators launch_vllm.py --include-last-layer (the final "
                        "layer appended as the training target)")
    p.add_argument("--family", choices=list(FAMILIES),
                   help="drafter family (default: from the draft config)")
    p.add_argument("--target-config", metavar="PATH", help="the target model's config.json (or its folder)")
    p.add_argument("--num-layers", type=layer_count, metavar="L",
                   help="target num_hidden_layers (instead of --target-config)")
    p.add_argument("--hidden-size", type=positive_int, metavar="H",
                   help="target hidden_size (instead of --target-config)")
    p.add_argument("--target-arch", metavar="NAME",
                   help="target architecture when no --target-config (e.g. DeepseekV3ForCausalLM, LlamaForCausalLM)")
    p.add_argument("--served", metavar="PATH",
                   help="capture of what the engine actually fed the draft (e.g. vLLM extract_hidden_states "
                        "safetensors): compared slot by slot with --data, no config needed")
    add_model_arguments(p, "reference model for exact r per slot (HF folder, .gguf, or a ladder capture with the "
                           "same input_ids); default: fingerprint from the data alone")
    p.add_argument("--no-fingerprint", action="store_true", help="trust declared layers; skip fingerprinting")
    add_stamp_argument(p)


def _preflight(args, engine, trainer) -> bool:
    """Data-free, and the question is the pre-flight doctor's: what the trainer was invoked with, a drafter
    family, an engine whose capture is a registry rule rather than modelled from its code, or a trainer whose
    stored data layout is not known."""
    if args.data is not None or args.served is not None or not args.draft or engine is None:
        return False
    return (args.target_layer_ids is not None or args.include_last_layer or args.family is not None
            or trainer is None or not engine.code_modelled or trainer.data_format is None)


def run(args) -> int:
    from forensics.analysis.audit.core import audit
    from forensics.layers import parse_id_list, parse_layer_list, r_label
    from forensics.models.conventions import arch_family

    data = args.data
    if args.trained_layout:  # the one layer-list parser: a typo is one line, exit 2
        data = [r_label(r) for r in parse_layer_list(args.trained_layout, "--trained-layout") or []]
    target_layer_ids = parse_id_list(args.target_layer_ids, "--target-layer-ids")
    engine, trainer = args.engine_system, args.trainer_system  # resolved once, for every command (forensics.cli)
    if _preflight(args, engine, trainer):
        from forensics.analysis.audit.doctor import preflight
        res = preflight(draft=args.draft, engine=engine, engine_version=args.engine_version,
                        trained_layout=data, trainer=trainer,
                        target_layer_ids=target_layer_ids,
                        include_last_layer=args.include_last_layer or None, target_config=args.target_config,
                        num_layers=args.num_layers, hidden_size=args.hidden_size,
                        arch=arch_family([args.target_arch]) if args.target_arch else None, family=args.family)
        if args.json:
            print_json(res.to_dict())
        else:
            args.console.text(res.text())
        return res.exit_code()
    with args.console.status("fingerprinting the training data and reading the draft's config"):
        res = audit(data=data, draft=args.draft, engine=engine, engine_version=args.engine_version,
                    trainer=trainer, target_config=args.target_config, served=args.served,
                    num_layers=args.num_layers, hidden_size=args.hidden_size,
                    arch=arch_family([args.target_arch]) if args.target_arch else None,
                    use_fingerprint=not args.no_fingerprint, model=target_of(args), stamp_check=args.stamp_check)
    if args.json:
        print_json(res.to_dict())
    else:
        from forensics.views.audit import text

        args.console.text(text(res, width=args.console.width, verbose=args.console.verbose))
    return res.exit_code()
