"""Where a dry run finds a checkpoint's shapes without the hub: a folder's own ``config.json``, else
the shipped table of the study's and the readout paper's checkpoints (``data/architectures.yaml``,
each entry copied from the checkpoint's config.json), keyed by hub id. Reads files only."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

ARCHITECTURES_DATA = "data/architectures.yaml"


@dataclass(frozen=True)
class Architecture:
    """A checkpoint's ``config.json`` (as a mapping) and its encoder towers' parameter counts, keyed
    by the modalities each serves (``image+video``: one tower for both; loaded unless every one
    of them is turned off; ``always``: loaded whatever the limits)."""

    source: str  # the file read, or the shipped table's entry
    config: Mapping[str, object]
    encoders: Mapping[str, int] = field(default_factory=dict)

    def encoder_params(self, off: Mapping[str, int] | None = None) -> int:
        """Encoder parameters that load, given ``limit_mm_per_prompt`` (a modality at 0 is off)."""
        limits = off or {}
        return sum(n for modalities, n in self.encoders.items() if modalities == "always" or any(limits.get(m, 1) != 0 for m in modalities.split("+")))


@lru_cache(maxsize=1)
def _shipped() -> dict[str, Architecture]:
    import yaml

    text = resources.files("sleight").joinpath(ARCHITECTURES_DATA).read_text(encoding="utf-8")
    models = yaml.safe_load(text)["models"]
    out: dict[str, Architecture] = {}
    for hub_id, entry in models.items():
        encoders = {str(k): int(v) for k, v in (entry.get("encoders") or {}).items()}
        out[str(hub_id).lower()] = Architecture(f"{ARCHITECTURES_DATA}: {hub_id}", entry["config"], encoders)
    return out


def architecture(model: str) -> Architecture | None:
    """``model``'s shapes: its folder's config.json where ``model`` is a folder with one, else the
    shipped entry for its hub id (or bundled name); None where neither knows it."""
    folder = Path(model).expanduser()
    if (folder / "config.json").is_file():
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        if isinstance(config, dict):
            return Architecture(str(folder / "config.json"), config)
    return _shipped().get(model.strip().lower())


def shipped_ids() -> list[str]:
    """The hub ids (and bundled names) the shipped table knows, lower-cased."""
    return sorted(_shipped())
