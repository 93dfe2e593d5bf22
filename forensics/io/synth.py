"""SYNTHETIC Kimi-K2.5-shaped captures for benchmarks and demos of scale. Not real data.

``kimi_like()`` builds one ``[1281, 7168]`` bf16 × 4 sample shaped like the seed's Kimi-K2.5
speculators-v1 file (slots labelled ``[embed, L3, L31, L59]``), whose per-token norm statistics are
set **exactly** (before bf16 rounding) to the figures of the Kimi-K2.5 case (the per-token norms printed
by the engineer who found it):

====  ================  =====================  ===========
slot  mean ± std        token 0                label
====  ================  =====================  ===========
0     1.04 ± 0.22       (one embedding row)    embed
1     37.2 ± 92.0       3321 (massive dims)    L3
2     174.4 ± 99.4      2599 (massive dims)    L31
3     111.3 ± 7.9       61.5                   L59
====  ================  =====================  ===========

The embedding slot is a lookup: repeated token ids give identical rows. The sink token (position 0)
of slots 1 and 2 carries almost all of its norm in ``MASSIVE_DIMS`` (Sun et al. 2024: massive
activations sit in a few fixed feature dims). Deeper slots share a per-token direction with the
embedding and with each other, decreasingly with depth, so a similarity matrix is not pure noise.
Everything else is random: the numbers are **not** a model's hidden states and must never be presented
as real data or committed into ``sample_data/`` (only real SmolLM2 captures live there).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from forensics.errors import ForensicsError
from forensics.io.capture import Capture, Provenance, Slot, constant_getter
from forensics.io.formats import speculators_v1
from forensics.io.formats.base import Sample
from forensics.io.output import atomic_output

if TYPE_CHECKING:  # pragma: no cover
    import torch

SYNTHETIC = "synthetic"  # Provenance.format of every capture made here
# the seed's per-token norm figures, slot by slot: (mean, std, token-0 norm or None)
KIMI_NORMS = ((1.04, 0.22, None), (37.2, 92.0, 3321.0), (174.4, 99.4, 2599.0), (111.3, 7.9, 61.5))
KIMI_LABELS = ("embed", "L3", "L31", "L59")
KIMI_LAYER_IDS = (-1, 2, 30, 58)  # what the seed's data_config would say in legacy numbering (r = id + 1)
KIMI_VOCAB = 163840
MASSIVE_DIMS = (1137, 5219)  # fixed feature dims that carry the sink token's norm in slots 1 and 2
MASSIVE_SHARES = (0.70, 0.62)  # fraction of the sink norm on each massive dim (squares sum to < 1)
DEPTH_COSINE = (1.0, 0.55, 0.35, 0.25)  # share of each slot's direction taken from the embedding direction
ACTIVE_VOCAB = 3000  # token ids drawn Zipf-like from this many distinct ids, so ids repeat


@dataclass
class SynthSpec:
    """What ``kimi_like`` was asked for (kept in ``Capture.meta['synthetic']``)."""

    seed: int
    tokens: int
    hidden: int
    norms: tuple


def _standardize(z: torch.Tensor, mean: float, std: float, weights: torch.Tensor | None = None):
    """Affinely map ``z`` so its (weighted) population mean and std are exactly ``mean``/``std``."""
    import torch

    z = z.double()
    w = torch.ones_like(z) if weights is None else weights.double()
    mu = (w * z).sum() / w.sum()
    sd = torch.sqrt((w * (z - mu) ** 2).sum() / w.sum())
    return mean + std * (z - mu) / sd


def rest_moments(n: int, mean: float, std: float, first: float) -> tuple[float, float]:
    """Mean and population std the other ``n - 1`` tokens need so that all ``n`` have ``mean``/``std``
    when token 0 has norm ``first``."""
    var, m = _rest_var(n, mean, std, first)
    if var <= 0:
        need = next(k for k in range(n + 1, 10 ** 8) if _rest_var(k, mean, std, first)[0] > 0)
        raise ForensicsError(f"no set of {n} token norms has mean {mean}, std {std} and token 0 = {first} "
                             f"(token 0 alone gives more variance; these figures need >= {need} tokens)")
    return m, var ** 0.5


def _skewed(n: int, gen) -> torch.Tensor:
    """Right-skewed positive draws (log-normal, sigma 0.5) like real token norms; bounded below, so an
    affine rescale to the target mean/std keeps every norm positive."""
    import torch

    return torch.randn(n, generator=gen, dtype=torch.float64).mul(0.5).exp()


def massive_dims(hidden: int) -> list[int]:
    """``MASSIVE_DIMS`` folded into ``[0, hidden)`` (distinct), for smaller test hidden sizes."""
    dims: list[int] = []
    for d in MASSIVE_DIMS:
        d %= hidden
        while d in dims:
            d = (d + 1) % hidden
        dims.append(d)
    return dims


def _rest_var(n: int, mean: float, std: float, first: float) -> tuple[float, float]:
    m = (n * mean - first) / (n - 1)
    return (n * std * std - (first - mean) ** 2) / (n - 1) - (m - mean) ** 2, m


def _unit_rows(g: torch.Tensor) -> torch.Tensor:
    return g / g.norm(dim=-1, keepdim=True)


def kimi_like(seed: int = 0, tokens: int = 1281, hidden: int = 7168, norms: tuple = KIMI_NORMS,
              vocab: int = KIMI_VOCAB) -> Capture:
    """A SYNTHETIC Kimi-shaped sample: 4 bf16 ``[tokens, hidden]`` slots with the seed's norm statistics.

    Example:
        >>> cap = kimi_like(hidden=256)  # Kimi's 1281 tokens: fewer cannot hold the seed's statistics
        >>> [s.name for s in cap.slots], cap.format
        (['hidden_states[0]', 'hidden_states[1]', 'hidden_states[2]', 'hidden_states[3]'], 'synthetic')
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    # token ids: a BOS-like id 1 first, then Zipf-like draws from ACTIVE_VOCAB ids (repeats guaranteed)
    active = torch.randperm(vocab - 2, generator=gen)[:ACTIVE_VOCAB] + 2
    zipf = 1.0 / torch.arange(1, ACTIVE_VOCAB + 1, dtype=torch.float64)
    ids = torch.cat([torch.tensor([1]), active[torch.multinomial(zipf, tokens - 1, True, generator=gen)]])
    uniq, inverse, counts = torch.unique(ids, return_inverse=True, return_counts=True)

    # slot 0: an embedding table over the ids present; row norms set so the TOKEN-level stats are exact
    mean0, std0, _ = norms[0]
    row_norms = _standardize(_skewed(len(uniq), gen), mean0, std0, counts)
    table = _unit_rows(torch.randn(len(uniq), hidden, generator=gen)) * row_norms.float()[:, None]
    embed_dir = _unit_rows(table)[inverse]
    shared = torch.randn(tokens, hidden, generator=gen)  # per-token direction shared by the deeper slots
    states = [table[inverse].to(torch.bfloat16)]
    for k in range(1, len(norms)):
        mean, std, first = norms[k]
        m, s = rest_moments(tokens, mean, std, first)
        tn = torch.empty(tokens, dtype=torch.float64)
        tn[0] = first
        tn[1:] = _standardize(_skewed(tokens - 1, gen), m, s)
        if float(tn.min()) <= 0:
            raise ForensicsError(f"slot {k}: norms {mean} ± {std} (token 0 = {first}) would need negative norms")
        c = DEPTH_COSINE[min(k, len(DEPTH_COSINE) - 1)]
        mix = _unit_rows(shared + 0.6 * torch.randn(tokens, hidden, generator=gen))
        d = _unit_rows(c * embed_dir + (1 - c * c) ** 0.5 * mix)
        if k in (1, 2):  # the sink's norm sits in a couple of fixed dims (massive activations)
            dims = massive_dims(hidden)
            row = d[0].clone()
            row[dims] = 0.0
            row *= (1.0 - sum(a * a for a in MASSIVE_SHARES)) ** 0.5 / row.norm()
            row[dims] = torch.tensor(MASSIVE_SHARES, dtype=row.dtype)
            d[0] = row  # unit norm: the shares and the remainder add up in quadrature
        x = d * tn.float()[:, None]
        states.append(x.to(torch.bfloat16))
        del x, d, mix
    spec = SynthSpec(seed=seed, tokens=tokens, hidden=hidden, norms=tuple(norms))
    return _capture(states, ids, spec)


