"""Writing files that other processes may read at any moment."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_text_atomic(path: Path, text: str, mode: int | None = None) -> None:
    """Write through a temporary file in the same folder and rename it, so a reader
    never sees half a file; ``mode`` sets the permissions (else mkstemp's 0600).
    Raises OSError; the temporary file never stays behind."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
