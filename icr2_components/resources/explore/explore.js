// The interactive page of an icr2 run (icr2_components/evaluation/reports/interactive_page.py writes the data).
// Plain JavaScript, no network: it filters, sorts, pages and shows the rows the page embeds; every number it shows
// is in the data (computed by Python from report.json and the answer records), none is computed here.
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("page-data").textContent);
  var ROWS = DATA.rows;
  // answers stored once for several rows (a reproduce reference's, the same under every condition)
  if (DATA.shared) {
    ROWS.forEach(function (r) {
      var shared = DATA.shared[r.id];
      if (shared) Object.keys(shared).forEach(function (c) { if (!r.cells[c]) r.cells[c] = shared[c]; });
    });
  }
  var COLS = DATA.columns;
  var state = {cond: "", search: "", outcome: {}, metric: {col: "", name: "", min: "", max: ""},
               pair: null, sort: {key: "", dir: 1}, page: 0};
  var shown = ROWS.slice();
  var openRow = null;

  function esc(text) {
    return String(text == null ? "" : text).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;"}[c];
    });
  }
  function el(tag, attrs, html) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (html != null) node.innerHTML = html;
    return node;
  }
  function mark(right) {
    if (right === 1) return "<span class='right' title='right'>&#10003;</span>";
    if (right === 0) return "<span class='wrong' title='wrong'>&#10007;</span>";
    return "<span class='none' title='not scored'>&ndash;</span>";
  }
  function highlight(text, answers) {
    var out = esc(text);
    var terms = (answers || []).filter(function (a) { return typeof a === "string" && a.trim(); })
      .map(function (a) { return esc(a.trim()).replace(/[.*+?^${}()|[\]\\]/g, "\\$&"); });
    if (!terms.length) return out;
    terms.sort(function (a, b) { return b.length - a.length; });
    return out.replace(new RegExp("(" + terms.join("|") + ")", "gi"), "<mark>$1</mark>");
  }
  function contains(text, answers) {
    var lower = String(text || "").toLowerCase();
    return (answers || []).some(function (a) {
      return typeof a === "string" && a.trim() && lower.indexOf(a.trim().toLowerCase()) >= 0;
    });
  }
  function condText(row) { return row.condLabel || row.cond || ""; }

  // ---- the columns of the question table: [key, title, value(row) for sorting, cell html]
  var columns = [
    ["id", "question id", function (r) { return r.id; }, function (r) { return esc(r.id); }],
    ["q", "question", function (r) { return r.q; }, function (r) { return esc(r.q); }, "question"],
    ["cond", DATA.condName, function (r) { return r.x != null ? r.x : r.cond; }, function (r) { return esc(condText(r)); }],
    ["gold", "gold answers", function (r) { return r.gold.join(" | "); }, function (r) { return esc(r.gold.join(" | ")); }]
  ];
  if (DATA.kind === "eval-gate") {
    columns.push(["outcome", "label", function (r) { return r.labels.outcome; },
                  function (r) { return esc(r.labels.outcome); }]);
  }
  COLS.forEach(function (c) {
    columns.push(["a:" + c, c, function (r) { var x = r.cells[c]; return x ? (x.r == null ? -1 : x.r) : -2; },
                  function (r) { var x = r.cells[c]; return x ? mark(x.r) + " " + esc(x.a) : ""; }, "answer"]);
    if (DATA.kind === "eval-gate") {
      columns.push(["d:" + c, c + " decision", function (r) { var x = r.cells[c]; return x ? x.t.decision : ""; },
                    function (r) { var x = r.cells[c]; return x ? esc(x.t.decision) + (x.t["P(yes)"] != null ? " (" + x.t["P(yes)"] + ")" : "") : ""; }]);
    } else {
      columns.push(["lat:" + c, c + " s", function (r) { var x = r.cells[c]; return x ? x.lat : null; },
                    function (r) { var x = r.cells[c]; return x && x.lat != null ? esc(x.lat.toFixed(2)) : ""; }]);
      columns.push(["tok:" + c, c + " tokens", function (r) { var x = r.cells[c]; return x ? x.tok : null; },
                    function (r) { var x = r.cells[c]; return x && x.tok != null ? esc(x.tok) : ""; }]);
    }
  });
  DATA.metrics.filter(function (m) { return m.indexOf("judge:") === 0; }).forEach(function (m) {
    COLS.forEach(function (c) {
      columns.push([m + ":" + c, c + " " + m, function (r) { var x = r.cells[c]; return x ? x.s[m] : null; },
                    function (r) { var x = r.cells[c]; return x && x.s[m] != null ? esc(x.s[m]) : ""; }]);
    });
  });

  // ---- filters
  function searchText(row) {
    if (row._text == null) {
      var parts = [row.id, row.q, row.gold.join(" "), condText(row)];
      COLS.forEach(function (c) { if (row.cells[c]) parts.push(row.cells[c].a); });
      row._text = parts.join(" \n ").toLowerCase();
    }
    return row._text;
  }
  function keep(row) {
    if (state.pair) {
      var p = DATA.comparisons[state.pair.index];
      if (!row.stats || (p.cond != null && row.cond !== p.cond)) return false;
      var a = row.cells[p.a], b = row.cells[p.b];
      if (!a || !b || a.s[p.metric] == null || b.s[p.metric] == null) return false;
      var want = state.pair.side === "a" ? [1, 0] : [0, 1];
      if (a.s[p.metric] !== want[0] || b.s[p.metric] !== want[1]) return false;
    }
    if (state.cond && row.cond !== state.cond) return false;
    for (var c in state.outcome) {
      var o = state.outcome[c];
      if (!o) continue;
      var cell = row.cells[c];
      var r = cell ? cell.r : null;
      if (o === "right" && r !== 1) return false;
      if (o === "wrong" && r !== 0) return false;
      if (o === "unscored" && r != null) return false;
    }
    var m = state.metric;
    if (m.col && m.name && (m.min !== "" || m.max !== "")) {
      var x = row.cells[m.col];
      var v = x ? x.s[m.name] : null;
      if (m.name === "latency_s") v = x ? x.lat : null;
      if (m.name === "prompt_tokens") v = x ? x.tok : null;
      if (v == null) return false;
      if (m.min !== "" && v < Number(m.min)) return false;
      if (m.max !== "" && v > Number(m.max)) return false;
    }
    if (state.search) {
      var terms = state.search.toLowerCase().split(/\s+/).filter(Boolean);
      var text = searchText(row);
      for (var i = 0; i < terms.length; i++) if (text.indexOf(terms[i]) < 0) return false;
    }
    return true;
  }
  function apply() {
    shown = ROWS.filter(keep);
    if (state.sort.key) {
      var col = columns.filter(function (c) { return c[0] === state.sort.key; })[0];
      var dir = state.sort.dir;
      shown = shown.map(function (r, i) { return [col[2](r), i, r]; }).sort(function (x, y) {
        var a = x[0], b = y[0];
        if (a == null && b == null) return x[1] - y[1];
        if (a == null) return 1;
        if (b == null) return -1;
        if (a < b) return -dir;
        if (a > b) return dir;
        return x[1] - y[1];
      }).map(function (t) { return t[2]; });
    }
    state.page = 0;
    render();
  }

  function buildFilters() {
    var box = document.getElementById("filters");
    var html = "<label>search <input id='search' type='search' placeholder='question, answer, id'></label>";
    html += "<label>" + esc(DATA.condName) + " <select id='cond-filter'><option value=''>all</option>" +
      DATA.conds.map(function (c) {
        var label = c;
        ROWS.some(function (r) { if (r.cond === c && r.condLabel) { label = r.condLabel; return true; } return false; });
        return "<option value='" + esc(c) + "'>" + esc(label) + "</option>";
      }).join("") + "</select></label>";
    COLS.forEach(function (c, i) {
      html += "<label>" + esc(c) + " <select class='outcome-filter' data-col='" + i + "'>" +
        "<option value=''>any</option><option value='right'>right</option><option value='wrong'>wrong</option>" +
        "<option value='unscored'>not scored</option></select></label>";
    });
    var metricNames = DATA.metrics.slice();
    if (DATA.kind !== "eval-gate") metricNames = metricNames.concat(["latency_s", "prompt_tokens"]);
    metricNames = metricNames.filter(function (m, i) { return metricNames.indexOf(m) === i; });
    html += "<label>metric <select id='metric-col'><option value=''>pipeline</option>" +
      COLS.map(function (c) { return "<option>" + esc(c) + "</option>"; }).join("") + "</select>" +
      "<select id='metric-name'>" + metricNames.map(function (m) { return "<option>" + esc(m) + "</option>"; }).join("") +
      "</select> from <input id='metric-min' size='5'> to <input id='metric-max' size='5'></label>";
    html += "<span id='pair-chip'></span> <button id='clear-filters'>clear filters</button>";
    box.innerHTML = html;
    document.getElementById("search").addEventListener("input", function (e) { state.search = e.target.value; apply(); });
    document.getElementById("cond-filter").addEventListener("change", function (e) { state.cond = e.target.value; apply(); });
    Array.prototype.forEach.call(box.querySelectorAll(".outcome-filter"), function (s) {
      s.addEventListener("change", function () { state.outcome[COLS[+s.dataset.col]] = s.value; apply(); });
    });
    ["metric-col", "metric-name", "metric-min", "metric-max"].forEach(function (id) {
      document.getElementById(id).addEventListener("input", function () {
        state.metric = {col: document.getElementById("metric-col").value,
                        name: document.getElementById("metric-name").value,
                        min: document.getElementById("metric-min").value.trim(),
                        max: document.getElementById("metric-max").value.trim()};
        apply();
      });
    });
    document.getElementById("clear-filters").addEventListener("click", function () { clearControls(); apply(); });
  }

  function clearControls() {
    state.cond = ""; state.search = ""; state.outcome = {}; state.pair = null;
    state.metric = {col: "", name: "", min: "", max: ""};
    var box = document.getElementById("filters");
    Array.prototype.forEach.call(box.querySelectorAll("input"), function (i) { i.value = ""; });
    Array.prototype.forEach.call(box.querySelectorAll("select"), function (s) { s.selectedIndex = 0; });
  }

  function setPair(index, side) {
    // one click shows exactly the comparison's discordant questions: the other filters are cleared
    clearControls();
    state.pair = {index: index, side: side};
    apply();
    document.getElementById("questions-section").scrollIntoView();
  }

  function buildComparisons() {
    var box = document.getElementById("comparisons");
    if (!DATA.comparisons.length) {
      box.innerHTML = "<p class='note'>No paired comparison of 0/1 scores in this report.</p>";
      return;
    }
    var head = ["comparison", DATA.condName, "metric", "n", "difference", "test", "p", "Holm p", "verdict",
                "right only with the first", "right only with the second"];
    var html = "<table id='comparison-table'><thead><tr>" + head.map(function (h) { return "<th>" + esc(h) + "</th>"; }).join("") +
      "</tr></thead><tbody>";
    DATA.comparisons.forEach(function (c, i) {
      html += "<tr data-comparison='" + i + "'><td>" + esc(c.label) + "</td><td>" + esc(c.cond == null ? "all" : c.cond) +
        "</td><td>" + esc(c.metric) + "</td><td>" + esc(c.n) + "</td><td>" + esc(c.difference) + "</td><td>" + esc(c.test) +
        "</td><td>" + esc(c.p) + "</td><td>" + esc(c.holm) + "</td><td>" + esc(c.verdict) + "</td>" +
        "<td><button class='discordant' data-comparison='" + i + "' data-side='a' data-count='" + c.onlyA + "'>only " +
        esc(c.a) + ": " + c.onlyA + "</button></td>" +
        "<td><button class='discordant' data-comparison='" + i + "' data-side='b' data-count='" + c.onlyB + "'>only " +
        esc(c.b) + ": " + c.onlyB + "</button></td></tr>";
    });
    box.innerHTML = html + "</tbody></table>";
    box.addEventListener("click", function (e) {
      var b = e.target.closest("button.discordant");
      if (b) setPair(+b.dataset.comparison, b.dataset.side);
    });
  }

  function buildHead() {
    var tr = el("tr");
    columns.forEach(function (c) {
      var th = el("th", {"data-key": c[0]}, esc(c[1]));
      if (state.sort.key === c[0]) th.className = state.sort.dir > 0 ? "sorted-asc" : "sorted-desc";
      th.addEventListener("click", function () {
        state.sort = {key: c[0], dir: state.sort.key === c[0] ? -state.sort.dir : 1};
        buildHead();
        apply();
      });
      tr.appendChild(th);
    });
    var head = document.querySelector("#questions thead");
    head.innerHTML = "";
    head.appendChild(tr);
  }

  function render() {
    var size = DATA.pageSize, pages = Math.max(1, Math.ceil(shown.length / size));
    if (state.page >= pages) state.page = pages - 1;
    var start = state.page * size, slice = shown.slice(start, start + size);
    var body = [];
    slice.forEach(function (r, i) {
      body.push("<tr data-row='" + (start + i) + "'" + (r === openRow ? " class='open'" : "") + ">" +
        columns.map(function (c) { return "<td" + (c[4] ? " class='" + c[4] + "'" : "") + ">" + c[3](r) + "</td>"; }).join("") +
        "</tr>");
    });
    document.querySelector("#questions tbody").innerHTML = body.join("");
    var count = document.getElementById("row-count");
    count.dataset.count = String(shown.length);
    count.textContent = shown.length + " of " + ROWS.length + " rows (questions x " + DATA.condName + ")";
    var chip = document.getElementById("pair-chip");
    if (state.pair) {
      var p = DATA.comparisons[state.pair.index];
      var who = state.pair.side === "a" ? [p.a, p.b] : [p.b, p.a];
      chip.innerHTML = "<span class='chip'>right only with " + esc(who[0]) + ", wrong with " + esc(who[1]) + " (" +
        esc(p.metric) + (p.cond != null ? ", " + esc(p.cond) : "") + ")</span>";
    } else {
      chip.innerHTML = "";
    }
    document.getElementById("pager").innerHTML = "<button id='prev-page'" + (state.page ? "" : " disabled") +
      ">previous</button> page " + (state.page + 1) + " of " + pages + " <button id='next-page'" +
      (state.page + 1 < pages ? "" : " disabled") + ">next</button>";
    document.getElementById("prev-page").onclick = function () { state.page--; render(); };
    document.getElementById("next-page").onclick = function () { state.page++; render(); };
  }

  function passageList(ids, row, answers) {
    if (!ids) return "<p class='note'>No passages recorded for this answer.</p>";
    if (!ids.length) return "<p class='note'>No passages shown.</p>";
    var gold = row.goldIds || [];
    return "<ol class='passages'>" + ids.map(function (id) {
      var text = DATA.passages[id];
      var isGold = row.goldByAnswer ? contains(text, row.gold) : gold.indexOf(id) >= 0;
      var tag = isGold ? "<span class='gold-tag'>" + (row.goldByAnswer ? "holds a gold answer" : "gold passage") + "</span> " : "";
      return "<li class='passage" + (isGold ? " gold" : "") + "' data-id='" + esc(id) + "'>" + tag +
        "<small>" + esc(id) + "</small><br>" + (text == null ? "<i>text not recorded</i>" : highlight(text, answers)) + "</li>";
    }).join("") + "</ol>";
  }

  function idList(ids) {
    return ids && ids.length ? ids.map(esc).join(", ") : "none";
  }

  // what each technique did for this answer (the record's trace: component name -> its own fields)
  function techniqueBlock(x, row) {
    var html = "<div class='technique'><h4>What the technique did</h4>";
    Object.keys(x.tr).forEach(function (name) {
      var t = x.tr[name] || {};
      html += "<div class='trace' data-component='" + esc(name) + "' data-technique='" + esc(t.technique || "") + "'>";
      if (t.technique === "gate") {
        html += "<p><b>" + esc(name) + "</b> decision <span class='gate-decision'>" + esc(t.decision) + "</span>" +
          (t.score != null ? " &middot; score " + esc(t.score) : "") + (t.threshold != null ? " &middot; threshold " + esc(t.threshold) : "") +
          (t.method ? " &middot; method " + esc(t.method) : "") + (t.scoring ? " &middot; scoring " + esc(t.scoring) : "") + "</p>";
      } else if (t.technique === "rap_filter") {
        var kept = t.kept_ids || [], dropped = t.dropped_ids || [], scores = t.scores || {};
        var order = Object.keys(scores).length ? Object.keys(scores) : kept.concat(dropped);
        html += "<p><b>" + esc(name) + "</b> kept " + kept.length + " of " + order.length + " passages (M " + esc(t.top_m) +
          (t.heads ? ", heads " + esc(t.heads.join(" ")) : "") + (t.m_clamped ? ", M not below the passages: all kept" : "") + ")</p>";
        html += "<ol class='passages rap'>" + order.map(function (id) {
          var isKept = kept.indexOf(id) >= 0, text = DATA.passages[id];
          var gold = (row.goldIds || []).indexOf(id) >= 0 ? " <span class='gold-tag'>gold passage</span>" : "";
          return "<li class='passage " + (isKept ? "kept" : "dropped") + "' data-id='" + esc(id) + "'><span class='" +
            (isKept ? "kept-tag'>kept" : "dropped-tag'>dropped") + "</span>" + gold + " <small>" + esc(id) +
            (scores[id] != null ? " &middot; score " + esc(scores[id]) : "") + "</small><br>" +
            (text == null ? "<i>text not recorded</i>" : highlight(text, row.gold)) + "</li>";
        }).join("") + "</ol>";
      } else if (t.technique === "corpus_builder") {
        html += "<p><b>" + esc(name) + "</b> budget <span class='budget'>" + esc(t.used) + " of " + esc(t.budget) + " " +
          esc(t.budget_unit || "") + "</span> used" + (t.stop_reason ? " (stopped: " + esc(t.stop_reason) + ")" : "") +
          (t.achieved_ratio != null ? " &middot; retriever share of confounders " + esc(t.achieved_ratio) : "") + "</p>" +
          "<p class='confounders'><b>confounders</b> (" + (t.confounder_ids || []).length + ") " + idList(t.confounder_ids) +
          " &middot; <b>gold</b> " + idList(t.gold_ids) + "</p>";
      } else {
        html += "<p><b>" + esc(name) + "</b> " + Object.keys(t).map(function (k) {
          var v = t[k];
          return esc(k) + ": " + esc(typeof v === "object" ? JSON.stringify(v) : v);
        }).join(" &middot; ") + "</p>";
      }
      html += "</div>";
    });
    return html + "</div>";
  }

  function showDetail(row) {
    openRow = row;
    var box = document.getElementById("detail");
    var html = "<h2>" + esc(row.q) + "</h2><p><b>id</b> " + esc(row.id) + " &middot; <b>" + esc(DATA.condName) + "</b> " +
      esc(condText(row)) + " &middot; <b>gold answers</b> " + esc(row.gold.join(" | ")) +
      (row.goldIds && row.goldIds.length ? " &middot; <b>gold passages</b> " + esc(row.goldIds.join(", ")) : "") +
      (row.stats ? "" : " &middot; <i>not in the statistics (not answered under every condition and variant)</i>") + "</p>";
    if (row.labels) {
      html += "<p>" + Object.keys(row.labels).map(function (k) { return "<b>" + esc(k) + "</b> " + esc(row.labels[k]); }).join(" &middot; ") + "</p>";
    }
    var previous = null;
    COLS.forEach(function (c) {
      var x = row.cells[c];
      if (!x) return;
      html += "<div class='pipeline-block' data-pipeline='" + esc(c) + "'><h3>" + mark(x.r) + " " + esc(c) + "</h3>";
      html += "<p><b>answer</b> " + highlight(x.a, row.gold) + "</p>";
      if (x.e) html += "<p class='wrong'>error: " + esc(x.e) + "</p>";
      var scores = Object.keys(x.s).filter(function (k) { return k !== "latency_s" && k !== "prompt_tokens"; })
        .map(function (k) { return esc(k) + " " + esc(x.s[k]); });
      if (x.lat != null) scores.push("latency " + esc(x.lat) + " s");
      if (x.tok != null) scores.push("prompt tokens " + esc(x.tok));
      if (scores.length) html += "<p><b>scores</b> " + scores.join(" &middot; ") + "</p>";
      var trace = Object.keys(x.t || {});
      if (trace.length) {
        html += "<p><b>what the technique recorded</b> " + trace.map(function (k) {
          var v = x.t[k];
          return esc(k) + ": " + esc(typeof v === "object" ? JSON.stringify(v) : v);
        }).join(" &middot; ") + "</p>";
      }
      (x.j || []).forEach(function (j) {
        html += "<p><b>judge " + esc(j.metric) + "</b> " + (j.unparsable ? "unparsable" : esc(j.value)) +
          (j.error ? " (failed: " + esc(j.error) + ")" : "") + "</p>";
        if (j.replies != null) html += "<pre class='reply'>" + esc(typeof j.replies === "string" ? j.replies : JSON.stringify(j.replies, null, 1)) + "</pre>";
      });
      if (x.tr) html += techniqueBlock(x, row);
      if (x.prompt) {
        html += "<details class='prompt-block'><summary>Prompt (" + esc(x.promptChars || x.prompt.length) + " characters" +
          (x.promptChars ? ", the first " + esc(x.prompt.length) + " recorded" : "") + ")</summary><pre class='prompt'>" +
          esc(x.prompt) + "</pre></details>";
      }
      var same = previous && x.p && previous.p && x.p.join("\n") === previous.p.join("\n");
      if (same) {
        html += "<p class='note'>passages: the same, in the same order, as " + esc(previous.name) + "</p>";
      } else {
        html += "<details" + (previous ? "" : " open") + "><summary>passages in the order shown (" + (x.p ? x.p.length : 0) +
          ")</summary>" + passageList(x.p, row, row.gold) + "</details>";
      }
      if (x.p && x.p.length) previous = {name: c, p: x.p};
      html += "</div>";
    });
    if (!COLS.some(function (c) { return row.cells[c] && row.cells[c].p && row.cells[c].p.length; })) {
      var any = Object.keys(DATA.passages).filter(function (id) { return id.indexOf(row.id + "#") === 0; });
      if (any.length) html += "<h3>passages</h3>" + passageList(any, row, row.gold);
    }
    box.innerHTML = "<button id='close-detail'>close</button>" + html;
    box.hidden = false;
    document.getElementById("close-detail").onclick = function () { box.hidden = true; openRow = null; render(); };
    render();
    box.scrollTop = 0;
  }

  document.querySelector("#questions tbody").addEventListener("click", function (e) {
    var tr = e.target.closest("tr[data-row]");
    if (tr) showDetail(shown[+tr.dataset.row]);
  });

  buildComparisons();
  buildFilters();
  buildHead();
  render();
  window.explore = {rows: function () { return shown.length; }, setPair: setPair, apply: apply};
  window.exploreReady = performance.now();
  document.body.dataset.ready = "1";

  // the figures (plotly's JSON, written by Python) once plotly.js, loaded deferred, has run: the table comes first
  function drawFigures() {
    var figures = JSON.parse(document.getElementById("figure-data").textContent);
    figures.forEach(function (f, i) {
      window.Plotly.newPlot("figure-" + i, f.data, f.layout, {displaylogo: false, responsive: true});
    });
    document.body.dataset.figures = String(figures.length);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", drawFigures);
  else drawFigures();
})();
