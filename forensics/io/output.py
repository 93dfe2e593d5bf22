"""Where commands write: an output path is never an input, a capture or a directory, and is written whole.

Every command that writes a file (``hsf report -o``, ``hsf scan -o``, ``hsf capture``, a result's ``.save()``)
checks its path with :func:`check_output` before any work, and writes through :func:`atomic_output` (a
temporary file in the same folder, renamed over the target only once complete; a failure leaves the old file
in place). ``hsf scan`` appends rows as it goes, so it holds :func:`lock_output` on its ``-o`` instead.

What ``-o`` may be (:func:`output_target`):
- a new path or a regular file: written whole through a temporary file and a rename;
- a symbolic link to a regular file: its target is written the same way and the link is kept (as a shell's
  ``>`` would); a dangling link is refused;
- ``-``, a character device (``/dev/null``, a terminal), a FIFO or a pipe (``/dev/stdout``, ``/dev/fd/N``):
  written through, opened for appending, never replaced, truncated or renamed over (a FIFO without a reader
  is refused instead of blocking);
- a block device, a socket or a directory: refused in one line.

Temporary files and folders are named ``.NAME.hsf-tmp-PID-XXXXXXXX`` beside their target (:func:`temp_path`):
one a killed run left (``kill -9``, a lost machine) is removed by the next write of the same target once its PID
is no longer running (:func:`clean_stale`), and its name says which target and which process it was.

A write that fails for lack of room (``ENOSPC``, ``EDQUOT``) or over the file-size limit (``EFBIG``,
``ulimit -f``) is one line, ``cannot write OUT: <reason>``: a whole-file output is left as it was, an appended
one keeps every complete row written before.
"""

from __future__ import annotations

import codecs
import errno
import fcntl
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import IO

from forensics.io.formats import is_capture_name
from forensics.io.formats._io import sniff

from ..errors import ForensicsError
from .tempfiles import clean_stale, temp_path

CAPTURE_CONTAINERS = ("zip", "gzip", "safetensors", "pickle")  # what _io.sniff calls a possible capture
# Files the readers take from an input's folder (or its parent: capture.json): the declared layers, stamps, the
# speculators dataset markers, a tokenizer or chat template, a model's or draft's config. An output of one of
# these names beside an input would change how that input reads (or destroy it), so it is refused there.
READ_SIDE_NAMES = frozenset({
    "capture.json", "data_config.json", "sample_lengths.json", "stamps.jsonl", "dataset_info.json", "state.json",
    "config.json", "generation_config.json", "training.json", "model.safetensors.index.json", "tokenizer.json",
    "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja", "chat_template.json", "vocab.json",
    "merges.txt", "tokenizer.model", "added_tokens.json",
})
TEXT_ERRORS = "hsf-escape"  # codec error handler of text outputs (registered below)


def _escape_unencodable(err: UnicodeError) -> tuple[str, int]:
    """An undecodable file-name byte (PEP 383 surrogate U+DC80..U+DCFF) as ``\\xNN``, as the shell shows it;
    any other unencodable character as a backslash escape."""
    if not isinstance(err, UnicodeEncodeError):
        raise err
    bad = err.object[err.start:err.end]
    return "".join(f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else f"\\u{ord(c):04x}"
                   for c in bad), err.end


codecs.register_error(TEXT_ERRORS, _escape_unencodable)


STDOUT = "-"
WRITE_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EACCES, errno.EPERM,
                errno.ENXIO, errno.EINVAL)  # failures of a write or of opening an output, as one line
_THROUGH_ROOTS = ("/dev/", "/proc/")  # a regular file reached through these (/dev/stdout > file) is written through


def write_error(out: str, e: OSError) -> ForensicsError:
    """``cannot write OUT: <reason>`` for an OSError met while writing ``out``."""
    why = e.strerror or type(e).__name__
    if e.errno == errno.ENXIO and _is_fifo(out):
        why = "no process is reading this FIFO"
    return ForensicsError(f"cannot write {out}: {why}")


def _is_fifo(path: str) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


def output_target(path: str | os.PathLike) -> tuple[str, str]:
    """How ``path`` is written: ``("file", where)`` (whole, through a temporary file renamed over ``where``: the
    path itself, or a symbolic link's target) or ``("through", path)`` (``-``, a character device, a FIFO or a
    pipe: opened for appending, never replaced). Anything else is a ForensicsError.

    Example:
        >>> output_target("-")
        ('through', '-')
        >>> output_target("/dev/null")
        ('through', '/dev/null')
    """
    out = os.fspath(path)
    if out == STDOUT:
        return "through", out
    if not os.path.lexists(out):
        return "file", out
    try:
        st = os.stat(out)  # follows links
    except OSError:
        if os.path.islink(out):
            raise ForensicsError("output is a symbolic link to nothing (a dangling link); give its target or "
                                 "another name", path=out) from None
        raise
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        raise ForensicsError("output is a directory; give a file name", path=out)
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return "through", out
    if not stat.S_ISREG(mode):
        kind = "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file"
        raise ForensicsError(f"output is {kind}; refusing to write it", path=out)
    if os.path.abspath(out).startswith(_THROUGH_ROOTS):  # /dev/stdout or /dev/fd/N redirected to a file
        return "through", out
    if os.path.islink(out):
        return "file", os.path.realpath(out)
    return "file", out


@contextmanager
def _through(out: str, mode: str) -> Iterator[IO]:
    """``out`` (``-``, a device, a FIFO, a pipe) opened for appending; a FIFO without a reader is refused."""
    text = "b" not in mode
    try:
        if out == STDOUT:  # a file object of our own on a copy of fd 1: closing it never closes sys.stdout
            sys.stdout.flush()
            fd = os.dup(sys.stdout.fileno())
        else:
            fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            os.set_blocking(fd, True)
        f = os.fdopen(fd, "a" if text else "ab", encoding="utf-8" if text else None,
                      errors=TEXT_ERRORS if text else None)
    except OSError as e:
        raise write_error(out, e) from None
    try:
        try:
            yield f
            if not f.closed:
                f.flush()
        except BrokenPipeError:
            raise
        except OSError as e:
            if e.errno in WRITE_ERRNOS:
                raise write_error(out, e) from None
            raise
    finally:
        try:
            f.close()
        except OSError:  # what could not be flushed was already reported
            pass


def _sniff(path: str) -> str | None:
    try:
        return sniff(path)
    except ForensicsError:  # empty or unreadable: nothing a capture could be
        return None


def check_output(path: str | os.PathLike, inputs: Iterable[str | os.PathLike] = (), *, allow: str = "",  # noqa: C901
                 directory: bool = False) -> str:
    """``path`` as a string, or a ForensicsError when writing it could destroy data or cannot work.

    Refused: a directory; the same file as any input (``os.path.samefile``: links included); a path under an
    input folder that the dataset listing would take as a capture; an existing file that sniffs as a capture
    container (zip, gzip, safetensors, pickle) unless its container is ``allow``. ``directory=True``: the
    output is a folder (a Parquet scan), which must not be, or lie inside, an input folder.
    """
    out = os.fspath(path)
    if directory:
        if out == STDOUT:
            raise ForensicsError("a Parquet scan writes a folder of part files; it cannot go to stdout (-)")
        if os.path.islink(out):
            raise ForensicsError("output folder is a symbolic link; give the folder itself", path=out)
        if os.path.exists(out) and not os.path.isdir(out):
            raise ForensicsError("output must be a folder, found a file", path=out)
        for src in inputs:
            src = os.fspath(src)
            if os.path.isdir(src) and (os.path.realpath(out) + os.sep).startswith(os.path.realpath(src) + os.sep):
                raise ForensicsError(f"output folder lies inside the input folder {src}; choose another", path=out)
        return out
    kind, target = output_target(out)  # refuses a directory, a block device, a socket, a dangling link
    if kind == "through":
        return out
    _refuse_side_file(out, inputs)
    parent = os.path.dirname(os.path.abspath(out))
    if os.path.exists(parent) and not os.path.isdir(parent):
        raise ForensicsError("output folder is not a directory", path=out)
    exists = os.path.exists(out)

    for src in inputs:
        src = os.fspath(src)
        if exists and os.path.exists(src):
            try:
                if os.path.samefile(out, src):
                    raise ForensicsError("output is one of the inputs; refusing to overwrite it", path=out)
            except OSError:
                pass
        if os.path.isdir(src):
            root = os.path.realpath(src)
            real = os.path.realpath(out)
            if real.startswith(root + os.sep) and is_capture_name(os.path.basename(real)):
                raise ForensicsError(f"output would be read as a capture of the input folder {src}; "
                                     "refusing to write a capture-named file there", path=out)
    if exists and os.path.isfile(out):
        container = _sniff(target)
        if container in CAPTURE_CONTAINERS and container != allow:
            raise ForensicsError(f"output exists and looks like a capture ({container} container); refusing to "
                                 "overwrite it", path=out)
    return out


def _refuse_side_file(out: str, inputs: Iterable[str | os.PathLike]) -> None:
    """A ForensicsError when ``out`` is named like a side file (:data:`READ_SIDE_NAMES`) and lies where an input
    reads it: inside an input folder, or in an input file's folder or that folder's parent."""
    real = os.path.realpath(out)
    if os.path.basename(real) not in READ_SIDE_NAMES and os.path.basename(out) not in READ_SIDE_NAMES:
        return
    where = os.path.dirname(real)
    for src in inputs:
        src = os.fspath(src)
        if not os.path.exists(src):
            continue
        root = os.path.realpath(src)
        if os.path.isdir(src):
            inside = (where + os.sep).startswith(root + os.sep)
        else:
            inside = where in (os.path.dirname(root), os.path.dirname(os.path.dirname(root)))
        if inside:
            raise ForensicsError(f"output is named like a side file the input {src} is read with "
                                 f"({os.path.basename(real)}); refusing to write it there", path=out)


@contextmanager
def atomic_output(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside ``path`` and rename it over ``path`` when the block ends without error.

    Text mode writes UTF-8; a non-UTF-8 file name is written as ``\\xNN`` escapes (it never breaks a report).
    A symbolic link's target is written (the link stays); ``-``, a device, a FIFO or a pipe is written through
    (:func:`output_target`). No room or a size limit while writing: ``cannot write OUT: …``, nothing replaced.

    Example:
        >>> with atomic_output("report.html") as f:      # doctest: +SKIP
        ...     f.write(html)
    """
    shown = os.fspath(path)
    kind, out = output_target(shown)
    if kind == "through":
        with _through(out, mode) as f:
            yield f
        return
    folder = os.path.dirname(os.path.abspath(out))
    try:
        os.makedirs(folder, exist_ok=True)
        clean_stale(out)  # what a killed run of this output left
        tmp = temp_path(out)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError as e:
        raise ForensicsError(f"cannot write: {e.strerror}", path=shown) from None
    try:
        text = "b" not in mode
        with os.fdopen(fd, mode, encoding="utf-8" if text else None,
                       errors=TEXT_ERRORS if text else None) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())  # the data is on disk before the rename makes it the file
        if os.path.exists(out):  # keep the mode of the file replaced
            os.chmod(tmp, os.stat(out).st_mode & 0o7777)
        else:  # mkstemp makes 0600: give a new file the mode open() would have
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, out)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO):
            raise write_error(shown, e) from None
        raise
    try:  # the rename itself on disk
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:  # some filesystems refuse fsync on a directory; the rename is done
        pass


@contextmanager
def lock_output(path: str | os.PathLike, truncate: bool, directory: bool = False) -> Iterator[IO]:
    """``path`` opened for appending under an exclusive ``flock``; a second writer gets a ForensicsError.

    The lock is taken before anything is truncated, so a refused second scan changes nothing.
    ``directory=True``: the folder itself is created and locked (a Parquet scan's output); yields None.
    """
    out = os.fspath(path)
    if directory:
        try:
            os.makedirs(out, exist_ok=True)
            fd = os.open(out, os.O_RDONLY)
        except OSError as e:
            raise ForensicsError(f"cannot write: {e.strerror}", path=out) from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise ForensicsError("another scan is writing this folder; wait for it, or choose another -o",
                                     path=out) from None
            yield None  # type: ignore[misc]
        finally:
            os.close(fd)
        return
    kind, real = output_target(out)
    if kind == "through":  # -, a device, a FIFO, a pipe: appended to, never locked, truncated or resumed
        if not truncate:
            raise ForensicsError("--resume reads the rows back, so it needs a regular file as -o", path=out)
        with _through(real, "w") as f:
            yield f
        return
    try:
        os.makedirs(os.path.dirname(os.path.abspath(real)), exist_ok=True)
        f = open(real, "a+", encoding="utf-8", errors=TEXT_ERRORS)
    except OSError as e:
        raise ForensicsError(f"cannot write: {e.strerror}", path=out) from None
    try:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise ForensicsError("another scan is writing this file; wait for it, or choose another -o",
                                 path=out) from None
        if truncate:
            f.truncate(0)
        yield f
    finally:
        try:
            f.close()  # closing releases the lock
        except OSError:  # a failed flush was already reported by append_line
            pass


def append_line(f: IO, out: str, line: str) -> None:
    """Append one line (``line`` + newline) to ``f`` whole, or not at all: on a failed write (no room, the
    file-size limit) the partial line is cut off again and the error is ``cannot write OUT: …``; the lines
    before it stay."""
    data = (line + "\n").encode("utf-8", TEXT_ERRORS)
    f.flush()
    fd = f.fileno()
    try:
        start: int | None = os.lseek(fd, 0, os.SEEK_END)
    except OSError:  # a pipe: nothing to cut back
        start = None
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BrokenPipeError:
        raise
    except OSError as e:
        if start is not None:
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass
        raise ForensicsError(f"cannot write {out}: {e.strerror or type(e).__name__}; the rows written before "
                             "this one are kept") from None
