"""The output check every writing command (and every library entry that writes) makes before it
loads anything: one line naming an output that cannot be written.

May import: ``sleight.errors`` only.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from sleight.errors import UserError


def check_writable(path: Path | str, flag: str = "--out", *, file: bool = False) -> Path:
    """Refuse an output that cannot be written, in one line, before any model is loaded.

    ``path`` is a folder to create or reuse (``file=False``) or a file to write. Nothing is created:
    the nearest existing folder above it must be a folder (not a file) that accepts a new file,
    which a probe file, removed at once, proves (``/proc``, ``/sys`` and read-only mounts refuse).
    """
    p = Path(path)
    where = p.absolute() if not file else p.absolute().parent
    try:
        if not file and p.exists() and not p.is_dir():
            raise UserError(f"{flag} {p} exists and is not a folder")
        if file and p.is_dir():
            raise UserError(f"{flag} {p} is a folder, not a file")
        while not where.exists():
            where = where.parent
        if not where.is_dir():
            raise UserError(f"{flag} {p}: {where} is a file, so nothing can be written under it")
        fd, probe = tempfile.mkstemp(prefix=".sleight-probe-", dir=where)
    except OSError as exc:
        raise UserError(f"{flag} {p} cannot be written: {where} refuses new files ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)
    return p
