"""Files written so that nothing is half-written, replaced by mistake or lost to a signal:
an output written to a temporary name and renamed over a regular file (or a missing one),
written through a device, a FIFO or the process's own descriptor, a symlink followed;
and the signals held while a rename or a clean-up must not stop halfway.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import re
import signal
import stat
import sys
import tempfile
import threading
from pathlib import Path
from typing import Iterator


@dataclasses.dataclass(frozen=True)
class OutputTarget:
    """Where replace_file writes a path it is given, and how."""

    path: Path  # the file written: a symlink's target, else the path as given
    replaced: bool  # True: a temporary written beside it and renamed over it; False: written through
    descriptor: int | None = None  # the path names this process's open descriptor (/dev/stdout: 1)


# A name of an open descriptor, once its folders are resolved: /dev/stdout is a link to
# /proc/self/fd/1, /proc/self to /proc/PID, /dev/fd to /proc/self/fd.
_DESCRIPTOR_NAME = re.compile(r"/proc/(\d+)(?:/task/\d+)?/fd/(\d+)")


def output_target(path: str | os.PathLike) -> OutputTarget:
    """How replace_file writes `path`. A regular file, or nothing yet, is replaced whole
    (a temporary renamed over it). What is not a file is written through, never renamed
    over: a character device (a terminal, /dev/null, /dev/full), a FIFO, a name of an open
    descriptor (/dev/stdout, even when it is a file: the shell's redirection keeps
    writing to it). A symlink is followed, the link left as it is: its target is what
    is written, as a shell's `>` writes it. A directory or a block device is refused (an
    OSError, nothing written)."""
    here = Path(path).absolute()
    for _ in range(40):  # the kernel's own bound on links followed
        here = Path(os.path.realpath(here.parent)) / here.name  # the folders' links resolved
        named = _DESCRIPTOR_NAME.fullmatch(str(here))
        if named:
            own = int(named[1]) == os.getpid()
            return OutputTarget(Path(path), False, int(named[2]) if own else None)
        try:
            link = os.readlink(here)
        except OSError:  # not a link (EINVAL), or nothing there (ENOENT): the end of the chain
            break
        here = here.parent / link  # a relative link names a path in its own folder
    else:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
    try:
        mode = os.stat(here).st_mode
    except FileNotFoundError:
        return OutputTarget(here, True)
    if stat.S_ISREG(mode):
        return OutputTarget(here, True)
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return OutputTarget(here, False)
    raise OSError(errno.EINVAL, "a block device or a socket: give a file, a character device or a FIFO")


def replace_file(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` as output_target says: a file is written to a temporary name
    beside it and renamed into place, so that a reader never sees a half-written file
    and a failed or interrupted write leaves none (an OSError propagates, the temporary
    removed); a device, a FIFO or a descriptor is written through."""
    target = output_target(path)
    if not target.replaced:
        _write_through(target, data)
        return
    path = target.path
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.partial-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(temporary, 0o666 & ~umask())
        os.replace(temporary, path)
    except BaseException:
        with signals_held():
            Path(temporary).unlink(missing_ok=True)
        raise


def _write_through(target: OutputTarget, data: bytes) -> None:
    """Write `data` to a device, a FIFO or a descriptor as it is (a FIFO's open waits for
    its reader, as a shell's redirection does); a write error (ENOSPC from /dev/full,
    EPIPE) propagates as an OSError."""
    # What this process printed comes first: /dev/stdout may be the same pipe or file.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    # This process's own descriptor is written where it stands: opened again by its name,
    # a file would be written from its start, over what the process printed before.
    fd = target.descriptor if target.descriptor is not None else os.open(target.path, os.O_WRONLY)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        if target.descriptor is None:
            os.close(fd)


def umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back until the block ends (then raised again): for renames
    and clean-ups that must not stop halfway. Python handlers that only take note, not a
    blocked signal mask: the kernel may hand a process's signal to any of its threads
    (numpy's among them), and Python then runs the handler in the main thread at once.
    Outside the main thread, where handlers cannot be set, nothing is held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {number: signal.signal(number, lambda number, frame: caught.append(number))
                for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)
        for number in dict.fromkeys(caught):
            signal.raise_signal(number)
