"""A memory-mapped file truncated or rewritten while it is read: one ``ForensicsError``, never a SIGBUS, never zeros.

hsf maps what it reads where mapping is what makes it fast (``torch.load(mmap=True)`` of ``.pt`` captures,
``.npy`` arrays, the stamp checksum's view of a safetensors stack). Touching a page of a mapping that lies past
the file's end (another process truncated the file) makes the kernel send SIGBUS (mmap(2): "Attempted access
to a page of the buffer that lies beyond the end of the mapped file"), which kills the process with nothing on
stderr. A Python-level handler cannot help: CPython's C handler only sets a flag and returns, and the faulting
instruction runs again and faults again, forever.

Two parts, both per file, so that no thread, pool or order of installation hands zeros to a result:

* :func:`watch` (called by :func:`forensics.io.formats.load` before a file is read) registers the file and
  records its identity, size, mtime and fault count; :meth:`Watch.check` (called by every verb that computes
  from a capture, before and after it computes, and by ``Capture.check_unchanged``) raises
  :class:`FileChangedSize` when the file faulted since, or was changed in place (same inode, other size or
  mtime). A result is only returned after that check, whichever thread, torch worker included, read the pages.
* :func:`install` puts a native handler in front (``sigaction`` with ``SA_SIGINFO``, through ``ctypes``),
  from any thread. On a fault in a read-only mapping of a registered file it maps anonymous zero pages over
  that mapping from the file's new end (``MAP_FIXED``), so the interrupted copy or reduction finishes instead of
  faulting again, counts the fault against the file, and, when the faulting thread runs Python, raises the
  error in that thread at the next bytecode of the code whose call into C faulted (a per-thread pending error
  and trace function; ``f_trace_opcodes``). A fault on a thread that runs no Python (a torch intra-op worker)
  is raised by the check of whichever thread computes from that file. When an error is raised, the zero pages
  are replaced by a mapping of an empty file, so any later read of that range faults, and is counted, again.

Any other SIGBUS (a fault in a mapping hsf did not make, a writable mapping, a signal someone sent) goes to the
action that was there before (by default the process dies, as it would have). Another handler installed after
this one (``faulthandler.enable()``, ``signal.signal(SIGBUS, ...)``) is put behind it again at the next load,
slot read or check (:func:`front`), and receives every fault that is not hsf's. Only 64-bit Linux is handled (the
kernel's generic ``siginfo_t`` and ``struct sigaction`` layouts); elsewhere :func:`install` does nothing and
:meth:`Watch.check` still detects files changed in place. Reading through a mapping costs nothing more: the
handler runs only on a fault.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any

from forensics.errors import ForensicsError, escape

_SA_SIGINFO = 4
_SI_CODE_OFFSET = 8  # siginfo_t.si_code: > 0 for a fault the kernel raised, <= 0 for a signal someone sent
_SI_ADDR_OFFSET = 16  # siginfo_t: si_signo, si_errno, si_code, padding, then the union (si_addr) on 64-bit Linux
_PROT_READ, _PROT_WRITE = 1, 2
_MAP_SHARED, _MAP_PRIVATE, _MAP_FIXED, _MAP_ANONYMOUS = 0x01, 0x02, 0x10, 0x20
_EMPTY_NAME = "hsf-truncated"  # the empty memfd mapped over a range after its error was raised
EXIT_CODE = 2  # bad input, as every one-line error of the CLI
MAX_REGISTERED = 1 << 16  # files remembered by the guard (a scan registers one per file; the oldest go first)

_lock = threading.Lock()
_state: dict[str, Any] = {"installed": False, "ok": False}
_tls = threading.local()  # .depth > 0 while this thread runs the native handler: nothing raises in there
_registered: dict[tuple[int, int], str] = {}  # (st_dev, st_ino) -> path of the files hsf mapped
_by_path: dict[str, tuple[int, int]] = {}  # realpath -> (st_dev, st_ino)
_faults: dict[tuple[int, int], int] = {}  # faults counted per registered file
_pending: dict[int, tuple[tuple[int, int], str, str]] = {}  # thread ident -> (file, path, message): raised there
_saved: dict[int, list] = {}  # thread ident -> the trace functions to put back when its error is raised
_zeroed: dict[tuple[int, int], tuple[tuple[int, int], str, str]] = {}  # zero-page ranges -> (file, path, msg)
_poisoned: dict[tuple[int, int], tuple[tuple[int, int], str, str]] = {}  # ranges now an empty file's mapping


class FileChangedSize(ForensicsError):
    """A mapped file shrank, was rewritten in place, or could not be read while hsf was reading it."""


def supported() -> bool:
    import ctypes

    return sys.platform.startswith("linux") and ctypes.sizeof(ctypes.c_void_p) == 8


# ---- watching files: the check at use -------------------------------------------------------------------------


@dataclass(frozen=True)
class Watch:
    """What a file was when hsf started reading it: checked again before a result computed from it is returned."""

    path: str
    key: tuple[int, int]  # (st_dev, st_ino)
    size: int
    mtime_ns: int
    faults: int

    def check(self) -> None:
        """Raise :class:`FileChangedSize` when the file faulted under a mapping since it was watched, or now has
        another size or mtime with the same inode (rewritten in place). A file replaced by a rename is not an
        error: a mapping keeps the old file's pages, and safetensors reads take tensors from the new file by name.
        """
        front()
        if _faults.get(self.key, 0) != self.faults:
            _poison(self.key)
            message = next((m for k, _, m in list(_zeroed.values()) + list(_poisoned.values()) if k == self.key),
                           None) or "changed size while being read; nothing computed from it is used"
            raise FileChangedSize(message, path=self.path)
        try:
            st = os.stat(self.path)
        except OSError:
            return  # gone (deleted or renamed away): a mapping still holds the pages, a fault is counted above
        if (st.st_dev, st.st_ino) == self.key and (st.st_size, st.st_mtime_ns) != (self.size, self.mtime_ns):
            what = f"changed size while being read (was {self.size} bytes, now {st.st_size})" \
                if st.st_size != self.size else "was rewritten in place while being read (its mtime changed)"
            raise FileChangedSize(f"{what}; nothing computed from it is used", path=self.path)


def watch(path: str) -> Watch | None:
    """Register ``path`` with the guard (a fault in a read-only mapping of it becomes an error) and return what
    it is now; None when it cannot be stat'ed (the reader's own error names it)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (st.st_dev, st.st_ino)
    real = os.path.realpath(path)
    with _lock:
        if key not in _registered and len(_registered) >= MAX_REGISTERED:
            old = next(iter(_registered))
            _by_path.pop(_registered.pop(old), None)
        _registered[key] = real
        _by_path[real] = key
    return Watch(path, key, st.st_size, st.st_mtime_ns, _faults.get(key, 0))


