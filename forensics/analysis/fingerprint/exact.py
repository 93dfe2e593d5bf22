"""Exact mode of the fingerprint: checks against the real model (or a reference ladder capture).

* Embedding: slot rows vs ``embed_tokens.weight[input_ids]``, reading only those rows (safetensors
  ``get_slice`` for a safetensors checkpoint; safetensors ``__init__.pyi``).
* Post-norm: with the final norm's γ, ``rms(x / γ) ≈ 1`` on every row ⇔ x = RMSNorm(h)
  (transformers ``LlamaRMSNorm``; HF's last ``hidden_states`` entry is post-norm, PR #26142).
* Reference ladder: run the model on the sample's ids (``forensics.models.target.ladder``) or take a committed
  ladder capture with the same ids, and match each slot to the r it equals (per-token cosine and
  relative error; best r and runner-up) — this resolves off-by-one (sglang PR #25454, vllm PR #43671).
"""

from __future__ import annotations

import glob
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from forensics.analysis.fingerprint.ladder import (
    BF16_COMPUTE_REL,
    LADDER_MATCH_COS,
    LADDER_MATCH_REL,
    LADDER_SEPARATION,
    LENS_NEAR,
    LENS_ROWS,
    decide,
    ladder_entry,
    ladder_match,
)
from forensics.analysis.fingerprint.streamed import streamed_ladder, streamed_lens
from forensics.errors import ForensicsError, ModelMismatch
from forensics.io.capture import Capture
from forensics.io.formats import load
from forensics.io.safetensors import infos_from_header, read_header, read_rows, read_tensor, shard_files
from forensics.layers import FINAL_POST, R, r_label
from forensics.models import target as target_module  # called through it: its loaders are patched in tests
from forensics.models.folder import check_ids
from forensics.models.stream import LayerStream
from forensics.models.target import (
    DEFAULT_TOKENS,
    Target,
    default_max_memory,
    embed_weight,
    final_norm,
    ladder,
    load_target,
    sublayer_states,
)

if TYPE_CHECKING:  # pragma: no cover
    import torch

POSTNORM_RMS_TOL = 0.02  # max_t |rms(x_t / γ) − 1| at/below this ⇒ post-final-norm
EMBED_MATCH_FRACTION = 1.0  # every row must equal E[id] (after casting E to the slot's dtype)
GAMMA_MIN_REL = 1e-3  # dims with |γ| below this × median |γ| are left out of x / γ


@dataclass(slots=True)
class ExactMatch:
    """One slot against the reference: the direct checks, the ladder match, the logit lens, and the r it equals.

    ``embedding``: ``{"equal_rows", "rows", "max_rel_err", "verdict"}`` (rows vs ``E[ids]``); ``postnorm``:
    ``{"max_abs_dev", "verdict"}`` (the final-norm γ test); ``sublayer``: for a slot that equals no r, the
    block-internal state it equals (:func:`sublayer_match`); ``ladder``: :func:`ladder_match`'s per-token cosine
    and relative error at every reference r (best, runner-up, table, tolerance); ``lens``: ``{"agreement",
    "rows", "near"}``. ``r_exact``: the ladder's match, else 0 (embedding) or ``final_post`` (γ), else None.
    """

    embedding: dict | None = None
    postnorm: dict | None = None
    ladder: dict | None = None
    r_exact: R | None = None
    lens: dict | None = None
    sublayer: dict | None = None  # a slot that equals no r: the state inside a block it equals (sublayer_match)

    def to_dict(self) -> dict:
        return {"embedding": self.embedding, "postnorm": self.postnorm, "ladder": self.ladder,
                "r_exact": self.r_exact, "lens": self.lens, "sublayer": self.sublayer}


@dataclass(slots=True)
class ExactResult:
    """Exact mode of one capture (``Fingerprint.exact``): what it ran against, and every slot's match.

    ``ran`` is False when the capture has no token ids (only the γ test could run); ``labels``: slot → r label
    of the slots it named; ``stream``: a streamed reference's provenance (blocks, shards, bytes, memory).

    >>> ExactResult("ladder.safetensors", 30, [ExactMatch(r_exact=3)], labels={0: "L3"}).to_dict()["labels"]
    {0: 'L3'}
    """

    source: str
    num_layers: int | None
    slots: list[ExactMatch]
    notes: list[str] = field(default_factory=list)
    labels: dict[int, str] = field(default_factory=dict)
    tokens: int | None = None
    compute_dtype: str | None = None
    stream: dict | None = None
    ran: bool = True

    def to_dict(self) -> dict:
        return {"source": self.source, "num_layers": self.num_layers, "slots": [s.to_dict() for s in self.slots],
                "notes": self.notes, "labels": self.labels, "tokens": self.tokens,
                "compute_dtype": self.compute_dtype, "stream": self.stream, "ran": self.ran}


class Reference:
    """What exact mode checks against: embedding rows, final-norm γ, and the ladder of states per r."""

    def __init__(self, source: str, net: Any = None, ladder: dict | None = None,
                 embed_rows: Any = None, gamma: Any = None, num_layers: int | None = None,
                 stream: Any = None, tokens: int | None = None):
        self.source, self.net, self._ladder = source, net, ladder
        self._embed_rows, self.gamma, self.num_layers = embed_rows, gamma, num_layers
        self.stream, self.tokens = stream, tokens  # a LayerStream when the model does not fit the budget

    def embedding_rows(self, ids: torch.Tensor) -> torch.Tensor | None:
        if self._embed_rows is not None:
            return self._embed_rows(ids)
        if self._ladder is not None and 0 in self._ladder:
            return None  # a ladder capture's r=0 slot is compared by the ladder match itself
        return None

    def vocab_size(self) -> int | None:
        """Rows of the model's embedding (ids must lie in ``0..rows - 1``), when a model is behind this."""
        if self.stream is not None:
            return int(self.stream.vocab_size)
        if self.net is not None:
            return int(self.net.get_input_embeddings().weight.shape[0])
        return None

    def hidden_size(self) -> int | None:
        """Width of the model's (or the ladder capture's) states, when known."""
        if self.stream is not None:
            return int(self.stream.hidden_size)
        if self.net is not None:  # the config's width (an embedding may be narrower, ALBERT-style), else the table's
            h = getattr(getattr(self.net, "config", None), "hidden_size", None)
            return int(h) if isinstance(h, int) else int(self.net.get_input_embeddings().weight.shape[1])
        if self._ladder:
            return int(next(iter(self._ladder.values())).shape[-1])
        return None

    def ladder(self, ids: torch.Tensor) -> dict | None:
        if self._ladder is not None:
            return self._ladder
        if self.net is None:
            return None

        self._ladder = ladder(self.net, ids)
        return self._ladder


def _safetensors_files(path: str) -> list[str]:
    """A checkpoint file, or a folder's shards (index-aware, confined to the folder: ``io.safetensors``)."""
    if os.path.isfile(path) and path.endswith(".safetensors"):
        return [path]
    if os.path.isdir(path) and (glob.glob(os.path.join(path, "*.safetensors"))
                                or os.path.isfile(os.path.join(path, "model.safetensors.index.json"))):
        return shard_files(path)
    return []


def _find(files: list[str], suffix: str) -> Any:
    """The :class:`~forensics.io.safetensors.TensorInfo` of the first tensor named ``*suffix``, or None."""
    for f in files:
        for k, info in infos_from_header(f, read_header(f)).items():
            if k.endswith(suffix):
                return info
    return None


def _lazy_rows(files: list[str], suffix: str):
    """A function ids → rows of the tensor named ``*suffix``, reading only those rows."""
    info = _find(files, suffix)
    if info is None:
        return None

    def rows(ids):
        import torch

        check_ids(ids, info.shape[0], os.path.dirname(info.file))
        uniq, inv = torch.unique(ids, return_inverse=True)
        got = torch.stack([read_rows(info, int(i), int(i) + 1)[0] for i in uniq.tolist()])
        return got[inv]
    return rows


def _lazy_tensor(files: list[str], suffix: str):
    info = _find(files, suffix)
    return None if info is None else read_tensor(info)