def _capture(states: list, ids: torch.Tensor, spec: SynthSpec) -> Capture:
    import torch

    slots = [Slot(index=i, name=f"hidden_states[{i}]", key="hidden_states", shape=tuple(t.shape), dtype=t.dtype,
                  getter=constant_getter(t), claimed="target" if i == len(states) - 1 else f"aux[{i}]")
             for i, t in enumerate(states)]
    prov = Provenance(path=f"<synthetic kimi_like seed={spec.seed}>", format=SYNTHETIC,
                      size_bytes=sum(t.numel() * t.element_size() for t in states),
                      notes=["SYNTHETIC data from forensics.io.synth.kimi_like: shaped like the Kimi-K2.5 EAGLE-3 "
                             "incident's capture (norm statistics only); not a model's hidden states"])

    h = hashlib.sha256()  # a content hash stands in for the file hash (there is no file)
    for t in states:
        h.update(t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    prov._sha256 = h.hexdigest()
    meta = {"synthetic": True, "generator": "forensics.io.synth.kimi_like", "seed": spec.seed,
            "labels": list(KIMI_LABELS), "layer_ids": list(KIMI_LAYER_IDS), "target_norms": [list(n) for n in
                                                                                              spec.norms]}
    return Capture(slots=slots, input_ids=ids, loss_mask=torch.ones_like(ids), provenance=prov,
                   declared_layers=list(KIMI_LAYER_IDS), declared_convention="speculators-legacy", meta=meta)


def write_speculators_v1(cap: Capture, path: str | os.PathLike) -> str:
    """Write a (synthetic) capture as a speculators legacy v1 ``data_{i}.pt`` file; returns the path.

    The file holds ``{input_ids, hidden_states: [...], loss_mask}`` like the real generator's; nothing
    in it says "synthetic", so keep such files out of real datasets and out of ``sample_data/``.
    """
    path = os.fspath(path)
    with atomic_output(path, "wb") as f:
        speculators_v1.write(f, Sample(cap.input_ids, cap.loss_mask, [s.tensor() for s in cap.slots], []))
    return path
