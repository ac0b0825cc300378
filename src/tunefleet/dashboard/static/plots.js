/* tunefleet dashboard plots: small SVG charts drawn with the DOM, no library.
 * Every text is set through textContent, never parsed as HTML. */
(function () {
  "use strict";
  const NS = "http://www.w3.org/2000/svg";
  const PALETTE = ["#2f6fde", "#e4572e", "#1f9d55", "#9b5de5", "#f2a541", "#17a2b8",
    "#d63384", "#6c757d", "#8ac926", "#5a3e36"];
  const OUTCOME = { promoted: "#1f9d55", stopped: "#d64545", waiting: "#b7791f",
    running: "#2f6fde", done: "#6b7280", error: "#d64545", removed: "#adb5bd" };

  function el(tag, attrs, parent) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (parent) parent.appendChild(node);
    return node;
  }
  function text(parent, x, y, value, attrs) {
    const node = el("text", Object.assign({ x: x, y: y }, attrs || {}), parent);
    node.textContent = value;
    return node;
  }
  function tip(node, value) { el("title", {}, node).textContent = value; return node; }

  function fmt(v) {
    if (v === null || v === undefined) return "-";
    if (typeof v !== "number") return String(v);
    if (Number.isInteger(v) && Math.abs(v) < 1e6) return String(v);
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(2);
    return String(Number(v.toPrecision(4)));
  }

  function niceTicks(lo, hi, count) {
    if (!(hi > lo)) return [lo];
    const raw = (hi - lo) / Math.max(1, count);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
    const out = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
      out.push(Math.abs(t) < step * 1e-9 ? 0 : t);
    }
    return out;
  }

  /* A linear or log scale from a domain onto a pixel range. */
  function scale(lo, hi, from, to, log) {
    if (log) {
      const a = Math.log10(lo), b = Math.log10(hi);
      const f = (v) => from + (Math.log10(v) - a) / ((b - a) || 1) * (to - from);
      f.ticks = () => {
        const out = [];
        for (let e = Math.floor(a); e <= Math.ceil(b); e++) {
          if (e >= a - 1e-9 && e <= b + 1e-9) out.push(Math.pow(10, e));
        }
        return out.length >= 2 ? out : [lo, hi];
      };
      return f;
    }
    if (hi === lo) { lo -= 1; hi += 1; }
    const f = (v) => from + (v - lo) / (hi - lo) * (to - from);
    f.ticks = (n) => niceTicks(lo, hi, n || 5);
    return f;
  }

  function extent(values) {
    let lo = Infinity, hi = -Infinity;
    for (const v of values) {
      if (typeof v === "number" && isFinite(v)) { if (v < lo) lo = v; if (v > hi) hi = v; }
    }
    return lo <= hi ? [lo, hi] : [0, 1];
  }

  function useLog(lo, hi) { return lo > 0 && hi / lo >= 100; }

  /* A sequential color for t in [0, 1]: blue (good) to orange (bad). */
  function ramp(t) {
    const stops = [[47, 111, 222], [140, 160, 190], [228, 87, 46]];
    const x = Math.max(0, Math.min(1, t)) * 2, i = Math.min(1, Math.floor(x)), f = x - i;
    const c = stops[i].map((s, j) => Math.round(s + (stops[i + 1][j] - s) * f));
    return "rgb(" + c.join(",") + ")";
  }

  function frame(target, width, height, label) {
    target.textContent = "";
    const svg = el("svg", { viewBox: "0 0 " + width + " " + height, role: "img",
      "aria-label": label, "data-plot": label }, target);
    return svg;
  }

  function axes(svg, x, y, box, xLabel, yLabel) {
    const g = el("g", { class: "axis" }, svg), grid = el("g", { class: "grid" }, svg);
    for (const t of y.ticks(5)) {
      const py = y(t);
      el("line", { x1: box.l, x2: box.r, y1: py, y2: py }, grid);
      text(g, box.l - 6, py + 4, fmt(t), { "text-anchor": "end" });
    }
    for (const t of x.ticks(6)) {
      const px = x(t);
      el("line", { x1: px, x2: px, y1: box.b, y2: box.b + 4 }, g);
      text(g, px, box.b + 16, fmt(t), { "text-anchor": "middle" });
    }
    el("line", { x1: box.l, x2: box.r, y1: box.b, y2: box.b }, g);
    el("line", { x1: box.l, x2: box.l, y1: box.t, y2: box.b }, g);
    text(g, (box.l + box.r) / 2, box.b + 32, xLabel, { "text-anchor": "middle", class: "label" });
    text(g, 12, (box.t + box.b) / 2, yLabel, { "text-anchor": "middle", class: "label",
      transform: "rotate(-90 12 " + (box.t + box.b) / 2 + ")" });
  }

  /* Lines of [x, y] points: series = [{id, label, color, points, width}]. */
  function lineChart(target, series, opts) {
    const W = 640, H = 320, box = { l: 62, r: W - 14, t: 12, b: H - 42 };
    const svg = frame(target, W, H, opts.name || "line chart");
    const xs = [], ys = [];
    for (const s of series) for (const p of s.points) { xs.push(p[0]); ys.push(p[1]); }
    if (!xs.length) {
      text(svg, W / 2, H / 2, opts.empty || "no data yet", { "text-anchor": "middle" });
      return svg;
    }
    const [x0, x1] = extent(xs), [y0, y1] = extent(ys);
    const log = opts.logY && useLog(y0, y1);
    const pad = log ? 0 : (y1 - y0) * 0.05 || 1;
    const x = scale(x0, x1, box.l, box.r, false);
    const y = scale(log ? y0 : y0 - pad, log ? y1 : y1 + pad, box.b, box.t, log);
    axes(svg, x, y, box, opts.xLabel || "", opts.yLabel || "");
    series.forEach((s, i) => {
      if (!s.points.length) return;
      const color = s.color || PALETTE[i % PALETTE.length];
      // a step back in x (a PBT trial continuing from another's checkpoint) starts a new line
      const d = s.points.map((p, j) => (j && p[0] >= s.points[j - 1][0] ? "L" : "M") +
        x(p[0]).toFixed(1) + " " + y(p[1]).toFixed(1)).join("");
      const path = el("path", { d: d, fill: "none", stroke: color,
        "stroke-width": s.width || 1.8, "data-series": s.id, class: "series" }, svg);
      tip(path, s.label + ": last " + fmt(s.points[s.points.length - 1][1]));
      if (s.points.length === 1) {
        el("circle", { cx: x(s.points[0][0]), cy: y(s.points[0][1]), r: 3, fill: color }, svg);
      }
    });
    return svg;
  }

  /* Parallel coordinates: axes = [{key, label, categorical}], rows = [{id, values, color}]. */
  function parallelCoords(target, rows, axesSpec, opts) {
    const W = 640, H = 320, box = { t: 30, b: H - 36 };
    const svg = frame(target, W, H, opts.name || "parallel coordinates");
    if (!rows.length || axesSpec.length < 2) {
      text(svg, W / 2, H / 2, opts.empty || "not enough data", { "text-anchor": "middle" });
      return svg;
    }
    const step = (W - 90) / (axesSpec.length - 1);
    const scales = axesSpec.map((a, i) => {
      const px = 45 + i * step;
      const vals = rows.map((r) => r.values[a.key]);
      if (a.categorical) {
        const cats = Array.from(new Set(vals.map((v) => String(v)))).sort();
        const pos = (v) => box.b - (cats.indexOf(String(v)) + 0.5) / cats.length * (box.b - box.t);
        return { px: px, at: pos, ticks: cats.map((c) => [c, pos(c)]) };
      }
      const [lo, hi] = extent(vals);
      const f = scale(lo, hi, box.b, box.t, useLog(lo, hi));
      return { px: px, at: (v) => (typeof v === "number" && isFinite(v) ? f(v) : null),
        ticks: f.ticks(4).map((t) => [fmt(t), f(t)]) };
    });
    const lines = el("g", {}, svg);
    for (const r of rows) {
      const pts = [];
      axesSpec.forEach((a, i) => {
        const py = scales[i].at(r.values[a.key]);
        if (py !== null && !isNaN(py)) pts.push(scales[i].px.toFixed(1) + " " + py.toFixed(1));
      });
      if (pts.length < 2) continue;
      const path = el("path", { d: "M" + pts.join("L"), fill: "none", stroke: r.color,
        "stroke-width": r.highlight ? 3 : 1.4, "stroke-opacity": r.highlight ? 1 : 0.75,
        class: "pc-line", "data-trial-id": r.id }, lines);
      tip(path, r.label);
    }
    axesSpec.forEach((a, i) => {
      const g = el("g", { class: "axis" }, svg), px = scales[i].px;
      el("line", { x1: px, x2: px, y1: box.t, y2: box.b }, g);
      for (const [label, py] of scales[i].ticks) {
        el("line", { x1: px - 3, x2: px + 3, y1: py, y2: py }, g);
        text(g, px + 5, py + 4, label.length > 12 ? label.slice(0, 11) + "\u2026" : label);
      }
      text(g, px, box.t - 12, a.label, { "text-anchor": "middle", class: "label" });
    });
    return svg;
  }

  /* ASHA rungs: x = rung, y = metric; a trial's scores joined across rungs. */
  function rungChart(target, bracket, opts) {
    const W = 640, H = 300, box = { l: 62, r: W - 110, t: 14, b: H - 42 };
    const svg = frame(target, W, H, opts.name || "rungs");
    const ys = [];
    for (const r of bracket.rungs) for (const e of r.entries) ys.push(e.value);
    if (!ys.length) {
      text(svg, W / 2, H / 2, "no trial reached a rung yet", { "text-anchor": "middle" });
      return svg;
    }
    const n = bracket.rungs.length, [y0, y1] = extent(ys), pad = (y1 - y0) * 0.08 || 1;
    const x = scale(-0.5, n - 0.5, box.l, box.r, false);
    x.ticks = () => bracket.rungs.map((_, k) => k);
    const y = scale(y0 - pad, y1 + pad, box.b, box.t, false);
    axes(svg, x, y, box, "rung (milestone)", opts.yLabel || "metric");
    const paths = {};
    bracket.rungs.forEach((r, k) => {
      for (const e of r.entries) {
        if (typeof e.value !== "number") continue;
        (paths[e.trial_id] = paths[e.trial_id] || []).push([x(k), y(e.value)]);
      }
    });
    for (const pts of Object.values(paths)) {
      if (pts.length < 2) continue;
      el("path", { d: "M" + pts.map((p) => p[0].toFixed(1) + " " + p[1].toFixed(1)).join("L"),
        fill: "none", stroke: "#c5ccd8", "stroke-width": 1 }, svg);
    }
    bracket.rungs.forEach((r, k) => {
      r.entries.forEach((e, j) => {
        if (typeof e.value !== "number") return;
        const jitter = ((j % 7) - 3) * 3;
        const dot = el("circle", { cx: x(k) + jitter, cy: y(e.value), r: 4.5,
          fill: OUTCOME[e.outcome] || "#888", class: "rung-dot", "data-trial-id": e.trial_id,
          "data-outcome": e.outcome }, svg);
        tip(dot, e.trial_id + ": " + fmt(e.value) + " (" + e.outcome + ")");
      });
      const label = r.at === null ? "rung " + k
        : "rung " + k + " (" + (r.exact ? "" : "\u2248") + fmt(r.at) + ")";
      text(svg, x(k), box.t + 2, label, { "text-anchor": "middle" });
    });
    let ly = box.t + 10;
    for (const [name, color] of Object.entries(OUTCOME)) {
      if (!bracket.rungs.some((r) => r.entries.some((e) => e.outcome === name))) continue;
      el("circle", { cx: box.r + 18, cy: ly, r: 4.5, fill: color }, svg);
      text(svg, box.r + 28, ly + 4, name);
      ly += 16;
    }
    return svg;
  }

  /* PBT lineage: one lane per trial, its run segments, an arrow per exploit. */
  function lineage(target, lanes, exploits, opts) {
    const laneH = 22, W = 640, H = Math.max(130, 56 + lanes.length * laneH);
    const box = { l: 110, r: W - 16, t: 26, b: H - 30 };
    const svg = frame(target, W, H, opts.name || "lineage");
    const row = {};
    lanes.forEach((lane, i) => { row[lane.trial_id] = box.t + laneH * (i + 0.5); });
    const xs = [0];
    for (const lane of lanes) for (const s of lane.segments) xs.push(s.from, s.to);
    const [x0, x1] = extent(xs);
    const x = scale(x0, Math.max(x1, x0 + 1), box.l, box.r, false);
    const g = el("g", { class: "axis" }, svg);
    for (const t of x.ticks(6)) text(g, x(t), box.b + 16, fmt(t), { "text-anchor": "middle" });
    text(g, (box.l + box.r) / 2, H - 2, "training_iteration", { "text-anchor": "middle",
      class: "label" });
    const key = opts.colorKey, values = [];
    for (const lane of lanes) for (const s of lane.segments) values.push(s.config[key]);
    const [v0, v1] = extent(values), logc = useLog(v0, v1);
    if (key) {
      text(svg, box.l, 12, "color: " + key + " (blue " + fmt(v0) + " \u2192 orange " +
        fmt(v1) + ")");
    }
    const color = (v) => {
      if (typeof v !== "number") return PALETTE[0];
      const t = logc ? (Math.log10(v) - Math.log10(v0)) / ((Math.log10(v1) - Math.log10(v0)) || 1)
        : (v - v0) / ((v1 - v0) || 1);
      return ramp(t);
    };
    for (const lane of lanes) {
      const py = row[lane.trial_id];
      text(svg, box.l - 8, py + 4, lane.trial_id, { "text-anchor": "end" });
      lane.segments.forEach((s, j) => {
        // iterations repeat after an exploit: alternate segments sit a little apart
        const sy = lane.segments.length > 1 ? py + (j % 2 ? 3 : -3) : py;
        const seg = el("line", { x1: x(s.from), x2: x(Math.max(s.to, s.from)), y1: sy, y2: sy,
          stroke: color(s.config[key]), "stroke-width": 6, "stroke-linecap": "round",
          class: "segment", "data-trial-id": lane.trial_id }, svg);
        tip(seg, lane.trial_id + " iterations " + s.from + "-" + s.to + (key ? ": " + key +
          "=" + fmt(s.config[key]) : "") + (s.source ? " (from " + s.source + ")" : ""));
      });
    }
    for (const e of exploits) {
      if (!(e.source in row) || !(e.trial_id in row)) continue;
      const arrow = el("path", { d: "M" + x(e.iteration) + " " + row[e.source] + "L" +
        x(e.iteration) + " " + row[e.trial_id], stroke: "#1d2330", "stroke-width": 1.2,
        "stroke-dasharray": "3 2", class: "exploit" }, svg);
      el("circle", { cx: x(e.iteration), cy: row[e.trial_id], r: 3, fill: "#1d2330" }, svg);
      const changed = Object.entries(e.changes).map(([k, v]) => k + ": " + fmt(v[0]) + " \u2192 " +
        fmt(v[1])).join(", ");
      tip(arrow, e.trial_id + " copied " + e.source + " at iteration " + e.iteration +
        (changed ? "; " + changed : ""));
    }
    return svg;
  }

  window.TFPlots = { lineChart, parallelCoords, rungChart, lineage, fmt, ramp, PALETTE, OUTCOME };
})();
