"""Accuracy of the ``loss_mask`` check (issue 33) on a held-out set of real chat captures, and its false alarms on
the clean accuracy corpus.

Held-out set: the 12 conversations of ``benchmarks/chat_holdout.json`` (written for this measurement; nothing was
tuned on them: the check has no threshold beyond one boundary token), captured with ``hsf capture`` (packaged
SmolLM2, speculators-v1 and SpecForge files: the loss mask the recorder sets from character spans of the rendered
conversation). Each capture is judged clean and with its mask corrupted the ways issue 33 names:

- ``prompt``: the mask over the system/user turns and headers instead of the replies → FAIL expected;
- ``everything``: every token supervised → FAIL expected;
- ``late`` / ``early``: the mask moved one token later / earlier (SpecForge#885, EAGLE#317) → WARN (offset ±1);
- ``first reply only`` (conversations with 2+ replies): a later reply unsupervised → WARN (reply).

Then every file of the clean accuracy corpus (``.cache/corpus``: raw texts, mask all ones) and of the encoder
corpus when present: any ``loss_mask`` finding there is a false alarm.

Usage::

    PYTHONPATH=. .venv/bin/python benchmarks/accuracy_loss_mask.py [--out /tmp/hsf-chat-holdout]

Last run (2026-12-05, this machine): see the notes printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from collections import Counter

EXPECTED = {"clean": None, "prompt": ("fail", "prompt"), "everything": ("fail", "prompt"),
            "late": ("warn", "offset"), "early": ("warn", "offset"), "first reply only": ("warn", "reply")}


def corrupt(how: str, mask, spans):
    import torch

    if how == "clean":
        return mask
    if how == "prompt":
        return 1 - mask
    if how == "everything":
        return torch.ones_like(mask)
    if how == "late":
        return torch.cat([mask.new_zeros(1), mask[:-1]])
    if how == "early":
        return torch.cat([mask[1:], mask.new_zeros(1)])
    if how == "first reply only":
        m = mask.clone()
        m[spans[1][0]:] = 0
        return m
    raise ValueError(how)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/hsf-chat-holdout")
    ap.add_argument("--corpus", default=".cache/corpus")
    a = ap.parse_args()
    from forensics.analysis.loss_mask import (
        assistant_spans,
        capture_loss_mask_findings,
        capture_markers,
        check_loss_mask,
    )
    from forensics.cli import main as hsf
    from forensics.io.formats import iter_files, load

    here = os.path.dirname(os.path.abspath(__file__))
    chats = json.load(open(os.path.join(here, "chat_holdout.json"), encoding="utf-8"))
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(os.path.join(a.out, "texts"))
    texts = []
    for i, msgs in enumerate(chats):
        p = os.path.join(a.out, "texts", f"chat_{i:02d}.json")
        with open(p, "w", encoding="utf-8") as f:
            json.dump(msgs, f)
        texts.append(p)
    table: Counter = Counter()
    for fmt in ("speculators-v1", "specforge"):
        out = os.path.join(a.out, fmt)
        layers = "0,3" if fmt == "speculators-v1" else "3,15,27,final_post"  # SpecForge: 3 aux + the final
        argv = ["capture", "-q", "--layers", layers, "--format", fmt, "--out", out]
        for t in texts:
            argv += ["--text", t]
        assert hsf(argv) == 0
        for path in iter_files(out):
            cap = load(path)
            markers = capture_markers(cap)
            assert markers is not None, path
            ids = cap.input_ids.reshape(-1).tolist()
            spans = [x for x in assistant_spans(ids, markers) if x[1] > x[0]]  # a generation prompt has no reply
            for how, want in EXPECTED.items():
                if how == "first reply only" and len(spans) < 2:
                    continue
                found = check_loss_mask(ids, corrupt(how, cap.loss_mask, spans).tolist(), markers)
                got = (found[0].severity.value, found[0].evidence["problem"]) if found else None
                table[(how, "files")] += 1
                table[(how, "right" if got == want else "wrong")] += 1
                if got != want:
                    print(f"  WRONG {how} {path}: expected {want}, got {got}")
    print(f"held-out chats: {len(chats)} conversations x 2 formats")
    print("| mask | files | expected | right | wrong |")
    print("|---|---|---|---|---|")
    for how, want in EXPECTED.items():
        print(f"| {how} | {table[(how, 'files')]} | {want or 'no finding'} | {table[(how, 'right')]} | "
              f"{table[(how, 'wrong')]} |")
    alarms = files = 0
    for root in (a.corpus, ".cache/encoder"):
        if not os.path.isdir(root):
            print(f"{root}: not present")
            continue
        n0, a0 = files, alarms
        for path in iter_files(root):
            if "/ladder/" in path:
                continue
            try:
                cap = load(path)
            except Exception:  # noqa: BLE001 - an unreadable corpus file is not this check's business
                continue
            files += 1
            alarms += bool(capture_loss_mask_findings(cap))
        print(f"{root}: {files - n0} clean files, {alarms - a0} loss_mask findings (false alarms)")


if __name__ == "__main__":
    main()
