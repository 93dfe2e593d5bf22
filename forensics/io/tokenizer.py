"""A capture's tokenizer: found next to the data, loaded from that folder's files only, never running code.

A dataset is untrusted: its ``capture.json`` may name any folder, and a tokenizer folder may ship Python
(``tokenizer_config.json`` ``auto_map``) that ``transformers`` would offer to run. Here the folder must lie
inside the folder of the ``capture.json`` that names it, every file it holds must resolve inside it (no
symlink out), a tokenizer that asks for its own code is refused before ``transformers`` sees it, and the
load itself passes ``trust_remote_code=False`` and ``local_files_only=True`` (transformers then raises
instead of prompting, and never reaches the network).

A folder the user names (``tokenizer="FOLDER"``, an HF model folder given as ``--model``) is loaded the same way,
except that its files may link elsewhere (a Hugging Face cache snapshot is links into its blob store). The size cap
applies to the files a tokenizer reads, never to a model folder's weights (``WEIGHT_SUFFIXES``).
"""

from __future__ import annotations

import os
from typing import Any

from forensics.errors import ForensicsError, one_line
from forensics.io.safetensors import refuse_special_files

from .formats._io import load_json
from .limits import MAX_TOKENIZER_FILE_BYTES

TOKENIZER_DIR = "tokenizer"
# ``tokenizer/`` is looked for next to a capture and in this many parents (sample_data/speculators/
# hidden_states/hs_0.safetensors -> sample_data/tokenizer is two up).
MAX_PARENT_LEVELS = 3
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# ``tokenizer_config.json`` classes whose ``decode`` is the ``tokenizer.json`` pipeline's own decode (transformers
# 5 ``TokenizersBackend``, its 4.x name ``PreTrainedTokenizerFast``, or no config at all): such a folder is read
# with the ``tokenizers`` library alone, without importing transformers (0.1 s instead of ~1–2 s CPU,
# 2026-12-01). Equal decodes for every id of the SmolLM2 vocabulary: tests/test_tokenizer.py.
TOKENIZER_JSON_CLASSES = (None, "TokenizersBackend", "PreTrainedTokenizerFast")

# files a tokenizer never reads (a model folder's weights): the tokenizer-file size cap does not apply to them
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".ckpt", ".msgpack", ".h5", ".onnx", ".npz",
                   ".npy")

_CACHE: dict[tuple[str, bool], tuple[Any, str | None]] = {}


def _inside(path: str, root: str) -> bool:
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def find_tokenizer(path: str, meta: dict | None = None) -> str | None:
    """The tokenizer folder of the capture file ``path``: ``capture.json``'s ``"tokenizer"`` (relative to that
    json, and confined to its folder), else a ``tokenizer/`` folder next to the file or up to
    ``MAX_PARENT_LEVELS`` folders above it. None when there is none (or the named one lies outside)."""
    if not os.path.exists(path):  # an in-memory capture (forensics.io.synth): no folder to look in
        return None
    here = os.path.dirname(os.path.abspath(path))
    rel = (meta or {}).get("tokenizer") if isinstance(meta, dict) else None
    if isinstance(rel, str) and rel:
        for folder in (here, os.path.dirname(here)):  # where formats' sidecar lookup finds capture.json
            if os.path.isfile(os.path.join(folder, "capture.json")):
                cand = os.path.join(folder, rel)
                if _inside(cand, folder) and os.path.isdir(cand):
                    return os.path.realpath(cand)
                break  # named but outside (or absent): do not guess another folder
    d = here
    for _ in range(MAX_PARENT_LEVELS + 1):
        cand = os.path.join(d, TOKENIZER_DIR)
        if any(os.path.isfile(os.path.join(cand, n)) for n in TOKENIZER_FILES):
            return os.path.realpath(cand)
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    return None


def _check_folder(folder: str, confined: bool = True) -> dict:
    """Refuse a folder whose files resolve outside it (``confined``: a folder a dataset names), holds a tokenizer
    file above the size cap, or whose config asks transformers to run code; return its ``tokenizer_config.json``
    (``{}`` when absent). A FIFO or device named like a tokenizer file is refused before any open (it would block)."""
    refuse_special_files(folder)
    for name in os.listdir(folder):
        if confined and not _inside(os.path.join(folder, name), folder):
            raise ForensicsError(f"tokenizer file {name!r} links outside the tokenizer folder; not loaded",
                                 path=folder)
        p = os.path.join(folder, name)
        if name.lower().endswith(WEIGHT_SUFFIXES):  # a model folder's weights: no tokenizer reads them
            continue
        if os.path.isfile(p) and os.path.getsize(p) > MAX_TOKENIZER_FILE_BYTES:  # read whole, with no limit
            raise ForensicsError(f"tokenizer file of {os.path.getsize(p)} bytes is larger than a tokenizer can be "
                                 f"(limit {MAX_TOKENIZER_FILE_BYTES}); not loaded", path=p)
    cfg_path = os.path.join(folder, "tokenizer_config.json")
    if os.path.isfile(cfg_path):
        cfg = load_json(cfg_path, "tokenizer config")
        if isinstance(cfg, dict) and cfg.get("auto_map"):
            raise ForensicsError("tokenizer config asks to run code shipped with the data (auto_map); "
                                 "not loaded (tokens are shown as ids)", path=cfg_path)
        return cfg if isinstance(cfg, dict) else {}
    return {}


