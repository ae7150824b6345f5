"""The report's figures (PNG, matplotlib): the dissociation plot and the signals around swaps.

:func:`swap_profile` is the pure part (per-token series aligned on swaps); the ``plot_*``
functions only draw.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sleight import rundir
from sleight.tamper.report.runs import RunData

BEFORE, AFTER = 4, 8
OFFSETS = list(range(-BEFORE, AFTER + 1))
METRICS = {"surprisal": "surprisal (nats)", "entropy_top20": "entropy, top-20 (nats)"}


def _floats(values: Any) -> np.ndarray:
    if values is None:
        return np.zeros(0)
    return np.array([np.nan if v is None else float(v) for v in values], dtype=float)


def _bools(values: Any, n: int) -> np.ndarray:
    if values is None:
        return np.zeros(n, dtype=bool)
    return np.array([bool(v) for v in values], dtype=bool)


def tampered_windows(injected: np.ndarray, swap_steps: Iterable[int]) -> list[dict[int, int]]:
    """For each swap, offset -> token index: offsets -1..-4 are the tokens before the swap, +1..+8
    the model-chosen tokens after the injected run (injected tokens skipped). Offset 0, the injected
    word, has no surprisal column entry (it is null there); :func:`swap_profile` takes its
    first token's log-prob from the ``logprobs`` column instead."""
    n = len(injected)
    out = []
    for st in swap_steps:
        st = int(st)
        win: dict[int, int] = {}
        for k in range(1, BEFORE + 1):
            i = st - k
            if 0 <= i < n and not injected[i]:
                win[-k] = i
        i, k = st, 0
        while i < n and k < AFTER:
            if not injected[i]:
                k += 1
                win[k] = i
            i += 1
        out.append(win)
    return out


def clean_windows(n: int, trigger_steps: Iterable[int]) -> list[dict[int, int]]:
    """The clean run around its own triggers: offset 0 is the trigger token itself."""
    out = []
    for t in trigger_steps:
        t = int(t)
        out.append({k: t + k for k in OFFSETS if 0 <= t + k < n})
    return out


def _clean_triggers(clean_row: Mapping[Any, Any], first_swaps: set[int]) -> list[int]:
    for col in ("trigger_steps", "swap_steps"):
        val = clean_row.get(col)
        if val is not None and len(val):
            return [int(v) for v in val]
    return sorted(first_swaps)  # the first swap sits where the clean run first emits the trigger


