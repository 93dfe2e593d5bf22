"""Per-token norm statistics of captured slots: chunked, float32-accumulated, robust.

Norms are computed in row blocks (``NORM_BLOCK_ROWS``) with ``vector_norm(..., dtype=float32)``, so a
whole tensor is never upcast (a whole-tensor ``.float()`` costs 3–4× on this data path: page faults on
fresh anonymous memory, see ecosystem.md §6.10). Summaries are robust (median, quantiles, MAD, token-0
and sink-excluded variants) because one sink token can carry almost all of σ (fingerprint-signals §1).
Massive activations follow Sun et al. 2024: ``|x| > 100`` and ``≥ 1000 ×`` the median ``|x|``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .capture import Capture, Slot, short_dtype
from .render import html_table, esc

if TYPE_CHECKING:  # pragma: no cover
    import torch

NORM_BLOCK_ROWS = 256
MASSIVE_ABS_THRESHOLD = 100.0  # Sun et al. 2024 §2.2; refine_massive_activations MASSIVE_ACTIVATION_ABS_THRESHOLD
MASSIVE_REL_THRESHOLD = 1000.0  # ... MASSIVE_ACTIVATION_REL_THRESHOLD
SINK_RATIO = 5.0  # a token whose norm is ≥ 5× the slot's median token norm is flagged as a sink
MEDIAN_ABS_SAMPLE_COLS = 64  # columns per row sampled (evenly strided) to estimate median |x|
MAX_LISTED_POSITIONS = 32


def token_norms(h: "torch.Tensor", block: int = NORM_BLOCK_ROWS) -> "torch.Tensor":
    """Per-token L2 norms ``[tokens]`` in float32, computed in row blocks (never upcasting all of ``h``).

    Example:
        >>> import torch
        >>> token_norms(torch.tensor([[3.0, 4.0], [0.0, 1.0]]))
        tensor([5., 1.])
    """
    import torch

    out = torch.empty(h.shape[0], dtype=torch.float32)
    for s in range(0, h.shape[0], block):
        out[s:s + block] = torch.linalg.vector_norm(h[s:s + block], dim=-1, dtype=torch.float32)
    return out


@dataclass
class NormSummary:
    """Robust summary of a set of per-token norms (float64 arithmetic)."""

    n: int
    mean: float
    std: float
    median: float
    p01: float
    p05: float
    p25: float
    p75: float
    p95: float
    p99: float
    mad: float
    min: float
    min_pos: int
    max: float
    max_pos: int

    @classmethod
    def of(cls, norms: np.ndarray, positions: np.ndarray | None = None) -> "NormSummary":
        x = np.asarray(norms, dtype=np.float64)
        pos = np.arange(x.size) if positions is None else np.asarray(positions)
        keep = np.isfinite(x)
        x, pos = x[keep], pos[keep]
        if x.size == 0:
            nan = float("nan")
            return cls(0, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, -1, nan, -1)
        q = np.percentile(x, [1, 5, 25, 50, 75, 95, 99])
        med = float(q[3])
        return cls(
            n=int(x.size), mean=float(x.mean()), std=float(x.std()), median=med,
            p01=float(q[0]), p05=float(q[1]), p25=float(q[2]), p75=float(q[4]), p95=float(q[5]), p99=float(q[6]),
            mad=float(np.median(np.abs(x - med))),
            min=float(x.min()), min_pos=int(pos[int(x.argmin())]),
            max=float(x.max()), max_pos=int(pos[int(x.argmax())]),
        )

    def to_dict(self) -> dict:
        return {k: _num(v) for k, v in self.__dict__.items()}


def _num(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


@dataclass
class SlotStats:
    """Statistics of one slot. ``norms`` (float32 numpy, one per token) is kept for plots/fingerprints."""

    index: int
    name: str
    key: str
    shape: tuple[int, int]
    dtype: str
    norms: np.ndarray = field(repr=False)
    norm: NormSummary
    norm_excl_first: NormSummary
    norm_excl_sinks: NormSummary
    first: float
    last: float
    sinks: list[int]
    sink_ratios: list[float]
    nan: int
    inf: int
    nan_positions: list[int]
    inf_positions: list[int]
    median_abs: float
    massive_threshold: float
    massive_tokens: list[dict]  # {pos, max_abs, ratio_to_median_abs, dims: [...]}
    rms_mean: float  # mean over tokens of rms(x) = ‖x‖/√H
    claimed: str | None = None
    declared_r: Any = None

    @property
    def first_ratio(self) -> float:
        """Token-0 norm over the median norm of the other tokens."""
        med = self.norm_excl_first.median
        return float(self.first / med) if med and math.isfinite(med) and med > 0 else float("nan")

    @property
    def massive_dims(self) -> list[int]:
        return sorted({d for t in self.massive_tokens for d in t["dims"]})

    def one_line(self) -> str:
        n = self.norm
        s = (f"[{self.index}] {self.name} {list(self.shape)} {self.dtype} ‖x‖ med={_g(n.median)} "
             f"μ={_g(n.mean)} σ={_g(n.std)} p5–p95=[{_g(n.p05)}, {_g(n.p95)}] "
             f"tok0={_g(self.first)} ({_g(self.first_ratio)}× med)")
        if self.sinks:
            s += f" sinks@{_short_list(self.sinks)}"
        if self.massive_tokens:
            s += f" massive: {len(self.massive_tokens)} tok, dims {_short_list(self.massive_dims)}"
        if self.nan:
            s += f" NaN×{self.nan}!"
        if self.inf:
            s += f" Inf×{self.inf}!"
        return s

    __repr__ = one_line

    def to_dict(self) -> dict:
        norm = self.norm.to_dict()
        norm.update(first=_num(self.first), last=_num(self.last),
                    mean_excl_first=_num(self.norm_excl_first.mean), std_excl_first=_num(self.norm_excl_first.std),
                    median_excl_first=_num(self.norm_excl_first.median), first_ratio=_num(self.first_ratio))
        return {
            "index": self.index, "name": self.name, "key": self.key, "shape": list(self.shape),
            "dtype": self.dtype, "claimed": self.claimed,
            "declared_r": self.declared_r,
            "norm": norm,
            "norm_excl_first": self.norm_excl_first.to_dict(),
            "norm_excl_sinks": self.norm_excl_sinks.to_dict(),
            "rms_mean": _num(self.rms_mean),
            "sinks": {"ratio_threshold": SINK_RATIO, "positions": self.sinks,
                      "ratios": [round(r, 3) for r in self.sink_ratios]},
            "nonfinite": {"nan": self.nan, "inf": self.inf, "nan_positions": self.nan_positions,
                          "inf_positions": self.inf_positions},
            "massive": {"abs_threshold": MASSIVE_ABS_THRESHOLD, "rel_threshold": MASSIVE_REL_THRESHOLD,
                        "median_abs": _num(self.median_abs), "threshold": _num(self.massive_threshold),
                        "tokens": self.massive_tokens, "dims": self.massive_dims},
            "summary": self.one_line(),
        }


def _g(x: float) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "nan"
    ax = abs(x)
    if ax != 0 and (ax >= 1e5 or ax < 1e-3):
        return f"{x:.3g}"
    return f"{x:.4g}" if ax >= 100 else f"{x:.3g}"


def _short_list(xs: list, k: int = 6) -> str:
    return "[" + ", ".join(str(x) for x in xs[:k]) + (", …" if len(xs) > k else "") + "]"


def slot_stats(slot: Slot, block: int = NORM_BLOCK_ROWS) -> SlotStats:
    """All statistics of one slot in one pass over row blocks of its tensor."""
    import torch

    h = slot.tensor()
    T, H = int(h.shape[0]), int(h.shape[1])
    norms = torch.empty(T, dtype=torch.float32)
    rowmax = torch.empty(T, dtype=torch.float32)
    nan_rows, inf_rows = torch.zeros(T, dtype=torch.int64), torch.zeros(T, dtype=torch.int64)
    col_stride = max(1, H // MEDIAN_ABS_SAMPLE_COLS)
    samples = []
    for s in range(0, T, block):
        b = h[s:s + block]
        norms[s:s + block] = torch.linalg.vector_norm(b, dim=-1, dtype=torch.float32)
        lo, hi = torch.aminmax(b, dim=-1)
        rowmax[s:s + block] = torch.maximum(hi.float(), -lo.float())
        if not torch.isfinite(norms[s:s + block]).all():
            bf = b.float()
            nan_rows[s:s + block] = torch.isnan(bf).sum(-1)
            inf_rows[s:s + block] = torch.isinf(bf).sum(-1)
        samples.append(b[:, ::col_stride].float().abs().flatten())
    sample = torch.cat(samples)
    sample = sample[torch.isfinite(sample)]
    median_abs = float(sample.median()) if sample.numel() else float("nan")
    threshold = max(MASSIVE_ABS_THRESHOLD, MASSIVE_REL_THRESHOLD * median_abs) if math.isfinite(median_abs) \
        else MASSIVE_ABS_THRESHOLD
    massive = []
    for p in torch.nonzero(torch.isfinite(rowmax) & (rowmax > threshold)).flatten().tolist():
        row = h[p].float().abs()
        dims = torch.nonzero(row > threshold).flatten()
        dims = dims[torch.argsort(row[dims], descending=True)].tolist()
        massive.append({"pos": int(p), "max_abs": float(rowmax[p]),
                        "ratio_to_median_abs": float(rowmax[p]) / median_abs if median_abs > 0 else None,
                        "dims": [int(d) for d in dims[:8]]})
    n = norms.numpy().astype(np.float32)
    finite = np.isfinite(n)
    med = float(np.median(n[finite])) if finite.any() else float("nan")
    ratios = n / med if med and med > 0 else np.full_like(n, np.nan)
    sinks = [int(i) for i in np.nonzero(finite & (ratios >= SINK_RATIO))[0]]
    pos = np.arange(T)
    keep_first = pos != 0
    keep_sinks = ~np.isin(pos, sinks)
    nan_pos = torch.nonzero(nan_rows).flatten().tolist()
    inf_pos = torch.nonzero(inf_rows).flatten().tolist()
    return SlotStats(
        index=slot.index, name=slot.name, key=slot.key, shape=(T, H), dtype=short_dtype(slot.dtype), norms=n,
        norm=NormSummary.of(n),
        norm_excl_first=NormSummary.of(n[keep_first], pos[keep_first]) if T > 1 else NormSummary.of(n),
        norm_excl_sinks=NormSummary.of(n[keep_sinks], pos[keep_sinks]) if keep_sinks.any() else NormSummary.of(n),
        first=float(n[0]), last=float(n[-1]), sinks=sinks[:MAX_LISTED_POSITIONS],
        sink_ratios=[float(ratios[i]) for i in sinks[:MAX_LISTED_POSITIONS]],
        nan=int(nan_rows.sum()), inf=int(inf_rows.sum()),
        nan_positions=nan_pos[:MAX_LISTED_POSITIONS], inf_positions=inf_pos[:MAX_LISTED_POSITIONS],
        median_abs=median_abs, massive_threshold=threshold, massive_tokens=massive[:MAX_LISTED_POSITIONS],
        rms_mean=float(np.mean(n[finite]) / math.sqrt(H)) if finite.any() else float("nan"),
        claimed=slot.claimed, declared_r=slot.declared_r,
    )


@dataclass
class CaptureStats:
    """Statistics of every slot of one capture: ``repr`` one line per slot, ``_repr_html_``, ``to_dict``."""

    capture: Capture = field(repr=False)
    slots: list[SlotStats]

    @property
    def path(self) -> str:
        return self.capture.path

    def __repr__(self) -> str:
        head = (f"{os.path.basename(self.path)}: {self.capture.format}, {self.capture.num_tokens} tokens, "
                f"hidden {self.capture.hidden_size}, {len(self.slots)} slots")
        return "\n".join([head] + ["  " + s.one_line() for s in self.slots])

    def to_dict(self) -> dict:
        c = self.capture
        return {"path": c.path, "format": c.format, "num_tokens": c.num_tokens, "hidden_size": c.hidden_size,
                "layout": c.provenance.layout, "declared_layers": c.declared_layers,
                "declared_convention": c.declared_convention, "declared_r": c.declared_r,
                "notes": list(c.provenance.notes), "error": None,
                "slots": [s.to_dict() for s in self.slots]}

    def _repr_html_(self) -> str:
        rows = []
        for s in self.slots:
            n = s.norm
            flags = []
            if s.sinks:
                flags.append(f"sinks {_short_list(s.sinks)}")
            if s.massive_tokens:
                flags.append(f"massive dims {_short_list(s.massive_dims)}")
            if s.nan or s.inf:
                flags.append(f"NaN {s.nan} / Inf {s.inf}")
            rows.append([s.index, s.name, "×".join(map(str, s.shape)), s.dtype, _g(n.mean), _g(n.std), _g(n.median),
                         _g(n.p05), _g(n.p95), _g(s.first), _g(s.last), _g(s.norm_excl_first.mean),
                         "; ".join(flags) or "—"])
        head = (f"<div class='hsf-caption'><b>{esc(os.path.basename(self.path))}</b> — {esc(self.capture.format)}, "
                f"{self.capture.num_tokens} tokens, hidden {self.capture.hidden_size}</div>")
        return head + html_table(
            ["#", "slot", "shape", "dtype", "‖x‖ mean", "std", "median", "p5", "p95", "token 0", "last",
             "mean excl. tok0", "flags"], rows, cls="hsf-stats")


def summarize(capture: Capture | str | os.PathLike) -> CaptureStats:
    """Statistics of every slot of a capture (or of the file at a path).

    Example:
        >>> st = summarize("sample_data/speculators_v1/data_0.pt")   # doctest: +SKIP
        >>> st.slots[1].first_ratio > 5                              # doctest: +SKIP
        True
    """
    if not isinstance(capture, Capture):
        from .formats import load

        capture = load(capture)
    return CaptureStats(capture=capture, slots=[slot_stats(s) for s in capture.slots])
