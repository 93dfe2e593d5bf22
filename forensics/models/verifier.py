"""The verifier as the probe needs it: facts, embedding, final norm, lm_head and next-token logits.

``open_verifier(spec)`` returns a :class:`Verifier` either over a loaded transformers model or, for a Llama
checkpoint stored as fp32/bf16 safetensors (the packaged SmolLM2's fp32 cache under ``~/.cache/hsf``, or an HF
folder), over a plain-torch forward that never imports transformers: that import alone costs ~2.5 s of CPU
per process (measured: ``torch.distributed.tensor``, ``torch._dynamo`` and ``sympy`` pulled in by
``modeling_llama``), more than the probe's whole scoring.

The plain forward replays transformers' ``LlamaForCausalLM`` (5.x, ``attn_implementation="sdpa"``, no
padding) op for op — the same ``F.linear`` shapes, the same RMSNorm expression, RoPE cos/sin built in fp32
the way ``LlamaRotaryEmbedding`` builds them, ``scaled_dot_product_attention(is_causal=True,
enable_gqa=True)`` — so its logits are bit-identical on the same machine (asserted against transformers in
tests/test_verifier.py). Anything outside that replay (biases, another RoPE type or activation, missing
tensors) falls back to transformers.

Example:
    >>> v = open_verifier("default")                 # doctest: +SKIP
    >>> v.facts["num_layers"], v.embed.shape          # doctest: +SKIP
    (30, torch.Size([49152, 576]))
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from forensics.errors import ForensicsError

if TYPE_CHECKING:  # pragma: no cover
    import torch

_PLAIN: dict[str, Verifier] = {}  # plain-torch verifiers loaded in this process, by folder
_PREFIX = "model."
PACK_TOKENS = 4096  # rows per packed verifier forward: activations ≤ 4096 × (H + 2·intermediate) floats
HEAD_ROWS = 1024  # rows per lm_head block: ≤ 1024 × V × 4 B of logits (0.2 GB at V = 49152)


@dataclass
class Verifier:
    """What the probe reads from a verifier model; ``predictions(seqs)`` is the argmax token ``[T]`` at every
    position of each 1-D id sequence (the verifier's greedy next-token prediction)."""

    facts: dict
    embed: torch.Tensor = field(repr=False)
    norm_weight: torch.Tensor = field(repr=False)
    norm_eps: float
    lm_head: torch.Tensor = field(repr=False)
    predictions: Callable[[list[torch.Tensor]], list[torch.Tensor]] = field(repr=False)
    logits: Callable[[torch.Tensor], torch.Tensor] = field(repr=False)  # [T, V] fp32 of one 1-D id sequence
    plain: bool = False  # True: the plain-torch replay; False: a transformers model

    @classmethod
    def from_model(cls, model: Any) -> Verifier:
        """Wrap a loaded transformers causal LM."""
        from forensics.models.target import embed_weight, final_norm, lm_head_weight, model_facts

        g, eps = final_norm(model)

        def logits(ids: torch.Tensor) -> torch.Tensor:
            import torch

            with torch.inference_mode():
                return model(input_ids=ids.reshape(1, -1), use_cache=False).logits[0].float()

        def predictions(seqs: list[torch.Tensor]) -> list[torch.Tensor]:
            return [logits(s).argmax(-1) for s in seqs]

        return cls(facts=model_facts(model), embed=embed_weight(model).float(), norm_weight=g, norm_eps=eps,
                   lm_head=lm_head_weight(model), predictions=predictions, logits=logits)


def open_verifier(spec: Any) -> Verifier:
    """``--model`` (``"default"``, a path, a :class:`~forensics.models.target.Target`, a loaded model or a
    ``(model, tokenizer)`` pair) → a :class:`Verifier`, through the plain-torch Llama when it applies."""
    from forensics.models.target import Target, load_target, resolve_model

    if isinstance(spec, Verifier):
        return spec
    if isinstance(spec, tuple):
        return Verifier.from_model(spec[0])
    if not isinstance(spec, (str, os.PathLike, Target)):
        return Verifier.from_model(spec)
    from forensics.models.target import _LOADED, fits_in_memory

    path = resolve_model(spec.path if isinstance(spec, Target) else spec)
    loaded = next((m for (p, _), (m, _) in _LOADED.items() if isinstance(path, str) and p == os.path.abspath(path)),
                  None)
    if loaded is not None:  # already in memory through transformers (the same bits): no second copy
        return Verifier.from_model(loaded)
    folder = plain_folder(path) if isinstance(path, str) else None
    if folder is not None and not (isinstance(spec, Target) and not fits_in_memory(folder, spec.max_memory)):
        return load_plain(folder)
    return Verifier.from_model(load_target(spec)[0])  # refuses a model over budget in one line


def plain_folder(path: str) -> str | None:
    """The safetensors folder the plain-torch Llama can run for ``path`` (a GGUF with its fp32 cache written,
    or an HF folder), or None when transformers must load it."""
    if os.path.isfile(path) and path.endswith(".gguf"):
        from forensics.models.target import _cache_folder

        folder = _cache_folder(path)
        if not os.path.isfile(os.path.join(folder, "model.safetensors")):
            return None
    elif os.path.isdir(path):
        folder = path
    else:
        return None
    try:
        cfg = _config(folder)
        shards = _shards(folder)
    except ForensicsError:  # transformers gives its own one-line error on such a folder
        return None
    return folder if shards and _unsupported(cfg) is None else None


def _config(folder: str) -> dict:
    from forensics.models.folder import read_config

    return read_config(folder)  # no custom code, every size within forensics.io.limits


def _shards(folder: str) -> list[str]:
    """The weight files as transformers picks them: those of ``model.safetensors.index.json``, else every
    ``*.safetensors`` of the folder (each confined to the folder: :func:`forensics.io.safetensors.shard_files`)."""
    from forensics.io.safetensors import shard_files

    return shard_files(folder)


def _unsupported(cfg: dict) -> str | None:
    """Why the plain replay does not cover this config (None: it does)."""
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    checks = (
        (cfg.get("model_type") == "llama", "model_type is not llama"),
        (cfg.get("architectures") in (None, ["LlamaForCausalLM"]), "architecture is not LlamaForCausalLM"),
        (cfg.get("hidden_act", "silu") == "silu", "activation is not silu"),
        (not cfg.get("attention_bias") and not cfg.get("mlp_bias"), "biases"),
        (isinstance(rope, dict) and (rope.get("rope_type") or rope.get("type") or "default") == "default",
         "RoPE type is not default"),
        (cfg.get("pretraining_tp", 1) == 1, "pretraining_tp"),
        (all(isinstance(cfg.get(k), int) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                                    "vocab_size")), "sizes"),
    )
    return next((why for ok, why in checks if not ok), None)


def load_plain(folder: str) -> Verifier:
    """Load a Llama safetensors folder as a plain-torch :class:`Verifier` (fp32 weights; memoised per process)."""
    if folder in _PLAIN:
        return _PLAIN[folder]
    from forensics.io.safetensors import SafetensorsFile

    cfg = _config(folder)
    w: dict[str, torch.Tensor] = {}
    shards = _shards(folder)
    for p in shards:
        sf = SafetensorsFile(p)  # validated header; tensors read by file reads (a truncated shard: one line)
        w.update({k: sf.get(k) for k in sf.keys()})
    w = {k: v.float() if v.is_floating_point() else v for k, v in w.items()}
    L, H, heads = int(cfg["num_hidden_layers"]), int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    tied = cfg.get("tie_word_embeddings") or "lm_head.weight" not in w  # transformers' tie_weights()
    if tied and _PREFIX + "embed_tokens.weight" in w:
        w["lm_head.weight"] = w[_PREFIX + "embed_tokens.weight"]
    need = [_PREFIX + "embed_tokens.weight", _PREFIX + "norm.weight", "lm_head.weight"] + [
        f"{_PREFIX}layers.{i}.{n}.weight" for i in range(L) for n in _LAYER_TENSORS]
    missing = [n for n in need if w.get(n) is None]
    if missing:
        raise ForensicsError(f"not a Llama checkpoint: tensor {missing[0]!r} missing ({len(missing)} in all)",
                             path=folder)
    eps = float(cfg.get("rms_norm_eps", 1e-6))
    model = _PlainLlama(w=w, num_layers=L, head_dim=int(cfg.get("head_dim") or H // heads), eps=eps,
                        rope_theta=float((cfg.get("rope_parameters") or {}).get("rope_theta")
                                         or cfg.get("rope_theta", 10000.0)))
    facts = {"architecture": "LlamaForCausalLM", "model_type": "llama", "num_layers": L, "hidden_size": H,
             "vocab_size": int(cfg["vocab_size"]), "rms_norm_eps": eps,
             "tie_word_embeddings": bool(cfg.get("tie_word_embeddings", False)), "dtype": "float32"}
    _PLAIN[folder] = Verifier(facts=facts, embed=w[_PREFIX + "embed_tokens.weight"], norm_eps=eps,
                              norm_weight=w[_PREFIX + "norm.weight"], lm_head=w["lm_head.weight"],
                              predictions=_cached_predictions(shards, model.predictions, int(cfg["vocab_size"])),
                              logits=model.logits,
                              plain=True)
    return _PLAIN[folder]


PREDICTIONS_DIR = "predictions"  # under the hsf cache: the verifier's greedy tokens per (weights, id sequence)
MAX_CACHED_PREDICTIONS = 20_000  # files; past it nothing more is written (each is T int32: a few KB)


def _cached_predictions(shards: list[str], compute: Callable[[list[torch.Tensor]], list[torch.Tensor]], vocab: int
                        ) -> Callable[[list[torch.Tensor]], list[torch.Tensor]]:
    """``compute`` with a disk cache: the argmax tokens of a sequence are a function of the weights and the ids
    alone, so a probe run again on the same capture (another draft, engine or ``--steps``) skips the forward.
    Keyed by the shard files (path, size, mtime) and the ids' bytes; kept under ``HSF_CACHE``, never in the
    model folder; a cache file that does not read back as ``T`` token ids below ``vocab`` is recomputed."""
    import hashlib

    import numpy as np
    import torch

    from forensics.models.target import CACHE_DIR

    base = hashlib.sha256()
    for p in shards:
        st = os.stat(p)
        base.update(f"{os.path.abspath(p)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    root = os.path.join(CACHE_DIR, PREDICTIONS_DIR)

    def path_of(ids: torch.Tensor) -> str:
        h = base.copy()
        h.update(ids.to(torch.int64).numpy().tobytes())
        key = h.hexdigest()
        return os.path.join(root, key[:2], key + ".npy")

    def read(path: str, n: int) -> torch.Tensor | None:
        try:
            a = np.load(path, allow_pickle=False)
        except (OSError, ValueError):
            return None
        ok = a.dtype == np.int32 and a.shape == (n,) and (n == 0 or (int(a.min()) >= 0 and int(a.max()) < vocab))
        return torch.from_numpy(a.astype(np.int64)) if ok else None

    def write(path: str, top: torch.Tensor) -> None:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                np.save(f, top.to(torch.int32).numpy(), allow_pickle=False)
            os.replace(tmp, path)
        except OSError:  # the cache is an optimisation only (read-only home, full disk)
            return

    def predictions(seqs: list[torch.Tensor]) -> list[torch.Tensor]:
        flat = [s.reshape(-1) for s in seqs]
        paths = [path_of(s) for s in flat]
        got = [read(p, int(s.numel())) for p, s in zip(paths, flat, strict=True)]
        todo = [n for n, g in enumerate(got) if g is None]
        if todo:
            room = MAX_CACHED_PREDICTIONS - sum(len(fs) for _, _, fs in os.walk(root))
            for n, top in zip(todo, compute([flat[n] for n in todo]), strict=True):
                got[n] = top
                if room > 0:
                    write(paths[n], top)
                    room -= 1
        return [g for g in got if g is not None]

    return predictions


def _packs(lens: list[int], budget: int) -> list[list[int]]:
    """Consecutive sequence indices grouped to at most ``budget`` rows each; 1-token sequences alone."""
    out: list[list[int]] = []
    rows = 0
    for n, k in enumerate(lens):
        if not out or k == 1 or lens[out[-1][-1]] == 1 or rows + k > budget:
            out.append([])
            rows = 0
        out[-1].append(n)
        rows += k
    return out


def row_blocks(rows: int, size: int) -> list[slice]:
    """Slices of at most ``size`` rows (``size + 1`` for the last) covering ``rows``, never a 1-row block
    when ``rows`` > 1: a 1-row product takes another kernel (sgemv) than the rows of a larger one."""
    out = [slice(a, min(a + size, rows)) for a in range(0, rows, size)]
    if len(out) > 1 and out[-1].stop - out[-1].start == 1:
        out[-2:] = [slice(out[-2].start, rows)]
    return out


_LAYER_TENSORS = ("input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                  "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


@dataclass
class _PlainLlama:
    """transformers' LlamaForCausalLM forward (sdpa, one unpadded sequence) in plain torch ops."""

    w: dict = field(repr=False)
    num_layers: int
    head_dim: int
    eps: float
    rope_theta: float
    _w1: dict | None = field(default=None, repr=False)

    def _mats(self, rows: int) -> dict:
        """The weights for a ``rows``-row product. sgemm packs its operands into aligned panels, so with ≥ 2
        rows the memory-mapped safetensors (8-byte aligned) give the bits of transformers' freshly allocated
        weights; a 1-row product runs sgemv straight from memory, whose summation order follows the 64-byte
        alignment (measured: logits 2.9e-6 apart): aligned copies, made on first use (~1 s for SmolLM2)."""
        if rows > 1:
            return self.w
        if self._w1 is None:
            self._w1 = {k: v.clone() for k, v in self.w.items()}
        return self._w1

    def _rms(self, x: torch.Tensor, name: str) -> torch.Tensor:
        import torch

        h = x.to(torch.float32)  # LlamaRMSNorm.forward
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.w[name] * h

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        """``[T, V]`` logits of one 1-D id sequence (what ``LlamaForCausalLM(...).logits[0]`` holds)."""
        import torch
        from torch.nn import functional as F

        with torch.inference_mode():
            h = self.hidden([ids])
            return F.linear(h, self._mats(int(h.shape[0]))["lm_head.weight"])

    def predictions(self, seqs: list[torch.Tensor]) -> list[torch.Tensor]:
        """The argmax token ``[T]`` at every position of each 1-D id sequence. Sequences are packed into
        forwards of at most ``PACK_TOKENS`` rows (a 1-token sequence runs alone, as transformers runs it:
        a 1-row product is another kernel); ``lm_head`` runs over the packed rows, ``HEAD_ROWS`` at a time,
        so its weight is read once per block rather than once per sequence."""
        import torch
        from torch.nn import functional as F

        flat = [s.reshape(-1) for s in seqs]
        out: list[torch.Tensor] = []
        for pack in _packs([int(s.numel()) for s in flat], PACK_TOKENS):
            h = self.hidden([flat[n] for n in pack])
            with torch.inference_mode():
                top = torch.cat([F.linear(h[b], self._mats(b.stop - b.start)["lm_head.weight"]).argmax(-1)
                                 for b in row_blocks(int(h.shape[0]), HEAD_ROWS)])
            out += list(top.split([int(flat[n].numel()) for n in pack]))
        return out

    def hidden(self, seqs: list[torch.Tensor]) -> torch.Tensor:
        """The final-norm output ``[ΣT, H]`` (``lm_head``'s input) of the sequences, run as one packed batch.

        Every op but attention acts row by row, so the rows of several sequences are stacked into one
        ``[1, ΣT, H]`` batch (one matmul per weight instead of one per sequence) and attention runs per
        sequence on its own slice, with positions restarting at 0: each sequence gets the bits it gets alone.
        """
        import torch
        from torch.nn import functional as F

        lens = [int(s.numel()) for s in seqs]
        w, hd, P = self._mats(sum(lens)), self.head_dim, _PREFIX
        ids = torch.cat([s.reshape(-1) for s in seqs]).reshape(1, -1)
        with torch.inference_mode():
            x = F.embedding(ids, w[P + "embed_tokens.weight"])
            # LlamaRotaryEmbedding.compute_default_rope_parameters + forward, fp32 throughout
            inv_freq = 1.0 / (self.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.int64).to(torch.float) / hd))
            pos = torch.cat([torch.arange(n) for n in lens])
            freqs = pos[None, :, None].float() * inv_freq.to(torch.float)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = (emb.cos() * 1.0)[:, None], (emb.sin() * 1.0)[:, None]

            def rope(t: torch.Tensor) -> torch.Tensor:
                half = t.shape[-1] // 2
                return (t * cos) + (torch.cat((-t[..., half:], t[..., :half]), dim=-1) * sin)

            def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
                gqa = {"enable_gqa": True} if q.shape[1] != k.shape[1] else {}
                parts, a = [], 0
                for n in lens:
                    o = F.scaled_dot_product_attention(q[:, :, a:a + n], k[:, :, a:a + n], v[:, :, a:a + n],
                                                       attn_mask=None, dropout_p=0.0, scale=hd ** -0.5,
                                                       is_causal=n > 1, **gqa)
                    parts.append(o.reshape(1, -1, n, hd).transpose(1, 2))
                    a += n
                return torch.cat(parts, dim=1).reshape(1, a, -1)

            T = int(ids.shape[1])
            for i in range(self.num_layers):
                p = f"{P}layers.{i}."
                residual = x
                h = self._rms(x, p + "input_layernorm.weight")
                q = F.linear(h, w[p + "self_attn.q_proj.weight"]).view(1, T, -1, hd).transpose(1, 2)
                k = F.linear(h, w[p + "self_attn.k_proj.weight"]).view(1, T, -1, hd).transpose(1, 2)
                v = F.linear(h, w[p + "self_attn.v_proj.weight"]).view(1, T, -1, hd).transpose(1, 2)
                x = residual + F.linear(attention(rope(q), rope(k), v), w[p + "self_attn.o_proj.weight"])
                residual = x
                h = self._rms(x, p + "post_attention_layernorm.weight")
                g = F.silu(F.linear(h, w[p + "mlp.gate_proj.weight"]))
                x = residual + F.linear(g * F.linear(h, w[p + "mlp.up_proj.weight"]), w[p + "mlp.down_proj.weight"])
            return self._rms(x, P + "norm.weight")[0]