def reference_for(model: Any, capture: Capture) -> Reference:
    """Resolve ``model=`` (path, loaded model, ``(model, tokenizer)``, or a ladder capture) to a Reference."""
    if isinstance(model, Reference):
        return model

    target = model if isinstance(model, Target) else None
    if target is not None:
        model = target.path
    if isinstance(model, tuple) and model and hasattr(model[0], "config"):
        model = model[0]
    if isinstance(model, Capture):
        return _ladder_reference(model, capture)
    if hasattr(model, "config") and hasattr(model, "forward"):
        E = embed_weight(model)
        return Reference(source=type(model).__name__, net=model, embed_rows=lambda ids: E[ids],
                         gamma=final_norm(model)[0], num_layers=int(model.config.num_hidden_layers))
    path = os.fspath(model)
    if not os.path.exists(path):
        raise ForensicsError("model not found (expected an HF folder, a safetensors checkpoint, a .gguf file "
                             "or a ladder capture)", path=path)
    st_files = _safetensors_files(path)
    has_embed = bool(st_files) and _has_suffix(st_files, "embed_tokens.weight")
    if os.path.isfile(path) and not path.endswith(".gguf") and not has_embed:  # a capture file: ladder reference

        return _ladder_reference(load(path), capture)
    if has_embed:
        rows = _lazy_rows(st_files, "embed_tokens.weight")
        gamma = _lazy_tensor(st_files, "model.norm.weight")
        net, stream = None, None
        if os.path.isdir(path) and os.path.isfile(os.path.join(path, "config.json")):
            budget = target.max_memory if target is not None else default_max_memory()
            if target_module.fits_in_memory(path, budget):
                net = target_module.load_model(path)[0]
            else:  # stream the blocks from the shards, one at a time

                stream = _fitting_stream(path, budget, target)
        L = int(net.config.num_hidden_layers) if net is not None else stream.num_layers if stream else None
        return Reference(source=path, net=net, embed_rows=rows, gamma=gamma, num_layers=L, stream=stream,
                         tokens=target.tokens if target is not None else None)

    net = load_target(target if target is not None else path)[0]  # a Target's budget is checked first
    E = embed_weight(net)
    return Reference(source=path, net=net, embed_rows=lambda ids: E[ids], gamma=final_norm(net)[0],
                     num_layers=int(net.config.num_hidden_layers),
                     tokens=target.tokens if target is not None else None)


def _fitting_stream(path: str, budget: int, target: Any) -> Any:
    """A float32 LayerStream, or a bfloat16 one when a float32 block would not fit the budget (its states
    differ from float32 by ≤ ``BF16_COMPUTE_REL``, inside ``LADDER_MATCH_REL``); raises when neither fits."""
    progress, T = bool(target and target.progress), (target.tokens if target is not None else DEFAULT_TOKENS)
    stream = LayerStream(path, progress=progress, max_memory=budget)
    try:
        stream.check_budget(T)
    except ForensicsError:
        half = LayerStream(path, compute_dtype="bfloat16", progress=progress, max_memory=budget)
        half.check_budget(T)
        return half
    return stream


def _has_suffix(files: list[str], suffix: str) -> bool:
    return _find(files, suffix) is not None


def _ladder_reference(ref: Capture, capture: Capture) -> Reference:
    import torch

    rs = [s.declared_r for s in ref.slots]
    if any(r is None for r in rs):
        raise ForensicsError("a reference ladder capture must declare r for every slot (capture.json \"r\")",
                             path=ref.path)
    if ref.input_ids is None or capture.input_ids is None or not torch.equal(
            ref.input_ids.reshape(-1), capture.input_ids.reshape(-1)):
        raise ForensicsError("the reference ladder's input_ids differ from this capture's; exact mode needs "
                             "the same tokens (pass the model instead to run it on these ids)", path=ref.path)
    lad = {r: s.tensor() for r, s in zip(rs, ref.slots, strict=True)}
    ints = [r for r in rs if isinstance(r, int)]
    return Reference(source=ref.path, ladder=lad, num_layers=max(ints) if FINAL_POST in rs and ints else
                     ref.num_layers)


