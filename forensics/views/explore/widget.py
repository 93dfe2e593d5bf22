"""``Explorer``: the anywidget behind :func:`forensics.explore` (the kernel side of ``static/explore.js``).

The heatmap's state (:func:`forensics.analysis.explore.explore_state`: norms, cosines, token text) is computed
when the widget is made or a file is picked; the fingerprint (slot verdicts, row findings) of each file and the
model for the logit lens are computed in one background thread, so the heatmap shows at once and the verdicts
arrive after. Hover and click are answered in the browser; only a click with a model (the lens) and a file
switch reach the kernel.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from typing import Any

import anywidget  # noqa: TID253 - this module is the widget: only forensics.explore imports it, on call
import traitlets

import forensics
from forensics.analysis.explore import (
    explore_state,
    failed_fingerprint,
    lens_map,
    logit_lens,
    with_fingerprint,
    with_tokenizer,
)
from forensics.errors import ForensicsError
from forensics.findings import UNREADABLE
from forensics.io.capture import Capture
from forensics.io.formats import as_captures, iter_files
from forensics.models.target import model_tokenizer
from forensics.models.verifier import open_verifier
from forensics.views.explore import wire
from forensics.views.format import headline_word

MAX_FILES = 1000  # files listed for a folder
MAX_VERDICT_FILES = 64  # files fingerprinted for the list's verdicts (the rest show "…"; `hsf scan` covers them)


def _sources(x: Any) -> list[tuple[str, Any]]:
    """``(name, path-or-capture-or-tensors)`` per file: a folder lists its capture files."""
    if isinstance(x, (str, os.PathLike)) and os.path.isdir(x):
        root = os.fspath(x)
        files = []
        for f in iter_files(root):
            files.append((os.path.relpath(f, root), f))
            if len(files) >= MAX_FILES:
                break
        if not files:
            raise ForensicsError("no capture files found", path=root)
        return files
    if isinstance(x, (str, os.PathLike)):
        return [(os.path.basename(os.fspath(x)), os.fspath(x))]
    if isinstance(x, Capture):
        return [(os.path.basename(x.path), x)]
    if isinstance(x, (list, tuple)) and x and all(isinstance(i, (str, os.PathLike, Capture)) for i in x):
        return [(os.path.basename(i.path if isinstance(i, Capture) else os.fspath(i)), i) for i in x]
    return [("tensors", x)]


class Explorer(anywidget.AnyWidget):
    """A slots × tokens explorer of one capture or a folder of them (see :func:`forensics.explore`)."""

    _esm = wire.asset("explore.js")
    _css = wire.asset("explore.css")
    meta = traitlets.Dict().tag(sync=True)
    tokens = traitlets.List().tag(sync=True)
    ids = traitlets.List().tag(sync=True)
    starts = traitlets.Bytes(b"").tag(sync=True)
    norms = traitlets.Bytes(b"").tag(sync=True)
    cos_prev = traitlets.Bytes(b"").tag(sync=True)
    cos_same = traitlets.Bytes(b"").tag(sync=True)
    files = traitlets.List().tag(sync=True)  # [{"name", "verdict"}]
    file = traitlets.Int(0).tag(sync=True)
    selected = traitlets.Int(-1).tag(sync=True)  # the clicked token (-1: none)
    lens = traitlets.Dict().tag(sync=True)  # {"file", "pos", "rows": [LensRow.to_dict()]} or {"error"}
    lens_map = traitlets.Dict().tag(sync=True)  # {"file", LensMap.to_dict()...}: the logit-lens overview
    has_model = traitlets.Bool(False).tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)

    def __init__(self, x: Any, model: Any = None, layers: Any = None, tokenizer: Any = "auto",
                 background: bool = True, input_ids: Any = None):
        super().__init__()
        self._input_ids = input_ids
        self.items = _sources(x)
        if not (isinstance(x, (str, os.PathLike)) and os.path.isdir(x)):
            self.items = self._samples(self.items)  # a file or tensors given: every sample listed (FILE#i)
        self.layers = layers
        self._tokenizer = tokenizer
        self._model_spec = model
        self._fallback: Any = None  # the tokenizer of model=, for captures saved without their own
        self._verifier: Any = None
        self._lock = threading.RLock()
        self._model_lock = threading.Lock()  # one model load, whether the thread or a click asks first
        self._captures: dict[int, Any] = {}
        self._states: dict[int, Any] = {}
        self._fps: dict[int, Any] = {}  # k -> Fingerprint or error text
        self._queue: deque[int] = deque()
        self._idle = threading.Event()
        self._idle.set()
        self._thread: threading.Thread | None = None
        self.files = [{"name": n, "verdict": None} for n, _ in self.items]  # one file too (the view hides a list of 1)
        self.has_model = model is not None
        if len(self.items) == 1:
            self.state(0)  # one unreadable input: its ForensicsError, one line naming it (a folder shows it instead)
        self._show(0)
        todo = list(range(min(len(self.items), MAX_VERDICT_FILES)))
        self._queue.extend(todo)
        if background:
            self._start()
        else:
            self._work()
        self.observe(self._on_file, names="file")
        self.observe(self._on_selected, names="selected")

    def _samples(self, items: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        """Each given file (or tensors) as its samples, read once: ``(NAME#i, Capture)`` per sample of a many-sample
        file (TensorRT-LLM records, SGLang objects, a ``[B, T]`` batch); an unreadable one stays as given, so its
        error shows when it is picked."""
        out: list[tuple[str, Any]] = []
        for name, src in items:
            if isinstance(src, Capture):
                out.append((name, src))
                continue
            try:
                caps = as_captures(src, self._input_ids if len(items) == 1 else None)
            except ForensicsError:
                out.append((name, src))
                continue
            if len(caps) == 1:
                out.append((name, caps[0]))
            else:
                out += [(f"{name}#{c.provenance.record}", c) for c in caps]
        return out[:MAX_FILES]  # listed like a folder's files: at most MAX_FILES (`hsf scan` judges every one)

    # ----------------------------------------------------------------------------------------- one file
    def capture(self, k: int | None = None) -> Any:
        """The ``Capture`` of file (or sample) ``k`` (default: the one shown). A folder's many-sample file is read
        when first picked: it becomes its sample 0 and its other samples join the end of the list."""
        k = self.file if k is None else k
        with self._lock:
            if k not in self._captures:
                name, src = self.items[k]
                if isinstance(src, Capture):
                    caps = [src]
                else:
                    ids = self._input_ids if len(self.items) == 1 else None  # ids of one sample, never of a folder
                    caps = as_captures(src, ids)
                self._captures[k] = caps[0]
                if len(caps) > 1:
                    self._grow(k, name, caps)
            return self._captures[k]

    def _grow(self, k: int, name: str, caps: list) -> None:
        """Item ``k`` held a many-sample file: it is now ``NAME#0``, the other samples are appended."""
        self.items[k] = (f"{name}#0", caps[0])
        first = len(self.items)
        for c in caps[1:max(1, MAX_FILES - first + 1)]:
            self.items.append((f"{name}#{c.provenance.record}", c))
        files = [dict(f) for f in self.files] or [{"name": n, "verdict": None} for n, _ in self.items[:first]]
        files[k]["name"] = self.items[k][0]
        files += [{"name": n, "verdict": None} for n, _ in self.items[first:]]
        self.files = files
        self._queue.extend(i for i in range(first, len(self.items)) if i < MAX_VERDICT_FILES)

    def state(self, k: int | None = None) -> Any:
        """The :class:`~forensics.analysis.explore.ExploreState` of file ``k`` (default: the one shown)."""
        k = self.file if k is None else k
        with self._lock:
            if k not in self._states:
                self._states[k] = explore_state(self.capture(k), tokenizer=self._tokenizer, fallback=self._fallback)
                fp = self._fps.get(k)
                if isinstance(fp, str):
                    failed_fingerprint(self._states[k], fp)
                elif fp is not None:
                    with_fingerprint(self._states[k], fp)
            return self._states[k]

    def _show(self, k: int) -> None:
        with self._lock:  # the background thread and a file switch both push state
            self._push(k)

    def _push(self, k: int) -> None:
        try:
            st = self.state(k)
        except ForensicsError as e:
            with self.hold_sync():
                self.meta = {"name": self.items[k][0], "error": str(e), "names": [], "fingerprinted": True,
                             "file_verdict": UNREADABLE}
                self.starts = self.norms = self.cos_prev = self.cos_same = b""
                self.tokens, self.ids, self.status = [], [], str(e)
            return
        p = wire.payload(st, self.items[k][0])
        with self.hold_sync():
            for key in ("tokens", "ids", *wire.BINARY):
                setattr(self, key, p[key])
            self.meta = p["meta"]
            self.status = self._status(k)
            if self.selected >= st.num_tokens:
                self.selected = st.num_tokens - 1

    def _status(self, k: int) -> str:
        """The status line of file ``k``: why its fingerprint failed (a capture of another hidden size than
        ``model=``'s, in one line), or that it is still running."""
        fp = self._fps.get(k)
        if isinstance(fp, str):
            return fp
        st = self._states.get(k)
        return "" if st is None or st.fingerprinted else "fingerprinting…"

    # ------------------------------------------------------------------------------- background work
    def _start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._idle.clear()
                self._thread = threading.Thread(target=self._work, name="hsf-explore", daemon=True)
                self._thread.start()

    def _work(self) -> None:
        """Fingerprint the shown file first, then take the model's tokenizer and load the model for the lens (if
        any: the exact fingerprint has loaded it, and written a GGUF's fp32 cache, by then), then the other files."""
        try:
            model_done = self._model_spec is None
            tok_done = model_done
            while True:
                if not tok_done and (self.file in self._fps or not self._queue):
                    self._model_tokenizer()
                    tok_done = True
                with self._lock:
                    k = self._queue.popleft() if self._queue else None
                if k is None and model_done:
                    break
                if k is None or (k != self.file and not model_done):
                    if k is not None:
                        with self._lock:
                            self._queue.appendleft(k)
                    self._load_verifier()
                    model_done = True
                    self._push_lens_map(self.file)
                    continue
                if k not in self._fps:
                    self._fingerprint(k)
        finally:
            self._idle.set()

    def _model_tokenizer(self) -> None:
        """The tokenizer of ``model=`` for the files saved without one: text for the states drawn before it came."""
        if self._model_spec is None or not (isinstance(self._tokenizer, str) and self._tokenizer == "auto"):
            return
        tok = model_tokenizer(self._model_spec)[0]
        if tok is None:
            return
        with self._lock:
            self._fallback = tok
            shown = [k for k, st in self._states.items() if st.tokens is None and st.ids is not None]
            for k in shown:
                with_tokenizer(self._states[k], tok)
        if self.file in shown:
            self._show(self.file)

    def fingerprint(self, k: int | None = None) -> Any:
        """The ``Fingerprint`` of file ``k`` (default: the one shown) whose labels and verdicts the explorer shows
        (exact with ``model=``), or the one-line error it failed with; None until computed (:meth:`wait`)."""
        return self._fps.get(self.file if k is None else k)

    def _fingerprint(self, k: int) -> None:
        try:
            fp: Any = forensics.fingerprint(self.capture(k), layers=self.layers, model=self._model_spec)
            verdict = fp.outcome  # the word every view writes (info reads NO CLAIM)
        except ForensicsError as e:
            fp, verdict = str(e), UNREADABLE  # not read against the model: no fail of the data (exit 2)
        with self._lock:
            self._fps[k] = fp
            if k in self._states:
                (failed_fingerprint if isinstance(fp, str) else with_fingerprint)(self._states[k], fp)
        if self.files:
            with self._lock:
                files = [dict(f) for f in self.files]
                files[k]["verdict"] = verdict
                self.files = files
        if k == self.file:
            self._show(k)

    def _load_verifier(self) -> None:
        if self._model_spec is None:
            return
        with self._model_lock:
            if self._verifier is not None:
                return
            self.status = "loading the model for the logit lens…"
            try:
                self._verifier = open_verifier(self._model_spec)
                self.status = self._status(self.file)
            except ForensicsError as e:
                self._verifier = e
                self.status = f"no logit lens: {e}"

    def wait(self, timeout: float | None = None) -> Explorer:
        """Wait until the background fingerprints (and the model) are done; returns the explorer."""
        self._idle.wait(timeout)
        return self

    # ------------------------------------------------------------------------------------- events
    def _on_file(self, change: dict) -> None:
        k = int(change["new"])
        if not 0 <= k < len(self.items):
            return
        self._show(k)
        if self._verifier is not None and not isinstance(self._verifier, Exception):
            threading.Thread(target=self._push_lens_map, args=(k,), name="hsf-lens-map", daemon=True).start()
        if k not in self._fps:
            with self._lock:
                if k in self._queue:
                    self._queue.remove(k)
                self._queue.appendleft(k)
            self._start()
        self._on_selected({"new": self.selected})

    def _on_selected(self, change: dict) -> None:
        pos = int(change["new"])
        if self._model_spec is None or pos < 0:
            return
        self.lens = self.logit_lens(pos)

    def lens_overview(self, k: int | None = None) -> dict:
        """The logit-lens overview of file ``k`` (default: the one shown) as the widget draws it: the top-1 next
        token and its probability per slot × first token (:func:`forensics.analysis.explore.lens_map`)."""
        k = self.file if k is None else k
        if self._verifier is None:
            self._load_verifier()
        v = self._verifier
        if isinstance(v, Exception) or v is None:
            return {"file": k, "error": f"no model: {v}"}
        try:
            st = self.state(k)
            tok = st.tokenizer if st.tokenizer is not None else self._fallback
            return {"file": k, **lens_map(self.capture(k), v, tok, labels=st.labels).to_dict()}
        except ForensicsError as e:
            return {"file": k, "error": str(e)}

    def _push_lens_map(self, k: int) -> None:
        if self._model_spec is None:
            return
        m = self.lens_overview(k)
        if k == self.file:
            self.lens_map = m

    def logit_lens(self, pos: int) -> dict:
        """The logit lens of token ``pos`` of the shown file, as the widget shows it (``{"file", "pos", "rows"}``)."""
        if self._verifier is None:
            self._load_verifier()
        v = self._verifier
        if isinstance(v, Exception) or v is None:
            return {"file": self.file, "pos": pos, "error": f"no model: {v}"}
        cap = self.capture()
        try:
            st = self.state()
            tok = st.tokenizer if st.tokenizer is not None else self._fallback
            rows = logit_lens(cap, pos, v, tok, labels=st.labels)
        except ForensicsError as e:
            return {"file": self.file, "pos": pos, "error": str(e)}
        return {"file": self.file, "pos": pos, "rows": [r.to_dict() for r in rows]}

    def __repr__(self) -> str:
        st = self._states.get(self.file)
        what = f"{len(st.names)} slots × {st.num_tokens} tokens" if st is not None else "not loaded"
        fp = self._fps.get(self.file)
        word = "" if fp is None else "; " + ("FAIL" if isinstance(fp, str) else headline_word(fp.outcome))
        lens = "" if not self.has_model else ("; no logit lens" if isinstance(self._verifier, Exception)
                                              else "; logit lens")
        return (f"Explorer({self.items[self.file][0]}: {what}; file {self.file + 1}/{len(self.items)}{word}"
                f"{lens})")
