"""``hsf audit``: does serving feed the EAGLE-3 draft what training fed it? Verdict, slices, fix.

Exit codes: 0 match; 1 mismatch; 2 unreadable input or bad arguments; 3 cannot-tell (non-zero so a CI
gate never passes on an unproven wiring, and distinct from 1 so a script can tell "proven wrong" from
"not proven").
"""

from __future__ import annotations

import json

from . import positive_int, print_json

EXIT = {"match": 0, "mismatch": 1, "cannot-tell": 3}



def add_arguments(p) -> None:
    p.add_argument("--data", metavar="PATH", help="training capture file or folder (its slots are fingerprinted)")
    p.add_argument("--trained-layout", metavar="R,R,...",
                   help="instead of --data: the stored slots as labels, e.g. embed,L3,L31,L59")
    p.add_argument("--draft", metavar="PATH", help="draft checkpoint folder (config.json [+ model.safetensors])")
    p.add_argument("--engine", choices=["sglang", "vllm"], help="the serving engine")
    p.add_argument("--engine-version", metavar="V",
                   help="sglang: pre-25454 | post-25454 (default); vllm: pre-36063 | post-36063 | post-46973 "
                        "(default). Also written sglang<25454, >=25454, latest")
    p.add_argument("--trainer", choices=["speculators-v1", "speculators", "specforge"],
                   help="the trainer that consumed --data (default: from the data's format)")
    p.add_argument("--target-config", metavar="PATH", help="the target model's config.json (or its folder)")
    p.add_argument("--num-layers", type=positive_int, metavar="L",
                   help="target num_hidden_layers (instead of --target-config)")
    p.add_argument("--hidden-size", type=positive_int, metavar="H",
                   help="target hidden_size (instead of --target-config)")
    p.add_argument("--target-arch", metavar="NAME",
                   help="target architecture when no --target-config (e.g. DeepseekV3ForCausalLM, LlamaForCausalLM)")
    p.add_argument("--served", metavar="PATH",
                   help="capture of what the engine actually fed the draft (e.g. vLLM extract_hidden_states "
                        "safetensors): compared slot by slot with --data, no config needed")
    p.add_argument("--model", metavar="PATH",
                   help="reference model for exact r per slot (HF folder, .gguf, or a ladder capture with the "
                        "same input_ids); default: fingerprint from the data alone")
    p.add_argument("--no-fingerprint", action="store_true", help="trust declared layers; skip fingerprinting")


def run(args) -> int:
    from ..audit import audit
    from ..conventions import arch_family

    data = args.data
    if args.trained_layout:
        data = [x for x in args.trained_layout.replace(" ", "").split(",") if x]
    res = audit(data=data, draft=args.draft, engine=args.engine, engine_version=args.engine_version,
                trainer=args.trainer, target_config=args.target_config, served=args.served,
                num_layers=args.num_layers, hidden_size=args.hidden_size,
                arch=arch_family([args.target_arch]) if args.target_arch else None,
                use_fingerprint=not args.no_fingerprint, model=args.model)
    if args.json:
        print_json(res.to_dict())
    else:
        print(render_text(res))
    return EXIT[res.verdict]


def _lab(r) -> str:
    from ..capture import r_label

    return "?" if r is None else r_label(r)


def render_text(res) -> str:
    """The report a user can act on without reading any engine's source."""
    c = res.context
    head = {"match": "MATCH", "mismatch": "MISMATCH", "cannot-tell": "CANNOT TELL"}[res.verdict]
    out = [f"hsf audit: {head}: {res.reason}"]
    ctx = [f"engine {c['engine']} {c['engine_version'] or ''}".strip() if c.get("engine") else "engine ?",
           f"trainer {c.get('trainer') or '?'}",
           f"target L={c.get('num_layers') or '?'} H={c.get('hidden_size') or '?'} ({c.get('arch')} path)"]
    out.append("  " + " · ".join(ctx))
    t, s = res.trained, res.served
    if t.get("fc_r") is not None:
        tgt = f", target {_lab(t['target_r'])}" if t.get("target_r") is not None else ""
        srcs = sorted(set(t.get("slot_source") or []))
        out.append(f"  trained: fc <- [{', '.join(_lab(r) for r in t['fc_r'])}]{tgt}   ({t['source']}; r from "
                   f"{'/'.join(srcs) or '?'})")
    if s.get("r") is not None:
        out.append(f"  served:  fc <- [{', '.join(_lab(r) for r in s['r'])}]   ({s['source']})")
    for n in s.get("notes") or []:
        out.append(f"           {n}")
    if res.slices:
        out.append("")
        out.append("  fc slice  trained  served  ok")
        for sl in res.slices:
            out.append(f"  {sl['slice']:>8}  {_lab(sl['trained_r']):>7}  {_lab(sl['served_r']):>6}  "
                       f"{'yes' if sl['ok'] else 'NO'}")
    if res.findings:
        out.append("")
        out.append("findings:")
        for f in res.findings:
            out.append(f"  {f.severity.upper():5} {f.kind}: {f.message}")
            ev = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in f.evidence.items()
                  if k in ("distance", "value", "threshold", "nearest_r", "nearest_value", "mean_cosine",
                           "served_role", "trained_role")}
            if ev:
                out.append(f"        evidence: {json.dumps(ev, default=str)}")
    fx = res.fix
    if fx:
        out.append("")
        out.append("fix:")
        if fx.get("ids") is None:
            out.append(f"  no id list can make {fx['engine']} {fx['version']} serve r = {fx['r']}: {fx.get('caveat')}")
        else:
            snippet = ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": fx["ids"]}}
                       if fx["where"] == "nested" else {"eagle_aux_hidden_state_layer_ids": fx["ids"]})
            if fx.get("already_set"):
                out.append(f"  the draft's config.json already sets {fx['where']} `{fx['key']}` = {fx['ids']}"
                           f"  ({fx['engine']} {fx['version']} reads it as r = {fx['r']}): the ids are right; "
                           "what still blocks serving is the caveat below")
            else:
                out.append(f"  in the draft's config.json set {fx['where']} `{fx['key']}` = {fx['ids']}"
                           f"  ({fx['engine']} {fx['version']} then captures r = {fx['r']})")
                out.append(f"    {json.dumps(snippet)}")
            if fx.get("caveat"):
                out.append(f"  caveat: {fx['caveat']}")
            if fx.get("also"):
                out.append(f"  also: {fx['also']}")
    other = [f for f in res.findings if f.severity == "error" and f.kind not in
             ("slices", "off_by_one", "shifted", "served_data")]
    if res.verdict == "match" and other:
        out.append("")
        out.append(f"note: the wiring matches, but {len(other)} other problem(s) above still need fixing")
    return "\n".join(out)
