"""The static site: ``index.html`` (sortable leaderboard, the other tables, the plots) and one trial
viewer per model, plus a loopback server for it.

Pages stay light: each viewer loads ``models/<slug>/trials.js`` (one compact row per trial) and,
only when a trial is opened, that question's ``q<N>.js`` (token texts, rounded surprisal, votes).
Data files are scripts rather than ``fetch``-ed JSON so the pages also open from ``file://``.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import pandas as pd

from sleight import rundir
from sleight.tamper.jury.gold import load_sample
from sleight.tamper.jury.prompt import DEFINITIONS, LABELS
from sleight.tamper.jury.run import answers_for
from sleight.tamper.report.export import TEXT_COLUMNS, Section
from sleight.tamper.report.runs import RunData
from sleight.tamper.report.tables import lexical_flags

TokenTexts = Callable[[Sequence[int]], list[str]]
ASSETS = ("sleight.css", "leaderboard.js", "viewer.js")
WARN_COLUMNS = ("Undecided",)  # a non-zero count is highlighted: it qualifies every rate beside it


def slug(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return s or "model"


def _js(key: str, obj: object) -> str:
    return f"sleightData({json.dumps(key)}, {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))});\n"


def _opt_bool(v: object) -> int | None:
    if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)):
        return None
    return int(bool(v))


def _round(values: Any) -> list[float | None]:
    """Two decimals are plenty for a heat map and keep the files small; missing -> null."""
    if values is None:
        return []
    arr = np.round(np.asarray(values, dtype=np.float64), 2)
    return [v if v == v else None for v in arr.tolist()]


# ---------------------------------------------------------------------------- token texts


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level BPE alphabet: each byte as the printable character its vocab uses."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = keep[:]
    n = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(keep, map(chr, chars)))


def token_texter(run: RunData) -> TokenTexts | None:
    """Per-token surface strings for the run's tokenizer, or ``None`` when it cannot be loaded.

    Only the tokenizer is loaded (never the weights). Byte-level BPE tokens are decoded through
    their bytes so the pieces join to exactly the reply, even when a character spans two tokens.
    """
    spec = None
    m = run.manifest.get("model")
    if isinstance(m, dict):
        spec = m.get("spec") or m.get("model_id")
    spec = spec or run.model
    try:
        from transformers import AutoTokenizer

        from sleight.backends import resolve

        tok = AutoTokenizer.from_pretrained(resolve(str(spec)).load_path)
    except Exception:  # noqa: BLE001 - any failure means "no token view", never a failed report
        return None
    byte_of = {c: b for b, c in _bytes_to_unicode().items()}

    memo: dict[int, bytes] = {}

    def token_bytes(i: int) -> bytes:
        if i not in memo:
            piece = tok.convert_ids_to_tokens(i)
            if piece is not None and byte_of and all(ch in byte_of for ch in piece):
                memo[i] = bytes(byte_of[ch] for ch in piece)
            else:  # not a byte-level piece (special token, other tokenizer family)
                memo[i] = str(tok.decode([i])).encode("utf-8")
        return memo[i]

    def texts(ids: Sequence[int]) -> list[str]:
        out, pending = [], b""
        for i in ids:
            pending += token_bytes(int(i))
            try:
                out.append(pending.decode("utf-8"))
                pending = b""
            except UnicodeDecodeError:
                out.append("")  # the rest of this character comes with the next token
        if pending:
            out[-1] += pending.decode("utf-8", errors="replace")
        return out

    return texts


# ---------------------------------------------------------------------------- viewer data

Vote = dict[str, str | bool | None]  # a juror's vote as the viewer shows it: juror, each label, abstained, reason, raw, error


class ViewerIndex(TypedDict):
    """A model's ``trials.js``: one compact row per judged trial (its ``columns``) and what the
    viewer names them by."""

    model: str
    jury: list[str]
    jury_label: str
    trigger: str
    columns: list[str]
    questions: dict[str, str]  # question text by id
    files: dict[str, str]  # detail file by question id
    rows: list[list[str | int | None]]
    slug: str
    definitions: dict[str, str]
    gold: list[list[str]]


class ViewerSide(TypedDict, total=False):
    """One reply in a question's detail file: token texts ``t`` (or the plain ``text``), rounded
    surprisal ``s``, injected marks ``inj``; a trial's also its swaps, lexical cue and votes."""

    text: str
    s: list[float | None]
    inj: list[int]
    t: list[str]
    n_swaps: int
    lex: str | None
    votes: list[Vote]


class QuestionDetail(TypedDict):
    """A question's ``q<N>.js``: the question, its accepted answers, its clean run and each trial by substitute."""

    question: str
    answers: list[str]
    clean: ViewerSide
    trials: dict[str, ViewerSide]