def embedding_check(h: torch.Tensor, ids: torch.Tensor, ref: Reference) -> dict | None:
    """Rows equal ``E[ids]`` (E cast to the slot dtype)? ``{"equal_rows", "rows", "max_rel_err"}``."""

    E = ref.embedding_rows(ids) if ids is not None else None
    if E is None:
        return None
    T = min(int(h.shape[0]), int(E.shape[0]))
    x, e = h[:T], E[:T].to(h.dtype)
    eq = (x == e).all(dim=-1)
    diff = (x.float() - E[:T].float()).norm(dim=-1) / E[:T].float().norm(dim=-1).clamp_min(1e-30)
    return {"equal_rows": int(eq.sum()), "rows": T, "max_rel_err": float(diff.max()),
            "verdict": bool(int(eq.sum()) >= EMBED_MATCH_FRACTION * T)}


def postnorm_check(h: torch.Tensor, ref: Reference) -> dict | None:
    """``max_t |rms(x_t / γ) − 1|`` with the final-norm γ (dims with tiny |γ| left out)."""
    import torch

    if ref.gamma is None or int(ref.gamma.numel()) != int(h.shape[1]):
        return None
    g = ref.gamma.to(torch.float64)
    keep = g.abs() > GAMMA_MIN_REL * g.abs().median()
    dev = 0.0
    for s in range(0, int(h.shape[0]), 256):
        x = h[s:s + 256].to(torch.float64)[:, keep] / g[keep]
        rms = x.pow(2).mean(-1).sqrt()
        dev = max(dev, float((rms - 1).abs().max()))
    if not math.isfinite(dev):
        dev = float("inf")
    return {"max_abs_dev": dev, "verdict": dev <= POSTNORM_RMS_TOL}


def reference_ladder(capture: Capture, model: Any) -> tuple[Reference, dict | None]:
    """The reference and its ladder ``{r: [T, H]}`` on the capture's first ids (None: streamed, or no ids).

    The ids run are the first T (``Target.tokens``; all for a whole model without a limit) plus the ids the
    rows may sit after (a prefix-cache suffix: rows for tokens 32.. need the states of tokens 32..)."""
    ref = reference_for(model, capture)
    check_sizes(capture, ref)
    ids = capture.input_ids.reshape(-1) if capture.input_ids is not None else None
    if ids is None:
        return ref, None
    # the ids the model will run: the first T, plus those the rows may sit after (streamed: its default T)
    T = ref.tokens or (DEFAULT_TOKENS if ref.stream is not None else None)
    if T is not None and (ref.stream is not None or ref.net is not None):
        ids = ids[:T + max(0, int(ids.numel()) - capture.num_tokens) + ROW_SHIFT_SLACK]
    if ref.vocab_size() is not None:
        check_ids(ids, int(ref.vocab_size() or 0), capture.path, ref.source)  # before any lookup
    return ref, (None if ref.stream is not None else ref.ladder(ids))


CONCAT_MAX_K = 8  # EAGLE-3 concatenates 3 states; a few more leave room for other drafts' fc widths


class ConcatenatedWidth(ModelMismatch):
    """The capture's slots are ``k·H`` wide against a model of hidden size ``H``: no state of that model is one of
    them (k states side by side, EAGLE-3's ``[T, k·H]`` aux states). Without a claim it is a capture that cannot be
    checked as stored (exit 2, how to re-save it); the fingerprint turns a one-state claim on such a slot into a FAIL
    (the width alone excludes it)."""

    def __init__(self, message: str, path: str | None, k: int, hidden_size: int, width: int, model: str):
        self.k, self.hidden_size, self.width, self.model = k, hidden_size, width, model
        super().__init__(message, path=path)


