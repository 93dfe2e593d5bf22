"""A slot against a reference ladder: per-token cosine and relative error at every r, best and runner-up.

Per-token errors (not one Frobenius norm): the sink row is nearly the same from r≈12 to r≈28 in SmolLM2 and
would otherwise dominate the comparison. The tolerances hold for a float32 reference forward against
states stored in bf16 (storage rounding ≈ 0.002 per token) or computed by a bf16 forward (≤ 0.02 at r = L).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

LADDER_MATCH_COS = 0.999  # mean per-token cosine at/above this ⇒ the slot equals the reference state
LADDER_MATCH_REL = 0.05  # …and median per-token relative error at/below this: bf16 storage ≈ 0.002, a whole
#                          bf16 forward ≤ 0.02 at r = L; adjacent layers of SmolLM2 differ by ≥ 0.22
LADDER_SEPARATION = 0.25  # …and best error ≤ this × the runner-up's (the match must be unambiguous)
BF16_COMPUTE_REL = 0.019  # median per-token relative error of a bfloat16 streamed forward vs float32, worst r
#                          (SmolLM2-135M, 119 tokens, final_post); a float32 stream equals the whole model exactly
LENS_ROWS = 32  # tokens decoded per slot by the logit lens (evenly spaced, token 0 left out)
LENS_NEAR = 0.1  # reference r whose lens agreement is within this of the slot's are listed as its depth range


def ladder_entry(x: torch.Tensor, y: torch.Tensor, r: Any) -> dict:
    """One row of a slot's ladder table: mean per-token cosine, median per-token relative error, scale."""
    import torch

    y = y.to(torch.float32)
    cos = torch.nn.functional.cosine_similarity(x, y, dim=-1)
    rel = (x - y).norm(dim=-1) / y.norm(dim=-1).clamp_min(1e-30)
    scale = x.norm(dim=-1) / y.norm(dim=-1).clamp_min(1e-30)
    return {"r": r, "cos": float(cos.mean()), "rel": float(rel.median()), "scale": float(scale.median())}


def decide(table: list[dict]) -> dict:
    """The match of one slot from its ladder table (see :func:`ladder_match`)."""
    if not table:
        return {"best": None, "match": False, "table": []}
    by_cos = max(table, key=lambda e: e["cos"])
    table = sorted(table, key=lambda e: (e["rel"], -e["cos"]))
    b = table[0]
    ru = table[1] if len(table) > 1 else {"r": None, "cos": None, "rel": None}
    return {"best": b["r"], "best_cos": b["cos"], "best_rel": b["rel"], "runner_up": ru["r"],
            "runner_up_cos": ru["cos"], "runner_up_rel": ru["rel"],
            "match": b["cos"] >= LADDER_MATCH_COS and b["rel"] <= LADDER_MATCH_REL and (
                ru["rel"] is None or b["rel"] <= LADDER_SEPARATION * ru["rel"]), "table": table,
            "direction": {"r": by_cos["r"], "cos": by_cos["cos"], "scale": by_cos["scale"]},
            "tolerance": {"cos_min": LADDER_MATCH_COS, "rel_max": LADDER_MATCH_REL,
                          "separation": LADDER_SEPARATION}}


def ladder_match(h: torch.Tensor, lad: dict) -> dict:
    """Match one slot to every reference r: mean per-token cosine, median per-token relative error.

    Per-token errors (not one Frobenius norm): the sink row is nearly the same from r≈12 to r≈28 and would
    otherwise dominate the comparison.

    Returns ``{"best", "best_cos", "best_rel", "runner_up", "runner_up_cos", "runner_up_rel", "match",
    "table", "direction", "tolerance"}``; ``match`` = best meets ``LADDER_MATCH_COS`` and ``LADDER_MATCH_REL``
    and is ``LADDER_SEPARATION`` × closer than the runner-up.
    """
    import torch

    x = h.to(torch.float32)
    return decide([ladder_entry(x, y, r) for r, y in lad.items() if tuple(y.shape) == tuple(x.shape)])
