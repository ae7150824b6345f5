"""The run directory: its manifest (created once by exactly one process), its sessions and parts.

A run is checked against a config before anything expensive (:meth:`RunDir.check`), then created or
joined (:meth:`RunDir.open`: the manifest is created with an exclusive link, the loser compares its
config and joins or refuses). :func:`find_runs` names the run directories of a kind under folders.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypedDict, cast

import pyarrow as pa

from sleight.errors import UserError
from sleight.rundir.config import ALL, Shard, config_diff, covered, fingerprint, model_identity, parse_shard
from sleight.rundir.files import _fsync_dir, dumps, now, read_json
from sleight.rundir.parts import Parts
from sleight.rundir.sessions import SESSIONS_DIR, TMP_DIR, Session, SessionRecord

try:  # POSIX; without it a cleaner cannot tell a dead session's leftovers from a live one's
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

FORMAT = "sleight-run"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"

# The fields of manifest.json, in the order they are written; see docs/rundir.md.
MANIFEST_FIELDS: dict[str, str] = {
    "format": f'always "{FORMAT}"',
    "version": f"version of this format ({FORMAT_VERSION}); a reader refuses a newer one",
    "kind": "which command made the run: tamper, audit, forecast or ptrue",
    "created": "UTC time the run directory was created (ISO 8601)",
    "model": "the model record (spec, model_id, revision, chat_template_sha256, chat_template_kwargs, tokenizer, engine, engine_version, dtype, device, batch_size) of the first session",
    "config": "everything that decides the records; a resume with a different value is refused",
    "fingerprint": "sha256 of the identity part of config and of the model's identity",
    "units": "how many units of work (questions, items) the run has in all",
}
# Derived when the manifest is read (never stored in manifest.json).
DERIVED_FIELDS: dict[str, str] = {
    "sessions": "the session records (sessions/*.json) in start order",
    "completed": "true once completed sessions' shards cover every unit",
    "finished": "when the last session finished, once completed; else null",
}


class Manifest(TypedDict, total=False):
    """``manifest.json`` as read back: :data:`MANIFEST_FIELDS`, ``versions`` and the
    :data:`DERIVED_FIELDS` (a run directory of any age may lack a key, so readers ``get`` them). A
    kind's own extras are read through a typed dict of its own, or the manifest as a
    ``Mapping[str, object]``."""

    format: str
    version: int
    kind: str
    created: str
    model: dict[str, object] | None
    config: dict[str, object]
    fingerprint: str
    units: int
    versions: dict[str, str]
    sessions: list[SessionRecord]
    completed: bool
    finished: str | None


class RunDir:
    """One run directory of one ``kind``: checked against a config, joined by sessions, holding parts."""

    def __init__(self, path: Path | str, kind: str, *, identity_keys: Sequence[str] | None = None) -> None:
        self.dir = Path(path)
        self.kind = kind
        self.identity_keys = tuple(identity_keys) if identity_keys is not None else None

    @property
    def manifest_path(self) -> Path:
        return self.dir / MANIFEST

    def parts(self, name: str, schema: pa.Schema) -> Parts:
        return Parts(self.dir, name, schema)

    # -- reading ---------------------------------------------------------------------------------
    def sessions(self) -> list[SessionRecord]:
        folder = self.dir / SESSIONS_DIR
        recs: list[SessionRecord] = []
        for p in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                rec = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # a session record is provenance; one unreadable record never blocks a run
            if isinstance(rec, dict):
                recs.append(cast(SessionRecord, rec))
        return sorted(recs, key=lambda r: (str(r.get("started", "")), str(r.get("id", ""))))

    def read_manifest(self) -> Manifest | None:
        """The manifest with its derived fields (``sessions``, ``completed``, ``finished``), or None."""
        if not self.manifest_path.is_file():
            return None
        m = cast(Manifest, read_json(self.manifest_path, "use another --out, or --overwrite to start over"))
        if m.get("format") != FORMAT:
            raise UserError(
                f"{self.manifest_path} is not a {FORMAT} manifest (format {m.get('format')!r}); use another --out, or --overwrite to start over"
            )
        if int(m.get("version", 0)) > FORMAT_VERSION:
            raise UserError(
                f"{self.manifest_path} is format version {m.get('version')}; this sleight reads up to {FORMAT_VERSION} (upgrade sleight)"
            )
        m["sessions"] = sessions = self.sessions()
        if "units" in m:
            done = [parse_shard(str(s.get("shard") or "1/1")) for s in sessions if s.get("completed")]
            m["completed"] = covered(int(m["units"]), done)
            ends = [str(s["finished"]) for s in sessions if s.get("finished")]
            m["finished"] = max(ends) if m["completed"] and ends else None
        return m

    def require(self, hint: str = "") -> Manifest:
        m = self.read_manifest()
        if m is None:
            raise UserError(f"{self.dir} is not a {self.kind} run directory (no {MANIFEST}){'; ' + hint if hint else ''}")
        self._check_kind(m)
        return m

    def _check_kind(self, m: Manifest) -> None:
        if m.get("kind") != self.kind:
            raise UserError(f"{self.dir} holds a '{m.get('kind')}' run, not '{self.kind}'; use another --out")

    def _check_config(self, old: Manifest, config: Mapping[str, object]) -> None:
        """The one refusal rule: one line naming each field that differs from the run's own config."""
        diff = config_diff(old.get("config") or {}, config, self.identity_keys)
        if diff:
            raise UserError(
                f"run directory {self.dir} was made with a different config ({'; '.join(diff)}); use another --out, or --overwrite to start over"
            )

    # -- checking --------------------------------------------------------------------------------
    def check(self, config: Mapping[str, object], *, overwrite: bool = False) -> Manifest | None:
        """Before anything expensive: refuse a directory that is not this run, or start it over.

        Returns the manifest to resume, or None for a new run. A different config is refused with one
        line naming each differing field; ``overwrite`` empties a directory that holds a run (of any
        config or kind, readable or not) and never touches one that holds none.
        """
        if self.dir.exists() and not self.dir.is_dir():
            raise UserError(f"--out {self.dir} exists and is not a directory")
        if self.dir.is_dir() and not os.access(self.dir, os.W_OK):
            raise UserError(f"--out {self.dir} is not writable")
        if overwrite and self.manifest_path.is_file():
            self.start_over()
            return None
        old = self.read_manifest() if self.dir.is_dir() else None
        if old is None:
            stray = [p.name for p in self.dir.iterdir() if p.name != TMP_DIR] if self.dir.is_dir() else []
            if stray:
                raise UserError(f"--out {self.dir} is not empty and holds no {MANIFEST}; choose a new or empty directory")
            return None
        self._check_kind(old)
        self._check_config(old, config)
        return old

    def start_over(self) -> None:
        """Empty the run directory (only one that holds a manifest: never a stranger's folder)."""
        if not self.manifest_path.is_file():
            return
        for p in self.dir.iterdir():
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)

    # -- joining ---------------------------------------------------------------------------------
    def open(
        self,
        config: Mapping[str, object],
        model: Mapping[str, object] | None,
        *,
        units: int,
        extra: Mapping[str, object] | None = None,
        shard: Shard = ALL,
        versions_: Mapping[str, str] | None = None,
    ) -> Session:
        """Create the run (exactly one process wins) or join it; start and record this session.

        A joining process with another config or model is refused with one line (the run is not
        touched). Leftovers of dead sessions in ``.tmp/`` are removed.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        session = Session(self, shard, model, versions_)
        try:
            manifest: dict[str, object] = {  # as written: the kind's extras after the fields
                "format": FORMAT,
                "version": FORMAT_VERSION,
                "kind": self.kind,
                "created": now(),
                "model": dict(model) if model is not None else None,
                "config": dict(config),
                "fingerprint": fingerprint(config, model, self.identity_keys),
                "units": int(units),
                **dict(extra or {}),
                "versions": session.record["versions"],
            }
            if not self._create(manifest, session.tmp_dir):
                old = self.require()
                self._check_config(old, config)
                if model is not None and old.get("model"):
                    mdiff = config_diff(model_identity(old["model"]), model_identity(model))
                    if mdiff:
                        raise UserError(
                            f"run directory {self.dir} was made with a different model ({'; '.join(mdiff)}); use another --out"
                        )
                if int(old.get("units", units)) != int(units):
                    raise UserError(f"run directory {self.dir} has {old.get('units')} units, this run {units}; use another --out")
            self._clear_dead_tmp(session.id)
            session.save()
        except BaseException:
            session.close()
            raise
        return session

    def _create(self, manifest: Mapping[str, object], tmp_dir: Path) -> bool:
        """Write manifest.json unless it exists (an exclusive link: of two racing processes one wins)."""
        tmp = tmp_dir / MANIFEST
        with open(tmp, "wb") as fh:
            fh.write((dumps(manifest, indent=1) + "\n").encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, self.manifest_path)
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: exclusive create (content written after)
            try:
                fd = os.open(self.manifest_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as fh:
                fh.write(tmp.read_bytes())
                fh.flush()
                os.fsync(fh.fileno())
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(self.dir)
        return True

    def _clear_dead_tmp(self, own: str, *, grace_s: float = 300.0) -> None:
        """Remove what killed sessions left in ``.tmp/`` (a live session holds its folder's lock;
        a folder or lock file still being born is left alone for ``grace_s``).

        A lone lock file (``.<id>.lock``) belongs to a session being born: it is created, then locked,
        then moved into the session's folder, so between the first two steps it is unlocked although
        its session is alive. It is removed only once older than ``grace_s``, locked or not."""
        root = self.dir / TMP_DIR
        for p in root.iterdir() if root.is_dir() else []:
            if p.name == own or p.name == f".{own}.lock" or fcntl is None:
                continue
            try:
                young = time.time() - p.stat().st_mtime < grace_s
            except FileNotFoundError:
                continue
            if p.is_file() or not (p / "lock").exists():  # no lock in a folder (yet): being born, or killed at birth
                if not young:
                    shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
                continue
            try:
                fh = open(p / "lock")
            except FileNotFoundError:
                continue
            with fh:
                try:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # alive (or a file system that cannot tell: keep it)
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)

    def record_session(self, shard: Shard, *, completed: bool, model: Mapping[str, object] | None = None) -> None:
        """A session that had nothing to do still says so (it may be the one that completes the run)."""
        Session(self, shard, model).finish(completed)

    def commit_parts(
        self,
        config: Mapping[str, object],
        todo: Sequence[str],
        *,
        units: int,
        start: Callable[[], Mapping[str, object]],
        write: Callable[[str, Path], None],
        extra: Mapping[str, object] | None = None,
    ) -> None:
        """Each part of ``todo`` in one session: ``start()`` (load the model; its info) once, then
        ``write(key, tmp_dir)`` commits a part and the session counts it. With nothing to do, a run
        not yet marked completed is marked so (a finished run loads no model)."""
        if not todo:
            if not (self.read_manifest() or {}).get("completed"):
                self.record_session(ALL, completed=True)
            return
        session = self.open(config, start(), units=units, extra=extra)
        completed = False
        try:
            for key in todo:
                write(key, session.tmp_dir)
                session.committed(1)
            completed = True
        finally:
            session.finish(completed)


def kind_of(path: Path | str) -> str | None:
    """The kind of run in ``path`` (None when it holds no readable manifest)."""
    mpath = Path(path) / MANIFEST
    try:
        m = json.loads(mpath.read_text(encoding="utf-8")) if mpath.is_file() else None
    except (OSError, ValueError):
        return None
    return str(m["kind"]) if isinstance(m, dict) and m.get("format") == FORMAT and m.get("kind") else None


def find_runs(paths: Iterable[Path | str], kind: str) -> list[Path]:
    """Run directories of ``kind`` named by ``paths``: a run directory stands for itself, a folder
    of them (a sweep's ``OUT``) for the runs directly inside it, in name order; repeats dropped."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise UserError(f"run directory {p} does not exist")
        if (p / MANIFEST).is_file():
            found = [p]
        else:
            found = sorted(d for d in p.iterdir() if d.is_dir() and kind_of(d) == kind) if p.is_dir() else []
            if not found:
                raise UserError(
                    f"{p} is neither a {kind} run directory nor a folder of them (no {MANIFEST} in it or in its subfolders)"
                )
        out += [d for d in found if d not in out]
    return out
