"""Where commands write: an output path is never an input, a capture or a directory, and is written whole.

Every command that writes a file (``hsf report -o``, ``hsf scan -o``, ``hsf capture``, a result's ``.save()``)
checks its path with :func:`check_output` before any work, and writes through :func:`atomic_output` (a
temporary file in the same folder, renamed over the target only once complete; a failure leaves the old file
in place). ``hsf scan`` appends rows as it goes, so it holds :func:`lock_output` on its ``-o`` instead.
"""

from __future__ import annotations

import codecs
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import IO

from ..errors import ForensicsError

CAPTURE_CONTAINERS = ("zip", "gzip", "safetensors", "pickle")  # what _io.sniff calls a possible capture
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


def _sniff(path: str) -> str | None:
    from .formats._io import sniff

    try:
        return sniff(path)
    except ForensicsError:  # empty or unreadable: nothing a capture could be
        return None


def check_output(path: str | os.PathLike, inputs: Iterable[str | os.PathLike] = (), *, allow: str = "",
                 directory: bool = False) -> str:
    """``path`` as a string, or a ForensicsError when writing it could destroy data or cannot work.

    Refused: a directory; the same file as any input (``os.path.samefile``: links included); a path under an
    input folder that the dataset listing would take as a capture; an existing file that sniffs as a capture
    container (zip, gzip, safetensors, pickle) unless its container is ``allow``. ``directory=True``: the
    output is a folder (a Parquet scan), which must not be, or lie inside, an input folder.
    """
    out = os.fspath(path)
    if directory:
        if os.path.exists(out) and not os.path.isdir(out):
            raise ForensicsError("output must be a folder, found a file", path=out)
        for src in inputs:
            src = os.fspath(src)
            if os.path.isdir(src) and (os.path.realpath(out) + os.sep).startswith(os.path.realpath(src) + os.sep):
                raise ForensicsError(f"output folder lies inside the input folder {src}; choose another", path=out)
        return out
    if os.path.isdir(out):
        raise ForensicsError("output is a directory; give a file name", path=out)
    parent = os.path.dirname(os.path.abspath(out))
    if os.path.exists(parent) and not os.path.isdir(parent):
        raise ForensicsError("output folder is not a directory", path=out)
    exists = os.path.exists(out)
    from .formats import is_capture_name

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
        kind = _sniff(out)
        if kind in CAPTURE_CONTAINERS and kind != allow:
            raise ForensicsError(f"output exists and looks like a capture ({kind} container); refusing to "
                                 "overwrite it", path=out)
    return out


@contextmanager
def atomic_output(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside ``path`` and rename it over ``path`` when the block ends without error.

    Text mode writes UTF-8; a non-UTF-8 file name is written as ``\\xNN`` escapes (it never breaks a report).

    Example:
        >>> with atomic_output("report.html") as f:      # doctest: +SKIP
        ...     f.write(html)
    """
    out = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(out))
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(out)}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise ForensicsError(f"cannot write: {e.strerror}", path=out) from None
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
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
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
    import fcntl

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
    try:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        f = open(out, "a+", encoding="utf-8", errors=TEXT_ERRORS)
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
        f.close()  # closing releases the lock
