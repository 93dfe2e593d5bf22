"""Bounds on the sizes a file may claim, checked before anything is allocated for them.

A config or sidecar is untrusted text: ``num_hidden_layers: 10^12`` must be a one-line error, not a
``set(range(1, L))`` that fills the machine.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
import warnings
from typing import Any

from forensics.errors import ForensicsError
from forensics.io.safetensors import open_regular

try:
    import resource
except ImportError:  # not a Unix
    resource = None  # type: ignore[assignment]

# The deepest public decoder-only LLMs have ~130 blocks (Llama-3.1-405B: 126, DeepSeek-V3/Kimi-K2: 61,
# Qwen3-235B: 94); 10 000 is ~80× that and still allocates nothing worth mentioning for per-layer sets.
MAX_NUM_LAYERS = 10_000
# The widest public hidden sizes are ~25 000 (Llama-3.1-405B: 16 384, Grok-1: 6 144, PaLM-540B: 18 432).
MAX_HIDDEN_SIZE = 1 << 20


# Slots of one file that a fingerprint compares pairwise. Real captures hold <= 8 (an EAGLE-3 training file: 4), a
# ladder capture of every layer L + 2 (Llama-3.1-405B: 128); the pairwise steps stay near-linear above
# analysis.fingerprint.depth.HEURISTIC_ALL_STARTS_MAX, and this bounds them (256 tiny slots: see
# tests/test_hardening_models.py).
MAX_SLOTS_PER_FILE = 256


def slots_per_file(n: int, path: str | None = None) -> int:
    """``n`` when a file's slot count is within ``MAX_SLOTS_PER_FILE``, else a one-line error naming the limit."""
    if n > MAX_SLOTS_PER_FILE:
        raise ForensicsError(f"{n} hidden-state slots in one file, more than the {MAX_SLOTS_PER_FILE} hsf reads and a "
                             "fingerprint compares (MAX_SLOTS_PER_FILE; real captures hold <= 8, a ladder of every "
                             "layer L + 2)", path=path)
    return n


# Samples one file may hold (TensorRT-LLM record lists, SGLang JSON lists, [B, T] batches). A TensorRT-LLM dump
# holds the requests of a few iterations (thousands); a 400 KB pickle listing one shared record 200 000 times made
# 200 000 captures (600 MB before any statistic, a MemoryError in fingerprint under 3 GB).
MAX_RECORDS_PER_FILE = 1 << 16


def records_per_file(n: int, path: str | None = None) -> int:
    """``n`` when a file's sample count is within ``MAX_RECORDS_PER_FILE``, else a one-line error (also for no
    sample at all: a ``[0, T]`` batch or an empty record list is nothing to check, not a pass)."""
    if n < 1:
        raise ForensicsError(f"holds {n} samples (an empty batch or record list): nothing to read", path=path)
    if n > MAX_RECORDS_PER_FILE:
        raise ForensicsError(f"{n} samples in one file, more than the {MAX_RECORDS_PER_FILE} hsf reads from one file "
                             "(MAX_RECORDS_PER_FILE); split it", path=path)
    return n


def _count(value: Any, what: str, limit: int, path: str | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):  # 32.0 too: code that sizes by it needs an int
        raise ForensicsError(f"{what} {value!r} is not a JSON integer", path=path)
    if not 1 <= value <= limit:
        raise ForensicsError(f"{what} {value} is not plausible (expected 1 to {limit})", path=path)
    return value


def num_layers(value: Any, path: str | None = None, what: str = "num_hidden_layers") -> int:
    """``value`` as a layer count L, or a ForensicsError naming ``path`` when it is not 1 ≤ L ≤ MAX_NUM_LAYERS."""
    return _count(value, what, MAX_NUM_LAYERS, path)


def hidden_size(value: Any, path: str | None = None, what: str = "hidden_size") -> int:
    """``value`` as a hidden size H, or a ForensicsError when it is not 1 ≤ H ≤ MAX_HIDDEN_SIZE."""
    return _count(value, what, MAX_HIDDEN_SIZE, path)


