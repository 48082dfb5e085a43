// Ying's HTML report: the chart of memory over time, the dump picker (top stacks table,
// flamegraph, peak view) and the diff of two dumps, drawn from the JSON in #ying-data.
// Hand-written, no dependency and no network: see src/report/html/mod.rs for why.
(function () {
  "use strict";
  var t0 = performance.now();
  var SVGNS = "http://www.w3.org/2000/svg";
  var COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
    "#ff9da7", "#9c755f", "#bab0ac"];
  var TOP = 10;

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function sel(tag, attrs) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    return e;
  }
  function bytes(b) {
    var u = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0, v = b;
    while (Math.abs(v) >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return (i === 0 ? String(b) : v.toFixed(1)) + " " + u[i];
  }
  function signed(b) { return (b > 0 ? "+" : b < 0 ? "-" : "") + bytes(Math.abs(b)); }
  function ms(m) {
    if (m < 0) return "";
    if (m < 1000) return m.toFixed(0) + "ms";
    if (m < 60000) return (m / 1000).toFixed(1) + "s";
    if (m < 3600000) return (m / 60000).toFixed(1) + "m";
    return (m / 3600000).toFixed(1) + "h";
  }
  function when(t) { return new Date(t).toISOString().replace(".000", ""); }

  // One process: its frames, stacks, points and dumps, and the DOM it draws into.
  function Process(p, root, index) {
    this.p = p; this.root = root; this.index = index;
    this.name = function (s) { return p.frames[p.stacks[s][0]][0]; };
    this.loc = function (s) { return p.frames[p.stacks[s][0]][1]; };
    // The span path of stack `s` (`get_item > db`), "" outside spans; whether any stack has one.
    this.span = function (s) {
      return p.stacks[s].slice(1).map(function (f) { return p.frames[f][0]; })
        .filter(function (n) { return n.indexOf("[span ") === 0; })
        .map(function (n) { return n.slice(6, -1); }).join(" > ");
    };
    this.hasSpans = p.frames.some(function (f) { return f[0].indexOf("[span ") === 0; });
    // The frames that called stack `s`'s naming frame, nearest first.
    this.callers = function (s) {
      var st = p.stacks[s], fr = st.slice(1), i = fr.lastIndexOf(st[0]);
      return fr.slice(0, i < 0 ? 0 : i).reverse();
    };
  }

  // The chart: exact retained, RSS and the peak as lines over every point; the top stacks
  // (largest retained at any dump) stacked at the dumps with the others on top; a marker at
  // each dump.
  Process.prototype.chart = function (box) {
    var p = this.p, self = this;
    var top = {}, order = [];
    p.dumps.forEach(function (d) {
      d.s.forEach(function (f) { top[f[0]] = Math.max(top[f[0]] || 0, f[1]); });
    });
    order = Object.keys(top).map(Number).filter(function (s) { return top[s] > 0; }).sort(function (a, b) { return top[b] - top[a]; })
      .slice(0, TOP);
    var series = order.map(function (s) {
      return p.dumps.map(function (d) {
        for (var i = 0; i < d.s.length; i++) if (d.s[i][0] === s) return d.s[i][1];
        return 0;
      });
    });
    var others = p.dumps.map(function (d, j) {
      var sum = 0;
      series.forEach(function (v) { sum += v[j]; });
      return Math.max(0, d.est_retained - sum);
    });
    var W = 1000, H = 320, L = 70, R = 10, T = 10, B = 30;
    var ts = p.points.map(function (q) { return q[0]; }).concat(p.dumps.map(function (d) { return d.t; }));
    var tmin = Math.min.apply(null, ts), tmax = Math.max.apply(null, ts);
    if (!(tmax > tmin)) { tmax = tmin + 1000; tmin -= 1000; }
    var ymax = 1;
    p.points.forEach(function (q) { ymax = Math.max(ymax, q[1], q[3], q[4]); });
    p.dumps.forEach(function (d) { ymax = Math.max(ymax, d.est_retained, d.retained, d.rss); });
    var x = function (t) { return L + (t - tmin) / (tmax - tmin) * (W - L - R); };
    var y = function (v) { return T + (1 - v / ymax) * (H - T - B); };
    var svg = sel("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, "class": "chart-svg" });
    for (var g = 0; g <= 4; g++) {
      var v = ymax * g / 4;
      svg.appendChild(sel("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#eee" }));
      var lab = sel("text", { x: L - 4, y: y(v) + 4, "text-anchor": "end", "font-size": 10 });
      lab.textContent = bytes(Math.round(v));
      svg.appendChild(lab);
    }
    [tmin, tmax].forEach(function (t, k) {
      var lab = sel("text", { x: x(t), y: H - 8, "text-anchor": k ? "end" : "start", "font-size": 10 });
      lab.textContent = when(t);
      svg.appendChild(lab);
    });
    var legend = el("div", { "class": "legend" });
    // Each series is named by its stack's first frame past the allocator; two stacks named
    // alike (one function reached from two places) are told apart by that frame's file:line,
    // and when that is alike too (a frame of a stripped library), by the nearest caller that
    // differs ("name ← caller").
    var seen = {};
    order.forEach(function (s) { var n = self.name(s); seen[n] = (seen[n] || 0) + 1; });
    var plainName = function (s) {
      var n = self.name(s);
      return seen[n] > 1 && self.loc(s) ? n + " (" + self.loc(s) + ")" : n;
    };
    var twins = {};
    order.forEach(function (s) { var b = plainName(s); (twins[b] = twins[b] || []).push(s); });
    var seriesName = function (s) {
      var b = plainName(s), others = twins[b].filter(function (t) { return t !== s; });
      if (!others.length) return b;
      var mine = self.callers(s), theirs = others.map(function (t) { return self.callers(t); });
      for (var k = 0; k < mine.length; k++) {
        var f = mine[k];
        if (theirs.every(function (c) { return c[k] !== f; })) return b + " \u2190 " + p.frames[f][0];
      }
      return b + " (stack " + (order.indexOf(s) + 1) + ")";
    };
    // Stacked areas, bottom up.
    var base = p.dumps.map(function () { return 0; });
    var layers = series.concat([others]);
    layers.forEach(function (vals, k) {
      var isOthers = k === series.length;
      var color = isOthers ? "#ccc" : COLORS[k % COLORS.length];
      var upper = vals.map(function (v, j) { return base[j] + v; });
      var pts = [];
      p.dumps.forEach(function (d, j) { pts.push(x(d.t) + "," + y(upper[j])); });
      for (var j = p.dumps.length - 1; j >= 0; j--) pts.push(x(p.dumps[j].t) + "," + y(base[j]));
      var name = isOthers ? "others" : seriesName(order[k]);
      var path = sel("polygon", { points: pts.join(" "), fill: color, "fill-opacity": 0.75,
        "class": "series", "data-name": name, "data-values": vals.join(",") });
      if (!isOthers) path.setAttribute("data-stack", order[k]);
      var tt = sel("title"); tt.textContent = name + (isOthers ? "" : " (" + self.loc(order[k]) + ")");
      path.appendChild(tt);
      svg.appendChild(path);
      var item = el("span", { "class": "legend-item" });
      var sw = el("i"); sw.style.background = color;
      item.appendChild(sw); item.appendChild(document.createTextNode(name));
      legend.appendChild(item);
      base = upper;
    });
    // Lines over every point.
    [[1, "exact retained", "#000"], [3, "RSS", "#1f77b4"], [4, "peak (sampled high-water)", "#d62728"]]
      .forEach(function (l) {
        var pts = p.points.map(function (q) { return x(q[0]) + "," + y(q[l[0]]); }).join(" ");
        var line = sel("polyline", { points: pts, fill: "none", stroke: l[2], "stroke-width": 1.5,
          "class": "line", "data-name": l[1],
          "data-values": p.points.map(function (q) { return q[l[0]]; }).join(",") });
        svg.appendChild(line);
        var item = el("span", { "class": "legend-item" });
        var sw = el("i"); sw.style.background = l[2];
        item.appendChild(sw); item.appendChild(document.createTextNode(l[1]));
        legend.appendChild(item);
      });
    this.markers = p.dumps.map(function (d, j) {
      var m = sel("line", { x1: x(d.t), x2: x(d.t), y1: T, y2: H - B, "class": "dump-marker",
        "data-dump": j });
      var tt = sel("title");
      tt.textContent = "dump " + d.seq + " at " + when(d.t) + ": " + bytes(d.retained) + " retained";
      m.appendChild(tt);
      m.addEventListener("click", function () { self.pick(j); });
      svg.appendChild(m);
      return m;
    });
    box.appendChild(svg);
    box.appendChild(legend);
  };

  // A flamegraph of `items` ([stack, value, a, b]: a and b set for a diff), in `box`.
  function Flame(proc, box, items, diff, unit) {
    this.proc = proc; this.box = box; this.diff = diff; this.unit = unit;
    var root = { name: "all", kids: {}, v: 0, a: 0, b: 0, f: -1 };
    var p = proc.p;
    items.forEach(function (it) {
      var n = root;
      n.v += it[1]; n.a += it[2] || 0; n.b += it[3] || 0;
      var frames = it[0] < 0 ? null : p.stacks[it[0]];
      var list = frames ? frames.slice(1) : [-1];
      list.forEach(function (f) {
        var k = n.kids[f];
        if (!k) { k = n.kids[f] = { kids: {}, v: 0, a: 0, b: 0, f: f, up: n }; }
        k.v += it[1]; k.a += it[2] || 0; k.b += it[3] || 0;
        n = k;
      });
    });
    this.root = root;
    this.zoom = root;
    this.term = proc.search || "";
    var self = this;
    var bar = el("div", { "class": "controls" });
    var search = el("input", { type: "search", placeholder: "search functions", "class": "fg-search" });
    search.value = this.term;
    var reset = el("button", { "class": "fg-reset" }, "reset zoom");
    this.found = el("span", { "class": "note fg-found" });
    search.addEventListener("input", function () { self.term = search.value; self.draw(); });
    reset.addEventListener("click", function () { self.zoom = root; self.draw(); });
    bar.appendChild(search); bar.appendChild(reset); bar.appendChild(this.found);
    this.area = el("div", { "class": "flame" });
    box.appendChild(bar); box.appendChild(this.area);
    this.draw();
  }
  Flame.prototype.label = function (n) {
    if (n.f === -1) return n.name || "[others: smaller stacks]";
    return this.proc.p.frames[n.f][0];
  };
  Flame.prototype.draw = function () {
    var self = this, area = this.area, total = this.zoom.v || 1, p = this.proc.p;
    area.textContent = "";
    var maxDepth = 0, term = this.term.toLowerCase();
    var W = 1200;
    // Ancestors of the zoomed node, full width.
    var chain = [], n = this.zoom;
    while (n) { chain.unshift(n); n = n.up; }
    function put(n, depth, left, width) {
      if (width * W < 1) return;
      maxDepth = Math.max(maxDepth, depth);
      var name = self.label(n);
      var d = el("div", { "class": "fg-node" }, name);
      d.style.left = (left * 100) + "%";
      d.style.width = (width * 100) + "%";
      d.style.top = (depth * 18) + "px";
      var loc = n.f >= 0 ? p.frames[n.f][1] : "";
      var tip = name + (loc ? "\n" + loc : "") + "\n" + bytes(n.v) + " " + self.unit + " (" +
        (n.v * 100 / (self.root.v || 1)).toFixed(1) + "% of all)";
      if (self.diff) {
        var delta = n.b - n.a;
        tip += "\nA: " + bytes(n.a) + "  B: " + bytes(n.b) + "  change: " + signed(delta);
        var r = Math.min(1, Math.abs(delta) / (Math.max(n.a, n.b) || 1));
        var c = Math.round(230 - 150 * r);
        d.style.background = delta > 0 ? "rgb(255," + c + "," + c + ")" :
          delta < 0 ? "rgb(" + c + ",255," + c + ")" : "#eee";
        d.setAttribute("data-delta", delta);
      } else {
        var h = 0;
        for (var i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
        d.style.background = "hsl(" + (h % 40 + 10) + ",80%," + (60 + h % 15) + "%)";
      }
      d.title = tip;
      d.setAttribute("data-bytes", n.v);
      if (term && name.toLowerCase().indexOf(term) >= 0) d.className += " fg-match";
      d.addEventListener("click", function () { self.zoom = n; self.draw(); });
      area.appendChild(d);
      return d;
    }
    chain.forEach(function (c, i) { if (i < chain.length - 1) put(c, i, 0, 1); });
    // A match inside a match is counted once.
    var matchedTotal = 0;
    function walk(n, depth, left, inMatch) {
      var width = n.v / total;
      put(n, depth, left, width);
      var m = term && self.label(n).toLowerCase().indexOf(term) >= 0;
      if (m && !inMatch) matchedTotal += n.v;
      var kids = Object.keys(n.kids).map(function (k) { return n.kids[k]; })
        .sort(function (a, b) { return b.v - a.v; });
      var x = left;
      kids.forEach(function (k) { walk(k, depth + 1, x, inMatch || m); x += k.v / total; });
    }
    walk(this.zoom, chain.length - 1, 0, false);
    area.style.height = ((maxDepth + 1) * 18 + 2) + "px";
    this.found.textContent = term ? "matched " + bytes(matchedTotal) + " (" +
      (matchedTotal * 100 / (this.root.v || 1)).toFixed(1) + "%)" : "";
  };

  // A table of `rows` with sortable columns: cols are [title, fn(row) -> value, numeric,
  // fmt(value, row)].
  function table(cls, cols, rows, sortBy, limit) {
    var t = el("table", { "class": cls });
    var head = el("tr");
    var body = el("tbody");
    function fill(k) {
      body.textContent = "";
      var sorted = rows.slice();
      if (k !== null) sorted.sort(function (a, b) { return cols[k][1](b) - cols[k][1](a); });
      sorted.slice(0, limit).forEach(function (r) {
        var tr = el("tr");
        cols.forEach(function (c) {
          var v = c[1](r);
          tr.appendChild(el("td", c[2] ? { "class": "n" } : {}, c[3] ? c[3](v, r) : v));
        });
        body.appendChild(tr);
      });
    }
    cols.forEach(function (c, k) {
      var th = el("th", c[2] ? { "class": "n sortable" } : {}, c[0]);
      if (c[2]) th.addEventListener("click", function () { fill(k); });
      head.appendChild(th);
    });
    var thead = el("thead"); thead.appendChild(head);
    t.appendChild(thead); t.appendChild(body);
    fill(sortBy);
    return t;
  }

  // The columns that name a stack (its first element): function, file:line, and its span
  // when the process has spans (one function under two spans is two rows, told apart here).
  Process.prototype.nameCols = function () {
    var self = this, cols = [
      ["function", function (r) { return self.name(r[0]); }],
      ["file:line", function (r) { return self.loc(r[0]); }],
    ];
    if (this.hasSpans) cols.push(["span", function (r) { return self.span(r[0]); }]);
    return cols;
  };

  Process.prototype.stackCols = function () {
    return this.nameCols().concat([
      // A sampled figure with its 95 % interval (1.96 standard errors, f[8]).
      // An estimate whose interval reaches zero is marked: its size is uncertain.
      ["retained", function (f) { return f[1]; }, true, function (v, f) {
        return bytes(v) + (f[8] >= 1 ? " \u00b1 " + bytes(Math.round(1.96 * f[8])) : "") +
          (v > 0 && 1.96 * f[8] >= v ? " (within noise)" : "");
      }],
      ["resident", function (f) { return f[9]; }, true, function (v) { return v < 0 ? "-" : bytes(v); }],
      ["allocated", function (f) { return f[2]; }, true, bytes],
      ["allocations", function (f) { return f[3]; }, true, String],
      ["retained allocs", function (f) { return f[4]; }, true, String],
      ["at peak", function (f) { return f[5]; }, true, bytes],
      ["avg lifetime (freed)", function (f) { return f[6]; }, true, ms],
      ["avg age (retained)", function (f) { return f[7]; }, true, ms],
    ]);
  };

  // The dump picker's views of dump `j`: its table, flamegraph and peak.
  Process.prototype.pick = function (j) {
    var p = this.p, d = p.dumps[j], self = this;
    if (this.picker) this.picker.value = String(j);
    this.markers.forEach(function (m, k) { m.setAttribute("class", "dump-marker" + (k === j ? " selected" : "")); });
    var box = this.dumpBox;
    box.textContent = "";
    box.setAttribute("data-dump", j);
    box.appendChild(el("p", { "class": "dump-info" }, "dump " + d.seq + " (" + d.stem + ") at " +
      when(d.t) + ": " + bytes(d.retained) + " retained (exact), " + bytes(d.est_retained) +
      " estimated, " + bytes(d.allocated) + " allocated since start, RSS " + bytes(d.rss) + ", " +
      d.sampled + " stacks sampled" + (d.detail ? "" : "; only its largest stacks are kept")));
    box.appendChild(el("h3", {}, "Top stacks"));
    if (!d.s.some(function (f) { return f[1] > 0; })) {
      box.appendChild(el("p", { "class": "top-empty" }, "No sampled stack retained bytes at this dump: " +
        "its stacks had freed what they held. The peak below holds what they held at its height; " +
        "the table lists what they allocated."));
    }
    box.appendChild(table("stacks", this.stackCols(), d.s, 2, 30));
    box.appendChild(el("h3", {}, "Flamegraph (retained bytes)"));
    var kept = 0;
    var items = d.s.filter(function (f) { return f[1] > 0; }).map(function (f) { kept += f[1]; return [f[0], f[1]]; });
    if (d.est_retained > kept) items.push([-1, d.est_retained - kept]);
    var fg = el("div", { "class": "flame-box current" });
    box.appendChild(fg);
    new Flame(this, fg, items, false, "retained");
    // A page of one dump shows its peak first, above the dump (see render).
    if (!this.single) {
      box.appendChild(el("h3", {}, "Peak"));
      this.peakView(box, d);
    }
  };

  // The peak kept at dump `d`: its figures, its top stacks and their flamegraph, in `box`. The
  // high-water mark is an estimate; when an exact figure it includes (the retained total at
  // the dump, the exact total at the kept peak) is above it, the peak was at least that.
  Process.prototype.peakView = function (box, d) {
    var floor = Math.max(d.retained, d.peak_exact), hw;
    if (floor > d.peak) {
      hw = "peak at least " + bytes(floor) + " (exact, " + (floor === d.retained ? "retained at dump " + d.seq :
        "retained at the kept peak") + "; the sampled high-water " + bytes(d.peak) + " is below it)";
    } else {
      hw = "peak ≈" + bytes(d.peak) + " (sampled high-water)";
    }
    box.appendChild(el("p", { "class": "peak-info" }, d.peak_est ? hw + "; kept peak" +
      (d.peak_t ? " at " + when(d.peak_t) : "") + ": " + bytes(d.peak_est) + " estimated" + (d.peak_exact ? ", " + bytes(d.peak_exact) + " exact" : "") :
      "no peak kept yet"));
    var peakRows = d.s.filter(function (f) { return f[5] > 0; });
    box.appendChild(table("peak-stacks", this.stackCols().filter(function (c) { return !c[2] || c[0] === "at peak"; }), peakRows, 2, 10));
    var pk = 0;
    var pitems = peakRows.map(function (f) { pk += f[5]; return [f[0], f[5]]; });
    if (d.peak_est > pk) pitems.push([-1, d.peak_est - pk]);
    var pf = el("div", { "class": "flame-box peak" });
    box.appendChild(pf);
    new Flame(this, pf, pitems, false, "retained at the peak");
  };

  // Sampling noise, as src/report/noise.rs decides it: the upper normal tail (erfc as in
  // Numerical Recipes), and the z a change must pass when `n` changes are tested together
  // (two-sided, 1 % for the whole diff: Bonferroni).
  function normalSf(z) {
    var x = Math.abs(z) / Math.SQRT2, t = 1 / (1 + 0.5 * x);
    var r = t * Math.exp(-x * x - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
      t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 +
      t * 0.17087277)))))))));
    return 0.5 * (z >= 0 ? r : 2 - r);
  }
  function threshold(n) {
    var tail = 0.01 / Math.max(1, n) / 2, lo = 0, hi = 40;
    for (var k = 0; k < 100; k++) { var mid = (lo + hi) / 2; if (normalSf(mid) > tail) lo = mid; else hi = mid; }
    return Math.max(hi, 1.96);
  }

  // The diff of dumps i (A) and j (B): each stack's change weighed against the sampling noise
  // of both dumps (its standard errors, the 9th figure of a dump's stack), those beyond noise
  // first, surest first, the others folded into one line (a box shows them), and a red/green
  // flamegraph.
  Process.prototype.diff = function (i, j) {
    var p = this.p, a = p.dumps[i], b = p.dumps[j], self = this, box = this.diffBox;
    box.textContent = "";
    box.setAttribute("data-a", i); box.setAttribute("data-b", j);
    // [stack, A, B, A's stderr, B's stderr, z, beyond]
    var m = {};
    a.s.forEach(function (f) { m[f[0]] = [f[0], f[1], 0, f[8] || 0, 0]; });
    b.s.forEach(function (f) {
      var r = m[f[0]] = m[f[0]] || [f[0], 0, 0, 0, 0];
      r[2] = f[1]; r[4] = f[8] || 0;
    });
    var rows = Object.keys(m).map(function (k) { return m[k]; })
      .filter(function (r) { return r[1] !== r[2]; });
    var thr = threshold(rows.length), within = 0, withinSum = 0;
    rows.forEach(function (r) {
      var d = r[2] - r[1], v = r[3] * r[3] + r[4] * r[4];
      r[5] = d === 0 ? 0 : v > 0 ? Math.abs(d) / Math.sqrt(v) : Infinity;
      r[6] = r[5] > thr;
      if (!r[6]) { within++; withinSum += d; }
    });
    rows.sort(function (x, y) { return (y[6] - x[6]) || ((y[5] > x[5]) - (y[5] < x[5])) || (y[2] - y[1] - x[2] + x[1]); });
    box.appendChild(el("p", { "class": "diff-info" }, "from dump " + a.seq + " (" + when(a.t) + ", " +
      bytes(a.retained) + " retained) to dump " + b.seq + " (" + when(b.t) + ", " + bytes(b.retained) +
      "): " + signed(b.retained - a.retained) + " exact; stacks outside a dump's kept top count as 0 there"));
    box.appendChild(el("h3", {}, "Stacks that changed beyond sampling noise"));
    box.appendChild(el("p", { "class": "diff-noise" }, (rows.length - within) + " of " + rows.length +
      " stacks changed beyond sampling noise (z > " + thr.toFixed(2) + ": the change over the standard " +
      "error of both dumps' estimates, 1 % for the whole diff), surest first; " + within +
      " within it, " + signed(withinSum) + " in all"));
    var cols = this.nameCols().concat([
      ["change", function (r) { return r[2] - r[1]; }, true, signed],
      ["z", function (r) { return r[5]; }, true, function (z) { return z === Infinity ? "exact" : z.toFixed(1); }],
      ["noise", function (r) { return r[6] ? "beyond" : "within"; }],
      ["A retained", function (r) { return r[1]; }, true, bytes],
      ["B retained", function (r) { return r[2]; }, true, bytes],
    ]);
    var tableBox = el("div");
    box.appendChild(tableBox);
    var show = function (all) {
      tableBox.textContent = "";
      tableBox.appendChild(table("diff-table", cols, all ? rows : rows.filter(function (r) { return r[6]; }), null, 20));
      if (!all && within) tableBox.appendChild(el("p", { "class": "diff-folded" }, "... and " + within +
        " stacks within noise, " + signed(withinSum) + " in all"));
    };
    var toggle = el("label", { "class": "diff-all" });
    var cb = el("input", { type: "checkbox" });
    cb.addEventListener("change", function () { show(cb.checked); });
    toggle.appendChild(cb); toggle.appendChild(document.createTextNode(" show the stacks within noise too"));
    box.appendChild(toggle);
    show(false);
    box.appendChild(el("h3", {}, "Diff flamegraph (width: the larger of A and B; red grew, green shrank)"));
    var fg = el("div", { "class": "flame-box diff" });
    box.appendChild(fg);
    new Flame(this, fg, Object.keys(m).map(function (k) { var r = m[k]; return [r[0], Math.max(r[1], r[2]), r[1], r[2]]; }), true, "retained");
  };

  Process.prototype.render = function () {
    var p = this.p, self = this, root = this.root;
    if (!p.dumps.length) { root.appendChild(el("p", {}, "no dump yet")); return; }
    // The URL's #dump=N&a=I&b=J&search=S (see below).
    var q = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      var s = kv.split("=");
      if (s.length === 2) q[s[0]] = s[0] === "search" ? decodeURIComponent(s[1]) : Number(s[1]);
    });
    this.search = q.search || "";
    // One dump (a short program's exit report): no chart of one instant and no diff of the dump
    // with itself; the page leads with the peak, which holds what the program's memory was.
    if (p.dumps.length === 1) {
      this.single = true;
      this.markers = [];
      var only = p.dumps[0];
      root.appendChild(el("p", { "class": "note single-dump" }, "One dump (" + only.stem + " at " + when(only.t) +
        "): the chart over time and the diff of two dumps need two dumps or more."));
      root.appendChild(el("h3", {}, "Peak"));
      var pv = el("div", { "class": "peak-view" });
      root.appendChild(pv);
      this.peakView(pv, only);
      root.appendChild(el("h3", {}, "At dump " + only.seq));
      this.dumpBox = el("div", { "class": "dump-view" });
      root.appendChild(this.dumpBox);
      this.pick(0);
      return;
    }
    root.appendChild(el("h3", {}, "Memory over time"));
    var chart = el("div", { "class": "chart" });
    root.appendChild(chart);
    this.chart(chart);
    root.appendChild(el("h3", {}, "Dump"));
    var controls = el("div", { "class": "controls" });
    this.picker = el("select", { "class": "dump-picker" });
    p.dumps.forEach(function (d, j) {
      self.picker.appendChild(el("option", { value: j }, "dump " + d.seq + " at " + when(d.t) + " (" +
        bytes(d.retained) + ")" + (d.detail ? "" : " [largest stacks only]")));
    });
    this.picker.addEventListener("change", function () { self.pick(Number(self.picker.value)); });
    var slider = el("input", { type: "range", min: 0, max: p.dumps.length - 1, "class": "dump-slider" });
    slider.addEventListener("input", function () { self.pick(Number(slider.value)); });
    controls.appendChild(this.picker); controls.appendChild(slider);
    root.appendChild(controls);
    this.dumpBox = el("div", { "class": "dump-view" });
    root.appendChild(this.dumpBox);
    root.appendChild(el("h3", {}, "Diff of two dumps"));
    var dc = el("div", { "class": "controls" });
    var sa = el("select", { "class": "diff-a" }), sb = el("select", { "class": "diff-b" });
    p.dumps.forEach(function (d, j) {
      [sa, sb].forEach(function (s) { s.appendChild(el("option", { value: j }, "dump " + d.seq + " at " + when(d.t))); });
    });
    var go = function () { self.diff(Number(sa.value), Number(sb.value)); };
    sa.addEventListener("change", go); sb.addEventListener("change", go);
    dc.appendChild(document.createTextNode("A ")); dc.appendChild(sa);
    dc.appendChild(document.createTextNode(" B ")); dc.appendChild(sb);
    root.appendChild(dc);
    this.diffBox = el("div", { "class": "diff-view" });
    root.appendChild(this.diffBox);
    // The URL's #dump=N&a=I&b=J picks; the first-to-last diff otherwise.
    var n = p.dumps.length, clamp = function (v, d) { return v >= 0 && v < n ? v : d; };
    var first = 0;
    while (first < n - 1 && !p.dumps[first].detail) first++;
    sa.value = String(clamp(q.a, first)); sb.value = String(clamp(q.b, n - 1));
    // The dump that matters (the last, or the largest when the last is near empty: see
    // Timeline::dump_that_matters), unless the URL picks one.
    var open = clamp(p.open, n - 1);
    slider.value = String(clamp(q.dump, open));
    this.pick(clamp(q.dump, open));
    go();
  };

  var data = JSON.parse(document.getElementById("ying-data").textContent);
  data.processes.forEach(function (p, i) {
    var box = document.getElementById("ying-process-" + i);
    if (!box) return;
    var app = el("div", { "class": "app" });
    box.appendChild(app);
    new Process(p, app, i).render();
  });
  document.body.setAttribute("data-render-ms", (performance.now() - t0).toFixed(1));
  document.body.setAttribute("data-rendered", "yes");
})();
