"""A memory-mapped file truncated by another process while it is read: one ``ForensicsError``, never a SIGBUS.

hsf maps what it reads where mapping is what makes it fast (``torch.load(mmap=True)`` of ``.pt`` captures,
``.npy`` arrays, the stamp checksum's view of a safetensors stack; transformers maps model shards). Touching a
page of a mapping that lies past the file's end (another process truncated the file, or rewrote it in place)
makes the kernel send SIGBUS (mmap(2): "Attempted access to a page of the buffer that lies beyond the end of the
mapped file"), which kills the process with nothing on stderr. A Python-level handler cannot help: CPython's C
handler only sets a flag and returns, and the faulting instruction runs again and faults again, forever.

:func:`install` puts a native handler in front (``sigaction`` with ``SA_SIGINFO``, through ``ctypes``):

1. it finds the mapping that holds the faulting address (``siginfo.si_addr``) in ``/proc/self/maps``; a fault
   anywhere else (not a file mapping of ours to handle) is handed to the action that was there before (by
   default the process dies, as it would have);
2. it maps anonymous zero pages over that mapping from the new end of the file to the mapping's end
   (``MAP_FIXED``), so the interrupted copy or reduction finishes instead of faulting again;
3. it raises :class:`FileChangedSize` ("FILE: changed size while being read") in the faulting thread at the
   next bytecode of the Python code whose call into C faulted (a trace function's exception propagates into
   the traced frame, ``sys.settrace``; ``f_trace_opcodes`` makes that the very next instruction). A fault on a
   thread that runs no Python (a torch worker of an operation the main thread started) is raised in the main
   thread instead (``_thread.interrupt_main(SIGBUS)`` and a Python-level handler).

When the exception is raised, the zero pages are replaced by a mapping of an empty file, so any later read of
that range (a caller that catches the error and reads the same tensor again) faults and raises again: a value
computed from the zeros never reaches a result.

Where the Python-level handler cannot be set (the first use is on a thread other than the main one) and the
fault is on a thread without Python, the native handler writes the one line to stderr and exits with status 2.
Only 64-bit Linux is handled (the kernel's generic ``siginfo_t`` and ``struct sigaction`` layouts); elsewhere
:func:`install` does nothing. Reading through a mapping costs nothing more: the handler runs only on a fault.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from forensics.errors import ForensicsError, escape

_SA_SIGINFO = 4
_SI_CODE_OFFSET = 8  # siginfo_t.si_code: > 0 for a fault the kernel raised, <= 0 for a signal someone sent
_SI_ADDR_OFFSET = 16  # siginfo_t: si_signo, si_errno, si_code, padding, then the union (si_addr) on 64-bit Linux
_PROT_READ = 1
_MAP_SHARED, _MAP_PRIVATE, _MAP_FIXED, _MAP_ANONYMOUS = 0x01, 0x02, 0x10, 0x20
_EMPTY_NAME = "hsf-truncated"  # the empty memfd mapped over a range after its error was raised
EXIT_CODE = 2  # bad input, as every one-line error of the CLI

_lock = threading.Lock()
_state: dict[str, Any] = {"installed": False, "raise": False, "depth": 0}
_pending: list[tuple[str, str]] = []  # (path, message) recorded by the native handler, raised by the Python side
_zeroed: dict[tuple[int, int], tuple[str, str]] = {}  # ranges now zero pages, until their error is raised
_poisoned: dict[tuple[int, int], tuple[str, str]] = {}  # ranges now an empty file: every read raises again


class FileChangedSize(ForensicsError):
    """A mapped file shrank (or could not be read) while hsf was reading it."""


def supported() -> bool:
    import ctypes

    return sys.platform.startswith("linux") and ctypes.sizeof(ctypes.c_void_p) == 8


def install(prog: str | None = None) -> bool:
    """Install the SIGBUS guard once per process (idempotent, cheap after the first call). True when a fault
    becomes a :class:`FileChangedSize` exception, False when the platform is not handled or the first call was
    not on the main thread (then a fault on a thread without Python becomes one line on stderr and exit status
    2). ``prog``: the name that line starts with (``hsf inspect``), as the CLI's own error lines.

    Example:
        >>> install() in (True, False)
        True
    """
    if prog is not None:
        _state["prog"] = prog
    if _state["installed"]:
        return bool(_state["raise"])
    with _lock:
        if _state["installed"]:
            return bool(_state["raise"])
        if not supported():
            _state["installed"] = True
            return False
        _install_native()
        try:
            signal.signal(signal.SIGBUS, _raise_in_main)  # the Python-level handler interrupt_main runs
            _install_native()  # signal.signal put CPython's C handler in front: ours goes first again
            _state["raise"] = True
        except ValueError:  # not the main thread of the main interpreter
            _state["raise"] = False
        _state["installed"] = True
        return bool(_state["raise"])


# ---- the native handler (runs on the faulting thread, inside the signal) ----------------------------------------


def _native(signum: int, info: int, context: int) -> None:
    import ctypes

    _state["depth"] += 1  # while > 0 nothing raises: an exception inside a ctypes callback would be lost
    try:
        if _recover(ctypes, info):
            caller = sys._getframe(0).f_back  # the Python frame whose call into C faulted (None: a C thread)
            if caller is not None:
                _arm(caller)
            elif _state["raise"]:
                import _thread

                _thread.interrupt_main(signal.SIGBUS)  # raised by the main thread once the C code returns
            else:
                _die(*_pending[-1])
    finally:
        _state["depth"] -= 1


def _recover(ctypes: Any, info: int) -> bool:
    """Zero pages over the part of the mapping past the file's end; True when an error is now pending."""
    try:
        if ctypes.c_int.from_address(info + _SI_CODE_OFFSET).value <= 0:  # sent (kill, raise), not a fault
            _hand_back(resend=True)
            return False
        addr = ctypes.c_void_p.from_address(info + _SI_ADDR_OFFSET).value or 0
        hit = _mapping_of(addr)
        if hit is None:
            _hand_back()
            return False
        start, end, offset, path = hit
        if path is None:  # anonymous: a range zeroed by another thread's fault just now reads fine
            if any(a <= addr < b for a, b in _zeroed):
                return False
            _hand_back()
            return False
        again = next(((a, b) for a, b in _poisoned if a <= addr < b), None)
        if again is not None and path.startswith(f"/memfd:{_EMPTY_NAME}"):
            first, end = again  # read again after its error was raised: the same error again
            path, message = _poisoned.pop(again)
        else:
            for table in (_zeroed, _poisoned):  # a new mapping reuses the addresses of an unmapped one
                for a, b in [r for r in table if r[0] < end and r[1] > start]:
                    table.pop((a, b))
            page = os.sysconf("SC_PAGE_SIZE")
            fault_at = offset + (addr - start)
            try:
                now: int | None = os.stat(path).st_size
            except OSError:
                now = None
            if now is not None and now <= fault_at:
                message = (f"changed size while being read (now {now} bytes; byte {fault_at} was needed): another "
                           "process truncated or rewrote it, and nothing computed from it is used")
                first = start + max(0, now - offset)
            else:
                message = ("could not be read through its memory map (an I/O error, or the file was replaced), "
                           "and nothing computed from it is used")
                first = addr
            first = min(addr, first) // page * page
        if not _map_over(ctypes, first, end, -1):
            _die(path, message)
        _zeroed[(first, end)] = (path, message)
        _pending.append((path, message))
        return True
    except BaseException:  # noqa: BLE001 - nothing may escape a signal handler; never run on after a failure
        _hand_back()
        return False


