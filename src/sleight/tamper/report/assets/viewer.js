// Trial viewer for one model. Data arrive as small script files (so the page also works from
// file://): "<base>trials.js" lists every trial with the jury's labels; "<base><qfile>.js" holds one
// question's replies, per-token surprisal and the judges' votes, and is loaded only when needed.
// Labelling mode: people label the trials drawn by 'sleight tamper gold' (all trials when none were
// drawn) with four checkboxes each, without seeing the jury's votes; the labels are kept in the
// browser (localStorage) and exported as a JSON file for 'sleight tamper report --gold FILE'.
(function () {
  var S = window.SLEIGHT;
  var pending = {}, cache = {};
  window.sleightData = function (key, obj) {
    cache[key] = obj;
    (pending[key] || []).forEach(function (f) { f(obj); });
    delete pending[key];
  };
  function load(key) {
    return new Promise(function (resolve, reject) {
      if (cache[key]) return resolve(cache[key]);
      if (pending[key]) { pending[key].push(resolve); return; }
      pending[key] = [resolve];
      var s = document.createElement("script");
      s.src = S.base + key + ".js";
      s.onerror = function () { reject(new Error("could not load " + s.src)); };
      document.head.appendChild(s);
    });
  }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  var LABELS = ["flagged", "corrected", "derailed", "switch_aware"];
  var SHORT = { flagged: "flag", corrected: "corr", derailed: "derail", switch_aware: "aware", ignored: "ign", lexical: "lex" };
  var idx, col = {}, current = null;
  var labelMode = false, gold = {}, goldKeys = null;
  function key(q, sub) { return q + "\u0000" + sub; }
  function storeName() { return "sleight-gold:" + idx.model; }
  function loadGold() {
    try { gold = JSON.parse(localStorage.getItem(storeName()) || "{}"); } catch (e) { gold = {}; }
  }
  function saveGold() {
    try { localStorage.setItem(storeName(), JSON.stringify(gold)); } catch (e) { /* private mode: kept in memory */ }
    document.getElementById("gold-count").textContent = Object.keys(gold).length + " labelled" +
      (goldKeys ? " of " + Object.keys(goldKeys).length + " drawn" : "");
  }
  function drawn(q, sub) { return !goldKeys || !!goldKeys[key(q, sub)]; }
  function inSample(r) { return drawn(r[col.q], r[col.sub]); }

  function badge(name, v) {
    var cls = v === 1 ? "badge on" : v === null || v === undefined ? "badge und" : "badge";
    return el("span", { "class": cls, title: name + ": " + (v === 1 ? "yes" : v === 0 ? "no" : "no majority") }, SHORT[name]);
  }
  function rowMatches(r, f) {
    if (f.q && r[col.q] !== f.q) return false;
    if (f.sub && r[col.sub].toLowerCase().indexOf(f.sub.toLowerCase()) < 0) return false;
    if (!f.label) return true;
    if (f.label === "undecided") return LABELS.some(function (l) { return r[col[l]] === null; });
    var v = r[col[f.label]];
    return f.neg ? v === 0 : v === 1;
  }
  function filters() {
    var lab = document.getElementById("f-label").value;
    return {
      label: lab.replace(/^not-/, ""), neg: lab.indexOf("not-") === 0,
      q: document.getElementById("f-question").value,
      sub: document.getElementById("f-sub").value.trim()
    };
  }
  function renderList() {
    var f = filters(), body = document.querySelector("#trial-list tbody");
    body.innerHTML = "";
    var shown = idx.rows.filter(function (r) { return rowMatches(r, f) && (!labelMode || inSample(r)); });
    document.getElementById("count").textContent = shown.length + " of " + idx.rows.length + " trials";
    shown.forEach(function (r) {
      var tr = el("tr", { "data-q": r[col.q], "data-sub": r[col.sub] });
      tr.appendChild(el("td", { "class": "text" }, r[col.q]));
      tr.appendChild(el("td", { "class": "text" }, r[col.sub]));
      tr.appendChild(el("td", {}, r[col.swaps]));
      var tl = el("td", { "class": "text" });
      if (!labelMode) LABELS.concat(["ignored", "lexical"]).forEach(function (l) { tl.appendChild(badge(l, r[col[l]])); });
      tr.appendChild(tl);
      var cls = [];
      if (current && current.q === r[col.q] && current.sub === r[col.sub]) cls.push("active");
      if (labelMode && gold[key(r[col.q], r[col.sub])]) cls.push("labelled");
      tr.className = cls.join(" ");
      tr.addEventListener("click", function () { show(r[col.q], r[col.sub]); });
      body.appendChild(tr);
    });
  }
  function heat(s) {
    if (s === null || s === undefined) return "transparent";
    var a = Math.min(Math.max(s, 0) / 8, 1) * 0.55;
    return "rgba(220, 50, 47, " + a.toFixed(3) + ")";
  }
  function tokensView(side, sub) {
    var box = el("div", { "class": "reply" }), strip = el("div", { "class": "strip", title: "per-token surprisal (darker = more surprised)" });
    if (side.t) {
      side.t.forEach(function (tok, i) {
        var inj = side.inj && side.inj[i] === 1, s = side.s[i];
        var span = el("span", { "class": inj ? "tok swap" : "tok", title: inj ? "injected: " + JSON.stringify(tok) : "surprisal " + (s === null ? "—" : s.toFixed(2)) + " nats" }, tok);
        if (!inj) span.style.background = heat(s);
        box.appendChild(span);
        var cell = el("span", { "class": inj ? "swap" : "" });
        cell.style.background = inj ? "" : heat(s);
        strip.appendChild(cell);
      });
    } else {
      // no tokenizer was available when the report was written: mark the substitute in the text
      var text = side.text || "", re = sub ? new RegExp(sub.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "gi") : null, last = 0, m;
      while (re && (m = re.exec(text))) {
        box.appendChild(document.createTextNode(text.slice(last, m.index)));
        box.appendChild(el("mark", { "class": "swap" }, m[0]));
        last = m.index + m[0].length;
      }
      box.appendChild(document.createTextNode(text.slice(last)));
      (side.s || []).forEach(function (s) { var c = el("span"); c.style.background = heat(s); strip.appendChild(c); });
    }
    var wrap = el("div");
    wrap.appendChild(strip);
    wrap.appendChild(box);
    return wrap;
  }
  function yn(v) {
    return v === true ? el("td", { "class": "yes" }, "yes") : v === false ? el("td", { "class": "no" }, "no") : el("td", { "class": "abst" }, "—");
  }
  function show(q, sub) {
    current = { q: q, sub: sub };
    location.hash = "q=" + encodeURIComponent(q) + "&s=" + encodeURIComponent(sub) + (labelMode ? "&label=1" : "");
    renderList();
    var pane = document.getElementById("detail");
    pane.innerHTML = "";
    pane.appendChild(el("p", { "class": "empty" }, "loading…"));
    load(idx.files[q]).then(function (data) {
      var t = data.trials[sub];
      pane.innerHTML = "";
      pane.appendChild(el("h2", {}, q + " · " + data.question));
      if (data.answers && data.answers.length) pane.appendChild(el("p", { "class": "note" }, "accepted answers: " + data.answers.join("; ")));
      pane.appendChild(el("p", { "class": "note" }, "every \u201c" + idx.trigger + "\u201d replaced by \u201c" + sub + "\u201d · " + t.n_swaps + " swap(s)" + (t.lex && !labelMode ? " · lexical baseline cue: \u201c" + t.lex + "\u201d" : "")));
      var pair = el("div", { "class": "pair" });
      var left = el("div"), right = el("div");
      left.appendChild(el("h3", {}, "tampered reply"));
      left.appendChild(tokensView(t, sub));
      right.appendChild(el("h3", {}, "clean reply"));
      right.appendChild(tokensView(data.clean, null));
      pair.appendChild(left);
      pair.appendChild(right);
      pane.appendChild(pair);
      if (labelMode) { pane.appendChild(goldForm(q, sub)); return; }
      pane.appendChild(el("h3", {}, "judges (" + idx.jury_label + ")"));
      if (!t.votes.length) { pane.appendChild(el("p", { "class": "empty" }, "not judged")); return; }
      var tb = el("table", { "class": "votes" }), head = el("tr");
      ["juror"].concat(LABELS).concat(["reason / reply"]).forEach(function (h) { head.appendChild(el("th", {}, h)); });
      tb.appendChild(el("thead")).appendChild(head);
      var body = tb.appendChild(el("tbody"));
      t.votes.forEach(function (v) {
        var tr = el("tr");
        tr.appendChild(el("td", { "class": "text" }, v.juror));
        LABELS.forEach(function (l) { tr.appendChild(yn(v[l])); });
        tr.appendChild(el("td", { "class": "reason" }, v.abstained ? "abstained · raw reply: " + (v.raw || "(empty)") + (v.error ? " · error: " + v.error : "") : (v.reason || v.raw)));
        body.appendChild(tr);
      });
      pane.appendChild(tb);
    }, function (err) {
      pane.innerHTML = "";
      pane.appendChild(el("p", { "class": "empty" }, err.message));
    });
  }
  function goldForm(q, sub) {
    var form = el("div", { "class": "gold-form", id: "gold-form" }), had = gold[key(q, sub)];
    form.appendChild(el("h3", {}, "your labels" + (had ? " (saved)" : "")));
    LABELS.forEach(function (l) {
      var lab = el("label"), box = el("input", { type: "checkbox", name: l, id: "gold-" + l });
      box.checked = !!(had && had[l]);
      lab.appendChild(box);
      lab.appendChild(document.createTextNode(" " + l + " "));
      lab.appendChild(el("span", { "class": "def" }, (idx.definitions || {})[l] || ""));
      form.appendChild(lab);
    });
    var save = el("button", { type: "button", id: "gold-save" }, "save labels and go to the next trial");
    save.addEventListener("click", function () {
      var rec = { question_id: q, substitute: sub, labelled_at: new Date().toISOString() };
      LABELS.forEach(function (l) { rec[l] = document.getElementById("gold-" + l).checked; });
      gold[key(q, sub)] = rec;
      saveGold();
      var rows = Array.from(document.querySelectorAll("#trial-list tbody tr"));
      var next = rows.find(function (tr) { return !gold[key(tr.getAttribute("data-q"), tr.getAttribute("data-sub"))]; });
      if (next) show(next.getAttribute("data-q"), next.getAttribute("data-sub")); else { renderList(); show(q, sub); }
    });
    form.appendChild(save);
    form.appendChild(el("p", { "class": "note" }, "a box left unticked means false; the jury's votes are hidden while you label"));
    return form;
  }
  function exportGold() {
    var labels = Object.keys(gold).map(function (k) { return gold[k]; });
    var obj = { format: "sleight-gold", version: 1, model: idx.model, exported_at: new Date().toISOString(),
                drawn: idx.gold ? idx.gold.length : 0, labels: labels };
    var blob = new Blob([JSON.stringify(obj, null, 1)], { type: "application/json" });
    var a = el("a", { href: URL.createObjectURL(blob), download: "gold-" + idx.slug + ".json" });
    document.body.appendChild(a);
    a.click();
    setTimeout(function () { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
    return labels.length;
  }
  function setLabelMode(on) {
    labelMode = on;
    document.body.classList.toggle("label-mode", on);
    document.getElementById("gold-export").hidden = !on;
    document.getElementById("label-mode").textContent = on ? "leave labelling mode" : "labelling mode";
    renderList();
    var first = document.querySelector("#trial-list tbody tr");
    if (current && (!on || drawn(current.q, current.sub))) show(current.q, current.sub);
    else if (first) show(first.getAttribute("data-q"), first.getAttribute("data-sub"));
  }
  load("trials").then(function (data) {
    idx = data;
    if (data.gold && data.gold.length) {
      goldKeys = {};
      data.gold.forEach(function (k) { goldKeys[key(k[0], k[1])] = true; });
    }
    loadGold();
    saveGold();
    document.getElementById("label-mode").addEventListener("click", function () { setLabelMode(!labelMode); });
    document.getElementById("gold-export").addEventListener("click", exportGold);
    data.columns.forEach(function (c, i) { col[c] = i; });
    var qs = document.getElementById("f-question");
    Object.keys(data.questions).forEach(function (q) { qs.appendChild(el("option", { value: q }, q + " · " + data.questions[q])); });
    var dl = document.getElementById("subs");
    Array.from(new Set(data.rows.map(function (r) { return r[col.sub]; }))).forEach(function (s) { dl.appendChild(el("option", { value: s })); });
    ["f-label", "f-question", "f-sub"].forEach(function (id) {
      document.getElementById(id).addEventListener("input", renderList);
    });
    renderList();
    var h = new URLSearchParams(location.hash.slice(1));
    if (h.get("label") === "1") {
      setLabelMode(true);
      if (h.get("q") && h.get("s") && drawn(h.get("q"), h.get("s"))) show(h.get("q"), h.get("s"));
    } else if (h.get("q") && h.get("s")) show(h.get("q"), h.get("s"));
    else if (data.rows.length) show(data.rows[0][col.q], data.rows[0][col.sub]);
  }, function (err) {
    document.getElementById("detail").appendChild(el("p", { "class": "empty" }, err.message));
  });
})();
