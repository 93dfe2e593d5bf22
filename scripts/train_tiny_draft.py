"""Train a tiny EAGLE-3 draft for SmolLM2-135M on the CPU, with one chosen wiring, in speculators format.

The proof checkpoint for ``hsf probe`` : the draft's fc reads ``cat([r=0, r=3, r=16])``
(``[embed, L3, L16]``, the seed's Kimi wiring scaled to L = 30) and learns the verifier's prediction
``lm_head(norm(r=30 pre-norm))`` restricted to a reduced draft vocabulary, as speculators trains it:

- step-0 pairing of ``shift_batch`` (speculators ``models/eagle3/data.py``): fused states at position t with
  the embedding of token t+1, target = the verifier's distribution at t+1, positions 1..T-1;
- loss = KL(verifier ‖ draft) over the draft vocabulary (speculators' default ``kl_div``);
- ``lm_head`` initialised from the verifier's rows ``lm_head[t2d]`` and frozen, the embedding frozen and not
  saved (``embed_tokens`` comes from ``--model`` / the packaged SmolLM2 at probe time);
- draft vocab = the most frequent ``--draft-vocab`` tokens of the corpus, ``d2t`` offsets / ``t2d`` mask as
  ``speculators/train/vocab_mapping.py`` builds them (``target = i + d2t[i]``).

Activations are generated at run time with ``forensics.models.target.ladder`` from an offline English corpus:
docstrings of Python standard-library modules, classes and methods (deterministic order). The probe's
proof data (``sample_data/``) is not used for training, so the proof measures held-out accuracy.

``--corpus source`` trains on stdlib Python source instead (cut at blank lines into ~1,500-character pieces; a
lower-entropy domain, where drafts agree more), ``--holdout-every N`` keeps about one module in N out of the corpus
by a fixed hash of its name and ``--holdout-dir`` writes those texts for ``hsf capture``: the held-out split of
``benchmarks/probe_unseen.py``. ``--states-cache`` keeps the verifier states between runs.

Run (about 10 minutes on 2 cores)::

    .venv/bin/python scripts/train_tiny_draft.py --out sample_data/draft_eagle3

Writes ``config.json`` (loads in speculators' ``Eagle3SpeculatorConfig`` with no unknown keys),
``model.safetensors`` (bf16 weights, int64 ``d2t``, bool ``t2d``; no ``embed_tokens``) and ``training.json``
(seed, corpus, steps, wall time, final loss and accuracy).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import inspect
import io
import json
import os
import sys
import time
import warnings

SKIP_MODULES = {"antigravity", "this", "idlelib", "turtledemo", "tkinter", "turtle", "test", "lib2to3",
                "ensurepip", "venv", "pydoc_data"}
MIN_DOC_CHARS = 200
LADDER_BATCH = 8  # sequences per verifier forward while generating the training states
SOURCE_PIECE_CHARS = 1500  # --corpus source: module sources cut at blank lines into pieces of about this size
VERIFIER_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


def stdlib_docstrings() -> list[str]:
    """Docstrings of stdlib modules, public classes/functions and their methods, in a fixed order."""
    names = sorted(n for n in sys.stdlib_module_names if not n.startswith("_") and n not in SKIP_MODULES)
    mods = []
    for n in names:
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                warnings.simplefilter("ignore")
                mods.append((n, importlib.import_module(n)))
        except BaseException:  # noqa: BLE001 - platform modules that do not import here
            continue
    docs, seen = [], set()

    def add(d):
        if d and len(d) >= MIN_DOC_CHARS and d not in seen:
            seen.add(d)
            docs.append(d)

    for n, m in mods:
        add(inspect.getdoc(m))
        for an, obj in sorted(vars(m).items()):
            if an.startswith("_") or getattr(obj, "__module__", None) != n:
                continue
            if inspect.isclass(obj) or inspect.isfunction(obj):
                add(inspect.getdoc(obj))
            if inspect.isclass(obj):
                for mn, meth in sorted(vars(obj).items()):
                    if not mn.startswith("_") and inspect.isfunction(meth):
                        add(inspect.getdoc(meth))
    return docs


def stdlib_sources(max_chars: int = SOURCE_PIECE_CHARS) -> list[tuple[str, str]]:
    """``(module, piece)``: the Python source of stdlib modules cut at blank lines into pieces of about
    ``max_chars`` characters, in a fixed order (a lower-entropy domain than prose: code is where served EAGLE-3
    and MTP acceptance is highest, e.g. 0.908 on code vs 0.49 on prose in tenstorrent/vllm#442)."""
    import sysconfig

    root = sysconfig.get_paths()["stdlib"]
    names = sorted(n for n in sys.stdlib_module_names if not n.startswith("_") and n not in SKIP_MODULES)
    out = []
    for n in names:
        path = os.path.join(root, n + ".py")
        if not os.path.isfile(path):
            path = os.path.join(root, n, "__init__.py")
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        piece = ""
        for block in text.split("\n\n"):
            piece = f"{piece}\n\n{block}" if piece else block
            if len(piece) >= max_chars:
                out.append((n, piece))
                piece = ""
        if len(piece) >= MIN_DOC_CHARS:
            out.append((n, piece))
    return out


def held_out(name: str, every: int) -> bool:
    """Whether document group ``name`` (a module) is in the held-out split: a fixed hash, ~1 in ``every``."""
    return every > 0 and int(hashlib.sha256(name.encode()).hexdigest(), 16) % every == 0


def split_holdout(named: list[tuple[str, str]], every: int) -> tuple[list[tuple[str, str]], list[str]]:
    """``(held-out (module, text) pairs, training texts)``: whole modules held out (:func:`held_out`), minus any
    held-out text that also occurs verbatim among the training texts (the stdlib repeats a few functions across
    modules, e.g. ``imghdr``/``sndhdr``'s ``testall``)."""
    docs = [d for n, d in named if not held_out(n, every)]
    seen = set(docs)
    return [(n, d) for n, d in named if held_out(n, every) and d not in seen], docs


def write_holdout(held: list[tuple[str, str]], folder: str, most: int) -> list[str]:
    """Write at most ``most`` held-out documents as ``holdout_NNN.txt``, taken round-robin over their groups
    (modules) so that one long module does not fill the split; returns the paths."""
    groups: dict[str, list[str]] = {}
    for n, d in held:
        groups.setdefault(n, []).append(d)
    picked, depth = [], 0
    while len(picked) < most and any(depth < len(v) for v in groups.values()):
        picked += [v[depth] for v in groups.values() if depth < len(v)][:most - len(picked)]
        depth += 1
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i, d in enumerate(picked):
        paths.append(os.path.join(folder, f"holdout_{i:03d}.txt"))
        with open(paths[-1], "w") as f:
            f.write(d)
    return paths


def make_sequences(tok, docs: list[str], seq_len: int, max_tokens: int, chat_every: int = 2) -> list[list[int]]:
    """Token windows of exactly ``seq_len``, each starting at a document start (as captures do).

    Every ``chat_every``-th document is rendered with the tokenizer's chat template (user asks about the
    API, assistant answers with the docstring; the template inserts SmolLM2's default system prompt), the
    others are plain text; a window is filled with the following documents, joined by blank lines.
    """
    def tokens(i, d):
        if chat_every and i % chat_every == 0:
            first = d.split("\n", 1)[0][:120]
            msgs = [{"role": "user", "content": f"Explain this Python API: {first}"},
                    {"role": "assistant", "content": d}]
            out = tok.apply_chat_template(msgs, tokenize=True)
            return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)
        return tok(d + "\n\n")["input_ids"]

    toks = [tokens(i, d) for i, d in enumerate(docs)]
    seqs, i = [], 0
    while i < len(toks) and len(seqs) * seq_len < max_tokens:
        window = []
        while i < len(toks) and len(window) < seq_len:
            window += toks[i]
            i += 1
        if len(window) >= seq_len:
            seqs.append(window[:seq_len])
    return seqs


def vocab_maps(seqs, draft_vocab: int, vocab: int):
    """``(d2t, t2d)`` from token frequencies (speculators ``build_vocab_mappings_from_distribution``)."""
    import torch

    counts = torch.bincount(torch.tensor([t for s in seqs for t in s]), minlength=vocab)
    order = sorted(range(vocab), key=lambda t: (-int(counts[t]), t))[:draft_vocab]
    sel = torch.tensor(sorted(order), dtype=torch.long)
    d2t = sel - torch.arange(draft_vocab, dtype=torch.long)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[sel] = True
    return d2t, t2d


def draft_config(mcfg, args, wiring: list[int]) -> dict:
    """A speculators ``Eagle3SpeculatorConfig`` document (keys as speculators 0.9.0 writes them)."""
    from transformers import LlamaConfig

    tl = LlamaConfig(hidden_size=mcfg.hidden_size, intermediate_size=args.intermediate,
                     num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                     head_dim=mcfg.hidden_size // args.heads if args.head_dim is None else args.head_dim,
                     num_hidden_layers=1, vocab_size=mcfg.vocab_size, rms_norm_eps=mcfg.rms_norm_eps,
                     max_position_embeddings=mcfg.max_position_embeddings, hidden_act="silu",
                     rope_parameters=dict(mcfg.rope_parameters), bos_token_id=mcfg.bos_token_id,
                     eos_token_id=mcfg.eos_token_id, pad_token_id=mcfg.pad_token_id, tie_word_embeddings=False)
    tl_dict = tl.to_diff_dict()
    return {
        "architectures": ["Eagle3DraftModel"],
        "auto_map": {"": "config.Eagle3SpeculatorConfig"},
        "draft_vocab_size": args.draft_vocab,
        "dtype": "bfloat16",
        # speculators / vLLM ids: r = id (speculators#379 records them)
        "eagle_aux_hidden_state_layer_ids": list(wiring),
        "embed_requires_grad": False,
        "fc_norm": False,
        "norm_before_fc": False,
        "norm_before_residual": args.norm_before_residual,
        "norm_output": False,
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"accept_tolerance": 0.0, "proposal_type": "greedy", "speculative_tokens": 3,
                                  "verifier_accept_k": 1}],
            "verifier": {"architectures": ["LlamaForCausalLM"], "name_or_path": VERIFIER_ID},
        },
        "speculators_model_type": "eagle3",
        "speculators_version": "0.9.0",
        "target_hidden_size": None,
        "transformer_layer_config": tl_dict,
    }


