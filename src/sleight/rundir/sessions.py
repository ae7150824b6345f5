"""Sessions: one record file and one locked temporary folder per process that works on a run.

Each process writes only its own record (``sessions/<id>.json``) and its own folder
(``.tmp/<id>/``, locked while it lives, so a cleaner can tell a dead session's leftovers from a
live one's).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import IO, NotRequired, Protocol, TypedDict

import pyarrow as pa

from sleight.rundir.config import Shard
from sleight.rundir.files import now, write_json

try:  # POSIX; without it a session cannot tell a dead session's leftovers from a live one's
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

SESSIONS_DIR = "sessions"
TMP_DIR = ".tmp"

SESSION_FIELDS: dict[str, str] = {
    "id": "the session's id (also its file name and its .tmp folder)",
    "started": "UTC start time",
    "finished": "UTC time it stopped normally; null while running or after a kill",
    "completed": "true when every unit of its shard was committed when it finished",
    "shard": '"K/N": the units i with i % N == K - 1 (1/1: all of them)',
    "host": "machine name",
    "pid": "process id on that machine",
    "new_units": "units this session committed",
    "seconds": "how long the session ran (set when it finishes)",
    "device": "the model's device in this session",
    "batch_size": "the model's batch size in this session",
    "engine_version": "the engine's version in this session",
    "versions": "package versions (sleight, python, numpy, pyarrow, and torch/transformers when loaded)",
}


class SessionRecord(TypedDict):
    """A session record (``sessions/<id>.json``), its keys in :data:`SESSION_FIELDS`' order. The
    device, batch size and engine version are the model record's values, kept as it gives them."""

    id: str
    started: str
    finished: str | None
    completed: bool
    shard: str
    host: str
    pid: int
    new_units: int
    device: object
    batch_size: object
    engine_version: object
    versions: dict[str, str]
    seconds: NotRequired[float]  # set when it finishes


class _Run(Protocol):
    """What a session needs of its run (a :class:`~sleight.rundir.directory.RunDir`): its folder."""

    dir: Path


def versions() -> dict[str, str]:
    """Versions of the packages that decide records (torch and transformers only when loaded)."""
    import platform

    import numpy

    from sleight import __version__

    out = {"sleight": __version__, "python": platform.python_version(), "numpy": numpy.__version__, "pyarrow": pa.__version__}
    for name in ("torch", "transformers"):
        mod = sys.modules.get(name)
        if mod is not None:
            out[name] = str(getattr(mod, "__version__", ""))
    return out


class Session:
    """One process's work on a run: its own record file, its own temporary folder (locked while it lives)."""

    def __init__(
        self, run: _Run, shard: Shard, model: Mapping[str, object] | None, versions_: Mapping[str, str] | None = None
    ) -> None:
        self.run = run
        self._t0 = time.monotonic()
        started = dt.datetime.now(dt.timezone.utc)
        self.id = f"{started.strftime('%Y%m%dT%H%M%S%f')}-{socket.gethostname()[:40]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.id = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.id)
        self.tmp_dir = run.dir / TMP_DIR / self.id
        self._lock = self._born_locked()
        m = model or {}
        self.record: SessionRecord = {
            "id": self.id,
            "started": started.isoformat(timespec="seconds"),
            "finished": None,
            "completed": False,
            "shard": str(shard),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "new_units": 0,
            "device": m.get("device"),
            "batch_size": m.get("batch_size"),
            "engine_version": m.get("engine_version"),
            "versions": dict(versions_ if versions_ is not None else versions()),
        }

    def _born_locked(self) -> IO[str]:
        """The session's folder, appearing with its lock already held (so that no cleaner ever sees
        it unlocked): the lock is taken on a file in ``.tmp/``, then moved into the new folder."""
        root = self.tmp_dir.parent
        for attempt in range(20):  # another session may remove an empty .tmp/ between two steps
            try:
                root.mkdir(parents=True, exist_ok=True)
                lock_path = root / f".{self.id}.lock"
                fh = open(lock_path, "w")
                if fcntl is not None:
                    try:
                        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        raise
                    except OSError:  # a file system without locks (some NFS): leftovers then stay, harmless
                        pass
                self.tmp_dir.mkdir(exist_ok=True)  # a retry finds it made (the id is this session's alone)
                os.replace(lock_path, self.tmp_dir / "lock")
                return fh
            except FileNotFoundError:
                if attempt == 19:
                    raise
                time.sleep(0.01)
        raise AssertionError("unreachable")

    @property
    def path(self) -> Path:
        return self.run.dir / SESSIONS_DIR / f"{self.id}.json"

    def save(self) -> None:
        write_json(self.path, self.record, indent=1, tmp_dir=self.tmp_dir)

    def committed(self, n: int = 1) -> None:
        """Count ``n`` newly committed units (saved at once: a killed session's record says what it did)."""
        self.record["new_units"] += n
        self.save()

    def finish(self, completed: bool) -> None:
        """Record the end (completed: every unit of this session's shard is committed) and let go."""
        self.record["finished"] = now()
        self.record["seconds"] = round(time.monotonic() - self._t0, 3)
        self.record["completed"] = bool(completed)
        try:
            self.save()
        finally:
            self.close()

    def close(self) -> None:
        if not self._lock.closed:
            self._lock.close()
            shutil.rmtree(self.tmp_dir, ignore_errors=True)
            try:
                self.tmp_dir.parent.rmdir()  # .tmp/ itself, once no session is left in it
            except OSError:
                pass

