"""EAGLE-3 draft checkpoints: load them in either naming scheme and run the step-0 draft forward.

Two weight-naming schemes exist (speculators ``layers.0.*`` with ``fc``; SpecForge/SGLang ``midlayer.*``):

- speculators / vLLM: ``layers.0.self_attn.q_proj.weight`` …, config ``speculators_model_type: eagle3``
  with a nested ``transformer_layer_config`` and top-level ``eagle_aux_hidden_state_layer_ids``;
- EAGLE / SGLang / SpecForge: ``midlayer.self_attn.q_proj.weight`` …, a flat Llama-style config with
  ``draft_vocab_size`` and (SGLang) ``eagle_config.eagle_aux_hidden_state_layer_ids``.

Both map to the same canonical names here (speculators' converter does
``key.replace("midlayer.", "layers.0.")``, ``speculators/convert/eagle/eagle3_converter.py``).

The forward is the training-time step 0 of speculators' ``Eagle3DraftModel.forward`` (0.9.0): ``fc`` on the
concatenated aux states, then the first decoder layer on ``cat([input_layernorm(embeds),
hidden_norm(fused)])`` with the residual taken from the fused state (normed when
``norm_before_residual``), RoPE over positions ``1..T`` (``shift_batch`` drops position 0), causal
attention, final ``norm`` and ``lm_head`` over the draft vocabulary. Draft index ``i`` is the verifier
token ``i + d2t[i]`` (offsets: speculators ``train/vocab_mapping.py``, SGLang ``hot_token_id``).

Example:
    >>> d = load_draft("sample_data/draft_eagle3")            # doctest: +SKIP
    >>> d                                                       # doctest: +SKIP
    Draft(draft_eagle3, scheme=layers.0, k=3, H=576, Vd=2048/49152, declared ids=[0, 3, 16])
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from forensics.errors import ForensicsError
from forensics.io import validate
from forensics.io.limits import num_layers
from forensics.io.safetensors import SafetensorsFile
from forensics.models.draft_config import WEIGHT_FILES, read_draft

if TYPE_CHECKING:  # pragma: no cover
    import torch

SCHEME_SPECULATORS = "layers.0"  # speculators / vLLM names
SCHEME_MIDLAYER = "midlayer"  # EAGLE / SGLang / SpecForge names
ORDER_EMB_H = "[emb, h]"  # the first layer's concat order in EAGLE-3: cat([input_layernorm(emb), hidden_norm(h)])
ORDER_H_EMB = "[h, emb]"  # the swapped order (a probe candidate; mlx-lm#1469 swapped it in an MTP head)


def has_weights(draft: str | os.PathLike) -> bool:
    """A draft folder (or a file inside it) with weights can be run; a bare config.json can only be audited."""
    d = os.fspath(draft)
    d = d if os.path.isdir(d) else os.path.dirname(d)
    return any(os.path.isfile(os.path.join(d, n)) for n in WEIGHT_FILES)


@dataclass
class Draft:
    """A loaded EAGLE-3 draft: canonical fp32 weights plus the facts its forward needs."""

    path: str
    config: dict
    scheme: str
    weights: dict = field(repr=False)
    hidden_size: int
    num_aux: int
    draft_vocab_size: int
    target_vocab_size: int | None
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope: dict
    norm_before_residual: bool
    norm_before_fc: bool = False
    fc_norm: bool = False
    norm_output: bool = False  # chain steps >= 1 get the post-norm output (else pre-norm), vLLM llama_eagle3.py
    declared_ids: list | None = None
    declared_ids_key: str | None = None
    trainer: str = "speculators"  # config style (draft_config.read_draft): speculators|sglang|vllm|eagle
    verifier: str | None = None
    problems: list = field(default_factory=list)  # d2t/t2d check findings (draft_config.check_vocab_maps)

    @property
    def embed(self) -> torch.Tensor | None:
        """The verifier embedding when the checkpoint ships a real one (not zeros/NaN), else None."""
        import torch

        w = self.weights.get("embed_tokens.weight")
        if w is None or not torch.isfinite(w).all() or not w.abs().amax() > 0:
            return None
        return w

    def target_ids(self) -> torch.Tensor:
        """Verifier token id of every draft index: ``i + d2t[i]`` (identity without ``d2t``)."""
        import torch

        base = torch.arange(self.draft_vocab_size, dtype=torch.long)
        d2t = self.weights.get("d2t")
        return base if d2t is None else base + d2t.long()

    def forward(self, fused: torch.Tensor, embeds: torch.Tensor, positions: torch.Tensor | None = None,
                dtype: Any = None) -> torch.Tensor:
        """Step-0 draft logits ``[T, Vd]`` from fused aux states ``[T, k·H]`` and token embeddings ``[T, H]``.

        Row ``t`` pairs the fused state at capture position ``t`` with the embedding of token ``t+1``
        (the caller does the pairing, as ``shift_batch`` does); ``positions`` default to ``1..T``.
        """
        return draft_forward(self, fused, embeds, positions, dtype)

    def __repr__(self) -> str:
        ids = self.declared_ids if self.declared_ids is not None else "none"
        v = self.target_vocab_size if self.target_vocab_size is not None else "?"
        return (f"Draft({os.path.basename(os.path.normpath(self.path))}, scheme={self.scheme}, k={self.num_aux}, "
                f"H={self.hidden_size}, Vd={self.draft_vocab_size}/{v}, layers={self.num_layers}, "
                f"declared ids={ids})")

    def to_dict(self) -> dict:
        return {"path": self.path, "scheme": self.scheme, "trainer": self.trainer, "num_aux": self.num_aux,
                "hidden_size": self.hidden_size, "draft_vocab_size": self.draft_vocab_size,
                "target_vocab_size": self.target_vocab_size, "num_layers": self.num_layers,
                "declared_ids": self.declared_ids, "declared_ids_key": self.declared_ids_key,
                "norm_before_residual": self.norm_before_residual, "has_embed": self.embed is not None,
                "verifier": self.verifier, "problems": list(self.problems)}


def canonical_name(name: str) -> str:
    """``model.midlayer.x`` / ``midlayer.x`` / ``model.layers.0.x`` → ``layers.0.x`` (speculators names)."""
    if name.startswith("model."):
        name = name[len("model."):]
    if name.startswith("midlayer."):
        name = "layers.0." + name[len("midlayer."):]
    if name == "draft_id_to_target_id":  # vLLM's in-memory name for d2t
        name = "d2t"
    return name


def _read_weights(folder: str) -> tuple[dict, str]:
    """All tensors of the checkpoint (fp32 for floats), under canonical names; and the scheme found."""
    import torch

    files = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    if not files:
        files = [f for f in WEIGHT_FILES if os.path.isfile(os.path.join(folder, f))]
    if not files:
        raise ForensicsError("no draft weights found (expected model.safetensors or pytorch_model.bin)",
                             path=folder)
    raw: dict = {}
    for f in files:
        p = os.path.join(folder, f)
        try:
            if f.endswith(".safetensors"):
                sf = SafetensorsFile(p)  # the one safetensors reader: validated header, file reads
                raw.update({k: sf.get(k) for k in sf.keys()})
            else:
                raw.update(torch.load(p, map_location="cpu", weights_only=True))
        except ForensicsError:
            raise
        except Exception as e:  # noqa: BLE001 - a corrupt or hostile weights file: any library error
            raise ForensicsError(f"cannot read draft weights: {type(e).__name__}: {e}", path=p) from None
    scheme = SCHEME_MIDLAYER if any(".midlayer." in f".{k}" for k in raw) else SCHEME_SPECULATORS
    out = {}
    for k, v in raw.items():
        v = v.float() if v.is_floating_point() else v
        out[canonical_name(k)] = v
    return out, scheme


def _nested(cfg: dict, key: str) -> dict:
    v = cfg.get(key)
    return v if isinstance(v, dict) else {}


def _rope_params(tl: dict) -> dict:
    rp = dict(tl.get("rope_parameters") or tl.get("rope_scaling") or {})
    rp.setdefault("rope_theta", tl.get("rope_theta", 10000.0))
    rp["rope_type"] = rp.get("rope_type") or rp.get("type") or "default"
    rp["partial_rotary_factor"] = tl.get("partial_rotary_factor", rp.get("partial_rotary_factor", 1.0))
    rp["max_position_embeddings"] = tl.get("max_position_embeddings")
    return rp


def load_draft(path: str | os.PathLike) -> Draft:
    """Load an EAGLE-3 draft folder (``config.json`` + weights) in either naming scheme.

    Raises ForensicsError naming the file and the expected vs found shape when the checkpoint is not an
    EAGLE-3 draft (no ``fc.weight`` / first layer taking ``cat([embeds, hidden])``).
    """
    folder = os.fspath(path)
    if os.path.isfile(folder):
        folder = os.path.dirname(folder) or "."
    info = read_draft(folder, read_vocab_maps=True)
    if info.config_path is None:
        raise ForensicsError("no config.json in the draft folder", path=folder)
    cfg = info.config
    w, scheme = _read_weights(folder)
    H, fc_in = _check_eagle3(w, folder)
    tl = _nested(cfg, "transformer_layer_config") if info.style == "speculators" else cfg
    q_out = int(w["layers.0.self_attn.q_proj.weight"].shape[0])
    kv_out = int(w["layers.0.self_attn.k_proj.weight"].shape[0])
    heads = int(tl.get("num_attention_heads") or 0)
    head_dim = int(tl.get("head_dim") or 0) or (q_out // heads if heads else 0)
    if not head_dim:
        raise ForensicsError("config has neither head_dim nor num_attention_heads", path=info.config_path)
    heads = q_out // head_dim
    ids, key = _declared_ids(info)
    n_layers = block_count(w, folder)
    t2d = w.get("t2d")
    return Draft(
        path=folder, config=cfg, scheme=scheme, weights=w, hidden_size=H, num_aux=fc_in // H,
        draft_vocab_size=int(w["lm_head.weight"].shape[0]),
        target_vocab_size=int(t2d.numel()) if t2d is not None else tl.get("vocab_size"),
        num_layers=n_layers, num_heads=heads, num_kv_heads=kv_out // head_dim, head_dim=head_dim,
        rms_norm_eps=float(tl.get("rms_norm_eps", 1e-6)), rope=_rope_params(tl),
        # speculators' config default is False; vLLM's update_eagle3 defaults it to True when absent
        # but a speculators config written by pydantic always carries the key.
        norm_before_residual=bool(cfg.get("norm_before_residual", False)),
        norm_before_fc=bool(cfg.get("norm_before_fc", False)), fc_norm=bool(cfg.get("fc_norm", False)),
        norm_output=bool(cfg.get("norm_output", False)),
        declared_ids=list(ids) if ids is not None else None, declared_ids_key=key if ids is not None else None,
        trainer=info.style, verifier=info.verifier,
        problems=list(info.vocab.problems) if info.vocab else [])


def _check_eagle3(w: dict, folder: str) -> tuple[int, int]:
    """``(H, fc inputs)`` of an EAGLE-3 checkpoint; ForensicsError when a tensor the forward reads is missing,
    ``fc`` is not ``[H, k·H]`` or the first layer's q_proj does not take ``cat([embeds, hidden])``."""
    for need in ("fc.weight", "layers.0.self_attn.q_proj.weight", "lm_head.weight", "norm.weight"):
        if need not in w:
            raise ForensicsError(f"not an EAGLE-3 draft: tensor {need!r} (or its midlayer.* name) is missing; "
                                 f"found {sorted(w)[:8]}…", path=folder)
    H = int(w["fc.weight"].shape[0])
    fc_in = int(w["fc.weight"].shape[1])
    if fc_in % H:
        raise ForensicsError(f"fc.weight {list(w['fc.weight'].shape)} is not [H, k·H]", path=folder)
    q_in = int(w["layers.0.self_attn.q_proj.weight"].shape[1])
    if q_in != 2 * H:
        raise ForensicsError(f"first-layer q_proj takes {q_in} inputs, expected 2·H = {2 * H} "
                             "(cat([embeds, hidden]))", path=folder)
    missing = [n for n in _layer_tensors(w, folder) if n not in w]
    if missing:
        raise ForensicsError(f"not a complete EAGLE-3 draft: {len(missing)} tensor(s) the forward reads are missing, "
                             f"e.g. {missing[:4]}", path=folder)
    return H, fc_in


def _declared_ids(info: Any) -> tuple[Any, str]:
    """The aux layer ids the draft config declares and the key they sit under: top-level ids (speculators /
    vLLM) or nested ids (SGLang), else whichever of the two the config carries."""
    ids, key = (info.ids_top, "eagle_aux_hidden_state_layer_ids") if info.style in ("speculators", "vllm") \
        else (info.ids_nested, "eagle_config.eagle_aux_hidden_state_layer_ids")
    if ids is None and (info.ids_top or info.ids_nested):
        ids, key = (info.ids_top, "eagle_aux_hidden_state_layer_ids") if info.ids_top is not None else \
            (info.ids_nested, "eagle_config.eagle_aux_hidden_state_layer_ids")
    return ids, key


def block_count(w: dict, path: str | None = None) -> int:
    """1 + the largest block index ``i`` among the ``layers.<i>.*`` weight names, bounded as a layer count. Only
    ASCII digits are an index: ``str.isdigit`` also accepts ``²`` (``int`` then raises) and ``٣``."""
    idx = [k.split(".")[1] for k in w if isinstance(k, str) and k.startswith("layers.")]
    top = max([int(i) for i in idx if validate.ascii_digits(i) and len(i) <= 9] + [0])
    return num_layers(1 + top, path, "draft block count (1 + the largest layers.<i> index of the weights)")


