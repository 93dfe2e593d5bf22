"""A tokenizer's chat template read as token markers: where an assistant turn starts and ends in token ids.

The template is rendered (Jinja2's immutable sandbox, with the options and globals transformers'
``apply_chat_template`` gives it) on a sentinel conversation; the text before the assistant's content is its
header (the generation prompt, ``<|im_start|>assistant\\n`` for ChatML), the text after it up to the next turn
its end-of-turn marker (``<|im_end|>\\n``). Both are tokenized without added special tokens, so a capture's
``input_ids`` can be searched for them: the assistant's reply is the run of tokens after each header up to the
end marker. Nothing in the template runs outside the sandbox; a template that fails, or whose headers cannot be
told apart this way, gives None (no markers: the caller says nothing about the turns).

Example:
    >>> m = chat_markers_from("{% for m in messages %}<s>{{ m.role }}:{{ m.content }}</s>{% endfor %}"
    ...                       "{% if add_generation_prompt %}<s>assistant:{% endif %}", lambda s: list(s.encode()))
    >>> bytes(m.assistant_header).decode(), bytes(m.end).decode()
    ('<s>assistant:', '</s>')
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from forensics.errors import ForensicsError
from forensics.io.tokenizer import TokenizerFile, load_tokenizer

from .formats._io import load_json
from .limits import MAX_TOKENIZER_FILE_BYTES, bounded_call

SENTINEL = "\u2063hsf{}\u2063"  # invisible separator around a tag: text no template writes itself
MAX_TEMPLATE_CHARS = 200_000  # a chat template is a few KB; a larger one is not read
MAX_MARKER_TOKENS = 64  # a role header or end marker longer than this is not a marker
MAX_MARKER_CHARS = 64 * MAX_MARKER_TOKENS  # and longer text is not tokenized to find out


@dataclass(frozen=True)
class ChatMarkers:
    """Token ids of the assistant turn's header and of its end-of-turn marker (``end``: the tokens the template
    writes after an assistant's content, before the next turn), and the template's source."""

    assistant_header: tuple[int, ...]
    end: tuple[int, ...]
    source: str

    def to_dict(self) -> dict:
        return {"assistant_header": list(self.assistant_header), "end": list(self.end), "source": self.source}


def template_of(folder: str) -> str | None:
    """The chat template of a tokenizer folder: ``chat_template.jinja``, else ``tokenizer_config.json``'s
    ``chat_template`` (a string, or the ``default`` entry of a list of named templates); None when there is none."""
    path = os.path.join(folder, "chat_template.jinja")
    if os.path.isfile(path):
        if os.path.getsize(path) > min(MAX_TEMPLATE_CHARS * 4, MAX_TOKENIZER_FILE_BYTES):
            return None
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except (OSError, UnicodeDecodeError):
            return None
    cfg_path = os.path.join(folder, "tokenizer_config.json")
    if not os.path.isfile(cfg_path):
        return None
    try:
        cfg = load_json(cfg_path, "tokenizer config")
    except ForensicsError:
        return None
    t = cfg.get("chat_template") if isinstance(cfg, dict) else None
    if isinstance(t, list):
        t = next((x.get("template") for x in t if isinstance(x, dict) and x.get("name") == "default"), None)
    return t if isinstance(t, str) and len(t) <= MAX_TEMPLATE_CHARS else None


def _render(template: str, messages: list[dict], add_generation_prompt: bool) -> str:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise ValueError(str(message))

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now)
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                            bos_token="", eos_token="", tools=None, documents=None)


def chat_markers_from(template: str, encode: Callable[[str], list[int]], source: str = "") -> ChatMarkers | None:
    """The assistant header and end-of-turn marker of ``template`` as token ids (``encode``: text → ids, no
    special tokens added), or None when the template does not render or its turns are not prefixes of each
    other (then no marker can be read off)."""
    S, U, A = (SENTINEL.format(x) for x in ("S", "U", "A"))
    prompt = [{"role": "system", "content": S}, {"role": "user", "content": U}]

    def render_all() -> list[str]:
        return [_render(template, prompt, False), _render(template, prompt, True),
                _render(template, [*prompt, {"role": "assistant", "content": A}], False)]

    try:  # the template's own loops run in a child with bounded time and memory (a template is untrusted data)
        upto, gen, full = bounded_call(render_all, "the chat template")
    except Exception:  # noqa: BLE001 - any template error (sandbox refusal, raise_exception, a limit): no markers
        return None
    if A not in full or not full.startswith(upto):
        return None
    at = full.index(A)
    header = gen[len(upto):] if gen.startswith(upto) and len(gen) > len(upto) else full[len(upto):at]
    if not full[len(upto):at].endswith(header) or not header.strip():
        return None
    after = full[at + len(A):]
    end = after
    if not end.strip() or len(header) > MAX_MARKER_CHARS or len(end) > MAX_MARKER_CHARS:
        return None
    try:
        h, e = tuple(int(i) for i in encode(header)), tuple(int(i) for i in encode(end))
    except Exception:  # noqa: BLE001 - a tokenizer that cannot encode its own markers: no markers
        return None
    if not h or not e or len(h) > MAX_MARKER_TOKENS or len(e) > MAX_MARKER_TOKENS:
        return None
    return ChatMarkers(h, e, source)


_CACHE: dict[str, ChatMarkers | None] = {}


def encoder(tok: Any) -> Callable[[str], list[int]] | None:
    """``text → ids`` without added special tokens for a tokenizer as :func:`forensics.io.tokenizer.load_tokenizer`
    returns it (a ``tokenizers`` file or a transformers tokenizer)."""
    if isinstance(tok, TokenizerFile):  # the tokenizers library's Tokenizer (transformers' own has a str .backend)
        backend = tok.backend
        return lambda s: backend.encode(s, add_special_tokens=False).ids
    if hasattr(tok, "encode"):
        return lambda s: tok.encode(s, add_special_tokens=False)
    return None


def chat_markers(folder: str | None) -> ChatMarkers | None:
    """The chat markers of a tokenizer folder (cached per folder), or None (no folder, no template, no
    tokenizer that loads, or a template whose turns cannot be read)."""
    if folder is None:
        return None
    folder = os.path.realpath(folder)
    if folder not in _CACHE:
        template = template_of(folder)
        tok, _ = load_tokenizer(folder) if template else (None, None)
        enc = encoder(tok) if tok is not None else None
        _CACHE[folder] = None if enc is None or template is None else \
            chat_markers_from(template, enc, f"chat template of {folder}")
    return _CACHE[folder]