# ---- installing the handler -----------------------------------------------------------------------------------


def install(prog: str | None = None) -> bool:
    """Install the SIGBUS guard (from any thread; idempotent and cheap after the first call, which also puts it
    back in front of a handler installed after it). True when a fault in a mapping of a watched file becomes a
    :class:`FileChangedSize`, False when the platform is not handled. ``prog``: the name the one line written
    when recovery is impossible starts with (``hsf inspect``), as the CLI's own error lines.

    Example:
        >>> install() in (True, False)
        True
    """
    if prog is not None:
        _state["prog"] = prog
    if _state["installed"]:
        front()
        return bool(_state["ok"])
    with _lock:
        if not _state["installed"]:
            if supported():
                _install_native()
                _state["ok"] = True
            _state["installed"] = True
    return bool(_state["ok"])


def front() -> None:
    """Put the guard back in front when another SIGBUS action was installed after it (``faulthandler``, a
    Python ``signal.signal`` handler): that action becomes the one faults that are not hsf's are handed to."""
    if not _state.get("ok"):
        return
    import ctypes

    libc, SigAction = _state["libc"], _state["SigAction"]
    cur = SigAction()
    if libc.sigaction(signal.SIGBUS, None, ctypes.byref(cur)) != 0 or cur.handler == _state["ours"]:
        return
    with _lock:
        _state["previous"] = cur
        _install_native()


def _install_native() -> None:
    import ctypes

    class SigAction(ctypes.Structure):  # struct sigaction of 64-bit Linux (glibc and musl)
        _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                    ("restorer", ctypes.c_void_p)]

    if "callback" not in _state:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        _state["callback"] = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(_native)
        _state["ours"] = ctypes.cast(_state["callback"], ctypes.c_void_p).value
        _state["libc"], _state["SigAction"] = libc, SigAction
        old = SigAction()
        libc.sigaction(signal.SIGBUS, None, ctypes.byref(old))
        _state["previous"] = old  # what a fault that is not ours is handed to
        _state["default"] = SigAction()  # SIG_DFL: a handler chain that hands a fault back to us ends there
    _state["handed_back"] = False
    new = _state["SigAction"]()
    new.handler = _state["ours"]
    new.flags = _SA_SIGINFO
    if _state["libc"].sigaction(signal.SIGBUS, ctypes.byref(new), None) != 0:
        raise OSError(ctypes.get_errno(), "sigaction(SIGBUS) failed")


# ---- the native handler (runs on the faulting thread, inside the signal) ----------------------------------------


def _native(signum: int, info: int, context: int) -> None:
    import ctypes

    _tls.depth = getattr(_tls, "depth", 0) + 1  # while > 0 nothing raises: an exception in a ctypes callback is lost
    try:
        hit = _recover(ctypes, info)
        caller = sys._getframe(0).f_back  # the Python frame whose call into C faulted (None: a C thread)
        if hit is not None and caller is not None:  # a C thread's fault is raised by the check at use
            tid = threading.get_ident()
            _pending.setdefault(tid, hit)
            _arm(caller, tid)
    finally:
        _tls.depth -= 1


def _recover(ctypes: Any, info: int) -> tuple[tuple[int, int], str, str] | None:
    """Zero pages over the part of the mapping past the file's end and count the fault; ``(file, path, message)`` when
    the fault was a watched file's, None when it was handed back to the previous action."""
    try:
        if ctypes.c_int.from_address(info + _SI_CODE_OFFSET).value <= 0:  # sent (kill, raise), not a fault
            _hand_back(resend=True)
            return None
        addr = ctypes.c_void_p.from_address(info + _SI_ADDR_OFFSET).value or 0
        hit = _mapping_of(addr)
        if hit is None:
            _hand_back()
            return None
        start, end, offset, path, ino, writable = hit
        if path is None:  # zeroed by another thread's fault while this one waited for the GIL: reads fine now
            done = next((v for (a, b), v in _zeroed.items() if a <= addr < b), None)
            if done is None:
                _hand_back()
            return done
        page = os.sysconf("SC_PAGE_SIZE")
        again = next(((a, b) for a, b in _poisoned if a <= addr < b), None)
        if again is not None and path is not None and path.startswith(f"/memfd:{_EMPTY_NAME}"):
            first, end = again  # read again after an error was raised for it: zeros again, counted again
            key, path, message = _poisoned.pop(again)
        else:
            found = _key_of(path, ino)
            if found is None or path is None or writable:  # not a file hsf mapped, or a write fault: not ours
                _hand_back()
                return None
            key = found
            for table in (_zeroed, _poisoned):  # a new mapping reuses the addresses of an unmapped one
                for a, b in [r for r in table if r[0] < end and r[1] > start]:
                    table.pop((a, b))
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
        if not _map_over(first, end, -1):
            _die(path, message)
        _zeroed[(first, end)] = (key, path, message)
        _faults[key] = _faults.get(key, 0) + 1
        return key, path, message
    except BaseException:  # noqa: BLE001 - nothing may escape a signal handler; never run on after a failure
        _hand_back()
        return None


def _key_of(path: str | None, ino: int) -> tuple[int, int] | None:
    """The registered file a mapping of ``path`` (inode ``ino`` as /proc/self/maps shows it) belongs to."""
    if path is None or path.startswith("/memfd:"):
        return None
    key = _by_path.get(path)
    if key is not None:
        return key
    return next((k for k in _registered if k[1] == ino), None)  # renamed or deleted since it was mapped


def _map_over(first: int, end: int, fd: int) -> bool:
    """``[first, end)`` replaced by zero pages (``fd`` -1) or by a shared mapping of the empty file ``fd``."""
    flags = _MAP_FIXED | (_MAP_PRIVATE | _MAP_ANONYMOUS if fd < 0 else _MAP_PRIVATE)
    # private and writable as torch.load(mmap=True)'s own copy-on-write mapping: a write to the range changes
    # this process's copy only, never the empty file, and never faults as a write to a read-only page would
    return bool(_state["libc"].mmap(first, end - first, _PROT_READ | _PROT_WRITE, flags, fd, 0) == first)


def _mapping_of(addr: int) -> tuple[int, int, int, str | None, int, bool] | None:
    """``(start, end, file offset, path, inode, writable)`` of the mapping holding ``addr`` (path None when it is
    not a file: anonymous, heap, stack; writable: a shared mapping whose writes reach the file, which a full
    filesystem faults), from /proc/self/maps; None when no mapping holds it."""
    with open("/proc/self/maps", "rb") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) < 5:
                continue
            lo, hi = (int(x, 16) for x in parts[0].split(b"-"))
            if not lo <= addr < hi:
                continue
            writable = b"w" in parts[1] and b"s" in parts[1]  # shared and writable: writes reach the file
            path = parts[5].rstrip(b"\n") if len(parts) == 6 else b""
            if path.startswith(b"/memfd:"):
                return lo, hi, int(parts[2], 16), os.fsdecode(path), int(parts[4]), writable
            if not path.startswith(b"/"):
                return lo, hi, 0, None, 0, writable
            if path.endswith(b" (deleted)"):
                path = path[:-len(b" (deleted)")]
            return lo, hi, int(parts[2], 16), os.fsdecode(path.replace(b"\\012", b"\n")), int(parts[4]), writable
    return None


def _die(path: str, message: str) -> None:
    line = f"{_state.get('prog', 'hsf')}: error: {escape(path)}: {message}\n"
    os.write(2, line.encode("utf-8", "backslashreplace"))
    os._exit(EXIT_CODE)


def _hand_back(resend: bool = False) -> None:
    """Put back the action that was there before ours: returning re-runs a faulting instruction under it, and a
    signal that was sent is sent again (it stays blocked until this handler returns). A signal sent while a
    fault handed back is being handled (``faulthandler`` re-raises it after its dump) goes to the default
    action: the chain ends in the death the fault would have caused, never in a loop."""
    import ctypes

    libc = _state.get("libc")
    prev = _state.get("default") if resend and _state.get("handed_back") else _state.get("previous")
    if libc is not None and prev is not None:
        libc.sigaction(signal.SIGBUS, ctypes.byref(prev), None)
    _state["handed_back"] = not resend
    if resend:
        signal.pthread_kill(threading.get_ident(), signal.SIGBUS)


# ---- raising, once the C code has returned --------------------------------------------------------------------


def _arm(frame: Any, tid: int) -> None:
    """Raise this thread's pending error at the next bytecode of ``frame`` or of anything it calls."""
    if tid not in _saved:  # what a debugger or coverage had set is put back when the error is raised
        saved: list = [sys.gettrace()]
        f = frame
        while f is not None:
            saved.append((f, f.f_trace, f.f_trace_opcodes))
            f.f_trace = _trace
            f.f_trace_opcodes = True
            f = f.f_back
        _saved[tid] = saved
    sys.settrace(_trace)


def _trace(frame: Any, event: str, arg: Any) -> Any:
    tid = threading.get_ident()
    if getattr(_tls, "depth", 0) or tid not in _pending:
        return _trace if tid in _pending else None
    saved = _saved.pop(tid, [None])
    sys.settrace(saved[0])
    for f, trace, opcodes in saved[1:]:
        f.f_trace, f.f_trace_opcodes = trace, opcodes
    key, path, message = _pending.pop(tid)
    _poison(key)
    raise FileChangedSize(message, path=path)


def _poison(key: tuple[int, int] | None) -> None:
    """Put an empty file's mapping over the zero pages of ``key`` (every file when None): a later read of those
    ranges faults, and is counted, again. Only once the C code that faulted has returned (it would fault again)."""
    ranges = [r for r, v in list(_zeroed.items()) if key is None or v[0] == key]
    if not ranges:
        return
    fd = _state.get("empty_fd")
    if fd is None:
        fd = _state["empty_fd"] = os.memfd_create(_EMPTY_NAME, os.MFD_CLOEXEC)
    for first, end in ranges:
        what = _zeroed.pop((first, end), None)
        if what is not None and _map_over(first, end, fd):
            _poisoned[(first, end)] = what


def pending_for_this_thread() -> bool:
    """Whether this thread has an error not raised yet (tests)."""
    return threading.get_ident() in _pending