def viewer_data(run: RunData, texts: TokenTexts | None) -> tuple[ViewerIndex, dict[str, QuestionDetail]]:
    """The compact trial index and the per-question detail objects of one model's viewer."""
    judged = run.judged
    lex = lexical_flags(judged) if len(judged) else pd.DataFrame(columns=["lexical_flagged", "lexical_cue"])
    judged = pd.concat([judged, lex], axis=1)
    questions = {q: str(t) for q, t in judged.drop_duplicates("question_id")[["question_id", "question"]].itertuples(index=False)}
    files = {q: f"q{i:04d}" for i, q in enumerate(questions)}
    columns = ["q", "sub", "swaps", *LABELS, "ignored", "lexical"]
    judged_by_jury = run.verdicts is not None and "flagged" in judged.columns
    rows = []
    for t in judged.to_dict("records"):
        labels = [_opt_bool(t.get(label)) if judged_by_jury else None for label in LABELS]
        ignored = _opt_bool(t.get("ignored")) if judged_by_jury else None
        rows.append([t["question_id"], t["substitute"], int(t["n_swaps"]), *labels, ignored, int(bool(t["lexical_flagged"]))])
    trigger = str(judged["trigger"].iloc[0]) if len(judged) else "the"
    index: ViewerIndex = {
        "model": run.model,
        "jury": run.jury,
        "jury_label": run.jury_label,
        "trigger": trigger,
        "columns": columns,
        "questions": questions,
        "files": files,
        "rows": rows,
        "slug": slug(run.model),
        "definitions": DEFINITIONS,
        "gold": [list(k) for k in load_sample(run.run_dir)],  # the trials drawn by 'tamper gold', for the labelling mode
    }
    votes: dict[tuple[str, str], list[Vote]] = {}
    for v in run.votes.to_dict("records"):
        votes.setdefault((v["question_id"], v["substitute"]), []).append(
            {
                "juror": v["juror"],
                **{label: (None if v[label] is None or v[label] is pd.NA else bool(v[label])) for label in LABELS},
                "abstained": bool(v["abstained"]),
                "reason": v["reason"] or "",
                "raw": (v["raw_reply"] or "")[:600],
                "error": v["error"],
            }
        )
    clean = {}
    if run.clean is not None:
        clean = {c["question_id"]: c for c in run.clean.to_dict("records")}
    details: dict[str, QuestionDetail] = {}
    for t in judged.to_dict("records"):
        q = t["question_id"]
        d = details.setdefault(
            files[q],
            {
                "question": questions[q],
                "answers": list(answers_for(q, questions[q])),
                "clean": _side(clean.get(q), texts),
                "trials": {},
            },
        )
        side = _side(t, texts)
        side["n_swaps"] = int(t["n_swaps"])
        side["lex"] = t["lexical_cue"]
        side["votes"] = votes.get((q, t["substitute"]), [])
        d["trials"][t["substitute"]] = side
    return index, details


def _side(rec: Mapping[Any, Any] | None, texts: TokenTexts | None) -> ViewerSide:
    """One reply for the viewer: token texts (or the plain text), surprisal, injected marks."""
    if rec is None:
        return {"text": "(no clean run stored)", "s": []}
    ids = rec.get("token_ids")
    out: ViewerSide = {"s": _round(rec.get("surprisal"))}
    inj = rec.get("injected")
    if inj is not None:
        out["inj"] = [int(bool(x)) for x in inj]
    if texts is not None and ids is not None and len(ids):
        out["t"] = texts(list(ids))
    else:
        out["text"] = str(rec.get("reply", ""))
    return out


# ---------------------------------------------------------------------------- pages


def _page(title: str, body: str, *, assets: str, scripts: Sequence[str] = (), head_extra: str = "") -> str:
    tags = "".join(f'<script src="{assets}{s}"></script>' for s in scripts)
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{html.escape(title)}</title>"
        f'<link rel="stylesheet" href="{assets}sleight.css">{head_extra}</head>\n<body>\n{body}\n{tags}\n</body></html>\n'
    )


LINKED = ("table1", "leaderboard")  # sortable tables whose model names link to the model's viewer