def check_sizes(capture: Capture, ref: Reference) -> None:
    """A one-line :class:`~forensics.errors.ModelMismatch` naming both numbers when the capture cannot come from
    the reference model: a slot of another hidden size, a declared layer count (``capture.json`` ``num_layers``)
    other than the model's, or a declared r beyond the model's last block. Token ids outside the vocabulary are
    :func:`forensics.models.folder.check_ids`'s."""
    name = os.path.basename(ref.source.rstrip(os.sep)) or ref.source
    H = ref.hidden_size()
    if H is not None:
        for s in capture.slots:
            k, rest = divmod(s.hidden_size, H)
            if not rest and 2 <= k <= CONCAT_MAX_K:  # k states side by side: EAGLE-3's [T, k·H] aux states
                raise ConcatenatedWidth(f"hidden size {s.hidden_size} (slot {s.index}, {s.name}) is {k} × {H}, the "
                                        f"hidden size of the model {name}: {k} states concatenated on the last axis "
                                        f"(EAGLE-3's [T, {k}·H] aux states)? save them as [T, {k}, H] "
                                        f"(hs.view(T, {k}, {H})), read as {k} slots; if the slot is one state, the "
                                        f"capture is not from {name}: pass the model it was captured with (--model, "
                                        "model=)", capture.path, k, H, int(s.hidden_size), name)
            if s.hidden_size != H:
                raise ModelMismatch(f"hidden size {s.hidden_size} (slot {s.index}, {s.name}) ≠ {H}, the hidden size "
                                    f"of the model {name}: the capture comes from another model; pass the model it was "
                                    "captured with (--model, model=)", path=capture.path)
    L = ref.num_layers if (ref.net is not None or ref.stream is not None) else None
    if L is None:
        return
    declared = capture.num_layers
    if declared is not None and declared != L:
        raise ModelMismatch(f"the capture declares {declared} layers (capture.json num_layers) ≠ {L}, the layer "
                            f"count of the model {name}: pass the model it was captured with (--model, model=)",
                            path=capture.path)
    deep = [(s, s.declared_r) for s in capture.slots if isinstance(s.declared_r, int) and s.declared_r > L]
    if deep:
        s, r = deep[0]
        raise ModelMismatch(f"slot {s.index} ({s.name}) is declared {r_label(r)}, beyond the {L} layers of the model "
                            f"{name}: pass the model it was captured with (--model, model=)", path=capture.path)


ROW_SHIFT_SLACK = 4  # extra ids run past T, so a row a few tokens late still has its reference state


def _row_selection(rows: Any, i: int, n: int, T: int) -> tuple[Any, Any] | None:
    """``(row index, token index)`` of slot ``i``'s good rows that have a reference state among the first T
    tokens, or None when every row is its own token's (no selection needed)."""
    import torch

    if rows is None:
        return None
    tok = rows.token_of_row(i)
    if tok is None:
        return None
    good = rows.good_rows(i) & (tok >= 0) & (tok < T)
    if good.all() and (tok == np.arange(n)).all():  # every row its own token's: the plain prefix comparison
        return None
    idx = np.flatnonzero(good)
    return torch.from_numpy(idx), torch.from_numpy(tok[idx])


