"""Writing files that other processes may read at any moment."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
#: How to open a file another user may have planted: never through a link, never blocking on a
#: FIFO or a device, never taking a terminal. The caller fstat()s the descriptor and decides.
READ_UNTRUSTED = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | _CLOEXEC


def write_atomic(path: Path, write: Callable[[BinaryIO], object], *, mode: int | None = None, create_mode: int = 0o600) -> None:
    """Write through a temporary file in the same folder and rename it, so a reader never
    sees half a file. The temporary file gets a random name and is created new (``O_EXCL``,
    which never follows a link), with ``create_mode`` less the umask; ``mode`` then sets the
    permissions exactly. Raises what ``write`` or the file system raise; the temporary file
    never stays behind."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC, create_mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: Path, text: str, mode: int | None = None) -> None:
    """:func:`write_atomic` for UTF-8 text (created 0600 unless ``mode`` says otherwise)."""
    data = text.encode("utf-8")
    write_atomic(path, lambda fh: fh.write(data), mode=mode)
