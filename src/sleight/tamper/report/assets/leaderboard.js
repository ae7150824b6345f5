// Sortable tables: click a header to sort by that column (numbers by value, text alphabetically);
// a second click reverses. Cells carry data-value with the raw number ("" for missing: last).
(function () {
  function key(cell) {
    var v = cell.getAttribute("data-value");
    if (v === null) return { num: false, val: cell.textContent.trim().toLowerCase() };
    if (v === "") return { num: true, val: null };
    return { num: true, val: parseFloat(v) };
  }
  function sortBy(table, col, th) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var dir = th.getAttribute("aria-sort") === "descending" ? "ascending" : "descending";
    if (!th.hasAttribute("aria-sort") && th.getAttribute("data-type") === "text") dir = "ascending";
    rows.sort(function (a, b) {
      var x = key(a.cells[col]), y = key(b.cells[col]);
      if (x.val === null && y.val === null) return 0;
      if (x.val === null) return 1;
      if (y.val === null) return -1;
      var c = x.num ? x.val - y.val : (x.val < y.val ? -1 : x.val > y.val ? 1 : 0);
      return dir === "ascending" ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir);
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.addEventListener("click", function () { sortBy(table, col, th); });
    });
  });
})();
