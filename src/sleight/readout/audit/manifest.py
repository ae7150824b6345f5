"""An audit directory's manifest.json as typed dicts: what the run records and the reports read.

The manifest is a :mod:`sleight.rundir` record written as JSON; its ``config`` is
:func:`sleight.readout.audit.run.run_config`'s object, passed through unchanged (to the fingerprint,
the manifest and back), so both are typed dicts rather than records with their own JSON form.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict


class AuditRunConfig(TypedDict, total=False):
    """The manifest's ``config``: the audit's config (:class:`sleight.readout.audit.run.AuditConfig`,
    in its field order) and a hash of the exact items; the reports read it for their header.
    :func:`~sleight.readout.audit.run.run_config` writes every key; one read back from an older run
    directory may lack some, so readers ``get`` them."""

    source: str
    preset: str | None
    options: list[str] | None
    stem: str | None
    variants: list[str]
    max_new_tokens: int
    floor: float
    rows_per_pass: int
    chunk_items: int
    n_items: int
    items_sha256: str


class AuditManifest(TypedDict, total=False):
    """The parts of an audit's manifest.json the audit reads back (a run directory of any age: every
    key may be missing). ``model`` is the backend's model record, kept as the backend writes it."""

    model: Mapping[str, Any]
    config: AuditRunConfig
    item_ids: list[str]
