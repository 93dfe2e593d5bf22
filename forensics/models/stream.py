"""Run a target model one decoder block at a time from its safetensors shards, in bounded memory.

``LayerStream(folder)`` reads ``config.json`` and the shard headers (never a whole shard); ``states(ids)``
yields ``(r, state)`` for r = 0, 1, …, L and then ``"final_post"``, holding one block's weights at a time:

* r = 0: the rows of ``embed_tokens.weight`` for the sample's ids, read by file reads
  (``forensics.io.safetensors.read_rows``).
* r = k + 1: block k built from the config with transformers' own decoder-layer class (on the ``meta``
  device, then filled with ``load_state_dict(assign=True)`` from that block's tensors only), run on the
  current states with the very keyword arguments (attention mask, rotary ``position_embeddings``,
  ``position_ids``) that the installed transformers' own model ``forward`` passes to that block: a
  recording stand-in for every block catches them (no hand-written forward).
* MoE blocks: the router runs first; only the experts it picks for these tokens are read, in groups that
  fit the budget, and run with transformers' own experts module over that subset (index remapped; the
  unpicked rows get the expert-parallel sentinel ``num_experts`` that the experts forwards skip).
* ``final_post``: the model's final norm with γ read from the checkpoint. ``top1(rows)`` is the logit lens
  (``lm_head`` read in row blocks, a running argmax; the tied embedding when there is no ``lm_head``).

``stats`` records the shards read and the bytes read from each, blocks run, and seconds per block.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import sys
import time
from collections.abc import Iterator
from typing import Any

from forensics.errors import ForensicsError
from forensics.io import limits
from forensics.layers import FINAL_POST
from forensics.models.folder import build_config, check_ids
from forensics.models.shards import DTYPE_BYTES, ShardReader, StreamStats, current_rss, shard_index

LM_HEAD_BLOCK_BYTES = 64 << 20  # lm_head rows read per block by the logit lens (64 MiB of compute-dtype rows)
EXPERT_GROUP_BYTES = 256 << 20  # routed experts read at once, at most (compute dtype); at least one expert
_EXPERT_KEY = re.compile(r"^(?P<path>.+)\.experts\.(?P<e>\d+)\.(?P<w>w1|w2|w3|gate_proj|up_proj|down_proj)\.weight$")
_GATE, _UP, _DOWN = {"w1", "gate_proj"}, {"w3", "up_proj"}, {"w2", "down_proj"}
_ALIASES = ((".block_sparse_moe.", ".mlp."),)  # Mixtral checkpoint names -> transformers 5 module names


def _torch_dtype(name: str) -> Any:
    import torch

    return {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
            "float16": torch.float16}[name]


def _recorder_class() -> type:
    import torch

    class Recorder(torch.nn.Module):
        """Stand-in for decoder block k while the model's own forward runs: keeps the block's input and
        the arguments the model passes it, returns the input unchanged."""

        def __init__(self, k: int, seen: dict, attention_type: str | None):
            super().__init__()
            self.k, self.seen = k, seen
            if attention_type is not None:
                self.attention_type = attention_type

        def forward(self, hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
            self.seen[self.k] = (hidden_states, args, kwargs)
            return hidden_states

    return Recorder


def _routed_experts_class() -> type:
    import torch

    class RoutedExperts(torch.nn.Module):
        """transformers' experts module run over only the experts the router picked (read on demand)."""

        def __init__(self, inner: Any, fetch: Any, num_experts: int, group: int, on_read: Any):
            super().__init__()
            self.inner, self.fetch, self.total, self.group, self.on_read = inner, fetch, num_experts, group, on_read
            del inner.gate_up_proj, inner.down_proj  # meta placeholders: the picked experts are set per group

        def forward(self, hidden_states: Any, top_k_index: Any, top_k_weights: Any) -> Any:
            picked = sorted(int(e) for e in torch.unique(top_k_index) if 0 <= int(e) < self.total)
            self.on_read(len(picked))
            out = None
            for s in range(0, len(picked), self.group):
                ids = picked[s:s + self.group]
                gate_up, down = self.fetch(ids)
                self.inner.gate_up_proj = torch.nn.Parameter(gate_up, requires_grad=False)
                self.inner.down_proj = torch.nn.Parameter(down, requires_grad=False)
                self.inner.num_experts = len(ids)
                # the experts forwards skip index == num_experts only in expert-parallel mode (transformers
                # integrations/moe.py grouped_mm_experts_forward: the sentinel mask)
                self.inner._is_expert_parallel = len(ids) < len(picked)
                lut = torch.full((self.total + 1,), len(ids), dtype=top_k_index.dtype)  # sentinel: skipped
                lut[torch.tensor(ids)] = torch.arange(len(ids), dtype=top_k_index.dtype)
                part = self.inner(hidden_states, lut[top_k_index], top_k_weights)
                out = part if out is None else out + part
                del self.inner.gate_up_proj, self.inner.down_proj, gate_up, down
            return out if out is not None else torch.zeros_like(hidden_states)

    return RoutedExperts