# Every other size a model's config.json may state, with a bound far above any public model and far below what
# would hang or fill memory when something is allocated per unit (vocabularies: Gemma 3 262 144; experts:
# Kimi-K2 384; intermediate sizes: Llama-3.1-405B 53 248; positions: Llama-4-Scout 10 485 760).
MAX_VOCAB_SIZE = 1 << 22
MAX_INTERMEDIATE_SIZE = 1 << 22
MAX_HEADS = 1 << 14
MAX_EXPERTS = 1 << 14
MAX_POSITIONS = 1 << 27
CONFIG_LIMITS = {
    "num_hidden_layers": MAX_NUM_LAYERS, "hidden_size": MAX_HIDDEN_SIZE, "vocab_size": MAX_VOCAB_SIZE,
    "intermediate_size": MAX_INTERMEDIATE_SIZE, "moe_intermediate_size": MAX_INTERMEDIATE_SIZE,
    "shared_expert_intermediate_size": MAX_INTERMEDIATE_SIZE, "num_attention_heads": MAX_HEADS,
    "num_key_value_heads": MAX_HEADS, "head_dim": MAX_HIDDEN_SIZE, "num_experts": MAX_EXPERTS,
    "num_local_experts": MAX_EXPERTS, "n_routed_experts": MAX_EXPERTS, "num_experts_per_tok": MAX_EXPERTS,
    "n_shared_experts": MAX_EXPERTS, "max_position_embeddings": MAX_POSITIONS,
}
REQUIRED_CONFIG_FIELDS = ("num_hidden_layers", "hidden_size")
ZERO_ALLOWED = frozenset({"moe_intermediate_size", "shared_expert_intermediate_size", "num_experts",
                          "num_local_experts", "n_routed_experts", "num_experts_per_tok", "n_shared_experts"})
# a tokenizer file read from a folder: real tokenizer.json files are < 35 MB (Gemma 3: 33 MB), their configs < 1 MB
MAX_TOKENIZER_FILE_BYTES = 64 << 20


def model_config(cfg: Any, path: str | None = None) -> dict:
    """``cfg`` (a parsed ``config.json``) checked: an object whose every size field in :data:`CONFIG_LIMITS`
    (also inside ``text_config``) is a whole number within its bound, with the fields of
    :data:`REQUIRED_CONFIG_FIELDS` present; returned unchanged.

    Example:
        >>> model_config({"num_hidden_layers": 30, "hidden_size": 576})["hidden_size"]
        576
        >>> model_config({"num_hidden_layers": 10**9, "hidden_size": 576})
        Traceback (most recent call last):
        ...
        forensics.errors.ForensicsError: num_hidden_layers 1000000000 is not plausible (expected 1 to 10000)
    """
    if not isinstance(cfg, dict):
        raise ForensicsError(f"config.json is {type(cfg).__name__}, not a JSON object", path=path)
    text = cfg.get("text_config")
    inner = text if isinstance(text, dict) else {}
    for name, limit in CONFIG_LIMITS.items():
        for where, d in (("", cfg), ("text_config.", inner)):
            value = d.get(name)
            if value is not None and not (name in ZERO_ALLOWED and type(value) is int and value == 0):
                _count(value, where + name, limit, path)
    for name in REQUIRED_CONFIG_FIELDS:
        if cfg.get(name) is None and inner.get(name) is None:
            raise ForensicsError(f"config.json has no {name}", path=path)
    return cfg


# ``--text`` of one capture: the text its token ids come from. 4 MiB is ~10^6 tokens (~4 characters a token),
# longer than any capture's context; tokenizing it costs well under a GiB (a 66 MB text aborted the tokenizer).
MAX_TEXT_BYTES = 4 << 20
# ``--ids`` as text: ~10^6 ids of up to 7 digits. An id has at most 18 digits (int64 holds 19; a vocabulary 7).
MAX_IDS_TEXT_BYTES = 16 << 20
MAX_ID_DIGITS = 18


