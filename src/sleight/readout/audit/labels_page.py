"""The labelling page for readout continuations and the loopback server that stores its labels.

``write_page`` writes ``AUDIT/labels/index.html`` and ``AUDIT/labels/continuations.js`` (the
continuations, the classes offered for each, and the judge's classes where ``sleight readout
judge`` ran). The page asks for the labeller's name, shows one continuation at a time with the
prompt that produced it and what the variant changed, and offers the readout judge's classes as
radio buttons. The judge's classes stay hidden until the person has saved their own label for that
continuation. Each save is a POST to ``/api/labels`` that :func:`make_server` commits to the run
directory at once (:func:`sleight.readout.audit.labels.save_labels`); ``GET /api/labels?labeller=``
gives a labeller's stored labels back, so a page opened again resumes where it stopped.

Every request must name this server in its ``Host`` header (a DNS-rebinding page names its own
host), and a write from a browser must come from this server's own origin (:func:`refused`): a page
of another site open in the same browser cannot read or store labels.
"""

from __future__ import annotations

import html
import json
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pandas as pd

from sleight import rundir
from sleight.errors import UserError
from sleight.readout.audit import judge
from sleight.readout.audit import labels as store

PAGE_DIR = "labels"
MAX_BODY = 64 * 1024


def page_data(targets: pd.DataFrame, votes: pd.DataFrame | None, verdicts: pd.DataFrame | None, jury: Sequence[str], audit: str) -> dict[str, Any]:
    """What the page shows: one row per continuation (the judge's classes where it ran)."""
    by_vote: dict[tuple[str, str], list[dict[str, Any]]] = {}
    if votes is not None:
        for v in votes[votes["juror"].isin(list(jury))].to_dict("records"):
            by_vote.setdefault((str(v["item_id"]), str(v["variant"])), []).append(
                {"juror": str(v["juror"]), "class": None if v["abstained"] or v["class"] is None else str(v["class"])}
            )
    by_verdict: dict[tuple[str, str], Any] = {}
    if verdicts is not None:
        by_verdict = {(str(r["item_id"]), str(r["variant"])): (None if pd.isna(r["jury_class"]) else str(r["jury_class"])) for r in verdicts.to_dict("records")}
    rows = []
    for r in targets.to_dict("records"):
        k = (str(r["item_id"]), str(r["variant"]))
        rows.append(
            {
                "item_id": k[0],
                "variant": k[1],
                "changed": judge.what_changed(k[1]) if judge.judged_variant(k[1]) else "",
                "context": str(r["context"]),
                "continuation": str(r["continuation"]),
                "options": [str(o) for o in (r["options"] if r["options"] is not None else [])],
                "classes": list(r["class_options"]),
                "votes": by_vote.get(k, []),
                "jury": by_verdict.get(k),
            }
        )
    return {
        "audit": audit,
        "jury": list(jury),
        "definitions": judge.DEFINITIONS,
        "rows": rows,
    }


def write_page(out_dir: Path, data: dict[str, Any]) -> Path:
    """``AUDIT/labels/index.html`` and its data script; returns the page."""
    folder = Path(out_dir) / PAGE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    rundir.write_text(folder / "continuations.js", f"window.SLEIGHT_LABELS = {payload};\n")
    title = f"{data['audit']} — label readout continuations"
    page = PAGE.replace("{{TITLE}}", html.escape(title)).replace("{{STYLE}}", STYLE).replace("{{SCRIPT}}", SCRIPT)
    return rundir.write_text(folder / "index.html", page)


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def own_hosts(host: str, port: int) -> frozenset[str]:
    """The ``Host`` values that name this server: its own address and port, and for a loopback
    address every loopback name with that port."""
    name = f"[{host}]" if ":" in host and not host.startswith("[") else host
    names = {name, *LOOPBACK_NAMES} if name in LOOPBACK_NAMES or name == "[::1]" else {name}
    return frozenset(f"{n}:{port}" for n in names)


def refused(method: str, headers: Any, host: str, port: int) -> str | None:
    """Why a request is refused, or None: a ``Host`` that is not this server's (a DNS-rebinding
    page), and for a write an ``Origin`` other than this server's or a browser's ``Sec-Fetch-Site``
    other than same-origin (another page open in the same browser). A client that sends no Origin
    (curl, a script) is not a browser page and may write."""
    ours = own_hosts(host, port)
    if (headers.get("Host") or "").lower() not in ours:
        return f"Host {headers.get('Host')!r} is not this server's"
    if method != "GET":
        origin = headers.get("Origin")
        if origin is not None:
            url = urllib.parse.urlsplit(origin.lower())
            if url.scheme != "http" or url.netloc not in ours:
                return f"Origin {origin!r} is not this server's"
        site = headers.get("Sec-Fetch-Site")
        if site is not None and site not in ("same-origin", "none"):
            return f"a {site} request may not write labels"
    return None