class LayerStream:
    """A target model as a stream of blocks read from an HF safetensors folder.

    Example:
        >>> s = LayerStream("my-model/")                       # doctest: +SKIP
        >>> for r, h in s.states([1, 2, 3]): ...               # doctest: +SKIP
    """

    def __init__(self, folder: str, compute_dtype: str = "float32", progress: bool = False,
                 max_memory: int | None = None, expert_group_bytes: int = EXPERT_GROUP_BYTES):
        self.folder = os.fspath(folder)
        self.compute_dtype = compute_dtype
        self.dtype = _torch_dtype(compute_dtype)
        self.progress, self.max_memory, self.expert_group_bytes = progress, max_memory, expert_group_bytes
        self._final_norm: Any = None
        self.config = _load_config(self.folder)
        self.model_type = str(getattr(self.config, "model_type", "?"))
        self.num_layers = limits.num_layers(getattr(self.config, "num_hidden_layers", None), self.folder)
        self.hidden_size = limits.hidden_size(getattr(self.config, "hidden_size", None), self.folder)
        self.index = shard_index(self.folder)
        self.stats = StreamStats()
        self._base_cls, self._layer_cls = _classes(self.config, self.folder)
        embed = [n for n in self.index if n.endswith("embed_tokens.weight")]
        if len(embed) != 1:
            raise ForensicsError(f"expected one *embed_tokens.weight tensor in the shards, found {len(embed)}",
                                 path=self.folder)
        self.embed_name = embed[0]
        shape = self.index[self.embed_name].shape
        if len(shape) != 2 or shape[1] != self.hidden_size or shape[0] < 1:
            raise ForensicsError(f"{self.embed_name} has shape {list(shape)} in the shards but config.json says "
                                 f"hidden_size {self.hidden_size}", path=self.folder)
        self.vocab_size = int(shape[0])
        self.prefix = self.embed_name[: -len("embed_tokens.weight")]  # "model." for *ForCausalLM checkpoints
        self.norm_name = self.prefix + "norm.weight"
        if self.norm_name not in self.index:
            raise ForensicsError(f"no final norm weight {self.norm_name!r} in the shards", path=self.folder)
        head = [n for n in self.index if n.endswith("lm_head.weight")]
        self.head_name = head[0] if head else self.embed_name  # tied embeddings: the embedding is the head

    # --- sizes ---------------------------------------------------------------------------------------

    def _itemsize(self) -> int:
        return 4 if self.compute_dtype in ("float32", "fp32") else 2

    def block_names(self, k: int) -> list[str]:
        p = f"{self.prefix}layers.{k}."
        return [n for n in self.index if n.startswith(p)]

    def block_bytes(self, k: int) -> int:
        """Compute-dtype bytes block k holds at once: its dense tensors plus, for MoE, one expert group."""
        dense, expert = 0, 0
        for n in self.block_names(k):
            i = self.index[n]
            b = i.nbytes // DTYPE_BYTES.get(i.dtype, 2) * self._itemsize()
            if _EXPERT_KEY.match(n):
                expert = max(expert, 3 * b)  # gate + up + down of one expert
            else:
                dense += b
        return dense + (max(expert, self.expert_group_bytes // max(1, expert) * expert) if expert else 0)

    def check_budget(self, tokens: int) -> int:
        """Raise when one block (+ the largest raw tensor read, + states) would push this process over
        ``max_memory``; return the estimated peak in bytes."""
        block = max((self.block_bytes(k) for k in range(self.num_layers)), default=0)
        raw = max((i.nbytes for n, i in self.index.items() if n.startswith(self.prefix + "layers.")), default=0)
        states = 4 * tokens * self.hidden_size * 8  # a block's activations, generously
        head = min(LM_HEAD_BLOCK_BYTES, self.index[self.head_name].nbytes // DTYPE_BYTES.get(
            self.index[self.head_name].dtype, 2) * self._itemsize())  # the logit lens' lm_head rows at once
        block = max(block, head)
        need = current_rss() + block + raw + states
        if self.max_memory is not None and need > self.max_memory:
            raise ForensicsError(f"streaming {self.model_type} needs about {need / 1e9:.2f} GB (this process "
                                 f"{current_rss() / 1e9:.2f} GB + one block {block / 1e9:.2f} GB in "
                                 f"{self.compute_dtype} + the largest tensor {raw / 1e9:.2f} GB): above "
                                 f"--max-memory {self.max_memory / 1e9:.2f} GB", path=self.folder)
        return need

    def weights_bytes(self) -> int:
        """Bytes of every tensor on disk (the whole checkpoint)."""
        return sum(i.nbytes for i in self.index.values())

    # --- the stream ----------------------------------------------------------------------------------

    def _skeleton(self, n_rows: int) -> tuple[Any, dict]:
        """The model's base class with no blocks and an ``n_rows``-row embedding; returns (module, seen)."""
        import torch

        small = copy.deepcopy(self.config)
        small.vocab_size = n_rows
        if hasattr(small, "pad_token_id"):
            small.pad_token_id = None
        small.num_hidden_layers = 0  # layer_types stay whole: rotary and masks are built per layer type
        try:
            with _quiet():
                skel = self._base_cls(small)
        except Exception as e:  # noqa: BLE001 - transformers raises many types
            raise ForensicsError(f"transformers cannot build {self._base_cls.__name__} for model_type "
                                 f"{self.model_type!r}: {type(e).__name__}: {str(e).splitlines()[0][:200]}",
                                 path=self.folder) from None
        skel.config = self.config
        for attr in ("_attn_implementation", "_experts_implementation"):
            if hasattr(small, attr):
                with contextlib.suppress(AttributeError, ValueError, TypeError):
                    setattr(self.config, attr, getattr(small, attr))
        seen: dict = {}
        types = getattr(self.config, "layer_types", None)
        rec = _recorder_class()
        skel.layers = torch.nn.ModuleList(rec(k, seen, types[k] if types else None) for k in range(self.num_layers))
        skel.to(self.dtype).eval()
        return skel, seen

    def _block(self, k: int, reader: ShardReader) -> Any:
        """Decoder block k on CPU in the compute dtype with its tensors (routed experts: on demand)."""
        import torch

        with torch.device("meta"), _quiet():
            block = self._layer_cls(self.config, k)
        want = dict(block.state_dict(keep_vars=True))
        p = f"{self.prefix}layers.{k}."
        names = self.block_names(k)
        experts: dict[str, dict[int, dict[str, str]]] = {}
        sd = {}
        for n in names:
            local = n[len(p):]
            for a, b in _ALIASES:
                alias = ("." + local).replace(a, b, 1)[1:]
                if alias != local and not any(w.startswith(local.split(".")[0] + ".") for w in want):
                    local = alias
            m = _EXPERT_KEY.match(local)
            if m and m["path"] + ".experts.gate_up_proj" in want:
                experts.setdefault(m["path"] + ".experts", {}).setdefault(int(m["e"]), {})[m["w"]] = n
                continue
            if local not in want:
                raise ForensicsError(f"checkpoint tensor {n!r} has no place in transformers' "
                                     f"{self._layer_cls.__name__} (model_type {self.model_type!r})", path=self.folder)
            sd[local] = reader.tensor(n, self.dtype)
        for path, per in experts.items():
            self._route_experts(k, block, path, per, want, reader)
        wrong = [(n, list(t.shape), list(want[n].shape)) for n, t in sd.items() if t.shape != want[n].shape]
        if wrong:
            n, got, exp = wrong[0]
            raise ForensicsError(f"block {k}: checkpoint tensor {p + n!r} has shape {got} but config.json makes it "
                                 f"{exp} (model_type {self.model_type!r})", path=self.folder)
        missing = sorted(set(want) - set(sd))
        if missing:
            raise ForensicsError(f"block {k}: the shards lack {missing[:3]} (model_type {self.model_type!r})",
                                 path=self.folder)
        block.load_state_dict(sd, strict=False, assign=True)
        left = [n for n, t in list(block.named_parameters()) + list(block.named_buffers()) if t.is_meta]
        if left:
            raise ForensicsError(f"block {k}: {left[:3]} are not in the checkpoint (model_type "
                                 f"{self.model_type!r})", path=self.folder)
        return block.eval()

    def _route_experts(self, k: int, block: Any, path: str, per: dict[int, dict[str, str]], want: dict[str, Any],
                       reader: ShardReader) -> None:
        """Swap block k's experts module at ``path`` for one that reads each routed expert from the shards on demand
        (``per``: expert → projection → checkpoint name); its stacked weights leave ``want``."""
        mod = block.get_submodule(path)
        if getattr(mod, "has_bias", False) or getattr(mod, "is_transposed", False):
            raise ForensicsError(f"{type(mod).__name__} with biases or transposed weights cannot be streamed "
                                 f"yet (model_type {self.model_type!r})", path=self.folder)
        total = int(mod.num_experts)
        if sorted(per) != list(range(total)) or any(len(v) != 3 for v in per.values()):
            raise ForensicsError(f"block {k}: the shards hold {len(per)} experts at {path} with missing "
                                 f"projections; the config says {total}", path=self.folder)
        fetch = self._expert_fetcher(per, reader)
        one = sum(self.index[n].nbytes // DTYPE_BYTES.get(self.index[n].dtype, 2) for n in per[0].values())
        group = max(1, self.expert_group_bytes // max(1, one * self._itemsize()))
        for leaf in ("gate_up_proj", "down_proj"):
            want.pop(f"{path}.{leaf}", None)
        routed = _routed_experts_class()(mod, fetch, total, group,
                                         lambda n, k=k: self.stats.experts_read.__setitem__(k, n))
        parent, _, leaf = path.rpartition(".")
        setattr(block.get_submodule(parent) if parent else block, leaf, routed)

    def _expert_fetcher(self, per: dict[int, dict[str, str]], reader: ShardReader) -> Any:
        import torch

        def fetch(ids: list[int]) -> tuple[Any, Any]:
            gate_up, down = [], []
            for e in ids:
                w = per[e]
                g = next(reader.tensor(n, self.dtype) for k, n in w.items() if k in _GATE)
                u = next(reader.tensor(n, self.dtype) for k, n in w.items() if k in _UP)
                gate_up.append(torch.cat([g, u], dim=0))
                down.append(next(reader.tensor(n, self.dtype) for k, n in w.items() if k in _DOWN))
            return torch.stack(gate_up), torch.stack(down)

        return fetch

    def states(self, input_ids: Any) -> Iterator[tuple[Any, Any]]:
        """Yield ``(r, [T, H] state)`` for r = 0..L, then ``("final_post", state)``; one block in memory.

        Stop iterating early to skip the deeper blocks (nothing beyond the current block is read).
        """
        import torch

        ids = torch.as_tensor(input_ids, dtype=torch.long).reshape(-1)
        check_ids(ids, self.vocab_size, self.folder)
        self.check_budget(int(ids.numel()))
        uniq, inv = torch.unique(ids, return_inverse=True)
        reader = ShardReader(self.index, self.stats)
        skel, seen = self._skeleton(int(uniq.numel()))
        rows = torch.stack([reader.rows(self.embed_name, int(i), int(i) + 1, self.dtype)[0] for i in uniq.tolist()])
        with torch.no_grad():
            skel.embed_tokens.weight = torch.nn.Parameter(rows, requires_grad=False)
            skel.norm.weight = torch.nn.Parameter(reader.tensor(self.norm_name, self.dtype), requires_grad=False)
            try:
                skel(input_ids=inv.reshape(1, -1), use_cache=False)
            except Exception as e:  # noqa: BLE001
                raise ForensicsError(f"transformers' {type(skel).__name__} forward failed on model_type "
                                     f"{self.model_type!r}: {type(e).__name__}: {str(e).splitlines()[0][:200]}",
                                     path=self.folder) from None
            if sorted(seen) != list(range(self.num_layers)):
                raise ForensicsError(f"{type(skel).__name__} ran {len(seen)} of {self.num_layers} blocks; "
                                     "cannot stream this architecture", path=self.folder)
            h = seen[0][0]
            yield 0, h[0]
            bar = _bar(self.num_layers, self.progress)
            try:
                for k in range(self.num_layers):
                    t0 = time.perf_counter()
                    block = self._block(k, reader)
                    _, args, kwargs = seen[k]
                    out = block(h, *args, **kwargs)
                    h = out[0] if isinstance(out, tuple) else out
                    del block
                    reader.close()
                    self.stats.block_seconds.append(time.perf_counter() - t0)
                    if bar is not None:
                        bar.update(1)
                    yield k + 1, h[0]
            finally:
                if bar is not None:
                    bar.close()
            self._final_norm = skel.norm
            yield FINAL_POST, skel.norm(h)[0]

    def top1(self, rows: Any) -> Any:
        """Top-1 token of ``lm_head(rows)`` for ``[N, H]`` rows (already normed): ``lm_head`` in row blocks."""
        import torch

        info = self.index[self.head_name]
        V = int(info.shape[0])
        step = max(1, LM_HEAD_BLOCK_BYTES // max(1, self.hidden_size * self._itemsize()))
        reader = ShardReader(self.index, self.stats)
        x = rows.to(self.dtype)
        best = torch.full((int(x.shape[0]),), -float("inf"), dtype=torch.float64)
        arg = torch.zeros(int(x.shape[0]), dtype=torch.long)
        with torch.no_grad():
            for s in range(0, V, step):
                w = reader.rows(self.head_name, s, min(V, s + step), self.dtype)
                v, i = (x @ w.T).max(-1)
                better = v.double() > best
                best = torch.where(better, v.double(), best)
                arg = torch.where(better, i + s, arg)
        reader.close()
        return arg

    def norm(self, rows: Any) -> Any:
        """The final norm of ``rows`` (a one-off module; γ read again, it is H values)."""
        import torch

        if self._final_norm is None:
            skel, _ = self._skeleton(1)
            with torch.no_grad():
                skel.norm.weight = torch.nn.Parameter(ShardReader(self.index, self.stats).tensor(
                    self.norm_name, self.dtype), requires_grad=False)
            self._final_norm = skel.norm
        with torch.no_grad():
            return self._final_norm(rows.to(self.dtype))


def _load_config(folder: str) -> Any:
    """The folder's transformers config, built from its checked ``config.json`` (no code of the folder runs)."""
    return build_config(folder)


def _classes(config: Any, folder: str) -> tuple[Any, Any]:
    """(base model class, decoder-layer class) for ``config`` from the installed transformers."""
    import transformers
    from transformers import AutoModel

    mt = getattr(config, "model_type", "?")
    base: Any
    try:
        base = AutoModel._model_mapping[type(config)]
    except Exception:  # noqa: BLE001
        raise ForensicsError(f"the installed transformers {transformers.__version__} has no model class for "
                             f"model_type {mt!r}", path=folder) from None
    mod = sys.modules[base.__module__]
    names = [n for n in (getattr(base, "_no_split_modules", None) or []) if n.endswith("DecoderLayer")]
    layer = next((getattr(mod, n) for n in names if hasattr(mod, n)), None)
    if layer is None or not hasattr(base, "_no_split_modules"):
        raise ForensicsError(f"cannot find the decoder-layer class of {base.__name__} (model_type {mt!r})",
                             path=folder)
    return base, layer


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def _bar(n: int, progress: bool) -> Any:
    if not progress or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=n, desc="hsf stream", unit="block", file=sys.stderr, leave=False)