class TokenizerFile:
    """A ``tokenizer.json`` read by the ``tokenizers`` library: ``decode`` and ``len`` as transformers'
    ``TokenizersBackend`` gives them for the configs in ``TOKENIZER_JSON_CLASSES``."""

    def __init__(self, tokenizer: Any):
        self.backend = tokenizer

    def __len__(self) -> int:
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def __repr__(self) -> str:
        return f"TokenizerFile({len(self)} tokens)"


def _tokenizer_json(folder: str, cfg: dict) -> TokenizerFile | None:
    """The folder's ``tokenizer.json`` without transformers, when its config asks for nothing more (no class
    of its own, no whitespace clean-up, no added tokens defined only in the config); else None."""
    path = os.path.join(folder, "tokenizer.json")
    if (cfg.get("tokenizer_class") not in TOKENIZER_JSON_CLASSES or cfg.get("clean_up_tokenization_spaces")
            or cfg.get("added_tokens_decoder") or not os.path.isfile(path)):
        return None
    try:
        import tokenizers

        return TokenizerFile(tokenizers.Tokenizer.from_file(path))
    except Exception:  # noqa: BLE001 - unreadable here: transformers' load below says why, in its words
        return None


def load_tokenizer(folder: str | None, confined: bool = True) -> tuple[Any, str | None]:
    """``(tokenizer, None)`` from the local folder, or ``(None, one-line reason)``; cached per folder.

    ``confined=False`` for a folder the user named (its files may link outside it, as a Hugging Face cache
    snapshot's do); a folder a dataset names stays confined."""
    if folder is None:
        return None, None
    if not os.path.isdir(folder):
        return None, f"{folder}: no such tokenizer folder"
    key = (os.path.realpath(folder) if confined else os.path.abspath(folder), confined)
    folder = key[0]
    if key not in _CACHE:
        try:
            fast = _tokenizer_json(folder, _check_folder(folder, confined))
            if fast is not None:
                _CACHE[key] = (fast, None)
                return _CACHE[key]
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from transformers import AutoTokenizer
            from transformers.utils import logging as hf_logging

            hf_logging.set_verbosity_error()  # library warnings stay off the user's stderr
            tok = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
            _CACHE[key] = (tok, None)
        except ForensicsError as e:
            _CACHE[key] = (None, str(e))
        except Exception as e:  # noqa: BLE001 - a broken tokenizer costs the token text, never the command
            _CACHE[key] = (None, f"{folder}: cannot load tokenizer: {type(e).__name__}: {one_line(e)[:300]}")
    return _CACHE[key]


MAX_TOKEN_TEXT_CHARS = 256  # one token's text as shown or synced (SmolLM2's longest: 65 chars; a hostile one: 10^6)
MAX_RUN_TEXT_CHARS = 4096  # a decoded run of tokens (the explorer's selection)


def cut_text(text: str, limit: int = MAX_TOKEN_TEXT_CHARS) -> str:
    """``text`` when at most ``limit`` characters, else its first ``limit`` and how many were cut:
    ``abc…(+999,997 chars)``, never silently."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…(+{len(text) - limit:,} chars)"


def decode_tokens(tok: Any, ids: list[int]) -> list[str]:
    """Text of each id on its own, cut to ``MAX_TOKEN_TEXT_CHARS`` with a count (:func:`cut_text`: a hostile
    tokenizer's 10^6-character token never reaches a report, the terminal or the explorer uncut); an id outside
    the tokenizer (-100 padding, ≥ its size) is ``<id N>``."""
    try:
        n = len(tok)
    except TypeError:
        n = None
    out = []
    for i in ids:
        i = int(i)
        if i < 0 or (n is not None and i >= n):
            out.append(f"<id {i}>")
            continue
        try:
            out.append(cut_text(str(tok.decode([i]))))
        except Exception:  # noqa: BLE001 - an id the tokenizer cannot decode is shown by number
            out.append(f"<id {i}>")
    return out


def decode_text(tok: Any, ids: list[int]) -> str:
    """The text of a run of ids, with out-of-range ids left out of the decode and shown as ``<id N>``."""
    try:
        n = len(tok)
    except TypeError:
        n = None
    if all(0 <= int(i) and (n is None or int(i) < n) for i in ids):
        try:
            return cut_text(str(tok.decode([int(i) for i in ids])), MAX_RUN_TEXT_CHARS)
        except Exception:  # noqa: BLE001
            pass
    return cut_text("".join(decode_tokens(tok, ids)), MAX_RUN_TEXT_CHARS)