def ladder_batch(model, seqs: list[list[int]], rs: list) -> dict:
    """``forensics.models.target.ladder`` for equal-length sequences in one forward: ``{r: [B, T, H]}``
    (r = L from a hook on the last block, pre-norm, as ``ladder`` takes it)."""
    import torch

    from forensics.models.target import decoder_layers

    got = {}
    layers = decoder_layers(model)
    h = layers[-1].register_forward_hook(lambda _m, _i, o: got.update(last=(o[0] if isinstance(o, tuple) else o)))
    try:
        with torch.no_grad():
            out = model(input_ids=torch.tensor(seqs, dtype=torch.long), output_hidden_states=True, use_cache=False)
    finally:
        h.remove()
    L = len(layers)
    return {r: (got["last"] if r == L else out.hidden_states[r]).detach() for r in rs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="sample_data/draft_eagle3")
    ap.add_argument("--wiring", default="0,3,16", help="r of the fc inputs, in concat order")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=4, help="sequences per step")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=60_000)
    ap.add_argument("--chat-every", type=int, default=2, help="render every n-th document as a chat (0: none)")
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--draft-vocab", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=512)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--norm-before-residual", action="store_true")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: a shared CPU thrashes with more)")
    ap.add_argument("--corpus", choices=("docstrings", "source"), default="docstrings",
                    help="stdlib docstrings (prose, the sample draft's) or stdlib Python source (code)")
    ap.add_argument("--holdout-every", type=int, default=0, metavar="N",
                    help="hold out ~1 in N modules (a fixed hash of the module name): never trained on")
    ap.add_argument("--holdout-dir", default=None, metavar="DIR",
                    help="write the held-out documents here as .txt files (capture them with hsf capture)")
    ap.add_argument("--holdout-max", type=int, default=24, help="at most this many held-out documents written")
    ap.add_argument("--states-cache", default=None, metavar="FILE",
                    help="keep the verifier states of the training sequences here (reused when the ids match)")
    args = ap.parse_args(argv)

    import torch
    from safetensors.torch import save_file

    from forensics.models.draft import Draft, draft_forward, load_draft
    from forensics.models.target import default_model_path, final_norm, lm_head_weight, load_model

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t0 = time.time()
    wiring = [int(x) for x in args.wiring.split(",")]
    model, tok = load_model()
    mcfg = model.config
    L, H, V = mcfg.num_hidden_layers, mcfg.hidden_size, mcfg.vocab_size
    if args.corpus == "source":
        named = stdlib_sources()
    else:
        named = []
        for d in stdlib_docstrings():
            named.append((d.split("\n", 1)[0], d))
    held, docs = split_holdout(named, args.holdout_every)
    if args.holdout_dir:
        write_holdout(held, args.holdout_dir, args.holdout_max)
    seqs = make_sequences(tok, docs, args.seq_len, args.max_tokens, args.chat_every)
    corpus_sha = hashlib.sha256("\n\n".join(docs).encode()).hexdigest()
    print(f"corpus: {len(docs)} {args.corpus} documents ({len(held)} held out), {len(seqs)} sequences x "
          f"{args.seq_len} tokens", flush=True)

    rs = sorted(set(wiring + [L]))
    ids = torch.tensor(seqs, dtype=torch.long)
    cached = torch.load(args.states_cache) if args.states_cache and os.path.isfile(args.states_cache) else None
    if cached is not None and torch.equal(cached["ids"], ids) and all(r in cached["states"] for r in rs):
        states = {r: cached["states"][r] for r in rs}
        print(f"  states from {args.states_cache}", flush=True)
    else:
        lists: dict = {r: [] for r in rs}
        for i in range(0, len(seqs), LADDER_BATCH):
            for r, v in ladder_batch(model, seqs[i:i + LADDER_BATCH], rs).items():
                lists[r] += [x.to(torch.bfloat16) for x in v]
            print(f"  ladder {i}/{len(seqs)}  {time.time() - t0:.0f}s", flush=True)
        states = {r: torch.stack(v) for r, v in lists.items()}  # [N, T, H] bf16
        if args.states_cache:
            torch.save({"ids": ids, "states": states}, args.states_cache)
    t_data = time.time() - t0

    d2t, t2d = vocab_maps(seqs, args.draft_vocab, V)
    E = model.get_input_embeddings().weight.detach().float()
    head = lm_head_weight(model).float()
    gamma, eps = final_norm(model)
    vhead = head[t2d]  # verifier_lm_head = lm_head[t2d] (DraftVocabMixin._load_verifier_weights)
    cfg = draft_config(mcfg, args, wiring)
    tl = cfg["transformer_layer_config"]
    hd, nh, nkv, inter = tl["head_dim"], args.heads, args.kv_heads, args.intermediate

    def param(*shape, ones=False):
        t = torch.ones(*shape) if ones else torch.randn(*shape) * 0.02  # initializer_range 0.02
        return torch.nn.Parameter(t)

    k = len(wiring)
    w = {"fc.weight": param(H, k * H),
         "layers.0.self_attn.q_proj.weight": param(nh * hd, 2 * H),
         "layers.0.self_attn.k_proj.weight": param(nkv * hd, 2 * H),
         "layers.0.self_attn.v_proj.weight": param(nkv * hd, 2 * H),
         "layers.0.self_attn.o_proj.weight": param(H, nh * hd),
         "layers.0.mlp.gate_proj.weight": param(inter, H), "layers.0.mlp.up_proj.weight": param(inter, H),
         "layers.0.mlp.down_proj.weight": param(H, inter),
         "layers.0.input_layernorm.weight": param(H, ones=True), "layers.0.hidden_norm.weight": param(H, ones=True),
         "layers.0.post_attention_layernorm.weight": param(H, ones=True), "norm.weight": param(H, ones=True)}
    trainable = list(w.values())
    w["lm_head.weight"] = vhead.clone()  # frozen, as speculators freezes lm_head
    w["d2t"], w["t2d"] = d2t, t2d
    draft = Draft(path=args.out, config=cfg, scheme="layers.0", weights=w, hidden_size=H, num_aux=k,
                  draft_vocab_size=args.draft_vocab, target_vocab_size=V, num_layers=1, num_heads=nh,
                  num_kv_heads=nkv, head_dim=hd, rms_norm_eps=float(tl.get("rms_norm_eps", mcfg.rms_norm_eps)),
                  rope={"rope_theta": mcfg.rope_parameters["rope_theta"], "rope_type": "default"},
                  norm_before_residual=args.norm_before_residual, declared_ids=wiring)
    opt = torch.optim.AdamW(trainable, lr=args.lr, weight_decay=args.weight_decay, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.steps, pct_start=0.05)
    n_seq = ids.shape[0]
    n_val = max(2, n_seq // 20)
    g = torch.Generator().manual_seed(args.seed)
    log = []

    def batch(idx, full_vocab=False):
        fused = torch.cat([states[r][idx, :-1].float() for r in wiring], dim=-1)
        emb = E[ids[idx, 1:]]
        last = states[L][idx, 1:].float()
        with torch.no_grad():
            normed = gamma * (last * torch.rsqrt(last.pow(2).mean(-1, keepdim=True) + eps))
            tgt = normed @ vhead.T
            # the full-vocab argmax only for the held-out score (a 49k-row head per training step cost more
            # than the draft's own forward and backward)
            full = (normed @ head.T).argmax(-1) if full_vocab else None
        return fused, emb, tgt, full

    tids = draft.target_ids()
    for step in range(args.steps):
        idx = n_val + torch.randint(0, n_seq - n_val, (args.batch,), generator=g)
        fused, emb, tgt, _ = batch(idx)
        logits = draft_forward(draft, fused, emb)
        logp = torch.log_softmax(logits, -1)
        p = torch.softmax(tgt, -1)
        loss = (p * (torch.log_softmax(tgt, -1) - logp)).sum(-1).mean()  # KL(verifier || draft)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 50 == 0 or step == args.steps - 1:
            with torch.no_grad():
                acc = (logits.argmax(-1) == tgt.argmax(-1)).float().mean().item()
            log.append({"step": step, "loss": round(loss.item(), 4), "acc_draft_vocab": round(acc, 4)})
            print(f"  step {step}  loss {loss.item():.3f}  acc {acc:.3f}  {time.time() - t0:.0f}s", flush=True)

    with torch.no_grad():  # held-out sequences: agreement with the verifier's full-vocab argmax
        fused, emb, _, full_arg = batch(torch.arange(n_val), full_vocab=True)
        pred = tids[draft_forward(draft, fused, emb).argmax(-1)]
        val_acc = (pred == full_arg).float().mean().item()
    print(f"held-out top-1 agreement with the verifier (full vocab): {val_acc:.3f}", flush=True)

    os.makedirs(args.out, exist_ok=True)
    sd = {n: (t.detach().to(torch.bfloat16) if t.is_floating_point() else t).contiguous() for n, t in w.items()}
    save_file(sd, os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    record = {
        "script": "scripts/train_tiny_draft.py", "argv": sys.argv[1:], "seed": args.seed,
        "wiring_r": wiring, "target": f"verifier lm_head(norm(r={L} pre-norm)) over the draft vocab (KL)",
        "verifier": VERIFIER_ID, "verifier_file": os.path.basename(default_model_path()),
        "corpus": {"source": ("Python stdlib docstrings (modules, classes, functions, methods; >= "
                              f"{MIN_DOC_CHARS} chars); every {args.chat_every}-th as a chat (tokenizer chat "
                              "template)") if args.corpus == "docstrings" else
                   (f"Python stdlib module sources cut at blank lines into ~{SOURCE_PIECE_CHARS}-char pieces; "
                    f"every {args.chat_every}-th as a chat" if args.chat_every else
                    f"Python stdlib module sources cut at blank lines into ~{SOURCE_PIECE_CHARS}-char pieces"),
                   "python": sys.version.split()[0], "documents": len(docs),
                   "held_out_documents": len(held), "held_out_modules": sorted({n for n, _ in held}),
                   "holdout_every": args.holdout_every,
                   "sha256": corpus_sha, "sequences": n_seq, "seq_len": args.seq_len,
                   "tokens": n_seq * args.seq_len, "held_out_sequences": n_val},
        "steps": args.steps, "batch": args.batch, "lr": args.lr, "weight_decay": args.weight_decay,
        "draft_vocab_size": args.draft_vocab,
        "intermediate_size": inter, "heads": nh, "kv_heads": nkv, "head_dim": hd,
        "seconds_data": round(t_data, 1), "seconds_total": round(time.time() - t0, 1),
        "held_out_top1_full_vocab": round(val_acc, 4), "log": log,
        "torch": torch.__version__, "threads": args.threads,
    }
    with open(os.path.join(args.out, "training.json"), "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    back = load_draft(args.out)  # round trip through the project's own loader
    print(f"saved {back!r}: {os.path.getsize(os.path.join(args.out, 'model.safetensors')) / 1e6:.2f} MB, "
          f"{time.time() - t0:.0f}s total", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