def html_table(section: Section, *, sortable: bool = False, links: dict[str, str] | None = None) -> str:
    """A table whose numeric cells carry ``data-value`` (the raw number) for sorting."""
    cls = ' class="sortable"' if sortable else ""
    text_cols = TEXT_COLUMNS
    head = "".join(
        f'<th class="text" data-type="text">{html.escape(c)}</th>' if c in text_cols else f'<th data-type="number">{html.escape(c)}</th>'
        for c in section.shown
    )
    body = []
    for i, (_, row) in enumerate(section.frame.iterrows()):
        cells = []
        for c in section.shown:
            v = row[c]
            text = html.escape(section.cell(v, c))
            if c == "Model" and links and str(v) in links:
                text = f'<a href="{html.escape(links[str(v)])}">{text}</a>'
            if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
                num = "" if isinstance(v, (float, np.floating)) and np.isnan(v) else repr(float(v))
                flag = ' class="warn"' if c in WARN_COLUMNS and num not in ("", "0.0") else ""
                cells.append(f'<td data-value="{num}"{flag}>{text}</td>')
            else:
                cells.append(f'<td class="text">{text}</td>')
        mark = ' class="think" title="thinking-capable"' if section.marked(i) else ""
        body.append(f"<tr{mark}>" + "".join(cells) + "</tr>")
    return f'<table id="t-{section.key}"{cls}><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def write_site(
    out: Path,
    runs: Sequence[RunData],
    sections: Sequence[Section],
    plots: Sequence[str],
    *,
    preamble: str = "",
    progress: Callable[[str], None] | None = None,
    aliases: Mapping[str, str] | None = None,
) -> Path:
    """Write ``index.html``, the assets and one viewer per model under ``out``; returns index.html.
    ``aliases``: other names of a model in the tables (the paper's display name -> the run's model),
    linked to its viewer too."""
    out = Path(out)
    (out / "assets").mkdir(parents=True, exist_ok=True)
    for name in ASSETS:
        src = resources.files("sleight.tamper.report").joinpath(f"assets/{name}")
        rundir.write_bytes(out / "assets" / name, src.read_bytes())
    links = {}
    for run in runs:
        s = slug(run.model)
        links[run.model] = f"models/{s}.html"
        if progress:
            progress(run.model)
        write_viewer(out / "models", s, run, token_texter(run))
    for name, model in (aliases or {}).items():
        if model in links:
            links.setdefault(name, links[model])
    parts = [
        "<header><h1>Sleight of Word — leaderboard</h1>",
        f"<p>{html.escape(preamble)}</p>" if preamble else "",
        "<p>Click a column header to sort; click a model to browse its trials.</p></header><main>",
    ]
    for sec in sections:
        parts.append(f"<h2>{html.escape(sec.title)}</h2>")
        if sec.warning:
            parts.append(f'<p class="warn"><strong>Read with care:</strong> {html.escape(sec.warning)}</p>')
        parts.append(html_table(sec, sortable=sec.key in LINKED, links=links if sec.key in LINKED else None))
        if sec.note:
            parts.append(f'<p class="note">{html.escape(sec.note)}</p>')
    if plots:
        parts.append("<h2>Figures</h2>")
        parts += [f'<img class="plot" src="{html.escape(p)}" alt="{html.escape(p)}">' for p in plots]
    parts.append("</main>")
    index = out / "index.html"
    rundir.write_text(index, _page("Sleight of Word leaderboard", "\n".join(parts), assets="assets/", scripts=["leaderboard.js"]))
    return index


def write_viewer(models_dir: Path, s: str, run: RunData, texts: TokenTexts | None) -> Path:
    """One model's viewer page and its data files (old data files of that model are replaced)."""
    data_dir = models_dir / s
    if data_dir.exists():
        shutil.rmtree(data_dir)
    data_dir.mkdir(parents=True)
    index, details = viewer_data(run, texts)
    rundir.write_text(data_dir / "trials.js", _js("trials", index))
    for key, obj in details.items():
        rundir.write_text(data_dir / f"{key}.js", _js(key, obj))
    label_opts = "".join(
        f'<option value="{v}">{html.escape(t)}</option>'
        for v, t in [
            ("", "any"),
            *[(label, label) for label in LABELS],
            *[(f"not-{label}", f"not {label}") for label in LABELS],
            ("ignored", "ignored"),
            ("undecided", "no majority"),
            ("lexical", "lexical baseline"),
        ]
    )
    body = f"""<header><h1>{html.escape(run.model)} — trials</h1>
<p><a href="../index.html">← leaderboard</a> · {html.escape(run.jury_label)} · swapped words are highlighted; hover a token for its surprisal (heat = surprisal).</p></header>
<main>
<div class="filters">
<label>label<select id="f-label">{label_opts}</select></label>
<label>question<select id="f-question"><option value="">all</option></select></label>
<label>substitute<input id="f-sub" list="subs" placeholder="any word"><datalist id="subs"></datalist></label>
<span id="count" class="note"></span>
<span class="labelling"><button id="label-mode" type="button" title="label trials yourself: the jury's votes are hidden, four checkboxes per trial, exported as a JSON file for 'sleight tamper report --gold'">labelling mode</button>
<button id="gold-export" type="button" hidden>export labels</button> <span id="gold-count" class="note"></span></span>
</div>
<div class="layout">
<div id="trial-list"><table><thead><tr><th>q</th><th>substitute</th><th>swaps</th><th class="text">labels</th></tr></thead><tbody></tbody></table></div>
<div id="detail"></div>
</div>
</main>
<script>window.SLEIGHT = {{"base": {json.dumps(s + "/")}}};</script>"""
    page = models_dir / f"{s}.html"
    rundir.write_text(page, _page(f"{run.model} — Sleight of Word trials", body, assets="../assets/", scripts=["viewer.js"]))
    return page


# ---------------------------------------------------------------------------- server


def serve(report_dir: Path, *, host: str = "127.0.0.1", port: int = 8000, ready: Callable[[str], None] | None = None) -> None:
    """Serve ``report_dir`` over HTTP until interrupted; ``ready(url)`` is called once listening."""
    import functools
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(report_dir))
    with ThreadingHTTPServer((host, port), handler) as httpd:
        url = f"http://{host}:{httpd.server_address[1]}/index.html"
        if ready:
            ready(url)
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass
