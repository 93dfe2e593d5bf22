"""The loss mask against the conversation: does a capture's stored ``loss_mask`` cover the assistant's replies?

A draft trained on a mask over the system and user turns learns to predict the prompt (SpecForge#885, EAGLE#317
moved the mask by one token at the reply's boundary; a mask built from the wrong role covers the whole prompt).
Where a capture stores a loss mask and its chat template is known (the capture's tokenizer folder, else
``--model``'s), the assistant's turns are located in the token ids by the template's own markers
(:mod:`forensics.io.chat`: the header it writes before an assistant's content, the end-of-turn marker after it),
never by guessing, and the mask is compared with them:

- the mask covers every reply token and nothing of the prompt (the end-of-turn marker may be in or out: both
  conventions exist) → no finding;
- it is the replies moved by one token (+1: each reply's first token unsupervised and the token after its end
  supervised; -1: set on the position before each reply token) → ``loss_mask`` WARN naming the trainer
  convention that explains it;
- it covers tokens of the system/user turns beyond that one-token boundary → ``loss_mask`` FAIL;
- it covers part of the replies and nothing of the prompt → ``loss_mask`` WARN (replies partly unsupervised).

A capture with no assistant header in its ids (raw text, a generation prompt only) gets no finding: there is no
turn to compare with.

Example:
    >>> from forensics.io.chat import ChatMarkers
    >>> m = ChatMarkers((7, 8), (9,), "t")
    >>> ids = [5, 6, 6, 9, 7, 8, 1, 2, 3, 9]          # user turn, then the assistant header 7 8, reply 1 2 3, end 9
    >>> [f.evidence["problem"] for f in check_loss_mask(ids, [1, 1, 1, 1, 0, 0, 0, 0, 0, 0], m)]
    ['prompt']
    >>> check_loss_mask(ids, [0, 0, 0, 0, 0, 0, 1, 1, 1, 1], m)
    []
"""

from __future__ import annotations

import os
from typing import Any

from forensics.findings import Finding, FindingKind, Severity
from forensics.io.chat import chat_markers, chat_markers_from, encoder
from forensics.io.tokenizer import find_tokenizer
from forensics.models.target import load_model, resolve_model

MAX_LISTED = 6  # position ranges listed in a message


def assistant_spans(ids: list[int], markers: Any) -> list[tuple[int, int, int]]:
    """``(content start, content end, end-marker end)`` of every assistant turn in ``ids``: the tokens after
    each assistant header up to the end-of-turn marker (or the next header, or the sequence's end when the
    reply was cut)."""
    h, e = list(markers.assistant_header), list(markers.end)
    T, out = len(ids), []
    starts = [p + len(h) for p in range(T - len(h) + 1) if ids[p:p + len(h)] == h]
    for k, s in enumerate(starts):
        stop = starts[k + 1] - len(h) if k + 1 < len(starts) else T
        end = next((q for q in range(s, stop) if ids[q:q + len(e)] == e), None)
        if end is None:
            out.append((s, stop, stop))
        else:
            out.append((s, end, min(end + len(e), T)))
    return out


def _ranges(pos: list[int]) -> str:
    runs: list[list[int]] = []
    for p in sorted(pos):
        if runs and p == runs[-1][1] + 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    shown = [f"{a}" if a == b else f"{a}–{b}" for a, b in runs[:MAX_LISTED]]
    return ", ".join(shown) + (f" (+{len(runs) - MAX_LISTED} more)" if len(runs) > MAX_LISTED else "")


OFFSET_WHY = {
    1: ("each mask entry sits one token after its reply token: every reply's first token is unsupervised and the "
        "token after its end (the next turn's header, or padding) is supervised, which is what a trainer that "
        "shifts ids and targets left but not loss_mask does (SpecForge#885; EAGLE#317: the last target is padding "
        "with loss_mask still 1), here baked into the data"),
    -1: ("the mask is set on the position before each reply token (the position whose next-token prediction is "
         "that token): the convention of a pipeline that shifts the mask with its targets (the SpecForge#885 fix, "
         "causal-LM label shifting); right only if the trainer does not shift it again"),
}


