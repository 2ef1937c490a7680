"""Every file the project writes goes through here (tests/unit/test_safefile_lint.py
checks it), as root or not, so that none can be turned against whoever runs it:

* nothing is opened through a link the project did not make: the data goes to a new
  temporary file (``O_CREAT | O_EXCL | O_NOFOLLOW``, random name) in the target's own
  directory, which is then renamed over the target. A link planted at the target is
  replaced, never followed; one planted at a guessed temporary name is never opened;
* a directory others may write to without the sticky bit (they could swap our files
  under us) is refused, and so is a planted link where the project makes a directory;
* the target is replaced whole (written, ``fsync``-ed, renamed): a reader sees the old
  or the new file, and a failure (a full disk too) leaves the previous version intact
  and no temporary file behind.

Failures are one-line :class:`WriteError` messages naming the path and what went wrong.

Reading a file a user hands over (a config, a run directory's files) goes through
:func:`read_regular` or :func:`regular`: a FIFO there would block the reader forever and
``/dev/zero`` would never end, so anything but a regular file is refused
(:class:`ReadError`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Literal, overload

from core.csvtext import csv_text
from core.errors import FabricEmuError

__all__ = ["ReadError", "WriteError", "create_empty", "make_dir", "open_atomic", "open_lock",
           "read_regular", "regular", "save_figure", "write_bytes", "write_csv", "write_json",
           "write_text"]

_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class WriteError(FabricEmuError, OSError):
    """A file could not be written; the previous version (if any) is unchanged."""


class ReadError(FabricEmuError, OSError):
    """A file handed over to be read is not a regular file, or is too large
    (``strerror`` says which, ``filename`` names it)."""


def _kind(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


def _check_regular(st: os.stat_result, path: str | os.PathLike[str], max_bytes: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise ReadError(errno.EINVAL, f"not a regular file ({_kind(st.st_mode)})", str(path))
    if st.st_size > max_bytes:
        raise ReadError(errno.EFBIG, f"{st.st_size:,} bytes, above the {max_bytes:,} a file "
                                     "here may hold", str(path))


def regular(path: str | os.PathLike[str], max_bytes: int) -> Path:
    """``path`` if it is a regular file (a link to one counts) of at most ``max_bytes``;
    :class:`ReadError` if it is anything else, OSError if it cannot be seen."""
    _check_regular(os.stat(path), path, max_bytes)
    return Path(path)


def read_regular(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of ``path``, a regular file of at most ``max_bytes`` (see `regular`):
    opened without blocking, checked, then read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as f:  # closes fd
        _check_regular(os.fstat(fd), path, max_bytes)
        return f.read(max_bytes + 1)[:max_bytes]


def _why(e: OSError) -> str:
    if e.errno == errno.ENOSPC:
        return "no space left on device"
    if e.errno == errno.EDQUOT:
        return "disk quota exceeded"
    return e.strerror or str(e)


def _check_dir_fd(fd: int, directory: Path) -> None:
    """Refuse a directory that others may rename entries in: anyone who can write to
    it without the sticky bit could swap our temporary file or our target under us."""
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise WriteError(f"cannot write in {directory}: not a directory")
    if st.st_mode & stat.S_ISVTX:
        return
    open_to = st.st_mode & stat.S_IWOTH or (
        # Root writing into a directory a group of ordinary users shares.
        st.st_mode & stat.S_IWGRP and os.geteuid() == 0 and st.st_gid != 0)
    if open_to:
        raise WriteError(f"refusing to write in {directory}: others may write to it "
                         f"(mode {stat.S_IMODE(st.st_mode):o}, no sticky bit)")


@contextlib.contextmanager
def _dir_fd(directory: Path) -> Iterator[int]:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise WriteError(f"cannot write in {directory}: {_why(e)}") from None
    try:
        _check_dir_fd(fd, directory)
        yield fd
    finally:
        os.close(fd)


def _target(path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    if path.name in ("", ".", ".."):
        raise WriteError(f"cannot write {path}: not a file name")
    return path


@overload
def open_atomic(path: str | os.PathLike[str], text: Literal[False] = ..., *,
                mode: int = ..., replace: bool = ...
                ) -> contextlib.AbstractContextManager[IO[bytes]]: ...
@overload
def open_atomic(path: str | os.PathLike[str], text: Literal[True], *,
                mode: int = ..., replace: bool = ...
                ) -> contextlib.AbstractContextManager[IO[str]]: ...
def open_atomic(path: str | os.PathLike[str], text: bool = False, *,
                mode: int = 0o644, replace: bool = True
                ) -> contextlib.AbstractContextManager[IO[Any]]:
    """``with open_atomic(path) as f: ...`` writes ``path`` whole when the block ends
    without an exception; with one, nothing changes (and a temporary file is removed).
    ``replace=False``: ``path`` must not exist yet (nor be a link)."""
    return _open_atomic(_target(path), text, mode, replace)


@contextlib.contextmanager
def _open_atomic(path: Path, text: bool, mode: int, replace: bool) -> Iterator[IO[Any]]:
    directory = path.parent
    with _dir_fd(directory) as dfd:
        tmp = f".{path.name[:200]}.{secrets.token_hex(6)}.tmp"
        opener = lambda name, flags: os.open(name, _NEW, mode, dir_fd=dfd)  # noqa: E731
        try:
            f = open(tmp, "w" if text else "wb", opener=opener,  # noqa: SIM115
                     **({"encoding": "utf-8", "newline": ""} if text else {}))
        except OSError as e:
            raise WriteError(f"cannot write {path}: {_why(e)}") from None
        renamed = False
        try:
            with f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            if replace:
                os.replace(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
                renamed = True
            else:  # a hard link fails on any existing entry, a link included
                os.link(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
        except FileExistsError:
            raise WriteError(f"cannot create {path}: it exists") from None
        except OSError as e:
            if isinstance(e, FabricEmuError):
                raise
            raise WriteError(f"cannot write {path}: {_why(e)}; "
                             + ("the previous version is kept" if _exists(dfd, path.name)
                                else "nothing was written")) from None
        finally:
            if not renamed:  # failed, or hard-linked (replace=False)
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)


def _exists(dfd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dfd, follow_symlinks=False)
        return True
    except OSError:
        return False


def write_bytes(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o644,
                replace: bool = True) -> None:
    with open_atomic(path, mode=mode, replace=replace) as f:
        f.write(data)


def write_text(path: str | os.PathLike[str], text: str, *, mode: int = 0o644) -> None:
    with open_atomic(path, True, mode=mode) as f:
        f.write(text)


def write_json(path: str | os.PathLike[str], obj: object, *, indent: int | None = 1) -> None:
    import json

    write_text(path, json.dumps(obj, indent=indent, default=str))


def write_csv(path: str | os.PathLike[str], frame: Any) -> None:
    """A pandas DataFrame as CSV, without its index: the text `core.csvtext` builds
    (pandas' own, twice as fast), or pandas' where it does not build it."""
    text = csv_text(frame)
    with open_atomic(path, True) as f:
        if text is None:
            frame.to_csv(f, index=False)
        else:
            f.write(text)


def save_figure(fig: Any, path: str | os.PathLike[str], **kwargs: Any) -> None:
    """A matplotlib figure, in the format its suffix names (``.png`` unless told)."""
    path = _target(path)
    kwargs.setdefault("format", path.suffix.lstrip(".").lower() or "png")
    with open_atomic(path) as f:
        fig.savefig(f, **kwargs)


def make_dir(path: str | os.PathLike[str], *, parents: bool = True,
             exist_ok: bool = True, mode: int = 0o777) -> Path:
    """``mkdir`` that refuses a link (or anything but a directory) where the directory
    should be: files written in it would otherwise land wherever the link points."""
    path = Path(path)
    if parents and not path.parent.exists():
        make_dir(path.parent, parents=True, exist_ok=True, mode=mode)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        if not exist_ok:
            raise WriteError(f"cannot create directory {path}: it exists") from None
    except OSError as e:
        raise WriteError(f"cannot create directory {path}: {_why(e)}") from None
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise WriteError(f"refusing to use {path}: it is a symbolic link, not a directory")
    if not stat.S_ISDIR(st.st_mode):
        raise WriteError(f"cannot use {path}: it exists and is not a directory")
    return path


def create_empty(path: str | os.PathLike[str], *, mode: int = 0o444) -> None:
    """A new empty file at ``path``, which must not exist (nor be a link)."""
    os.close(os.open(path, _NEW, mode))


def open_lock(path: str | os.PathLike[str], *, mode: int = 0o600) -> int:
    """A descriptor of a lock file (created if missing, never through a link) for flock."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM) and os.geteuid() != 0:
            raise WriteError(f"cannot open the lock file {path}: permission denied; "
                             "this command needs root (sudo)") from None
        if e.errno == errno.ELOOP:
            raise WriteError(f"refusing the lock file {path}: it is a symbolic link") from None
        raise WriteError(f"cannot open the lock file {path}: {_why(e)}") from None
