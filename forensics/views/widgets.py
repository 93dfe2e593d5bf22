"""SampleBrowser: an ipywidgets browser over captures (sample, slots, token range) with a pure render function.

    >>> from forensics.views.widgets import SampleBrowser          # doctest: +SKIP
    >>> SampleBrowser("sample_data/")                        # doctest: +SKIP

The controls (``Dropdown`` sample, ``SelectMultiple`` slots, ``IntRangeSlider`` tokens with
``continuous_update=False``) feed :func:`ipywidgets.interactive_output`, whose callback only calls the
module-level :func:`render_panel` — a pure function of (capture, stats, fingerprint, slots, token range,
tokenizer) returning one HTML string — and puts that string into the ``Output`` widget's ``outputs``.
So the panel is testable without a browser or kernel (set ``.value`` on a control, read
``browser.out.outputs``), and the HTML report can reuse the same panels as static pages.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import forensics
from forensics.errors import ForensicsError
from forensics.findings import sort_findings
from forensics.io.capture import Capture
from forensics.io.formats import iter_files
from forensics.io.tokenizer import decode_text, decode_tokens
from forensics.io.tokenizer import find_tokenizer as find
from forensics.io.tokenizer import load_tokenizer as load
from forensics.layers import r_label
from forensics.views.fingerprint import headline
from forensics.views.format import Raw, badge, esc, html_table, num
from forensics.views.plots.slots import slot_labels

MAX_TOKEN_ROWS = 32  # token table rows shown per panel (the range is cut, and the cut is said)
MAX_TEXT_CHARS = 2000  # decoded text of the token range shown above the table
DEFAULT_SLOTS_SHOWN = 6  # with more slots than this (a ladder capture), a spread of 6 is preselected
DEFAULT_TOKEN_WINDOW = 256
MAX_SLOT_ROWS = 32  # the slot list shows every slot up to a 32-slot ladder (embed, L1…L30, final_post)


# ------------------------------------------------------------------------------------------- pure render
def _g(x: Any) -> str:
    return num(x)  # the one number style of every view


def _fp_slot(fingerprint: Any, i: int) -> Any:
    return fingerprint.slots[i] if i < len(fingerprint.slots) else None


def verdict_html(fingerprint: Any) -> str:
    """The fingerprint's verdict as an HTML fragment: labels in stored order, depth order, findings."""
    if fingerprint is None:
        return "<div class='hsf-verdict'>fingerprint not available</div>"
    if isinstance(fingerprint, Exception):
        return f"<div class='hsf-verdict'>{badge('fail')} fingerprint failed: {esc(fingerprint)}</div>"
    labels = []
    for i, sf in enumerate(fingerprint.slots):
        lab = sf.label or (r_label(sf.r_exact) if sf.r_exact is not None else sf.role)
        labels.append(f"{i}: {lab}")
    order = list(fingerprint.depth_order)
    findings = sort_findings(fingerprint.findings)

    # the worst verdict first, as in every view
    lines = [f"<div class='hsf-headline'>{badge(fingerprint.outcome)} <b>{esc(headline(fingerprint))}</b>"
             "</div>"]
    verdicts = [f"{i}: {sf.claim.label} {sf.verdict.value}" for i, sf in enumerate(fingerprint.slots)
                if sf.verdict is not None and sf.claim is not None]
    if verdicts:
        lines.append(f"<div>claims: {esc('; '.join(verdicts))}</div>")
    lines.append(f"<div>slots (stored order): <b>{esc(', '.join(labels))}</b></div>")
    if order:
        lines.append(f"<div>depth order, shallow → deep: {esc(' → '.join(str(i) for i in order))}</div>")
    if findings:
        for f in findings:
            lines.append(f"<div>{badge(f.severity)} <b>{esc(f.kind)}</b>: {esc(f.message)}</div>")
    else:
        lines.append("<div>no findings (stored order = depth order, no duplicate, no non-finite values)</div>")
    return "<div class='hsf-verdict'>" + "".join(lines) + "</div>"