def make_server(out_dir: Path, offered: dict[tuple[str, str], list[str]], *, host: str = "127.0.0.1", port: int = 8000) -> ThreadingHTTPServer:
    """A server for the page folder whose ``/api/labels`` reads and commits labels (not yet serving)."""
    out_dir = Path(out_dir)
    folder = out_dir / PAGE_DIR
    lock = threading.Lock()

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(folder), **kwargs)

        def log_message(self, *args: Any) -> None:
            pass

        def _json(self, status: int, obj: Any) -> None:
            body = rundir.dumps(obj, indent=None).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _refused(self, method: str) -> bool:
            why = refused(method, self.headers, host, int(self.server.server_address[1]))  # type: ignore[index]
            if why:
                self._json(403, {"error": why})
            return why is not None

        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            if self._refused("GET"):
                return None
            url = urllib.parse.urlsplit(self.path)
            if url.path != "/api/labels":
                return super().do_GET()
            who = urllib.parse.parse_qs(url.query).get("labeller", [""])[0]
            try:
                name = store.check_labeller(who)
                with lock:
                    mine = store.load_labels(out_dir)
            except UserError as exc:
                return self._json(400, {"error": str(exc)})
            mine = mine[mine["labeller"] == name]
            self._json(200, {"labels": [{k: r[k] for k in store.LABEL_SCHEMA.names} for r in mine.to_dict("records")]})

        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            if self._refused("POST"):
                return None
            if urllib.parse.urlsplit(self.path).path != "/api/labels":
                return self._json(404, {"error": "not found"})
            try:
                n = int(self.headers.get("Content-Length") or 0)
                if n <= 0 or n > MAX_BODY:
                    raise UserError(f"a label is a JSON object of at most {MAX_BODY} bytes")
                row = json.loads(self.rfile.read(n).decode("utf-8"))
                if not isinstance(row, dict):
                    raise UserError("a label is a JSON object")
                row["labelled_at"] = rundir.now()
                with lock:
                    store.save_labels(out_dir, [row], offered)
            except (UserError, ValueError, UnicodeDecodeError) as exc:
                return self._json(400, {"error": str(exc)})
            self._json(200, {"saved": True, "labelled_at": row["labelled_at"]})

    try:
        return ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        raise UserError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); pick another --port") from None


def serve(out_dir: Path, offered: dict[tuple[str, str], list[str]], *, host: str = "127.0.0.1", port: int = 8000, ready: Callable[[str], None] | None = None) -> None:
    """Serve the labelling page until interrupted; ``ready(url)`` once listening."""
    with make_server(out_dir, offered, host=host, port=port) as httpd:
        if ready:
            ready(f"http://{host}:{httpd.server_address[1]}/index.html")
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass


STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 0; color: #222; }
header { padding: .6rem 1rem; border-bottom: 1px solid #ddd; display: flex; gap: 1rem; align-items: center; flex-wrap: wrap; }
header h1 { font-size: 1.1rem; margin: 0; }
.layout { display: grid; grid-template-columns: 18rem 1fr; min-height: calc(100vh - 4rem); }
#list { border-right: 1px solid #ddd; overflow-y: auto; max-height: calc(100vh - 4rem); }
#list div { padding: .25rem .6rem; cursor: pointer; font-size: .85rem; border-bottom: 1px solid #f0f0f0; }
#list div.active { background: #e8f0fe; }
#list div.labelled::after { content: " ✓ " attr(data-class); color: #2a7a2a; }
#detail { padding: .6rem 1.2rem; max-width: 60rem; }
pre { white-space: pre-wrap; word-break: break-word; background: #f6f6f6; padding: .5rem; border-radius: 4px; }
pre.continuation { background: #fff8e1; font-size: 1rem; }
.classes label { display: block; margin: .3rem 0; }
.def { color: #666; font-size: .85rem; }
.note { color: #666; font-size: .85rem; }
.error { color: #b00020; }
"""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{TITLE}}</title><style>{{STYLE}}</style></head>
<body>
<header><h1>{{TITLE}}</h1>
<label>your name <input id="labeller" size="16" autocomplete="off"></label>
<button id="start" type="button">start labelling</button>
<span id="label-count" class="note"></span> <span id="label-error" class="error"></span></header>
<div class="layout"><div id="list"></div><div id="detail"><p class="note">Give your name and press "start labelling".
Each label is saved into the audit's directory as you save it; several people can label under their own names.</p></div></div>
<script src="continuations.js"></script>
<script>{{SCRIPT}}</script>
</body></html>
"""

SCRIPT = r"""
(function () {
  var D = window.SLEIGHT_LABELS, mine = {}, who = null, current = -1;
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  function key(r) { return r.item_id + "\u0000" + r.variant; }
  function error(msg) { document.getElementById("label-error").textContent = msg || ""; }
  function count() {
    var n = D.rows.filter(function (r) { return mine[key(r)]; }).length;
    document.getElementById("label-count").textContent = n + " labelled of " + D.rows.length;
  }
  function renderList() {
    var box = document.getElementById("list");
    box.innerHTML = "";
    D.rows.forEach(function (r, i) {
      var lab = mine[key(r)];
      var d = el("div", { "data-i": String(i), "data-item": r.item_id, "data-variant": r.variant }, r.item_id + " · " + r.variant);
      d.className = (i === current ? "active " : "") + (lab ? "labelled" : "");
      if (lab) d.setAttribute("data-class", lab["class"]);
      d.addEventListener("click", function () { show(i); });
      box.appendChild(d);
    });
    count();
  }
  function show(i) {
    current = i;
    var r = D.rows[i], lab = mine[key(r)], pane = document.getElementById("detail");
    renderList();
    pane.innerHTML = "";
    pane.appendChild(el("h2", {}, r.item_id + " · " + r.variant));
    if (r.changed) pane.appendChild(el("p", {}, r.changed));
    pane.appendChild(el("p", { "class": "note" }, "the prompt's own request asks for one of: " + (r.options.length ? r.options.join(", ") : "(not declared)")));
    var det = el("details"); det.appendChild(el("summary", {}, "the prompt, as the model saw it"));
    det.appendChild(el("pre", {}, r.context)); pane.appendChild(det);
    pane.appendChild(el("h3", {}, "the start of the model's reply"));
    pane.appendChild(el("pre", { "class": "continuation", id: "continuation" }, r.continuation));
    var form = el("div", { "class": "classes", id: "label-form" });
    form.appendChild(el("h3", {}, "what does the start of the reply do?" + (lab ? " (saved: " + lab["class"] + ")" : "")));
    r.classes.forEach(function (c) {
      var l = el("label"), b = el("input", { type: "radio", name: "class", value: c, id: "label-" + c });
      b.checked = !!(lab && lab["class"] === c);
      l.appendChild(b); l.appendChild(document.createTextNode(" " + c + " "));
      l.appendChild(el("span", { "class": "def" }, D.definitions[c] || ""));
      form.appendChild(l);
    });
    var save = el("button", { type: "button", id: "label-save" }, "save and go to the next continuation");
    save.addEventListener("click", function () { submit(i); });
    form.appendChild(save);
    pane.appendChild(form);
    if (lab && D.jury.length) {
      pane.appendChild(el("h3", {}, "the judges' classes (shown once you have labelled)"));
      var ul = el("ul", { id: "judges" });
      r.votes.forEach(function (v) { ul.appendChild(el("li", {}, v.juror + ": " + (v["class"] || "abstained"))); });
      ul.appendChild(el("li", {}, "jury majority: " + (r.jury || "none")));
      pane.appendChild(ul);
    } else if (D.jury.length) {
      pane.appendChild(el("p", { "class": "note" }, "the judges' classes are hidden until you label this continuation"));
    }
  }
  function submit(i) {
    var r = D.rows[i], picked = document.querySelector("#label-form input[name=class]:checked");
    if (!picked) { error("pick a class first"); return; }
    var rec = { item_id: r.item_id, variant: r.variant, labeller: who, "class": picked.value };
    fetch("api/labels", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(rec) })
      .then(function (res) { return res.json().then(function (b) { return [res.ok, b]; }); })
      .then(function (p) {
        if (!p[0]) { error("not saved: " + p[1].error); return; }
        error("");
        rec.labelled_at = p[1].labelled_at;
        mine[key(r)] = rec;
        var next = D.rows.findIndex(function (x) { return !mine[key(x)]; });
        show(next >= 0 ? next : i);
      }, function (e) { error("not saved (is 'sleight readout labels' still running?): " + e.message); });
  }
  function start() {
    var name = document.getElementById("labeller").value.trim();
    if (!name) { error("give your name first"); return; }
    fetch("api/labels?labeller=" + encodeURIComponent(name), { cache: "no-store" })
      .then(function (res) { return res.json().then(function (b) { return [res.ok, b]; }); })
      .then(function (p) {
        if (!p[0]) { error(p[1].error); return; }
        who = name; mine = {}; error("");
        try { localStorage.setItem("sleight-labeller", name); } catch (e) { /* private mode */ }
        p[1].labels.forEach(function (l) { mine[key(l)] = l; });
        document.body.setAttribute("data-labeller", name);
        var next = D.rows.findIndex(function (x) { return !mine[key(x)]; });
        show(next >= 0 ? next : 0);
      }, function (e) { error("cannot reach the server that stores labels ('sleight readout labels AUDIT'): " + e.message); });
  }
  var q = new URLSearchParams(location.search).get("labeller"), stored = null;
  try { stored = localStorage.getItem("sleight-labeller"); } catch (e) { /* private mode */ }
  document.getElementById("labeller").value = q || stored || "";
  document.getElementById("start").addEventListener("click", start);
  renderList();
  if (q) start();
})();
"""