def check_loss_mask(ids: Any, mask: Any, markers: Any, source: str = "") -> list[Finding]:
    """``loss_mask`` findings of one sample (``ids``, ``mask``: equal-length sequences; a mask entry > 0 is
    supervised) against the assistant turns ``markers`` locate. Empty when the mask matches, or when no
    assistant turn is found."""
    ids = [int(i) for i in ids]
    m = [1 if float(x) > 0 else 0 for x in mask]
    T = len(ids)
    if T == 0 or len(m) != T:
        return []
    spans = assistant_spans(ids, markers)
    reply = {t for s, e, _ in spans for t in range(s, e)}
    if not reply:
        return []
    allowed = reply | {t for s, e, f in spans for t in range(e, f)}
    masked = {t for t in range(T) if m[t]}
    ev = {"turns": len(spans), "reply_tokens": len(reply), "masked": len(masked),
          "spans": [[s, e] for s, e, _ in spans], "source": source}
    if reply <= masked <= allowed:
        return []
    for k in (1, -1):  # the replies moved by one token (the last entry may fall off the sequence)
        want = {t + k for t in reply if 0 <= t + k < T}
        if want and want <= masked <= {t + k for t in allowed}:
            return [Finding(FindingKind.LOSS_MASK, Severity.WARN, [], (
                f"the loss mask is the assistant replies moved by {k:+d} token: {OFFSET_WHY[k]}"),
                {**ev, "problem": "offset", "offset": k})]
    boundary = {s - 1 for s, _, _ in spans} | {f for _, _, f in spans}  # one token either side of a turn
    prompt = sorted(masked - allowed - boundary)
    covered = len(reply & masked)
    if prompt:
        return [Finding(FindingKind.LOSS_MASK, Severity.FAIL, [], (
            f"the loss mask covers {len(prompt)} token(s) outside the assistant's replies, in the system/user turns "
            f"or their headers (positions {_ranges(prompt)}), and {covered} of the {len(reply)} reply token(s): "
            "a draft trained on it learns to predict the prompt (SpecForge#885, EAGLE#317); the replies are at "
            f"{_ranges(sorted(reply))}"),
            {**ev, "problem": "prompt", "prompt_tokens": len(prompt), "reply_covered": covered})]
    if covered < len(reply):
        return [Finding(FindingKind.LOSS_MASK, Severity.WARN, [], (
            f"the loss mask covers {covered} of the {len(reply)} assistant reply token(s) (missing at "
            f"{_ranges(sorted(reply - masked))}): those replies are not supervised"),
            {**ev, "problem": "reply", "reply_covered": covered})]
    return []


def capture_markers(cap: Any, model: Any = None) -> Any:
    """The chat markers for ``cap``: its own tokenizer folder's template (``capture.json`` ``tokenizer`` or a
    ``tokenizer/`` folder beside it), else the template of ``model``'s folder; None when neither has one."""
    path = getattr(cap, "path", None)
    folder = find_tokenizer(path, getattr(cap, "meta", None)) if isinstance(path, str) else None
    found = chat_markers(folder) if folder else None
    if found is None and model is not None:
        mpath = getattr(model, "path", None) or (model if isinstance(model, (str, os.PathLike)) else None)
        if isinstance(mpath, str) and mpath.lower() in ("default", "smollm2"):
            mpath = resolve_model(mpath)
        if mpath is not None and os.path.isdir(os.fspath(mpath)):
            found = chat_markers(os.fspath(mpath))
        elif mpath is not None and os.fspath(mpath).endswith(".gguf"):
            found = _gguf_markers(os.fspath(mpath))
    return found


_GGUF: dict[str, Any] = {}


def _gguf_markers(path: str) -> Any:
    """The chat markers of a ``.gguf`` model's tokenizer (its template travels in the file's metadata); the load
    is memoised (``forensics.models.target.load_model``: exact mode loads the same model)."""
    if path not in _GGUF:
        _, tok = load_model(path)
        template = getattr(tok, "chat_template", None)
        enc = encoder(tok) if tok is not None else None
        _GGUF[path] = chat_markers_from(template, enc, f"chat template of {os.path.basename(path)}") \
            if isinstance(template, str) and enc is not None else None
    return _GGUF[path]


def capture_loss_mask_findings(cap: Any, model: Any = None) -> list[Finding]:
    """:func:`check_loss_mask` of a capture that stores a loss mask, with its chat markers; [] otherwise."""
    if getattr(cap, "loss_mask", None) is None:
        return []
    n_mask = int(cap.loss_mask.numel())
    lengths: set[int] = set()
    if getattr(cap, "input_ids", None) is not None:
        lengths.add(int(cap.input_ids.numel()))
    if getattr(cap, "slots", None):
        lengths.add(int(cap.num_tokens))
    if lengths and n_mask not in lengths:  # rows ≠ ids alone is the row checks' row_count
        n = max(lengths)
        return [Finding(FindingKind.LOSS_MASK, Severity.FAIL, [], (
            f"the loss mask has {n_mask} entries for {n} tokens: it is cut, padded or another sample's, and a "
            "trainer pairs its entries with the wrong tokens (or fails on the length)"),
            {"problem": "length", "mask_entries": n_mask, "tokens": n})]
    if getattr(cap, "input_ids", None) is None or n_mask != int(cap.input_ids.numel()):
        return []
    try:
        markers = capture_markers(cap, model)
    except Exception:  # noqa: BLE001 - no template we can read: nothing to compare the mask with
        return []
    if markers is None:
        return []
    return check_loss_mask(cap.input_ids.reshape(-1).tolist(), cap.loss_mask.reshape(-1).tolist(), markers,
                           markers.source)