def exact_checks(capture: Capture, tensors: list, model: Any, rows: Any = None,  # noqa: C901
                 reference: tuple[Reference, dict | None] | None = None) -> ExactResult:
    """All exact checks for every slot (an :class:`ExactMatch` each); ``r_exact`` is the matched r, or 0 /
    ``final_post`` from the direct checks.

    ``rows`` (a ``forensics.analysis.rows.RowReport``) leaves each slot's bad rows out and puts its rows at
    their tokens (a shifted or suffix-only capture), so a zero block or foreign rows do not hide the slot's r.
    """
    ref, lad_ref = reference if reference is not None else reference_ladder(capture, model)
    ids = capture.input_ids.reshape(-1) if capture.input_ids is not None else None
    ids_all = ids
    T = ref.tokens or (DEFAULT_TOKENS if ref.stream is not None else None)
    n = int(tensors[0].shape[0]) if tensors else 0
    sel: list[Any] = [None] * len(tensors)
    if lad_ref is not None and ids is not None:
        T_lad = min(int(y.shape[0]) for y in lad_ref.values())
        sel = [_row_selection(rows, i, n, T_lad) for i in range(len(tensors))]
    full = list(tensors)
    if T is not None and (ref.net is not None or ref.stream is not None) and ids is not None:
        ids, tensors = ids[:T], [h[:T] for h in tensors]  # causal: the first T states need only these T ids
    if ids is not None and ref.vocab_size() is not None:
        check_ids(ids, int(ref.vocab_size() or 0), capture.path, ref.source)  # before any embedding lookup
    streamed = None
    if ref.stream is not None and ids is not None:
        streamed = streamed_ladder(ref.stream, ids, tensors)
        lad = None
    else:
        lad = lad_ref if lad_ref is not None else ref.ladder(ids) if ids is not None else None
    out: list[ExactMatch] = []
    for i, h in enumerate(tensors):
        s_i = sel[i]
        if s_i is not None and lad is not None and ids_all is not None:  # the slot's good rows at their tokens
            full_ids = ids_all
            hx, tok = full[i][s_i[0]], s_i[1]
            e = embedding_check(hx, full_ids[tok], ref) if int(tok.numel()) else None
            p = postnorm_check(hx, ref) if int(tok.numel()) else None
            m = ladder_match(hx, {r: y[tok] for r, y in lad.items()}) if int(tok.numel()) else None
            if m is not None:
                m["rows_used"] = int(tok.numel())
        else:
            lad_h = lad
            if lad is not None:  # the ladder may run a few ids past T (ROW_SHIFT_SLACK): compare the common rows
                common = min(int(h.shape[0]), *(int(y.shape[0]) for y in lad.values()))
                h, lad_h = h[:common], {r: y[:common] for r, y in lad.items()}
            e = embedding_check(h, ids, ref) if ids is not None else None
            p = postnorm_check(h, ref)
            m = streamed["matches"][i] if streamed else ladder_match(h, lad_h) if lad_h is not None else None
        if m and m.get("tolerance") and ref.net is not None:
            m["tolerance"]["compute_dtype"] = str(next(ref.net.parameters()).dtype).replace("torch.", "")
        r = None
        if m and m["match"]:
            r = m["best"]
        elif e and e["verdict"]:
            r = 0
        elif p and p["verdict"]:
            r = FINAL_POST
        out.append(ExactMatch(embedding=e, postnorm=p, ladder=m, r_exact=r))
    if ref.net is not None and lad is not None and ids_all is not None and any(
            x.r_exact is None and x.ladder is not None for x in out):
        _sublayers(ref.net, ids_all, tensors, full, sel, lad, out)
    if ref.net is not None and lad is not None and FINAL_POST in lad and all(x is None for x in sel):
        common = min(*(int(h.shape[0]) for h in tensors), *(int(y.shape[0]) for y in lad.values()))
        logit_lens(ref.net, [h[:common] for h in tensors], {r: y[:common] for r, y in lad.items()}, out)
    notes = []
    if ids is None:
        notes.append("capture has no input_ids: only the γ post-norm test can run")
    if any(x is not None for x in sel):
        notes.append("each slot matched on its good rows at their tokens (row findings); no logit lens")
    if streamed:
        streamed_lens(ref.stream, tensors, streamed, out)
        notes += streamed["notes"]
    return ExactResult(source=ref.source, num_layers=ref.num_layers, slots=out, notes=notes,
                       labels={i: r_label(s.r_exact) for i, s in enumerate(out) if s.r_exact is not None},
                       tokens=int(ids.numel()) if ids is not None else None,
                       compute_dtype=(ref.stream.compute_dtype if streamed else
                                      str(next(ref.net.parameters()).dtype).replace("torch.", "")
                                      if ref.net is not None else None),
                       stream=streamed["provenance"] if streamed else None)


SUBLAYER_NAMES = {"attn": "attention output", "mlp": "MLP output", "mid": "residual after attention, before the MLP"}
# the transformers module (0-based index) whose forward hook gives that state: the one a user hooked, by its own name
SUBLAYER_MODULES = {"attn": "model.layers[{i}].self_attn", "mlp": "model.layers[{i}].mlp",
                    "mid": "inside model.layers[{i}]"}


def _sublayers(net: Any, ids: Any, tensors: list, full: list, sel: list, lad: dict, out: list) -> None:
    """For each slot that equals no residual r: does it equal a state inside a block (attention output, MLP
    output, residual after attention) of the same forward? Sets ``ExactMatch.sublayer``."""
    T = min(int(y.shape[0]) for y in lad.values())
    subs = sublayer_states(net, ids[:T])
    for i, x in enumerate(out):
        if x.r_exact is not None or x.ladder is None:
            continue
        if sel[i] is not None:
            h, cands = full[i][sel[i][0]], {k: v[sel[i][1]] for k, v in subs.items()}
            base = {r: y[sel[i][1]] for r, y in lad.items()}
        else:
            common = min(int(tensors[i].shape[0]), T)
            h, cands = tensors[i][:common], {k: v[:common] for k, v in subs.items()}
            base = {r: y[:common] for r, y in lad.items()}
        x.sublayer = sublayer_match(h, base, cands)


def sublayer_match(h: torch.Tensor, lad: dict, subs: dict) -> dict | None:
    """The block-internal state ``h`` equals, decided over the residual ladder and every sub-layer candidate
    together (the same cosine, relative-error and separation rule as the ladder): ``{"what", "block",
    "name", "cos", "rel", "runner_up", "runner_up_rel"}``, or None when it equals none of them."""
    import torch

    x = h.to(torch.float32)
    table = [ladder_entry(x, y, r) for r, y in lad.items() if tuple(y.shape) == tuple(x.shape)]
    table += [ladder_entry(x, y, f"{k[0]}:{k[1]}") for k, y in subs.items() if tuple(y.shape) == tuple(x.shape)]
    d = decide(table)
    best = d.get("best")
    if not d["match"] or not isinstance(best, str) or ":" not in best:
        return None
    what, block = best.split(":")
    return {"what": what, "block": int(block), "name": _state_name(best), "cos": d["best_cos"],
            "rel": d["best_rel"], "runner_up": d["runner_up"], "runner_up_name": _state_name(d["runner_up"]),
            "runner_up_rel": d["runner_up_rel"]}


def _state_name(key: Any) -> str:
    """``"mlp:16"`` → "block 16's MLP output (model.layers[15].mlp)"; a residual r → its label (``L16``)."""
    if isinstance(key, str) and ":" in key:
        what, block = key.split(":")
        return f"block {block}'s {SUBLAYER_NAMES[what]} ({SUBLAYER_MODULES[what].format(i=int(block) - 1)})"
    return "none" if key is None else r_label(key)


def _lens_top1(net: Any, x: torch.Tensor, post: bool) -> torch.Tensor:
    """Top-1 token of ``lm_head(final_norm(x))`` (no norm for a post-norm state): the logit lens."""
    import torch

    with torch.no_grad():
        h = x.to(next(net.parameters()).dtype)
        if not post:
            h = getattr(net, "model", net).norm(h)
        return net.get_output_embeddings()(h).argmax(-1)


def logit_lens(net: Any, tensors: list, lad: dict, out: list) -> None:
    """Logit-lens depth signal (nostalgebraist 2020; tuned-lens, arXiv 2303.08112) added to each slot's
    exact checks: top-1 agreement with the model's own final prediction on ``LENS_ROWS`` tokens. For a slot
    that matches no reference state, the reference r with the nearest agreement give its depth range."""
    import torch

    T = int(lad[FINAL_POST].shape[0])
    rows = torch.unique(torch.linspace(1 if T > 1 else 0, T - 1, min(LENS_ROWS, T)).long())
    final = _lens_top1(net, lad[FINAL_POST][rows], post=True)

    def agree(x: torch.Tensor, post: bool) -> float:
        return float((_lens_top1(net, x[rows], post) == final).float().mean())

    profile = None
    for h, x in zip(tensors, out, strict=True):
        if int(h.shape[0]) != T:
            continue
        post = x.r_exact == FINAL_POST or bool(x.postnorm and x.postnorm["verdict"])
        a = agree(h, post)
        lens: dict[str, Any] = {"agreement": a, "rows": int(rows.numel()), "near": None}
        if x.r_exact is None:
            if profile is None:
                profile = {r: agree(v, r == FINAL_POST) for r, v in lad.items()}
            near = sorted((r for r, b in profile.items() if abs(b - a) <= LENS_NEAR),
                          key=lambda r: float("inf") if r == FINAL_POST else r)
            lens["near"] = near
        x.lens = lens

# the module's own names, and those it re-exports (callers import them from here)
__all__ = ["POSTNORM_RMS_TOL", "EMBED_MATCH_FRACTION", "GAMMA_MIN_REL", "ExactMatch", "ExactResult", "Reference",
           "reference_for", "embedding_check", "postnorm_check", "reference_ladder", "check_sizes",
           "ConcatenatedWidth", "ROW_SHIFT_SLACK",
           "exact_checks", "SUBLAYER_NAMES", "sublayer_match", "logit_lens", "BF16_COMPUTE_REL", "LADDER_MATCH_COS",
           "LADDER_MATCH_REL", "LADDER_SEPARATION", "LENS_NEAR", "LENS_ROWS", "decide", "ladder_entry", "ladder_match"]