def _map_over(ctypes: Any, first: int, end: int, fd: int) -> bool:
    """``[first, end)`` replaced by zero pages (``fd`` -1) or by a shared mapping of the empty file ``fd``."""
    libc = _state["libc"]
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                          ctypes.c_long]
    flags = _MAP_FIXED | (_MAP_PRIVATE | _MAP_ANONYMOUS if fd < 0 else _MAP_SHARED)
    return bool(libc.mmap(first, end - first, _PROT_READ, flags, fd, 0) == first)


def _mapping_of(addr: int) -> tuple[int, int, int, str | None] | None:
    """``(start, end, file offset, path)`` of the mapping holding ``addr`` (path None when it is not a file:
    anonymous, heap, stack), from /proc/self/maps; None when no mapping holds it."""
    with open("/proc/self/maps", "rb") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) < 5:
                continue
            lo, hi = (int(x, 16) for x in parts[0].split(b"-"))
            if not lo <= addr < hi:
                continue
            path = parts[5].rstrip(b"\n") if len(parts) == 6 else b""
            if path.startswith(b"/memfd:"):
                return lo, hi, int(parts[2], 16), os.fsdecode(path)
            if not path.startswith(b"/"):
                return lo, hi, 0, None
            if path.endswith(b" (deleted)"):
                path = path[:-len(b" (deleted)")]
            return lo, hi, int(parts[2], 16), os.fsdecode(path.replace(b"\\012", b"\n"))
    return None


