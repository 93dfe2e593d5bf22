"""`Capture`: one sample of captured hidden states, whatever format it was read from.

A capture is an ordered list of slots, each a ``[tokens, hidden]`` tensor (lazy where the format
allows: mmap-backed ``torch.load`` or safetensors ``safe_open``), plus the token ids, the loss mask,
what the data declares about its layers, and where it came from.

Everything in this toolkit speaks one coordinate, **r**:
``r = 0`` embedding output; ``r = k`` output of decoder block k (= HF ``hidden_states[k]``);
``r = L`` output of the last block *before* the final norm; ``"final_post"`` after the final norm.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

from forensics.errors import ForensicsError
from forensics.io.limits import num_layers
from forensics.io.sigbus import front
from forensics.layers import R, r_label

RECORD_SEP = "#"  # ``data_20.pt#3``: sample 3 of a many-sample file
_SHORT_DTYPES = {
    "torch.bfloat16": "bf16",
    "torch.float16": "f16",
    "torch.float32": "f32",
    "torch.float64": "f64",
    "torch.int64": "i64",
    "torch.int32": "i32",
    "torch.bool": "bool",
}


MAX_SLOT_NAME_CHARS = 120  # a slot's name as shown (real ones: ``aux_hidden_state[:, 576:1152]``, 29)


def constant_getter(t: Any) -> Callable[[], Any]:
    """A slot getter for a tensor already in memory."""
    return lambda: t


def short_dtype(dtype: Any) -> str:
    """``torch.bfloat16`` → ``bf16`` (lovely-tensors style)."""
    return _SHORT_DTYPES.get(str(dtype), str(dtype).replace("torch.", ""))


@dataclass
class Provenance:
    """Where a capture came from. ``sha256()`` is computed on request and cached."""

    path: str
    format: str
    size_bytes: int
    layout: str | None = None  # e.g. "[seq, k, H]" or "[k, seq, H] (transposed on read)"
    notes: list[str] = field(default_factory=list)
    record: int | None = None  # which record of a many-sample file (TensorRT-LLM, SGLang JSON); None: one sample
    # what the file was when its reading began (``forensics.io.sigbus.Watch``): checked before a result is returned
    watch: Any = field(default=None, repr=False, compare=False)
    _sha256: str | None = field(default=None, repr=False)

    def sha256(self) -> str:
        if self._sha256 is None:
            h = hashlib.sha256()
            with open(self.path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            self._sha256 = h.hexdigest()
        return self._sha256

    def to_dict(self, with_sha256: bool = False) -> dict:
        d = {"path": self.path, "format": self.format, "size_bytes": self.size_bytes,
             "layout": self.layout, "notes": list(self.notes)}
        if self.record is not None:
            d["record"] = self.record
        if with_sha256:
            d["sha256"] = self.sha256()
        return d


@dataclass
class Slot:
    """One captured ``[tokens, hidden]`` tensor of a capture.

    ``name`` is how the file names it (``hidden_states[1]``, ``aux_hidden_state[:, 576:1152]``);
    ``claimed`` is what the file says it is when it says anything (``"target"``, ``"final_post"``,
    ``"L3"``); ``declared_r`` is the r the data declares for it (from a sidecar), else None.
    """

    index: int
    name: str
    key: str
    shape: tuple[int, int]
    dtype: Any
    getter: Callable[[], torch.Tensor] = field(repr=False)
    claimed: str | None = None
    declared_r: R | None = None

    def __post_init__(self) -> None:
        # a name comes from the file (a dict key, a tensor name): a 10^6-character one is cut with a count, so no
        # report, terminal table or explorer sync carries it uncut (``key`` keeps the full name for reading)
        if isinstance(self.name, str) and len(self.name) > MAX_SLOT_NAME_CHARS:
            self.name = f"{self.name[:MAX_SLOT_NAME_CHARS]}…(+{len(self.name) - MAX_SLOT_NAME_CHARS:,} chars)"
        if isinstance(self.claimed, str) and len(self.claimed) > MAX_SLOT_NAME_CHARS:
            self.claimed = f"{self.claimed[:MAX_SLOT_NAME_CHARS]}…(+{len(self.claimed) - MAX_SLOT_NAME_CHARS:,} chars)"

    def tensor(self) -> torch.Tensor:
        """The ``[tokens, hidden]`` tensor (mmap-backed where the format allows; not upcast)."""
        front()  # a SIGBUS handler installed since the load goes behind the guard again
        return self.getter()

    @property
    def num_tokens(self) -> int:
        return self.shape[0]

    @property
    def hidden_size(self) -> int:
        return self.shape[1]

    def __repr__(self) -> str:
        extra = f" claimed={self.claimed}" if self.claimed else ""
        if self.declared_r is not None:
            extra += f" declared={r_label(self.declared_r)}"
        return f"Slot[{self.index}] {self.name} {list(self.shape)} {short_dtype(self.dtype)}{extra}"


@dataclass
class Capture:
    """One sample: ordered slots + token ids + loss mask + declared layers + provenance.

    Example:
        >>> import forensics
        >>> cap = forensics.load("sample_data/speculators_v1/data_0.pt")   # doctest: +SKIP
        >>> cap.slots[0].tensor().shape                                     # doctest: +SKIP
        torch.Size([187, 576])
    """

    slots: list[Slot]
    input_ids: torch.Tensor | None
    loss_mask: torch.Tensor | None
    provenance: Provenance
    declared_layers: list | None = None  # raw ids as the data's own metadata states them
    declared_convention: str | None = None  # the system whose numbering `declared_layers` use
    meta: dict = field(default_factory=dict)  # sidecar facts (model, num_layers, tokenizer, ...)

    @property
    def path(self) -> str:
        return self.provenance.path

    @property
    def name(self) -> str:
        """How commands name this sample: the path, or ``FILE#i`` for sample i of a file that holds several (a
        TensorRT-LLM record list, an SGLang JSON list, a ``[B, T]`` batch)."""
        rec = self.provenance.record
        if rec is None or int(self.meta.get("records", 1)) <= 1:
            return self.path
        return f"{self.path}{RECORD_SEP}{rec}"

    @property
    def format(self) -> str:
        return self.provenance.format

    @property
    def num_tokens(self) -> int:
        if self.slots:
            return self.slots[0].num_tokens
        return 0 if self.input_ids is None else int(self.input_ids.numel())

    @property
    def ids_match_rows(self) -> bool:
        """False when ``input_ids`` (or ``loss_mask``) has another length than the slots' rows: the file is
        readable and its content is wrong (``forensics.analysis.rows``: ``row_count``)."""
        n = self.slots[0].num_tokens if self.slots else None
        return n is None or all(t is None or int(t.numel()) == n for t in (self.input_ids, self.loss_mask))

    @property
    def hidden_size(self) -> int | None:
        return self.slots[0].hidden_size if self.slots else None

    @property
    def declared_r(self) -> list[R | None] | None:
        rs = [s.declared_r for s in self.slots]
        return rs if any(r is not None for r in rs) else None

    @property
    def num_layers(self) -> int | None:
        """L of the model that produced the capture, when a sidecar says so."""
        n = self.meta.get("num_layers")
        if n is None:
            return None

        try:
            return num_layers(n, self.path, "capture.json num_layers")
        except ForensicsError:  # a side file never makes a capture unreadable: an implausible L is unknown
            return None

    def check_unchanged(self) -> None:
        """Raise ``forensics.io.sigbus.FileChangedSize`` when the file this capture was read from was truncated
        under its memory map or rewritten in place since its reading began: the verbs call it before and after
        they compute, so that no value read from a changed file reaches a result (code of your own that computes
        on ``slot.tensor()`` of a mapped ``.pt`` should call it after computing, too)."""
        if self.provenance.watch is not None:
            self.provenance.watch.check()

    def __len__(self) -> int:
        return len(self.slots)

    def __repr__(self) -> str:
        name = os.path.basename(self.name)
        slots = ", ".join(f"{s.name}{list(s.shape)}" for s in self.slots)
        return f"Capture({name}, format={self.format}, tokens={self.num_tokens}, slots=[{slots}])"

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "format": self.format,
            "num_tokens": self.num_tokens,
            "hidden_size": self.hidden_size,
            "declared_layers": self.declared_layers,
            "declared_convention": self.declared_convention,
            "declared_r": self.declared_r,
            "provenance": self.provenance.to_dict(),
        }