def _slot_table(stats: Any, fingerprint: Any, sel: list[int]) -> str:
    rows = []
    for i in sel:
        s = stats.slots[i]
        sf = _fp_slot(fingerprint, i) if fingerprint is not None and not isinstance(fingerprint, Exception) else None
        n = s.norm
        flags = s.flags()
        rows.append([
            i, s.name, (sf.label or "—") if sf else "—", sf.role if sf else "—",
            _g(float(sf.confidence)) if sf is not None else "—",
            _g(sf.r_estimate) if sf else "—",
            r_label(s.declared_r) if s.declared_r is not None else "—",
            "×".join(map(str, s.shape)), s.dtype, _g(n.median), _g(n.mean), f"{_g(n.p05)}–{_g(n.p95)}",
            f"{_g(s.first)} ({_g(s.first_ratio)}×)", "; ".join(flags) or "—"])
    return html_table(["#", "slot", "label", "role", "conf.", "r est.", "declared", "shape", "dtype",
                       "median ‖x‖", "mean", "p5–p95", "token 0 (× median)", "flags"], rows, cls="hsf-stats")


def _token_table(capture: Capture, stats: Any, sel: list[int], lo: int, hi: int, tokenizer: Any) -> str:
    ids = capture.input_ids
    if ids is None:
        return "<div class='hsf-tokens'>no token ids in this capture</div>"
    ids = [int(t) for t in ids.flatten().tolist()]
    last = min(hi, lo + MAX_TOKEN_ROWS - 1, len(ids) - 1)
    marks = {i: (set(stats.slots[i].sinks), {t["pos"] for t in stats.slots[i].massive_tokens}) for i in sel}
    rows = []
    for p in range(lo, last + 1):
        text = decode_tokens(tokenizer, [ids[p]])[0] if tokenizer is not None else ""
        row = [p, ids[p], repr(text) if tokenizer is not None else "—"]
        for i in sel:
            v = float(stats.slots[i].norms[p]) if p < len(stats.slots[i].norms) else float("nan")
            sinks, massive = marks[i]
            row.append(_g(v) + (" ▼sink" if p in sinks else "") + (" ✕massive" if p in massive else ""))
        rows.append(row)
    note = "" if last >= hi else f" (first {MAX_TOKEN_ROWS} of tokens {lo}–{hi} shown)"
    src = "" if tokenizer is not None else " — no tokenizer found, ids only"
    head = f"<div class='hsf-caption'>tokens {lo}–{last}{esc(note)}{esc(src)}</div>"
    if tokenizer is not None:
        text = decode_text(tokenizer, ids[lo:hi + 1])
        cut = len(text) > MAX_TEXT_CHARS
        head = (f"<div class='hsf-caption'>text of tokens {lo}–{hi}{' (cut)' if cut else ''}:</div>"
                f"<pre class='hsf-text' style='white-space:pre-wrap'>{esc(text[:MAX_TEXT_CHARS])}</pre>" + head)
    names = [f"‖x‖ {lab}" for lab in slot_labels(stats)]
    return head + html_table(["pos", "id", "token"] + [names[i] for i in sel], rows, cls="hsf-tokens")


def render_panel(capture: Capture | None, stats: Any, fingerprint: Any = None, slot: int | Sequence[int] = (),
                 token_range: tuple[int, int] | None = None, tokenizer: Any = None,
                 error: str | None = None) -> str:
    """One browser panel as HTML: header, fingerprint verdict, slot summary, two plots, token table.

    Pure: reads only its arguments (``stats``/``fingerprint`` as computed elsewhere) and returns a string.
    ``slot`` is one slot index or several; ``token_range`` is inclusive ``(first, last)``.
    """
    from forensics.views import plots  # noqa: PLC0415 - matplotlib (the plots extra), on call

    if error is not None or capture is None or stats is None:
        return f"<div class='hsf-panel'>{badge('fail')} {esc(error or 'nothing to show')}</div>"
    sel = [slot] if isinstance(slot, int) else list(slot)
    sel = [int(i) for i in sel if 0 <= int(i) < len(stats.slots)]
    T = capture.num_tokens
    lo, hi = (0, T - 1) if token_range is None else (max(0, int(token_range[0])), min(T - 1, int(token_range[1])))
    head = (f"<div class='hsf-caption'><b>{esc(os.path.basename(capture.name))}</b> — {esc(capture.format)}, "
            f"{T} tokens, hidden {capture.hidden_size}, {len(stats.slots)} slots</div>")
    parts = [head, verdict_html(fingerprint)]
    if not sel:
        parts.append("<div>no slot selected</div>")
        return "<div class='hsf-panel'>" + "".join(parts) + "</div>"
    parts.append(f"<div class='hsf-caption'>tokens {lo}–{hi} of {T} apply to the norm-by-position plot and the "
                 f"token table; the verdict, the slot statistics and the norm distributions use all {T} tokens"
                 "</div>")
    parts.append(_slot_table(stats, fingerprint, sel))
    lines = "\n".join(stats.slots[i].one_line() for i in sel)
    parts.append("<pre class='hsf-oneline' style='white-space:pre-wrap;word-break:normal;overflow-wrap:break-word'>"
                 f"{esc(lines)}</pre>")
    result = fingerprint if fingerprint is not None and not isinstance(fingerprint, Exception) else stats
    parts.append(plots.figure_to_html(plots.norm_by_position(result, slots=sel, token_range=(lo, hi))))
    parts.append(plots.figure_to_html(plots.norm_distributions(result, slots=sel)))
    parts.append(_token_table(capture, stats, sel, lo, hi, tokenizer))
    return "<div class='hsf-panel'>" + "".join(Raw(p) for p in parts) + "</div>"


