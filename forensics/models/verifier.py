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

import hashlib
import io
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from forensics.errors import ForensicsError
from forensics.io.safetensors import SafetensorsFile, shard_files
from forensics.io.tempfiles import clean_stale, temp_path
from forensics.models import target
from forensics.models.folder import read_config
from forensics.models.target import (
    _LOADED,
    Target,
    _cache_folder,
    embed_weight,
    final_norm,
    lm_head_weight,
    load_target,
    model_facts,
    resolve_model,
)

if TYPE_CHECKING:  # pragma: no cover
    import torch

_PLAIN: dict[str, tuple[tuple, Verifier]] = {}  # plain-torch verifiers loaded in this process: folder -> (files, v)
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
    if isinstance(spec, Verifier):
        return spec
    if isinstance(spec, tuple):
        return Verifier.from_model(spec[0])
    if not isinstance(spec, (str, os.PathLike, Target)):
        return Verifier.from_model(spec)

    path = resolve_model(spec.path if isinstance(spec, Target) else spec)
    loaded = next((m for (p, _), (m, _) in _LOADED.items() if isinstance(path, str) and p == os.path.abspath(path)),
                  None)
    if loaded is not None:  # already in memory through transformers (the same bits): no second copy
        return Verifier.from_model(loaded)
    folder = plain_folder(path) if isinstance(path, str) else None
    if folder is not None and not (isinstance(spec, Target) and not target.fits_in_memory(folder, spec.max_memory)):
        return load_plain(folder)
    return Verifier.from_model(load_target(spec)[0])  # refuses a model over budget in one line


def plain_folder(path: str) -> str | None:
    """The safetensors folder the plain-torch Llama can run for ``path`` (a GGUF with its fp32 cache written,
    or an HF folder), or None when transformers must load it."""
    if os.path.isfile(path) and path.endswith(".gguf"):
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
    return read_config(folder)  # no custom code, every size within forensics.io.limits


def _shards(folder: str) -> list[str]:
    """The weight files as transformers picks them: those of ``model.safetensors.index.json``, else every
    ``*.safetensors`` of the folder (each confined to the folder: :func:`forensics.io.safetensors.shard_files`)."""
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
    shards = _shards(folder)
    files = _file_stamps([os.path.join(folder, "config.json"), *shards])
    if folder in _PLAIN and _PLAIN[folder][0] == files:  # the same files as when it was loaded: no second load
        return _PLAIN[folder][1]
    cfg = _config(folder)
    w: dict[str, torch.Tensor] = {}
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
    v = Verifier(facts=facts, embed=w[_PREFIX + "embed_tokens.weight"], norm_eps=eps,
                 norm_weight=w[_PREFIX + "norm.weight"], lm_head=w["lm_head.weight"],
                 predictions=_cached_predictions(lambda: weights_digest(cfg, w), model.predictions,
                                                 int(cfg["vocab_size"])),
                 logits=model.logits, plain=True)
    _PLAIN[folder] = (files, v)
    return v


def _file_stamps(paths: list[str]) -> tuple:
    """(path, inode, size, mtime, ctime) of each file: whether a memoised load still describes the folder (ctime
    too: ``cp -p`` over a file keeps its inode, size and mtime, and nothing can set a ctime back)."""
    out: list[tuple] = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append((p, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        except OSError:
            out.append((p, None))
    return tuple(out)


PREDICTIONS_DIR = "predictions"  # under the hsf cache: the verifier's greedy tokens per (weights, id sequence)
MAX_CACHED_PREDICTIONS = 20_000  # files; past it nothing more is written (each is T int32: a few KB)
NPY_HEADER_MAX = 4096  # bytes an entry may hold beyond its T int32 ids (numpy's header is 128)


def weights_digest(cfg: dict, weights: dict[str, torch.Tensor]) -> str:
    """SHA-256 of the model's content: its checked config and every weight tensor's name, dtype, shape and bytes
    (in name order). The predictions cache is keyed by it, never by file paths, sizes or mtimes: an edited
    ``config.json`` or another checkpoint of the same size copied with ``cp -p`` is another model."""
    import torch

    h = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode())
    for name in sorted(weights):
        t = weights[name].detach().contiguous()
        h.update(f"\0{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().data if t.numel() else b"")
    return h.hexdigest()


def _cached_predictions(key: Callable[[], str], compute: Callable[[list[torch.Tensor]], list[torch.Tensor]],
                        vocab: int) -> Callable[[list[torch.Tensor]], list[torch.Tensor]]:
    """``compute`` with a disk cache: the argmax tokens of a sequence are a function of the weights and the ids
    alone, so a probe run again on the same capture (another draft, engine or ``--steps``) skips the forward.

    Keyed by the model's content (``key()``: :func:`weights_digest`, computed on first use) and the ids' bytes;
    kept under ``HSF_CACHE``, never in the model folder. Entries are written to a temporary file renamed into
    place (two probes at once never see half an entry) and read defensively: only a regular file (a FIFO is never
    opened for a blocking read), at most ``4 T + NPY_HEADER_MAX`` bytes, a plain ``.npy`` (no pickle, no object
    array, no ``.npz``) of exactly ``T`` int32 ids below ``vocab``. Anything else, and any error reading or
    writing (a read-only or full cache, a zero-length entry left by a crash), is a cache miss: recomputed."""
    import torch

    root = os.path.join(target.CACHE_DIR, PREDICTIONS_DIR)  # read at call time (HSF_CACHE, tests)
    memo: list[str] = []

    def path_of(ids: torch.Tensor) -> str:
        if not memo:
            memo.append(key())
        h = hashlib.sha256(memo[0].encode())
        h.update(ids.to(torch.int64).numpy().tobytes())
        k = h.hexdigest()
        return os.path.join(root, k[:2], k + ".npy")

    def predictions(seqs: list[torch.Tensor]) -> list[torch.Tensor]:
        flat = [s.reshape(-1) for s in seqs]
        paths = [path_of(s) for s in flat]
        got = [read_entry(p, int(s.numel()), vocab) for p, s in zip(paths, flat, strict=True)]
        todo = [n for n, g in enumerate(got) if g is None]
        if todo:
            room = MAX_CACHED_PREDICTIONS - sum(len(fs) for _, _, fs in os.walk(root))
            for n, top in zip(todo, compute([flat[n] for n in todo]), strict=True):
                got[n] = top
                if room > 0:
                    write_entry(paths[n], top)
                    room -= 1
        return [g for g in got if g is not None]

    return predictions


def read_entry(path: str, n: int, vocab: int) -> torch.Tensor | None:
    """A cached prediction of ``n`` token ids, or None for anything that is not exactly that (see
    :func:`_cached_predictions`)."""
    import torch

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not 0 < st.st_size <= 4 * n + NPY_HEADER_MAX:
            return None
        data = os.pread(fd, st.st_size, 0)
        a = np.load(io.BytesIO(data), allow_pickle=False)
    except Exception:  # noqa: BLE001 - a damaged or crafted entry is a miss, whatever numpy makes of it
        return None
    finally:
        os.close(fd)
    ok = isinstance(a, np.ndarray) and a.dtype == np.int32 and a.shape == (n,) and \
        (n == 0 or (int(a.min()) >= 0 and int(a.max()) < vocab))
    return torch.from_numpy(a.astype(np.int64)) if ok else None


def write_entry(path: str, top: torch.Tensor) -> None:
    """Write one entry atomically (a temporary file in the same folder, renamed); any failure writes nothing and
    leaves no temporary file."""
    import torch

    tmp = None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        clean_stale(path)
        tmp = temp_path(path)
        with open(tmp, "xb") as f:
            np.save(f, top.to(torch.int32).numpy(), allow_pickle=False)
        os.replace(tmp, path)
        tmp = None
    except (OSError, ValueError):  # the cache is an optimisation only (read-only home, full disk, a FIFO there)
        return
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


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

    def _rope_tables(self, lens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """The rotary ``(cos, sin)`` tables ``[1, 1, ΣT, head_dim]`` of packed sequences, positions restarting at 0.

        LlamaRotaryEmbedding.compute_default_rope_parameters + forward, fp32 throughout.
        """
        import torch

        hd = self.head_dim
        inv_freq = 1.0 / (self.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.int64).to(torch.float) / hd))
        pos = torch.cat([torch.arange(n) for n in lens])
        freqs = pos[None, :, None].float() * inv_freq.to(torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * 1.0)[:, None], (emb.sin() * 1.0)[:, None]

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
            cos, sin = self._rope_tables(lens)

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