def _layer_tensors(w: dict, path: str | None = None) -> list[str]:
    """Every tensor name the forward reads for the decoder layers present in ``w`` (layer 0 also its
    ``hidden_norm``), so a checkpoint missing one is refused at load, not with a KeyError mid-forward.

    Example:
        >>> _layer_tensors({"layers.0.self_attn.q_proj.weight": None})[:2]
        ['layers.0.input_layernorm.weight', 'layers.0.post_attention_layernorm.weight']
    """
    n = block_count(w, path)  # a name like layers.99999999999.x asked for 10^11 blocks' names (memory)
    per = ["input_layernorm.weight", "post_attention_layernorm.weight"] + \
        [f"self_attn.{p}_proj.weight" for p in "qkvo"] + [f"mlp.{p}_proj.weight" for p in ("gate", "up", "down")]
    return [f"layers.{i}.{t}" for i in range(n) for t in per] + ["layers.0.hidden_norm.weight"]


# ---------------------------------------------------------------- forward (plain torch) --

def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    import torch

    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope_inv_freq(d: Draft, dtype: Any = None) -> tuple[torch.Tensor, float]:
    """``(inv_freq, attention_scaling)`` for the draft's RoPE (default and llama3 types built in;
    other types through transformers' ``ROPE_INIT_FUNCTIONS``)."""
    import torch

    rp = d.rope
    dim = int(d.head_dim * float(rp.get("partial_rotary_factor") or 1.0))
    base = float(rp["rope_theta"])
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    kind = rp["rope_type"]
    if kind == "default":
        return inv.to(dtype or torch.float32), 1.0
    if kind == "llama3":  # transformers modeling_rope_utils._compute_llama3_parameters
        factor, lo, hi = float(rp["factor"]), float(rp["low_freq_factor"]), float(rp["high_freq_factor"])
        old = float(rp["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv
        out = torch.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        mid = (1 - smooth) * out / factor + smooth * out
        is_mid = (wavelen >= old / hi) & (wavelen <= old / lo)
        return torch.where(is_mid, mid, out).to(dtype or torch.float32), 1.0
    try:
        from transformers import LlamaConfig
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        cfg = LlamaConfig(hidden_size=d.hidden_size, num_attention_heads=d.num_heads, head_dim=d.head_dim,
                          max_position_embeddings=rp.get("max_position_embeddings") or 4096,
                          rope_parameters={k: v for k, v in rp.items() if k != "max_position_embeddings"})
        inv_t, scale = ROPE_INIT_FUNCTIONS[kind](cfg, "cpu")
        return inv_t.to(dtype or torch.float32), float(scale)
    except (KeyError, TypeError, ValueError) as e:
        raise ForensicsError(f"unsupported RoPE type {kind!r} in the draft config ({e})", path=d.path) from None


def _attention(d: Draft, prefix: str, x: torch.Tensor, cos, sin, dt, cache: list | None = None,
               rows: tuple | None = None) -> torch.Tensor:
    """Self-attention of one draft layer.

    Step 0 (``rows`` None): ``x`` ``[..., T, D]``, causal attention over the T rows; their keys and values are
    appended to ``cache`` (this layer's KV list). A chain step ≥ 1: ``x`` ``[n, D]`` holds the rows still
    drafting, ``rows = (b, t)`` their batch and position indices; row ``t`` attends to the step-0 keys of rows
    ``0..t`` (the context the engine's KV cache holds) and to its own keys of steps ``1..j`` (the tokens its
    chain drafted), the mask of EAGLE-3's chain drafting (vLLM ``EagleProposer.propose``; speculators' TTT
    ``extend_dense_mask_for_draft_tokens`` adds the same diagonal blocks).
    """
    import torch

    W = {k[len(prefix):]: v for k, v in d.weights.items() if k.startswith(prefix)}
    lead = x.shape[:-2] if rows is None else x.shape[:-1]
    T = x.shape[-2] if rows is None else 1

    def proj(name, n):
        y = x @ W[f"{name}.weight"].to(dt).T
        if f"{name}.bias" in W:
            y = y + W[f"{name}.bias"].to(dt)
        if rows is not None:
            return y.view(*lead, n, d.head_dim)  # [n, heads, hd]
        return y.view(*lead, T, n, d.head_dim).transpose(-2, -3)  # [..., heads, T, hd]

    q, k, v = proj("q_proj", d.num_heads), proj("k_proj", d.num_kv_heads), proj("v_proj", d.num_kv_heads)
    if "q_norm.weight" in W:  # Qwen3 per-head q/k norms
        q, k = _rms(q, W["q_norm.weight"].to(dt), d.rms_norm_eps), _rms(k, W["k_norm.weight"].to(dt), d.rms_norm_eps)
    rot = cos.shape[-1]
    cs, sn = (cos, sin) if rows is None else (cos[:, None, :], sin[:, None, :])

    def rope(t):
        r, p = t[..., :rot], t[..., rot:]
        half = rot // 2
        rh = torch.cat([-r[..., half:], r[..., :half]], dim=-1)
        return torch.cat([r * cs + rh * sn, p], dim=-1)

    q, k = rope(q), rope(k)
    cache = [] if cache is None else cache
    if rows is None:
        out = _context_attention(d, q, k, v, cache, lead, T)
    else:
        out = _chain_attention(d, q, k, v, cache, rows, lead)
    y = out @ W["o_proj.weight"].to(dt).T
    return y + W["o_proj.bias"].to(dt) if "o_proj.bias" in W else y


def _context_attention(d: Draft, q, k, v, cache: list, lead: tuple, T: int) -> torch.Tensor:
    """Step 0: causal attention over the T rows ``[..., heads, T, hd]``; their keys and values join ``cache``."""
    import torch

    rep, scale = d.num_heads // d.num_kv_heads, d.head_dim ** -0.5
    cache.append((k, v))
    kr, vr = k.repeat_interleave(rep, -3), v.repeat_interleave(rep, -3)
    scores = (q @ kr.transpose(-1, -2)) * scale
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    out = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ vr  # [..., heads, T, hd]
    return out.transpose(-2, -3).reshape(*lead, T, d.num_heads * d.head_dim)


def _chain_attention(d: Draft, q, k, v, cache: list, rows: tuple, lead: tuple) -> torch.Tensor:
    """A chain step ≥ 1: rows ``(b, t)`` ``[n, heads, hd]`` attend to the step-0 keys of rows ``0..t`` of their
    own batch row and to their own keys of steps ``1..j`` (this step's join ``cache`` at ``(b, t)``)."""
    import torch

    rep, scale = d.num_heads // d.num_kv_heads, d.head_dim ** -0.5
    b, t = rows
    k0, v0 = cache[0]  # [B, kv heads, T0, hd]
    kd, vd = torch.zeros_like(k0), torch.zeros_like(v0)
    kd[b, :, t], vd[b, :, t] = k, v
    cache.append((kd, vd))
    ke = torch.stack([c[0][b, :, t] for c in cache[1:]], dim=-2).repeat_interleave(rep, -3)  # [n, heads, j, hd]
    ve = torch.stack([c[1][b, :, t] for c in cache[1:]], dim=-2).repeat_interleave(rep, -3)
    extra = (q.unsqueeze(-2) * ke).sum(-1) * scale  # [n, heads, j]
    out = torch.empty_like(q)
    T0 = k0.shape[-2]
    for bb in torch.unique(b).tolist():  # the context keys of each batch row's own step 0
        sel = (b == bb).nonzero().squeeze(-1)
        kr, vr = k0[bb].repeat_interleave(rep, 0), v0[bb].repeat_interleave(rep, 0)  # [heads, T0, hd]
        sc = torch.einsum("nhd,htd->nht", q[sel], kr) * scale
        mask = torch.arange(T0)[None, None, :] > t[sel][:, None, None]
        p = torch.softmax(torch.cat([sc.masked_fill(mask, float("-inf")), extra[sel]], dim=-1), dim=-1)
        out[sel] = torch.einsum("nht,htd->nhd", p[..., :T0], vr) + (p[..., T0:].unsqueeze(-1) * ve[sel]).sum(-2)
    return out.reshape(*lead, d.num_heads * d.head_dim)


def _mlp(d: Draft, prefix: str, x: torch.Tensor, dt) -> torch.Tensor:
    import torch

    g = x @ d.weights[f"{prefix}gate_proj.weight"].to(dt).T
    u = x @ d.weights[f"{prefix}up_proj.weight"].to(dt).T
    return (torch.nn.functional.silu(g) * u) @ d.weights[f"{prefix}down_proj.weight"].to(dt).T


def draft_forward(d: Draft, fused: torch.Tensor, embeds: torch.Tensor, positions: torch.Tensor | None = None,
                  dtype: Any = None) -> torch.Tensor:
    """Step-0 logits ``[..., T, Vd]`` (see :meth:`Draft.forward`), computed in ``dtype`` (default fp32).

    Leading batch dimensions are allowed. No ``no_grad`` here: the training script differentiates it.
    """
    import torch

    head = d.weights["lm_head.weight"].to(dtype or torch.float32)
    return draft_hidden(d, fused, embeds, positions, dtype) @ head.T


def draft_hidden(d: Draft, fused: torch.Tensor, embeds: torch.Tensor, positions: torch.Tensor | None = None,
                 dtype: Any = None, order: str = ORDER_EMB_H) -> torch.Tensor:
    """The normed last hidden state ``[..., T, H]`` that ``lm_head`` turns into :func:`draft_forward`'s logits.

    A caller that only needs each row's top-k applies ``lm_head`` in row blocks (matmul rows are independent:
    the logits are the same bits) and never holds the whole ``[..., T, Vd]`` tensor. ``order`` is the first
    layer's concat order: ``"[emb, h]"`` (EAGLE-3, speculators' ``Eagle3FirstLayerMixin``) or ``"[h, emb]"``
    (a wiring candidate of the probe).
    """
    return draft_chain(d, fused, embeds, [], positions, dtype, order)[0]


def _rope_tables(d: Draft, positions: torch.Tensor, dt) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    inv, scale = rope_inv_freq(d, torch.float64)
    ang = positions.to(torch.float64)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return (ang.cos() * scale).to(dt), (ang.sin() * scale).to(dt)


def _decoder(d: Draft, h: torch.Tensor, embeds: torch.Tensor, cos, sin, dt, caches: list, order: str,
             rows: tuple | None = None) -> torch.Tensor:
    """The draft's decoder layers on one step's input: the pre-norm output ``h + residual``."""
    import torch

    w, eps = d.weights, d.rms_norm_eps
    for i in range(d.num_layers):
        p = f"layers.{i}."
        if i == 0:  # Eagle3FirstLayerMixin.forward (speculators models/eagle3/model_definitions.py)
            e = _rms(embeds, w[p + "input_layernorm.weight"].to(dt), eps)
            hn = _rms(h, w[p + "hidden_norm.weight"].to(dt), eps)
            residual = hn if d.norm_before_residual else h
            x = torch.cat([hn, e] if order == ORDER_H_EMB else [e, hn], dim=-1)
        else:
            residual, x = h, _rms(h, w[p + "input_layernorm.weight"].to(dt), eps)
        h = residual + _attention(d, p + "self_attn.", x, cos, sin, dt, caches[i], rows)
        h = h + _mlp(d, p + "mlp.", _rms(h, w[p + "post_attention_layernorm.weight"].to(dt), eps), dt)
    return h


def _fc_input(d: Draft, fused: torch.Tensor, embeds: torch.Tensor, dt) -> torch.Tensor:
    """Step 0's input ``[B, T, H]``: ``fc`` on the fused target states (normed first when the config says so),
    after checking fused ``[..., T, k·H]`` against embeds ``[..., T, H]``."""
    import torch

    w, eps, H = d.weights, d.rms_norm_eps, d.hidden_size
    if fused.shape[-1] != d.num_aux * H or embeds.shape[-1] != H or embeds.shape[:-1] != fused.shape[:-1]:
        raise ForensicsError(f"draft expects fused [T, {d.num_aux}·{H}] and embeds [T, {H}]; found "
                             f"{list(fused.shape)} and {list(embeds.shape)}", path=d.path)
    if d.norm_before_fc and "input_norm.weight" in w:
        fused = _rms(fused, w["input_norm.weight"].to(dt), eps)
    if d.fc_norm:
        fused = torch.cat([_rms(c, w[f"fc_norm.{i}.weight"].to(dt), eps)
                           for i, c in enumerate(fused.chunk(d.num_aux, dim=-1))], dim=-1)
    return (fused @ w["fc.weight"].to(dt).T).reshape(-1, fused.shape[-2], H)


def draft_chain(d: Draft, fused: torch.Tensor, embeds: torch.Tensor, feed: Any = (),
                positions: torch.Tensor | None = None, dtype: Any = None, order: str = ORDER_EMB_H,
                keep: Callable | None = None) -> torch.Tensor:
    """Greedy chain drafting as EAGLE-3 serves it: the normed hidden state ``[1 + len(feed), ..., T, H]`` of
    every draft step, row ``t`` of step ``j`` drafting the token ``j + 1`` places after row ``t``'s step 0.

    Step 0 is the training-time forward (:func:`draft_hidden`): ``fc`` on the target's fused states with the
    embedding of token ``t + 1`` at position ``t + 1``. Step ``j ≥ 1`` feeds back the draft's own output
    state — the pre-final-norm ``h + residual`` (vLLM ``llama_eagle3.py`` returns ``hidden_prenorm`` as
    the next step's ``hidden_states``; post-norm when the config sets ``norm_output``), never through ``fc``
    — with ``feed[j - 1]`` ``[..., T, H]``, the embedding of the token drafted at step ``j - 1``, at
    position ``t + 1 + j`` (vLLM ``EagleProposer.propose``: ``positions += 1``). Row ``t`` attends to the
    step-0 rows ``0..t`` and to its own earlier steps (see :func:`_attention`).

    ``keep(j, normed [n, H], b, t) -> bool [n]`` (optional) is called after each step with the rows computed
    (flat batch index ``b``, position ``t``) and says which chains go on; a row it drops is never computed
    again and stays zero in the output (a caller scoring acceptance drops rejected chains). A caller may feed
    the embedding of the verifier's token instead of the drafted one: a chain goes on only while they agree.
    """
    import torch

    dt = dtype or torch.float32
    w, eps, H = d.weights, d.rms_norm_eps, d.hidden_size
    fused, embeds = fused.to(dt), embeds.to(dt)
    T, lead = fused.shape[-2], fused.shape[:-2]
    h = _fc_input(d, fused, embeds, dt)
    if positions is None:
        positions = torch.arange(1, T + 1)  # shift_batch: position ids start at 1
    B = h.shape[0]
    caches: list[list] = [[] for _ in range(d.num_layers)]
    cos, sin = _rope_tables(d, positions, dt)
    pre = _decoder(d, h, embeds.reshape(B, T, H), cos, sin, dt, caches, order)
    out = torch.zeros(1 + len(feed), B, T, H, dtype=dt)
    out[0] = _rms(pre, w["norm.weight"].to(dt), eps)
    b, t = (x.reshape(-1) for x in torch.meshgrid(torch.arange(B), torch.arange(T), indexing="ij"))
    prev = (out[0] if d.norm_output else pre).reshape(B * T, H)
    for j, e in enumerate(feed, start=1):
        if keep is not None:
            go = keep(j - 1, out[j - 1][b, t], b, t)
            b, t, prev = b[go], t[go], prev[go]
        if not b.numel():
            break
        cos, sin = _rope_tables(d, positions[t] + j, dt)
        pre = _decoder(d, prev, e.to(dt).reshape(B, T, H)[b, t], cos, sin, dt, caches, order, (b, t))
        out[j, b, t] = _rms(pre, w["norm.weight"].to(dt), eps)
        prev = out[j, b, t] if d.norm_output else pre
    if keep is not None:
        _keep_last(keep, len(feed), out, b, t)
    return out.reshape(1 + len(feed), *lead, T, H)


def _keep_last(keep: Callable, steps: int, out: torch.Tensor, b: torch.Tensor, t: torch.Tensor) -> None:
    """``keep`` also sees the rows of the last step computed (step 0 when nothing was fed; none when every chain
    stopped before the last step)."""
    if b.numel() and steps:
        keep(steps, out[steps][b, t], b, t)
    elif not steps:
        keep(0, out[0][b, t], b, t)
