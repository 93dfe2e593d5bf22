"""Data-only depth signals between slots: exact duplicate rows, masked angular distance, seriation.

* Duplicate rows: the embedding output is a table lookup, so repeated token ids give bit-identical
  rows; any later layer mixes in context (transformers issue #2461).
* Masked angular distance: per-token ``arccos(cos(a_t, b_t)) / π`` averaged over tokens (Gromov et al.,
  ICLR 2025), after dropping sink tokens and masking massive-activation dims (rogue dims dominate raw
  cosine: "All Bark and No Bite", EMNLP 2021) and mean-centring each slot.
* Seriation: the residual stream accumulates, so the depth order is the Hamiltonian path of least
  total distance (ShortGPT / "Layers as Painters": adjacent layers are closest); the path's direction
  is decided separately (norm growth, sink fading; see ``fingerprint.py``).
* ``normalizes``: slot B equals RMSNorm(slot A) with some per-dim gain γ — then B is post-norm and A is
  the final pre-norm state, without reading γ from a checkpoint.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch

MAX_DISTANCE_ROWS = 2048  # tokens used for pairwise distances (evenly strided beyond this)
MAX_DISTANCE_ELEMENTS = 64_000_000  # float32 working set of all prepared slots (256 MB): fewer rows beyond
MIN_DISTANCE_ROWS = 128
EXACT_PATH_MAX_SLOTS = 9  # brute-force the best path up to this many slots; heuristic above
NORMALIZES_MIN_ROWS = 16  # fewer rows than this: γ̂ (one per dim) would fit anything
NORMALIZES_SCREEN_ROWS = 64  # quick first fit on this many rows; the full fit only when it passes
NORMALIZES_MAX_RESIDUAL = 0.02  # ‖B − γ̂ ⊙ A/rms(A)‖ / ‖B‖ at or below this ⇒ B = RMSNorm(A) (bf16 rounding ≈ 0.004)


def _row_keys(h: torch.Tensor) -> list[bytes]:
    """One exact byte key per row (bit patterns, so -0.0 ≠ 0.0 and NaN rows compare by bits)."""
    import torch

    x = h.contiguous()
    if x.dtype in (torch.bfloat16, torch.float16):
        x = x.view(torch.int16)
    elif x.dtype == torch.float32:
        x = x.view(torch.int32)
    elif x.dtype == torch.float64:
        x = x.view(torch.int64)
    a = x.numpy()
    return [a[i].tobytes() for i in range(a.shape[0])]


def duplicate_rows(h: torch.Tensor, input_ids: torch.Tensor | None) -> dict:
    """Exact-duplicate-row statistics of one ``[T, H]`` slot.

    With token ids: ``groups`` = ids that occur more than once, ``identical`` = how many of those groups
    have bit-identical rows, ``fraction`` = identical / groups (None when no id repeats). Without ids:
    ``rows_with_twin`` = rows that equal some other row (all-zero padding rows excluded) and
    ``fraction`` = rows_with_twin / T.
    """
    import torch

    keys = _row_keys(h)
    zero = ((h == 0).all(dim=-1) | ~torch.isfinite(h).all(dim=-1)).tolist()  # padding / NaN rows: no evidence
    out: dict = {"tokens": len(keys)}
    if input_ids is not None and int(input_ids.numel()) == len(keys):
        by_id: dict[int, list[int]] = {}
        for i, t in enumerate(input_ids.tolist()):
            by_id.setdefault(int(t), []).append(i)
        groups = [g for g in by_id.values() if len(g) > 1]
        identical = sum(1 for g in groups if len({keys[i] for i in g}) == 1 and not zero[g[0]])
        # rows of *different* ids that are identical would not be a table lookup
        distinct: dict = {}
        clashes = 0
        for t, g in by_id.items():
            k = keys[g[0]]
            if k in distinct and distinct[k] != t and not zero[g[0]]:
                clashes += 1
            distinct[k] = t
        out.update(groups=len(groups), identical=identical, clashes=clashes,
                   fraction=(identical / len(groups)) if groups else None)
        return out
    counts: dict[bytes, int] = {}
    for k, z in zip(keys, zero, strict=True):
        if not z:
            counts[k] = counts.get(k, 0) + 1
    twins = sum(c for c in counts.values() if c > 1)
    out.update(rows_with_twin=twins, fraction=twins / max(1, len(keys)))
    return out


DISTANCE_BLOCK_ROWS = 256  # rows per block in the distance and RMSNorm-fit loops (bounded float32/64 copies)


def _clean(h: torch.Tensor, rows: torch.Tensor, mask_dims: Sequence[int]) -> torch.Tensor:
    """Selected rows in float32 with massive dims zeroed and non-finite entries set to 0."""
    import torch

    x = h[rows].to(torch.float32)
    if mask_dims:
        x[:, list(mask_dims)] = 0.0
    return torch.nan_to_num_(x, nan=0.0, posinf=0.0, neginf=0.0)


def angular_distances(tensors: Sequence[torch.Tensor], drop_tokens: Sequence[int],
                      mask_dims: Sequence[int]) -> tuple[np.ndarray, int]:
    """``k×k`` mean per-token angular distance in [0, 1] (0 = same direction) and the tokens used.

    Tokens in ``drop_tokens`` (sinks, non-finite rows) are left out; ``mask_dims`` (massive-activation
    dims) are zeroed in every slot; each slot is mean-centred over tokens. Two passes over row blocks
    (column means in float64, then per-token angles), so the working set is one block per slot, not a
    float32 copy of every slot (≈ 150 MB for a Kimi-sized sample, per scan worker).
    """
    import torch

    T = min(int(t.shape[0]) for t in tensors)
    keep = torch.ones(T, dtype=torch.bool)
    drop = [i for i in drop_tokens if 0 <= i < T]
    if drop and len(drop) < T:
        keep[drop] = False
    rows = torch.nonzero(keep).flatten()
    H = max(int(t.shape[1]) for t in tensors)
    budget = max(MIN_DISTANCE_ROWS, min(MAX_DISTANCE_ROWS, MAX_DISTANCE_ELEMENTS // max(1, len(tensors) * H)))
    if rows.numel() > budget:
        rows = rows[torch.linspace(0, rows.numel() - 1, budget).long()]
    n, k, B = int(rows.numel()), len(tensors), DISTANCE_BLOCK_ROWS
    means = []
    for t in tensors:
        acc = torch.zeros(int(t.shape[1]), dtype=torch.float64)
        for s in range(0, n, B):
            acc += _clean(t, rows[s:s + B], mask_dims).sum(0, dtype=torch.float64)
        means.append((acc / max(1, n)).to(torch.float32))
    sums = np.zeros((k, k), dtype=np.float64)
    for s in range(0, n, B):
        prep = []
        for t, m in zip(tensors, means, strict=True):
            x = _clean(t, rows[s:s + B], mask_dims).sub_(m)
            prep.append(x.div_(x.norm(dim=-1, keepdim=True).clamp_min(1e-30)))
        for i in range(k):
            for j in range(i + 1, k):
                c = (prep[i] * prep[j]).sum(-1).clamp(-1.0, 1.0)
                sums[i, j] += float(torch.arccos(c).sum(dtype=torch.float64))
    D = (sums + sums.T) / (max(1, n) * math.pi)
    return D, n


def _path_cost(D: np.ndarray, path: Sequence[int]) -> float:
    return float(sum(D[path[i], path[i + 1]] for i in range(len(path) - 1)))


def seriate(D: np.ndarray, nodes: Sequence[int]) -> tuple[list[int], float, float]:
    """Shortest Hamiltonian path through ``nodes`` under ``D``: ``(path, cost, runner_up_cost)``.

    Exact (all orderings) up to ``EXACT_PATH_MAX_SLOTS`` nodes, else nearest-neighbour starts + 2-opt.
    A path and its reverse are the same here; direction is decided by the caller. ``runner_up_cost``
    is the cheapest path that is not this one or its reverse (inf when there is none).
    """
    nodes = list(nodes)
    if len(nodes) <= 2:
        return nodes, _path_cost(D, nodes), math.inf
    if len(nodes) <= EXACT_PATH_MAX_SLOTS:
        costs = []
        for p in itertools.permutations(nodes):
            if p[0] < p[-1]:
                costs.append((_path_cost(D, p), list(p)))
        costs.sort(key=lambda c: c[0])
        return costs[0][1], costs[0][0], (costs[1][0] if len(costs) > 1 else math.inf)
    best: tuple[float, list[int]] | None = None
    for start in nodes:
        path, rest = [start], set(nodes) - {start}
        while rest:
            nxt = min(rest, key=lambda j: D[path[-1], j])
            path.append(nxt)
            rest.remove(nxt)
        path = _two_opt(D, path)
        c = _path_cost(D, path)
        if best is None or c < best[0] - 1e-12:
            best = (c, path)
    assert best is not None
    cost, path = best
    runner = min((_path_cost(D, path[:i] + path[i:i + 2][::-1] + path[i + 2:]) for i in range(len(path) - 1)),
                 default=math.inf)
    return path, cost, runner


def _two_opt(D: np.ndarray, path: list[int]) -> list[int]:
    """Reverse sub-paths while that shortens the open path (O(1) gain per candidate)."""
    n = len(path)
    improved = True
    while improved:
        improved = False
        for i in range(n - 1):
            for j in range(i + 2, n + 1):
                a, b = path[i], path[j - 1]
                old = (D[path[i - 1], a] if i > 0 else 0.0) + (D[b, path[j]] if j < n else 0.0)
                new = (D[path[i - 1], b] if i > 0 else 0.0) + (D[a, path[j]] if j < n else 0.0)
                if new < old - 1e-12:
                    path = path[:i] + path[i:j][::-1] + path[j:]
                    improved = True
    return path


def normalizes(pre: torch.Tensor, post: torch.Tensor, drop_tokens: Sequence[int] = (),
               max_rows: int = MAX_DISTANCE_ROWS) -> dict:
    """Does ``post`` = γ ⊙ pre / rms(pre) for one per-dim γ? Fits γ̂ by least squares per dim.

    Returns ``{"residual": ‖post − γ̂ ⊙ u‖ / ‖post‖, "gamma_rms": rms(γ̂)}`` with ``u = pre / rms(pre)``;
    a residual at bf16 rounding level means ``post`` is RMSNorm(``pre``) exactly (RMSNorm definition,
    transformers LlamaRMSNorm).
    """
    import torch

    T = min(int(pre.shape[0]), int(post.shape[0]))
    keep = torch.ones(T, dtype=torch.bool)
    drop = [i for i in drop_tokens if 0 <= i < T]
    if drop and len(drop) < T:
        keep[drop] = False
    rows = torch.nonzero(keep).flatten()[:max_rows]
    if rows.numel() < NORMALIZES_MIN_ROWS:
        return {"residual": float("inf"), "gamma_rms": float("nan")}
    def blocks():  # float64 row blocks of (u = pre / rms(pre), post): bounded memory on Kimi-sized slots
        for s in range(0, int(rows.numel()), DISTANCE_BLOCK_ROWS):
            r = rows[s:s + DISTANCE_BLOCK_ROWS]
            a = pre[r].to(torch.float64)
            yield a / a.pow(2).mean(-1, keepdim=True).sqrt().clamp_min(1e-30), post[r].to(torch.float64)

    H = int(post.shape[1])
    num, den = torch.zeros(H, dtype=torch.float64), torch.zeros(H, dtype=torch.float64)
    for u, b in blocks():  # least-squares γ̂ per dim: Σ b·u / Σ u²
        num += (b * u).sum(0)
        den += u.pow(2).sum(0)
    gamma = num / den.clamp_min(1e-30)
    r2 = b2 = 0.0
    for u, b in blocks():
        r2 += float((b - gamma * u).pow(2).sum())
        b2 += float(b.pow(2).sum())
    resid = math.sqrt(r2) / max(math.sqrt(b2), 1e-30)
    if not math.isfinite(resid):
        resid = float("inf")
    return {"residual": resid, "gamma_rms": float(gamma.pow(2).mean().sqrt())}