# -------------------------------------------------------------------------------------------- tokenizer
def find_tokenizer(capture: Capture) -> str | None:
    """A local tokenizer folder for a capture (:func:`forensics.io.tokenizer.find_tokenizer`)."""
    return find(capture.path, capture.meta)


def load_tokenizer(path: str | None, confined: bool = True) -> Any:
    """The tokenizer of a local folder (never its code: :func:`forensics.io.tokenizer.load_tokenizer`), or None
    when absent/unloadable (ids are still shown); ``confined=False`` for a folder the user named."""
    return load(path, confined=confined)[0]


# ---------------------------------------------------------------------------------------------- browser
def _sources(source: Any) -> list[tuple[str, Any]]:
    if isinstance(source, (str, os.PathLike)):
        root = os.fspath(source)
        files = list(iter_files(root))
        if not files:
            raise ForensicsError("no capture files found", path=root)
        base = root if os.path.isdir(root) else os.path.dirname(root)
        return [(os.path.relpath(f, base) if os.path.isdir(root) else os.path.basename(f), f) for f in files]
    if isinstance(source, Capture):
        source = [source]
    out = []
    for k, item in enumerate(source):
        path = item.path if isinstance(item, Capture) else os.fspath(item)
        out.append((f"{k}: {os.path.basename(path)}", item))
    return out


def _default_slots(k: int) -> tuple[int, ...]:
    if k <= DEFAULT_SLOTS_SHOWN:
        return tuple(range(k))
    return tuple(sorted({round(j * (k - 1) / (DEFAULT_SLOTS_SHOWN - 1)) for j in range(DEFAULT_SLOTS_SHOWN)}))