def read_bounded(path: str, limit: int, what: str, refusal: str = "refused") -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them; a FIFO, device or socket (which would
    block or never end), a larger file (``{what} is larger than {limit} bytes; {refusal}``) or a read error is one
    line naming the file."""
    fd = open_regular(path)
    try:
        with os.fdopen(fd, "rb") as f:
            fd = -1
            data = f.read(limit + 1)
    except OSError as e:
        raise ForensicsError(f"cannot read {what}: {e.strerror}", path=path) from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > limit:
        raise ForensicsError(f"{what} is larger than {limit} bytes; {refusal}", path=path)
    return data


# Rendering a chat template from a tokenizer folder (the dataset's or a model's) runs the template's own loops
# in Jinja's sandbox, which bounds nothing but a single range(): nested loops or ``'x' * 10**10`` hang or fill the
# machine. Such code runs in a forked child under these limits (a real template renders in milliseconds).
RENDER_SECONDS = 10.0  # wall clock, on a busy machine; the child's CPU limit is the same number of seconds
RENDER_MEMORY_BYTES = 512 << 20  # above what the parent had mapped when it forked
RENDER_OUTPUT_BYTES = 16 << 20  # the JSON of what the call returns


class BoundExceeded(ForensicsError):
    """A bounded call (:func:`bounded_call`) ran past its time or memory, or failed."""


def bounded_call(fn: Any, what: str, seconds: float = RENDER_SECONDS, memory: int = RENDER_MEMORY_BYTES,
                 output: int = RENDER_OUTPUT_BYTES) -> Any:
    """``fn()`` (returning plain JSON data) run in a forked child with ``seconds`` of wall and CPU time and
    ``memory`` bytes of address space above the parent's; what it returns comes back as JSON. Past a limit,
    or when ``fn`` raises, a :class:`BoundExceeded` naming ``what``. The child's stdin, stdout and stderr are
    ``/dev/null`` (a library's warning never reaches the user). Where ``os.fork`` is missing (not Linux),
    ``fn()`` runs in this process, unbounded."""
    if resource is None or not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return fn()
    r, w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Python 3.12+ warns about fork() with threads: the child runs no thread
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child (its coverage is not collected)
        code = 1
        try:
            os.close(r)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            cpu = max(1, int(seconds))
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            resource.setrlimit(resource.RLIMIT_AS, (_mapped_bytes() + memory,) * 2)
            data = json.dumps(fn()).encode()
            if len(data) <= output:
                view = memoryview(data)
                while view:
                    view = view[os.write(w, view):]
                code = 0
            else:
                code = 3
        except BaseException:  # noqa: BLE001 - any failure is the parent's "failed"
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    chunks: list[bytes] = []
    size, deadline, killed, why = 0, time.monotonic() + seconds, False, "ran past its time limit"
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                killed = True
                break
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            size += len(chunk)
            if size > output:
                killed, why = True, "returned too much"
                break
            chunks.append(chunk)
    finally:
        os.close(r)
        if killed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, status = os.waitpid(pid, 0)
    if killed or not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        if not killed:
            why = {3: "returned too much"}.get(os.WEXITSTATUS(status), "failed or ran past its memory limit") \
                if os.WIFEXITED(status) else "ran past its time limit"
        raise BoundExceeded(f"{what} {why} ({seconds:g} s, {memory >> 20} MiB, {output >> 20} MiB of output)")
    return json.loads(b"".join(chunks))


def proc_kib(path: str, key: str) -> int | None:
    """The bytes of a ``key: N kB`` line of a ``/proc`` file (``/proc/meminfo``, ``/proc/self/status``); None when
    the file or the line cannot be read."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _mapped_bytes() -> int:
    """This process's virtual size (``VmSize``), which ``RLIMIT_AS`` counts."""
    return proc_kib("/proc/self/status", "VmSize") or 0
