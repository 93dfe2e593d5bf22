"""Run every hsf command on sample_data with --json and write one normalised JSON per command to OUT: the check
that a refactor changes no behaviour (run it before and after, from checkouts at paths of the same length, then
``diff -r BEFORE AFTER``).

Usage: python scripts/json_snapshot.py OUT [NAME ...]   (from the repository root; NAME: only those commands).
Timings, file times and temporary paths are blanked so that two runs of the same code give identical files; the
exit code and stderr's last line are recorded too. ``hsf capture`` runs record each written file's sha256 (a
safetensors header with its keys sorted: safetensors' writer does not fix the order of ``__metadata__``).
"""

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

OUT = sys.argv[1]
ROOT = os.getcwd()
TMP = tempfile.mkdtemp(prefix="hsf-json-")
COPY = os.path.join(TMP, "copy")
shutil.copytree("sample_data", COPY)
SD = "sample_data"
DR = f"{SD}/draft_eagle3"
V1, D0 = f"{SD}/speculators_v1", f"{SD}/speculators_v1/data_0.pt"


def fp(*a):
    return ["fingerprint", *a, "--json"]


def au(*a):
    return ["audit", *a, "--json"]


def cap(name, fmt, *a):
    return ["capture", "--text", f"{SD}/texts/english_rivers.txt", "--max-tokens", "8", "--format", fmt,
            "--out", os.path.join(TMP, name), *a, "--json", "-q"]


CMDS = {
    "inspect": ["inspect", SD, "--json"],
    "inspect_ladder": ["inspect", f"{SD}/ladder", "--json"],
    "fingerprint_v1": fp(V1),
    "fingerprint_all": fp(f"{SD}/speculators", f"{SD}/specforge", f"{SD}/ladder"),
    "fingerprint_layers": fp(D0, "--layers", "0,3,16,28"),
    "fingerprint_expect": fp(D0, "--expect", "embed,L3,L16,L28"),
    "fingerprint_draft": fp(D0, "--draft", DR, "--engine", "sglang"),
    "fingerprint_draft_tr": fp(D0, "--draft", DR, "--trainer", "speculators-v1"),
    "audit_sglang": au("--data", V1, "--draft", DR, "--engine", "sglang"),
    "audit_vllm": au("--data", V1, "--draft", DR, "--engine", "vllm"),
    "audit_vllm_old": au("--data", f"{SD}/speculators", "--draft", DR, "--engine", "vllm", "--engine-version",
                         "pre-36063"),
    "audit_specforge": au("--data", f"{SD}/specforge", "--draft", DR, "--engine", "sglang"),
    "audit_llamacpp": au("--data", V1, "--draft", DR, "--engine", "llama.cpp"),
    "audit_trtllm": au("--data", V1, "--draft", DR, "--engine", "trtllm"),
    "audit_layout": au("--trained-layout", "embed,L3,L16", "--draft", DR, "--engine", "vllm"),
    "audit_layout30": au("--trained-layout", "embed,L3,L16", "--draft", DR, "--engine", "vllm", "--num-layers", "30"),
    "audit_preflight": au("--target-layer-ids", "2,15,27", "--trainer", "speculators", "--engine", "vllm",
                          "--num-layers", "30"),
    "audit_preflight_sf": au("--target-layer-ids", "1,14,26", "--trainer", "specforge", "--engine", "sglang",
                             "--num-layers", "30"),
    "audit_served": au("--data", f"{SD}/speculators", "--served", f"{SD}/speculators"),
    "audit_nofp": au("--data", V1, "--draft", DR, "--engine", "tokenspeed", "--no-fingerprint"),
    "scan": ["scan", SD, "--workers", "0", "--json", "--no-progress"],
    "report": ["report", SD, "--draft", DR, "--engine", "sglang", "--trainer", "speculators-v1", "-o",
               os.path.join(TMP, "r.html"), "--json"],
    "conventions": ["conventions", "--json"],
    "stamp": ["stamp", COPY + "/speculators_v1", "--layers", "embed,L3,L16,L28", "--json"],
    "stamp_sp": ["stamp", COPY + "/speculators", "--layers", "0,15,27,30", "--json"],
    "verify": ["verify", COPY, "--json"],
    "probe": ["probe", "--draft", DR, "--data", V1, "--samples", "2", "--json"],
    "capture_v1": cap("c1", "speculators-v1"),
    "capture_sp": cap("c2", "speculators"),
    "capture_sf": cap("c3", "specforge"),
    "capture_st": cap("c4", "safetensors", "--layers", "0,5,final_post"),
    "bad_layers": fp(D0, "--layers", "L3,,x"),
    "bad_expect": fp(D0, "--expect", "L-1"),
    "bad_layout": au("--trained-layout", "embed,Lx", "--draft", DR, "--engine", "vllm"),
    "bad_layout30": au("--trained-layout", "embed,Lx", "--draft", DR, "--engine", "vllm", "--num-layers", "30"),
    "bad_tid": au("--target-layer-ids", "2,x", "--trainer", "speculators", "--engine", "vllm", "--num-layers", "30"),
    "bad_engine": au("--data", V1, "--draft", DR, "--engine", "nope"),
}
TIME = re.compile(r"(seconds|elapsed|_s$|^time|duration|wall|generated_at|started|finished|when|mtime)", re.I)


def digest(p):
    with open(p, "rb") as f:
        b = f.read()
    if p.endswith(".safetensors"):
        n = struct.unpack("<Q", b[:8])[0]
        b = json.dumps(json.loads(b[8:8 + n]), sort_keys=True).encode() + b[8 + n:]
    return hashlib.sha256(b).hexdigest()


def norm(x, key=""):
    if isinstance(x, dict):
        return {k: ("<t>" if TIME.search(k) and isinstance(v, (int, float, str)) else norm(v, k)) for k, v in x.items()}
    if isinstance(x, list):
        return [norm(v) for v in x]
    if isinstance(x, str):
        return x.replace(TMP, "<tmp>").replace(ROOT, "<root>")
    return x


os.makedirs(OUT, exist_ok=True)
only = sys.argv[2:] or list(CMDS)
for name in only:
    args = CMDS[name]
    p = subprocess.run([sys.executable, "-m", "forensics.cli", *args], capture_output=True, text=True)
    try:
        doc = norm(json.loads(p.stdout))
    except ValueError:
        doc = {"stdout": norm(p.stdout)}
    err = [ln for ln in p.stderr.splitlines() if ln.strip() and "%" not in ln]
    if name.startswith("capture_"):
        o = args[args.index("--out") + 1]
        doc = {"doc": doc, "files": {os.path.relpath(os.path.join(r, f), o): digest(os.path.join(r, f))
                                     for r, _, fs in os.walk(o) for f in fs
                                     if not f.endswith((".json", ".arrow")) and "tokenizer" not in r}}
    res = {"rc": p.returncode, "stderr_last": norm(err[-1]) if err else "", "json": doc}
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
    print(name, p.returncode, flush=True)
shutil.rmtree(TMP)
