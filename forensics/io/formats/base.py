"""The one interface every capture format exposes: a :class:`CaptureFormat` record, and a :class:`Writer` for the
formats ``hsf capture`` writes.

A format module builds one ``FORMAT = CaptureFormat(...)``; ``forensics.io.formats`` keeps them in one ordered
registry. Loading a file is: sniff the container once, open it once, offer its content to the formats of that
container in registry order, read with the first that matches (the shape of xarray's ``BackendEntrypoint``:
``guess_can_open`` + ``open_dataset``, chosen by ``plugins.get_backend``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from forensics.io.capture import Capture

# The containers a file's first bytes can name, as ``load`` opens them: a torch checkpoint (zip, legacy pickle,
# gzip) → the unpickled object; safetensors → a lazy ``SafetensorsFile``; numpy ``.npy``/``.npz`` → an array or a
# dict of arrays; JSON → the parsed document.
CONTAINERS = ("torch", "safetensors", "numpy", "json")


@dataclass(frozen=True)
class Request:
    """What ``load`` was asked for, passed to every reader alike."""

    path: str
    record: int = 0  # the record of a many-sample file (TensorRT-LLM record lists, SGLang JSON lists)
    input_ids: Any = None  # token ids given from outside the file: a 1-D int64 tensor, or None


@dataclass(frozen=True)
class Sample:
    """One sample as a writer receives it: token ids, loss mask, one ``[T, H]`` state per slot and its r."""

    input_ids: Any
    loss_mask: Any
    states: list
    r: list
    metadata: dict[str, str] | None = None  # safetensors header entries (an ``hsf stamp``); torch files take none


@dataclass
class Dataset:
    """What a writer's dataset-level side files are made from (once every sample file is written)."""

    out: str
    samples: list  # the tokenized samples (``input_ids``, ``loss_mask`` lists), in file order
    num_tokens: list[int]
    layer_ids: list | None
    hidden_size: int
    dtype: str  # "bf16" | "fp32"
    model: str
    texts: list[str]  # the text files, relative to ``out``
    max_tokens: int
    command: str
    write_json: Callable[[str, Any], None]  # writes a JSON document whole or not at all (``io.output``)
    versions: dict[str, str] = field(default_factory=dict)  # package versions of the writing process


@dataclass(frozen=True)
class Writer:
    """How ``hsf capture`` writes a format exactly as its own generator does.

    ``name`` is the ``--format`` choice; ``convention`` the numbering of the layer ids in the format's own
    metadata (a ``forensics.models.conventions`` name, or ``"r"``); ``default_r(L)`` the r list the system
    captures by default; ``check_r(rs, L)`` raises a ``ForensicsError`` for an r list the format cannot hold and
    returns notes on one it holds unusually; ``layer_ids(rs)`` the ids its metadata states (None: it states none);
    ``side_files(Dataset)`` writes the dataset-level files beside the samples and returns notes."""

    name: str
    write: Callable[[IO[bytes], Sample], None]
    sample_path: Callable[[int], str]
    convention: str
    default_r: Callable[[int], list]
    check_r: Callable[[list, int], list[str]] = lambda rs, L: []
    layer_ids: Callable[[list], list | None] = lambda rs: None
    side_files: Callable[[Dataset], list[str]] = lambda ds: []
    side_names: tuple[str, ...] = ()  # the files ``side_files`` writes (an existing one is never replaced)
    header_metadata: bool = False  # True: ``Sample.metadata`` goes into the file's header (safetensors)


@dataclass(frozen=True)
class CaptureFormat:
    """One capture format: its name, the containers it comes in, ``match(content)`` (does this opened content
    look like this format; cheap, never raises), ``read(content, request) → Capture``, the trainer whose
    training data it is (None: no one trainer's), an optional side file read beside each file, and an optional
    writer."""

    name: str
    containers: tuple[str, ...]
    match: Callable[[Any], bool]
    read: Callable[[Any, Request], Capture]
    trainer: str | None = None
    side_file: tuple[str, Callable[[Capture, dict], None]] | None = None  # (file name, apply(capture, doc))
    writer: Writer | None = None
    # every sample of content that holds several (a record list, a JSON list, a [B, T] batch), read once: one
    # Capture each, ``provenance.record`` = its index. None: ``read`` gives the content's one sample.
    samples: Callable[[Any, Request], list[Capture]] | None = None