def _die(path: str, message: str) -> None:
    line = f"{_state.get('prog', 'hsf')}: error: {escape(path)}: {message}\n"
    os.write(2, line.encode("utf-8", "backslashreplace"))
    os._exit(EXIT_CODE)


def _hand_back(resend: bool = False) -> None:
    """Put back the action that was there before ours: returning re-runs a faulting instruction under it, and a
    signal that was sent is sent again (it stays blocked until this handler returns)."""
    import ctypes

    libc = _state.get("libc")
    prev = _state.get("previous")
    if libc is not None and prev is not None:
        libc.sigaction(signal.SIGBUS, ctypes.byref(prev), None)
    if resend:
        signal.pthread_kill(threading.get_ident(), signal.SIGBUS)


# ---- raising, once the C code has returned --------------------------------------------------------------------


def _arm(frame: Any) -> None:
    """Raise the pending error in this thread at the next bytecode of ``frame`` or of anything it calls."""
    saved = _state.setdefault("saved", [])
    if not saved:  # what a debugger or coverage had set is put back when the error is raised
        saved.append(sys.gettrace())
        f = frame
        while f is not None:
            saved.append((f, f.f_trace, f.f_trace_opcodes))
            f.f_trace = _trace
            f.f_trace_opcodes = True
            f = f.f_back
    sys.settrace(_trace)


def _trace(frame: Any, event: str, arg: Any) -> Any:
    if _state["depth"] or not _pending:
        return _trace if _pending else None
    saved = _state.pop("saved", [None])
    sys.settrace(saved[0])
    for f, trace, opcodes in saved[1:]:
        f.f_trace, f.f_trace_opcodes = trace, opcodes
    _raise()


def _raise_in_main(signum: int, frame: Any) -> None:
    """The Python-level handler: the error of a fault on a thread that runs no Python, in the main thread."""
    if _pending and not _state["depth"]:
        _raise()


def _raise() -> None:
    """Raise the pending error after putting an empty file's mapping over every zeroed range (a later read of
    the range faults, and raises, again)."""
    import ctypes

    path, message = _pending[0]
    _pending.clear()
    fd = _state.get("empty_fd")
    if fd is None:
        fd = _state["empty_fd"] = os.memfd_create(_EMPTY_NAME, os.MFD_CLOEXEC)
    for (first, end), what in list(_zeroed.items()):
        if _map_over(ctypes, first, end, fd):
            _poisoned[(first, end)] = what
        _zeroed.pop((first, end))
    raise FileChangedSize(message, path=path)


def _install_native() -> None:
    import ctypes

    class SigAction(ctypes.Structure):  # struct sigaction of 64-bit Linux (glibc and musl)
        _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                    ("restorer", ctypes.c_void_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    if "callback" not in _state:
        _state["callback"] = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(_native)
        _state["libc"] = libc
        old = SigAction()
        libc.sigaction(signal.SIGBUS, None, ctypes.byref(old))
        _state["previous"] = old  # what a fault that is not ours is handed to
    new = SigAction()
    new.handler = ctypes.cast(_state["callback"], ctypes.c_void_p).value
    new.flags = _SA_SIGINFO
    if libc.sigaction(signal.SIGBUS, ctypes.byref(new), None) != 0:
        raise OSError(ctypes.get_errno(), "sigaction(SIGBUS) failed")