def swap_profile(runs: Sequence[RunData]) -> pd.DataFrame:
    """Mean surprisal and top-20 entropy at offsets -4..+8 around swaps, tampered vs clean, per model."""
    records = []
    for run in runs:
        judged = run.judged
        first: dict[str, set[int]] = {}
        for t in judged.to_dict("records"):
            sur, ent = _floats(t.get("surprisal")), _floats(t.get("entropy_top20"))
            inj = _bools(t.get("injected"), len(sur))
            raw_steps = t.get("swap_steps")
            steps = [] if raw_steps is None else [int(s) for s in raw_steps]
            if steps:
                first.setdefault(t["question_id"], set()).add(steps[0])
            own = _floats(t.get("logprobs"))  # the model's log-prob of every token, injected included
            for st, win in zip(steps, tampered_windows(inj, steps)):
                for k, i in win.items():
                    records.append((run.model, "tampered", k, sur[i], ent[i] if i < len(ent) else np.nan))
                if st < len(own):  # offset 0: how surprising the injected word itself was
                    records.append((run.model, "tampered", 0, -own[st], np.nan))
        if run.clean is not None:
            for c in run.clean.to_dict("records"):
                if c["question_id"] not in first:
                    continue
                sur, ent = _floats(c.get("surprisal")), _floats(c.get("entropy_top20"))
                for win in clean_windows(len(sur), _clean_triggers(c, first[c["question_id"]])):
                    for k, i in win.items():
                        records.append((run.model, "clean", k, sur[i], ent[i] if i < len(ent) else np.nan))
    df = pd.DataFrame(records, columns=["model", "series", "offset", "surprisal", "entropy_top20"])
    if df.empty:
        return pd.DataFrame(columns=["model", "series", "offset", "metric", "mean", "n"])
    long = df.melt(id_vars=["model", "series", "offset"], var_name="metric", value_name="value").dropna(subset=["value"])
    return long.groupby(["model", "series", "offset", "metric"], as_index=False).agg(mean=("value", "mean"), n=("value", "size"))


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def plot_dissociation(table1: pd.DataFrame, path: Path) -> Path:
    """Δsurprisal against flagged % per model: does the model's surprise show in what it says?"""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.6), dpi=120)
    shown = table1.dropna(subset=["Flag. %"])
    for _, r in shown.iterrows():
        for col, style, lab in (("Δsurp. (nats)", "o", "study"), ("Δsurp. matched (nats)", "s", "matched")):
            y = r[col]
            if isinstance(y, float) and math.isnan(y):
                continue
            ax.scatter(r["Flag. %"], y, marker=style, s=46, facecolors="C0" if lab == "study" else "none", edgecolors="C0")
        ax.annotate(f"{r['Model']} ({r['Jury']})", (r["Flag. %"], r["Δsurp. (nats)"]), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.scatter([], [], marker="o", color="C0", label="Δsurp., study definition")
    ax.scatter([], [], marker="s", facecolors="none", edgecolors="C0", label="Δsurp., position-matched")
    ax.axhline(0, color="0.7", lw=0.8)
    ax.set_xlabel("flagged (% of judged trials)")
    ax.set_ylabel("Δ surprisal after swaps (nats)")
    ax.set_xlim(-5, 105)
    if shown.empty:
        ax.text(50, 0, "no judged run yet (sleight tamper judge)", ha="center", va="bottom", color="0.4")
    ax.set_title("Registered vs said: surprisal jump vs flagging")
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    rundir.write_bytes(path, buf.getvalue())
    plt.close(fig)
    return path


def plot_swap_profile(profile: pd.DataFrame, path: Path) -> Path:
    """Mean per-token surprisal and entropy at steps -4..+8 around swaps, against the clean run."""
    plt = _pyplot()
    fig = draw_swap_profile(profile)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    rundir.write_bytes(path, buf.getvalue())
    plt.close(fig)
    return path


def draw_swap_profile(profile: pd.DataFrame) -> Any:
    """The swap-profile figure (a matplotlib Figure; the caller saves and closes it)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=120, sharex=True)
    models = sorted(profile["model"].unique()) if len(profile) else []
    for ax, (metric, ylabel) in zip(axes, METRICS.items()):
        for m_i, model in enumerate(models):
            for series, ls in (("tampered", "-"), ("clean", "--")):
                d = profile[(profile["model"] == model) & (profile["series"] == series) & (profile["metric"] == metric)].sort_values("offset")
                if len(d):
                    ax.plot(d["offset"], d["mean"], ls, marker="o", ms=3, color=f"C{m_i}", label=f"{model} · {series}")
        ax.axvline(0, color="0.6", lw=0.8)
        ax.set_xticks(OFFSETS)
        ax.set_xlabel("token offset from the swap (0 = swapped word)")
        ax.set_ylabel(ylabel)
        if not models:
            ax.text(0.5, 0.5, "no swaps", transform=ax.transAxes, ha="center", color="0.4")
    # A long handle, so the dashed clean line reads as dashed in the legend too (the marker hides a short one).
    if models:
        axes[0].legend(fontsize=7, loc="best", handlelength=4.5)
    fig.suptitle("Signals around swaps: tampered reply (solid) vs clean run at its trigger (dashed)")
    fig.text(0.5, 0.005, "Tampered: 0 = first token of the injected word (surprisal only), +k = k-th model-chosen token after it. "
             "Clean: the same steps around the clean run's own trigger (0 = the trigger).", ha="center", fontsize=7, color="0.35")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig
