"""A model folder read without running anything from it: its ``config.json`` checked, custom code refused.

A model folder is as untrusted as a dataset. transformers runs a folder's own Python when its ``config.json`` (or
``tokenizer_config.json``) has an ``auto_map`` and ``trust_remote_code`` is not False, and when it is None it asks
on stdin (``resolve_trust_remote_code`` calls ``input()`` on any stdin, not only a terminal). Here:

* :func:`read_config` reads ``config.json`` within :data:`~forensics.io.formats._io.MAX_JSON_BYTES`, refuses any
  remote-code hook (:data:`REMOTE_CODE_KEYS`) before transformers sees the folder, and bounds every size field
  (:func:`forensics.io.limits.model_config`);
* :func:`build_config` makes the transformers config from that checked dict with the installed library's own
  class for its ``model_type`` (``CONFIG_MAPPING[model_type].from_dict``), never ``from_pretrained`` on the folder;
* :data:`LOCAL_ONLY` is what every ``from_pretrained`` of this package passes: ``trust_remote_code=False``
  (transformers then raises instead of asking) and ``local_files_only=True`` (never the network).
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any

from forensics.errors import ForensicsError, ModelMismatch, escape
from forensics.io.formats._io import load_json
from forensics.io.limits import MAX_TOKENIZER_FILE_BYTES, model_config
from forensics.io.safetensors import refuse_special_files

LOCAL_ONLY = {"trust_remote_code": False, "local_files_only": True}
# keys through which a config asks transformers to import the folder's own modules
REMOTE_CODE_KEYS = ("auto_map", "custom_pipelines")
CODE_CONFIGS = ("config.json", "tokenizer_config.json", "processor_config.json", "preprocessor_config.json",
                "generation_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
                   "tokenizer.model", "added_tokens.json", "chat_template.jinja")


def refuse_custom_code(folder: str) -> None:
    """A one-line error when any config of ``folder`` asks transformers to run code shipped in it (or the folder
    holds a FIFO or device named like a model file: :func:`refuse_special_files`)."""
    refuse_special_files(folder)
    for name in CODE_CONFIGS:
        p = os.path.join(folder, name)
        if not os.path.isfile(p):
            continue
        doc = load_json(p, name)
        hooks = [k for k in REMOTE_CODE_KEYS if isinstance(doc, dict) and doc.get(k)]
        if hooks:
            raise ForensicsError(f"{name} asks to run Python code shipped in the model folder ({hooks[0]}); "
                                 "refused: hsf never runs a model folder's code", path=p)


def check_tokenizer_files(folder: str) -> None:
    """A one-line error when a tokenizer file of ``folder`` exceeds ``MAX_TOKENIZER_FILE_BYTES`` (the
    ``tokenizers`` library reads a file whole, with no limit of its own)."""
    refuse_special_files(folder)
    for name in TOKENIZER_FILES:
        p = os.path.join(folder, name)
        if os.path.isfile(p) and os.path.getsize(p) > MAX_TOKENIZER_FILE_BYTES:
            raise ForensicsError(f"tokenizer file of {os.path.getsize(p)} bytes is larger than a tokenizer can be "
                                 f"(limit {MAX_TOKENIZER_FILE_BYTES}); not read", path=p)


def read_config(folder: str) -> dict:
    """``config.json`` of ``folder`` parsed and checked (size, depth, no custom code, sizes within limits)."""
    path = os.path.join(folder, "config.json")
    refuse_custom_code(folder)  # FIFOs and devices first: config.json itself may be one
    if not os.path.isfile(path):
        raise ForensicsError("no config.json in the model folder", path=folder)
    cfg = model_config(load_json(path, "config.json"), path)
    mt = cfg.get("model_type")
    if not isinstance(mt, str) or not mt:
        raise ForensicsError(f"config.json has model_type {escape(repr(mt))[:60]}; expected a name such as "
                             "'llama'", path=path)
    return cfg


def build_config(folder: str, cfg: dict | None = None) -> Any:
    """The transformers config of ``folder`` built from its checked ``config.json`` by the installed library's
    class for that ``model_type``; nothing of the folder is imported."""
    cfg = read_config(folder) if cfg is None else cfg
    path = os.path.join(folder, "config.json")
    import transformers
    from transformers import CONFIG_MAPPING

    mt = cfg["model_type"]
    try:
        cls = CONFIG_MAPPING[mt]
    except Exception:  # noqa: BLE001 - KeyError / ValueError by version
        raise ForensicsError(f"the installed transformers {transformers.__version__} has no config class for "
                             f"model_type {escape(repr(mt))[:60]}", path=path) from None
    try:
        with quiet():
            return cls.from_dict({k: v for k, v in cfg.items() if k not in REMOTE_CODE_KEYS})
    except Exception as e:  # noqa: BLE001 - a config class validates its fields with many exception types
        raise ForensicsError(f"transformers cannot build a {cls.__name__} from config.json: {type(e).__name__}: "
                             f"{str(e).splitlines()[0][:200] if str(e) else ''}", path=path) from None


class quiet:
    """transformers' logging at error level and its progress bars off, restored on exit: its own bars and the
    plain ``tqdm`` bar of its GGUF reader ("Converting and de-quantizing GGUF tensors"), which the switch
    ``disable_progress_bar`` does not reach."""

    GGUF_MODULE = "transformers.modeling_gguf_pytorch_utils"

    def __enter__(self) -> quiet:
        from transformers.utils import logging as hf_logging

        self._level = hf_logging.get_verbosity()
        self._bar = hf_logging.is_progress_bar_enabled()
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        self._gguf: Any = None
        self._tqdm: Any = None
        try:
            self._gguf = importlib.import_module(self.GGUF_MODULE)
            self._tqdm = self._gguf.tqdm
            self._gguf.tqdm = functools.partial(self._tqdm, disable=True)
        except (ImportError, AttributeError):  # another transformers layout: nothing to silence there
            self._gguf = None
        return self

    def __exit__(self, *exc: Any) -> None:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity(self._level)
        if self._bar:
            hf_logging.enable_progress_bar()
        if self._gguf is not None:
            self._gguf.tqdm = self._tqdm


def check_ids(ids: Any, vocab_size: int, path: str | None = None, model: str | None = None) -> None:
    """A one-line error when a token id lies outside ``0 <= id < vocab_size``, checked before any embedding
    lookup (a negative id would otherwise index from the end of the table, a large one raise IndexError).

    Example:
        >>> check_ids([5, 299], 300)
        >>> check_ids([5, -7], 300, "model/")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        forensics.errors.ModelMismatch: model/: input_ids hold 1 id outside the model's vocabulary 0..299 (first: ...
    """
    import torch

    t = torch.as_tensor(ids).reshape(-1)
    if t.numel() == 0:
        return
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise ForensicsError(f"input_ids are {str(t.dtype).replace('torch.', '')}, not integers", path=path)
    bad = (t < 0) | (t >= int(vocab_size))
    n = int(bad.sum())
    if n:
        i = int(bad.nonzero()[0, 0])
        of = f" of {model}" if model else ""
        raise ModelMismatch(f"input_ids hold {n} id{'s' if n > 1 else ''} outside the model's vocabulary "
                             f"0..{int(vocab_size) - 1}{of} (first: {int(t[i])} at position {i}); exact mode needs "
                             "the model the ids were tokenized for", path=path)
