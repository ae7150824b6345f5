"""Everything the report needs from one run directory, read once (thin I/O; the tables are pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from sleight.errors import UserError
from sleight.rundir import Manifest
from sleight.tamper.jury import store as jury_store
from sleight.tamper.jury.judged import judged_trials, load_run_trials


@dataclass
class RunData:
    """One model's run: its trials and clean runs, the jury's votes and verdicts (if judged)."""

    run_dir: Path
    model: str
    manifest: Manifest
    trials: pd.DataFrame
    clean: pd.DataFrame | None
    verdicts: pd.DataFrame | None
    judgements: pd.DataFrame
    jury_meta: jury_store.JuryMeta = field(default_factory=jury_store.JuryMeta)

    @property
    def judged(self) -> pd.DataFrame:
        """Trials with ≥1 swap, with the jury's verdict columns joined where judged."""
        judged = judged_trials(self.trials)
        if self.verdicts is None or len(self.verdicts) == 0:
            return judged
        keep = [c for c in self.verdicts.columns if c not in judged.columns or c in jury_store.TRIAL_KEY]
        return judged.merge(self.verdicts[keep], on=list(jury_store.TRIAL_KEY), how="left")

    @property
    def jury(self) -> list[str]:
        return list(self.jury_meta.get("jury") or [])

    @property
    def jury_label(self) -> str:
        if self.verdicts is None:
            return "not judged"
        n = len(self.jury)
        return "jury of one" if n == 1 else f"jury of {n}"

    @property
    def votes(self) -> pd.DataFrame:
        """The stored votes of the jury and prompt variant that produced the verdicts."""
        if not self.jury:
            return self.judgements.iloc[0:0]
        j = self.judgements
        return j[j["juror"].isin(self.jury) & (j["prompt_variant"] == self.jury_meta.get("prompt_variant", "default"))]


def display_model(name: str) -> str:
    """The leaderboard's name for a model: a local file or folder by its base name, else as given
    (hub ids such as ``org/model`` stay whole)."""
    p = Path(name)
    if name.endswith(".gguf") or (("/" in name or "\\" in name) and p.exists()):
        return p.name or name
    return name


def load_run(run_dir: Path) -> RunData:
    from sleight.tamper.store import load_clean

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"run directory {run_dir} does not exist")
    trials, manifest = load_run_trials(run_dir)
    try:
        clean = load_clean(run_dir)
    except (OSError, ValueError, UserError):
        clean = None
    return RunData(
        run_dir=run_dir,
        model=display_model(str(trials["model"].iloc[0])),
        manifest=manifest,
        trials=trials,
        clean=clean,
        verdicts=jury_store.load_verdicts(run_dir),
        judgements=jury_store.load_judgements(run_dir),
        jury_meta=jury_store.load_jury_meta(run_dir),
    )


def load_runs(run_dirs: list[Path]) -> list[RunData]:
    """Several runs, one per model; two runs of the same model would make two rows with one name."""
    runs = [load_run(Path(d)) for d in run_dirs]
    seen: dict[str, Path] = {}
    for r in runs:
        if r.model in seen:
            raise UserError(f"runs {seen[r.model]} and {r.run_dir} are both of model '{r.model}'; report one run per model")
        seen[r.model] = r.run_dir
    return runs