class SampleBrowser:
    """Browse captures: pick a sample, slots and a token range; see stats, verdict, plots and token text.

    Args:
        source: a capture file, a directory (walked with ``forensics.iter_files``) or a list of
            paths/``Capture`` objects.
        layers: expected layer list passed to ``forensics.fingerprint`` (labels), e.g. ``[0, 3, 16, 28]``.
        tokenizer: a tokenizer object, a local folder, ``"auto"`` (capture.json / ``tokenizer/`` nearby)
            or None.
        fingerprint: compute the fingerprint verdict (False shows statistics only).
    """

    def __init__(self, source: Any, layers: Sequence[Any] | None = None, tokenizer: Any = "auto",
                 fingerprint: bool = True):
        import ipywidgets as w

        self.items = _sources(source)
        self.layers = layers
        self._tokenizer = tokenizer
        self._use_fp = fingerprint
        self._cache: dict[int, tuple] = {}
        self._busy = False
        self.sample = w.Dropdown(options=[(name, k) for k, (name, _) in enumerate(self.items)], value=0,
                                 description="sample", layout=w.Layout(width="340px"))
        self.slots = w.SelectMultiple(options=[], description="slots", rows=6, layout=w.Layout(width="300px"))
        self.tokens = w.IntRangeSlider(value=(0, 0), min=0, max=0, description="tokens", continuous_update=False,
                                       layout=w.Layout(width="420px"))
        self.sample.observe(self._on_sample, names="value")  # registered first: controls update before render
        self._set_controls(0)
        self.out: Any = None  # interactive_output calls _show once before it returns the Output widget
        self.out = w.interactive_output(self._show, {"sample": self.sample, "slot": self.slots,
                                                      "token_range": self.tokens})
        self._show(self.sample.value, self.slots.value, self.tokens.value)
        self.widget = w.VBox([w.HBox([w.VBox([self.sample, self.tokens]), self.slots]), self.out])

    # data for one sample (loaded once, cached)
    def data(self, k: int) -> tuple:
        """(capture, stats, fingerprint-or-exception-or-None, tokenizer, error) for sample ``k``."""
        if k not in self._cache:
            item = self.items[k][1]
            cap = st = fp = tok = err = None
            try:
                cap = item if isinstance(item, Capture) else forensics.load(item)
                if self._use_fp:
                    try:
                        fp = forensics.fingerprint(cap, layers=self.layers)
                        st = fp.stats
                    except ForensicsError as e:
                        fp = e
                    except (ImportError, AttributeError):  # fingerprint engine not installed in this build
                        fp = None
                st = st or forensics.summarize(cap)
                tok = self._resolve_tokenizer(cap)
            except ForensicsError as e:
                err = str(e)
            self._cache[k] = (cap, st, fp, tok, err)
        return self._cache[k]

    def _resolve_tokenizer(self, cap: Capture) -> Any:
        t = self._tokenizer
        if t is None:
            return None
        if t == "auto":
            return load_tokenizer(find_tokenizer(cap))
        if isinstance(t, (str, os.PathLike)):
            return load_tokenizer(os.fspath(t), confined=False)  # the user's folder: an HF model folder too
        return t

    def _set_controls(self, k: int) -> None:
        cap, st, fp, _, _ = self.data(k)
        labels = []
        if st is not None:
            labels = slot_labels(fp if fp is not None and not isinstance(fp, Exception) else st)
        old, old_options = tuple(self.slots.value), self.slots.options
        same_shape = len(old_options) == len(labels)
        # clear the selection before the options change: the browser's SelectMultiple view applies a selection
        # index by index to its <option> elements, and an index past a shorter new list (the 32-slot ladder's
        # 31 on a 4-slot file) hit an element that no longer exists ("Cannot set properties of undefined")
        self.slots.value = ()
        self.slots.options = [(lab, i) for i, lab in enumerate(labels)]
        self.slots.rows = max(2, min(len(labels), MAX_SLOT_ROWS))  # the whole list, so the selection shows
        self.slots.value = old if (same_shape and old) else _default_slots(len(labels))
        T = cap.num_tokens if cap is not None else 1
        self.tokens.min, self.tokens.max = 0, max(0, T - 1)  # min first: max ≥ min always holds
        self.tokens.value = (0, min(T - 1, DEFAULT_TOKEN_WINDOW - 1)) if T else (0, 0)

    def _on_sample(self, change: dict) -> None:
        self._busy = True
        try:
            self._set_controls(change["new"])
        finally:
            self._busy = False

    def _show(self, sample: int, slot: Sequence[int], token_range: tuple[int, int]) -> None:
        if self._busy or self.out is None:
            return
        html = self.render(sample, slot, token_range)
        text = f"SampleBrowser panel: {self.items[sample][0]}"
        self.out.outputs = ({"output_type": "display_data", "metadata": {},
                             "data": {"text/html": html, "text/plain": text}},)

    def render(self, sample: int | None = None, slot: Sequence[int] | None = None,
               token_range: tuple[int, int] | None = None) -> str:
        """The panel HTML for the given (default: current) control values."""
        k = self.sample.value if sample is None else sample
        cap, st, fp, tok, err = self.data(k)
        return render_panel(cap, st, fp, tuple(self.slots.value if slot is None else slot),
                            tuple(self.tokens.value if token_range is None else token_range), tok, error=err)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)

    def __repr__(self) -> str:
        return f"SampleBrowser({len(self.items)} samples; sample={self.items[self.sample.value][0]!r})"
