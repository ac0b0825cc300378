/* tunefleet dashboard: the pages. Data comes from the JSON API (served) or from the
 * embedded #tunefleet-data block (a static report). Every text is set through
 * textContent, never parsed as HTML. */
(function () {
  "use strict";
  const P = window.TFPlots, fmt = P.fmt;
  const STATES = ["PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR"];
  const POLL_MS = 1500;
  const embeddedNode = document.getElementById("tunefleet-data");
  const embedded = embeddedNode ? JSON.parse(embeddedNode.textContent) : null;
  let page = null; // the experiment page's state, null on the list page
  let timer = null;
  let generation = 0; // bumped by every navigation: late answers for an old page are dropped
  document.body.dataset.refreshes = "0";

  // -- DOM helpers ------------------------------------------------------------------------
  function h(tag, attrs) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "text") node.textContent = v;
      else if (k === "on") for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
      else if (v !== null && v !== undefined && v !== false) node.setAttribute(k, String(v));
    }
    for (let i = 2; i < arguments.length; i++) {
      const child = arguments[i];
      if (child === null || child === undefined) continue;
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }
  function when(t) { return typeof t === "number" ? new Date(t * 1000).toLocaleString() : "-"; }
  function num(v) { return typeof v === "number" && isFinite(v) ? v : null; }
  function badge(status) { return h("span", { class: "badge " + status, text: String(status) }); }

  // -- data -------------------------------------------------------------------------------
  async function getJSON(url) {
    const r = await fetch(url, { credentials: "same-origin", cache: "no-store" });
    if (!r.ok) {
      let why = r.statusText;
      try { why = (await r.json()).error || why; } catch (e) { /* not JSON */ }
      throw new Error(r.status + ": " + why);
    }
    return r.json();
  }
  const base = (name) => "/api/experiments/" + encodeURIComponent(name);
  const api = embedded ? {
    experiments: async () => ({ experiments: embedded.experiments }),
    experiment: async () => embedded.experiment,
    curves: async (name, metric, ids) => {
      const all = embedded.curves[metric] || {}, out = {};
      for (const id of ids) if (all[id]) out[id] = all[id];
      return { metric: metric, curves: out };
    },
  } : {
    experiments: () => getJSON("/api/experiments"),
    experiment: (name, q) => getJSON(base(name) + (q ? "?" + q : "")),
    poll: (name) => getJSON(base(name) + "/poll"),
    curves: (name, metric, ids) => getJSON(base(name) + "/curves?metric=" +
      encodeURIComponent(metric) + "&trials=" + ids.map(encodeURIComponent).join(",")),
  };
  function curveMetrics(view) {
    const keys = view.objectives.map((o) => o.metric);
    for (const k of view.metric_keys) if (!keys.includes(k)) keys.push(k);
    return embedded ? keys.filter((k) => k in embedded.curves) : keys;
  }

  // -- routing ----------------------------------------------------------------------------
  function route() {
    stopPolling();
    generation += 1;
    const m = location.hash.match(/^#\/exp\/(.+)$/);
    const main = document.getElementById("app");
    if (m) showExperiment(decodeURIComponent(m[1]), main);
    else if (embedded) showExperiment(embedded.experiment.name, main);
    else showList(main);
  }
  function stopPolling() { if (timer) clearTimeout(timer); timer = null; page = null; }
  function fail(main, err) {
    main.textContent = "";
    main.appendChild(h("p", { class: "error-box", text: "Could not load: " + err.message }));
  }
  function setLive(on, lastUpdate) {
    const live = document.getElementById("live-status");
    live.className = on ? "live on" : "live";
    live.textContent = (on ? "live \u00b7 " : "") + (lastUpdate ? "updated " + when(lastUpdate)
      : "") + (embedded ? " \u00b7 report written " + when(embedded.generated_at) : "");
    document.body.dataset.lastUpdate = String(lastUpdate || "");
  }

  // -- the experiments list ------------------------------------------------------------------
  async function showList(main) {
    const gen = generation;
    document.getElementById("crumb").textContent = "experiments";
    let data;
    try { data = await api.experiments(); } catch (err) { fail(main, err); return; }
    if (gen !== generation) return;
    main.textContent = "";
    const rows = data.experiments;
    const table = h("table", { id: "experiments-table" }, h("thead", {}, h("tr", {},
      ...["Experiment", "Status", "Trials", ...STATES, "Best", "Last update"].map((t) =>
        h("th", { text: t })))));
    const body = h("tbody");
    for (const e of rows) {
      const best = e.best ? e.best.metric + " = " + fmt(e.best.value) + " (" + e.best.trial_id +
        ")" : "-";
      body.appendChild(h("tr", { "data-name": e.name },
        h("td", {}, h("a", { href: "#/exp/" + encodeURIComponent(e.name), text: e.name })),
        h("td", { title: e.resume ? "driver gone; resume with: " + e.resume : null },
          badge(e.status || "-")), h("td", { class: "num", text: String(e.trials ?? "-") }),
        ...STATES.map((s) => h("td", { class: "num", text: String((e.counts || {})[s] ?? "-") })),
        h("td", { text: e.error ? e.error : best }), h("td", { text: when(e.last_update) })));
    }
    table.appendChild(body);
    main.appendChild(h("div", { class: "panel" }, h("h2", { text: rows.length + " experiments" }),
      rows.length ? h("div", { class: "scroll" }, table) : h("p", { class: "empty",
        text: "No experiments under this storage path yet." })));
    const running = rows.some((e) => e.status === "running");
    setLive(running, Math.max(0, ...rows.map((e) => num(e.last_update) || 0)) || null);
    if (running && !embedded) timer = setTimeout(() => showList(main), POLL_MS);
  }

  // -- one experiment -------------------------------------------------------------------------
  async function showExperiment(name, main) {
    document.getElementById("crumb").textContent = name;
    const gen = generation;
    let view;
    try { view = await api.experiment(name); } catch (err) { fail(main, err); return; }
    if (gen !== generation) return;
    const goal = view.objectives[0] || null;
    const pageInfo = view.page || { sort: "index", descending: false, offset: 0 };
    page = {
      name: name, view: view, sort: { key: pageInfo.sort, dir: pageInfo.descending ? -1 : 1 },
      offset: 0, state: "", thrMetric: goal ?
        goal.metric : (view.metric_keys[0] || ""), thrOp: goal && goal.mode === "max" ? ">=" :
        "<=", thrValue: "", selected: new Set(), metric: goal ? goal.metric :
        (curveMetrics(view)[0] || ""), colorKey: null,
    };
    defaultSelection(page);
    main.textContent = "";
    skeleton(main, page);
    renderAll(page);
    if (!embedded && view.meta.status === "running") startPolling(page);
  }

  function defaultSelection(pg) {
    const ranked = rankedTrials(pg.view);
    for (const t of ranked.slice(0, 6)) pg.selected.add(t.trial_id);
    if (!ranked.length) for (const t of pg.view.trials.slice(0, 6)) pg.selected.add(t.trial_id);
  }
  function rankedTrials(view) {
    const goal = view.objectives[0];
    if (!goal) return [];
    const v = (t) => num(t.metrics[goal.metric]);
    const sign = goal.mode === "max" ? -1 : 1;
    return view.trials.filter((t) => v(t) !== null).sort((a, b) => sign * (v(a) - v(b)));
  }

  // the server sorts, filters by state and pages the trials; a report holds them all
  function pageQuery(pg) {
    return "offset=" + pg.offset + "&sort=" + encodeURIComponent(pg.sort.key) +
      "&descending=" + (pg.sort.dir < 0 ? 1 : 0) + (pg.state ? "&state=" + pg.state : "");
  }
  async function reload(pg) {
    if (embedded) { renderAll(pg); return; }
    try { pg.view = await api.experiment(pg.name, pageQuery(pg)); } catch (err) {
      document.getElementById("live-status").textContent = "update failed: " + err.message;
      return;
    }
    if (page === pg) renderAll(pg);
  }
  function turnPage(pg, step) {
    const p = pg.view.page;
    if (!p || !p.limit) return;
    const next = pg.offset + step * p.limit;
    if (next < 0 || next >= p.matching) return;
    pg.offset = next;
    reload(pg);
  }

  function startPolling(pg) {
    let last = pg.view.last_update, busy = false, notBefore = 0;
    timer = setInterval(async () => {
      if (busy || page !== pg || Date.now() < notBefore) return;
      busy = true;
      try {
        const p = await api.poll(pg.name);
        if (p.last_update !== last || p.status !== pg.view.meta.status) {
          last = p.last_update;
          const started = Date.now();
          pg.view = await api.experiment(pg.name, pageQuery(pg));
          // a big experiment is slow to read: wait a few times that long before the next read
          notBefore = Date.now() + 4 * (Date.now() - started);
          renderAll(pg);
          document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes) + 1);
        }
        if (p.status !== "running") { clearInterval(timer); timer = null; setLive(false, last); }
      } catch (err) {
        document.getElementById("live-status").textContent = "update failed: " + err.message;
      } finally { busy = false; }
    }, POLL_MS);
  }

  function skeleton(main, pg) {
    const box = (id, title, ...kids) => h("section", { class: "panel", id: id },
      h("h2", { text: title }), ...kids);
    const stateSel = h("select", { id: "state-filter", on: { change: (e) => {
      pg.state = e.target.value; pg.offset = 0; reload(pg); } } },
      h("option", { value: "", text: "all" }),
      ...STATES.map((s) => h("option", { value: s, text: s })));
    const thrMetric = h("select", { id: "threshold-metric", on: { change: (e) => {
      pg.thrMetric = e.target.value; renderAll(pg); } } });
    const thrOp = h("select", { id: "threshold-op", on: { change: (e) => {
      pg.thrOp = e.target.value; renderAll(pg); } } }, h("option", { value: "<=", text: "\u2264" }),
      h("option", { value: ">=", text: "\u2265" }));
    thrOp.value = pg.thrOp;
    const thrValue = h("input", { id: "threshold-value", type: "number", step: "any",
      placeholder: "any", on: { input: (e) => { pg.thrValue = e.target.value; renderAll(pg); } } });
    const metricSel = h("select", { id: "curve-metric", on: { change: (e) => {
      pg.metric = e.target.value; renderCurves(pg); } } });
    const colorSel = h("select", { id: "lineage-color", on: { change: (e) => {
      pg.colorKey = e.target.value; renderScheduler(pg); } } });
    pg.nodes = { stateSel, thrMetric, thrValue, metricSel, colorSel };
    main.append(
      h("section", { class: "panel", id: "summary" }),
      box("trials", "Trials", h("div", { class: "controls" }, h("label", { text: "state" }),
        stateSel, h("label", { text: "metric" }), thrMetric, thrOp, thrValue,
        h("span", { id: "trial-count", class: "muted" }),
        h("button", { id: "page-prev", type: "button", text: "\u2039 previous",
          on: { click: () => turnPage(pg, -1) } }),
        h("button", { id: "page-next", type: "button", text: "next \u203a",
          on: { click: () => turnPage(pg, 1) } })), h("div", { class: "scroll" },
        h("table", { id: "trials-table" }, h("thead"), h("tbody")))),
      h("div", { class: "grid2" },
        box("curves", "Learning curves (selected trials)", h("div", { class: "controls" },
          h("label", { text: "metric" }), metricSel), h("div", { id: "curves-plot" }),
          h("div", { id: "curves-legend", class: "legend" })),
        box("parcoords", "Hyperparameters vs metric (filtered trials)",
          h("div", { id: "parcoords-plot" }))),
      box("scheduler", "Scheduler", h("div", { class: "controls", id: "scheduler-controls" }),
        h("div", { id: "scheduler-body" })),
      box("failures", "Failures", h("div", { id: "failures-body" })));
  }

  function fillSelect(sel, values, current) {
    const now = Array.from(sel.options).map((o) => o.value).join("\n");
    if (now !== values.join("\n")) {
      sel.textContent = "";
      for (const v of values) sel.appendChild(h("option", { value: v, text: v }));
    }
    sel.value = current;
  }

  function renderAll(pg) {
    const v = pg.view;
    fillSelect(pg.nodes.thrMetric, curveMetricsAll(v), pg.thrMetric);
    fillSelect(pg.nodes.metricSel, curveMetrics(v), pg.metric);
    renderSummary(pg);
    renderTable(pg);
    renderCurves(pg);
    renderParcoords(pg);
    renderScheduler(pg);
    renderFailures(pg);
    setLive(!embedded && v.meta.status === "running", v.last_update);
  }
  function curveMetricsAll(view) {
    const keys = view.objectives.map((o) => o.metric);
    for (const k of view.metric_keys) if (!keys.includes(k)) keys.push(k);
    return keys;
  }

  function renderSummary(pg) {
    const v = pg.view, m = v.meta, node = document.getElementById("summary");
    node.textContent = "";
    const fact = (label, value) => h("span", {}, label + " ", h("b", { text: String(value) }));
    const goals = v.objectives.map((o) => o.metric + " (" + o.mode + ")").join(", ") || "none";
    node.append(h("h1", {}, v.name + " ", badge(m.status || "-")), h("div", { class: "facts" },
      fact("trainable", m.trainable || "-"), fact("objective", goals),
      fact("searcher", m.searcher || "-"), fact("scheduler", m.scheduler || "-"),
      fact("trials", v.page ? v.page.total : v.trials.length), ...STATES.filter((s) => v.counts[s]).map((s) =>
        fact(s.toLowerCase(), v.counts[s])),
      fact("best", v.best ? v.best.metric + " = " + fmt(v.best.value) + " (" +
        v.best.trial_id + ")" : "-"), fact("started", when(m.created_at)),
      fact("last update", when(v.last_update))));
    if (v.non_finite_trials) {
      node.appendChild(h("p", { class: "nan-note", text: "\u26a0 " + v.non_finite_trials +
        (v.non_finite_trials === 1 ? " trial" : " trials") +
        " reported NaN or inf (marked \u26a0): recorded, never ranked best" }));
    }
    if (m.stop_reason) node.appendChild(h("p", { class: "muted", text: "Stopped: " + m.stop_reason }));
    if (m.resume) node.appendChild(h("p", { class: "nan-note", text: "Interrupted: its driver " +
      "is gone; the unfinished trials are resumable with: " + m.resume }));
  }

  // -- trials table -----------------------------------------------------------------------------
  function filtered(pg) {
    const limit = pg.thrValue === "" ? null : Number(pg.thrValue);
    return pg.view.trials.filter((t) => {
      if (pg.state && t.status !== pg.state) return false;
      if (limit === null || isNaN(limit)) return true;
      const x = num(t.metrics[pg.thrMetric]);
      return x !== null && (pg.thrOp === "<=" ? x <= limit : x >= limit);
    });
  }
  function columns(pg) {
    const v = pg.view, cols = [
      { key: "index", label: "#", get: (t) => t.index ?? v.trials.indexOf(t), num: true },
      { key: "trial_id", label: "Trial", get: (t) => t.trial_id },
      { key: "status", label: "Status", get: (t) => t.status, cell: (t) => badge(t.status) },
      { key: "iteration", label: "Iter", get: (t) => t.iteration, num: true }];
    for (const o of v.objectives) {
      cols.push({ key: "last:" + o.metric, label: o.metric, num: true,
        get: (t) => t.metrics[o.metric], cell: (t) => (t.non_finite || []).includes(o.metric) ?
          h("span", { class: "nan", title: "reported NaN or inf",
            text: fmt(t.metrics[o.metric]) + " \u26a0" }) : fmt(t.metrics[o.metric]) });
      cols.push({ key: "best:" + o.metric, label: "best " + o.metric, num: true,
        get: (t) => t.best[o.metric] });
    }
    for (const [k, label] of USAGE) {  // result["resources"], when the trials recorded it
      if (!v.trials.some((t) => t.resources && t.resources[k] !== undefined)) continue;
      cols.push({ key: "res:" + k, label: label, num: true, get: (t) => (t.resources || {})[k],
        cell: (t) => usageText(t.resources || {}, k) });
    }
    for (const p of v.params) {
      cols.push({ key: "cfg:" + p, label: p, get: (t) => t.config[p],
        num: v.trials.every((t) => typeof t.config[p] === "number" || t.config[p] === undefined) });
    }
    cols.push({ key: "note", label: "Note", get: (t) => t.error || t.stop_reason || "" });
    return cols;
  }
  const USAGE = [["cpu_percent", "CPU %"], ["peak_rss_mb", "Peak RSS"], ["gpu_peak_mb", "GPU peak"]];
  function mib(x) { return x >= 1024 ? (x / 1024).toFixed(2) + " GiB" : x.toFixed(0) + " MiB"; }
  function usageText(r, k) {
    const x = num(r[k]);
    if (x === null) return "-";
    if (k === "cpu_percent") return x.toFixed(0) + "%";
    const limit = k === "peak_rss_mb" ? num(r.memory_limit_mb) : null;
    return mib(x) + (limit ? " / " + mib(limit) : "");
  }
  function compare(a, b) {
    const na = typeof a === "number", nb = typeof b === "number";
    if (na && nb) return a - b;
    if (na !== nb) return na ? -1 : 1;
    return String(a).localeCompare(String(b));
  }
  function renderTable(pg) {
    const table = document.getElementById("trials-table"), cols = columns(pg);
    const head = h("tr", {}, h("th", { text: "\u2713", title: "show in the learning curves" }));
    for (const c of cols) {
      const cls = pg.sort.key === c.key ? (pg.sort.dir > 0 ? "sorted-asc" : "sorted-desc") : null;
      head.appendChild(h("th", { class: cls, "data-key": c.key, text: c.label, on: { click: () => {
        pg.sort = { key: c.key, dir: pg.sort.key === c.key ? -pg.sort.dir : 1 };
        pg.offset = 0;
        if (embedded) renderTable(pg); else reload(pg);
      } } }));
    }
    table.tHead.textContent = "";
    table.tHead.appendChild(head);
    const col = cols.find((c) => c.key === pg.sort.key) || cols[0];
    const missing = (x) => x === undefined || x === null;
    // served: the page comes sorted by the server (over every trial); a report sorts here
    const rows = !embedded ? filtered(pg) : filtered(pg).slice().sort((a, b) => {
      const x = col.get(a), y = col.get(b);
      if (missing(x) || missing(y)) return missing(x) === missing(y) ? 0 : (missing(x) ? 1 : -1);
      return compare(x, y) * pg.sort.dir;
    });
    const body = table.tBodies[0];
    body.textContent = "";
    const best = pg.view.best ? pg.view.best.trial_id : null;
    for (const t of rows) {
      const box = h("input", { type: "checkbox", "aria-label": "select " + t.trial_id,
        on: { change: (e) => {
          if (e.target.checked) pg.selected.add(t.trial_id); else pg.selected.delete(t.trial_id);
          renderCurves(pg); renderParcoords(pg);
        } } });
      box.checked = pg.selected.has(t.trial_id);
      const tr = h("tr", { "data-trial-id": t.trial_id, class: t.trial_id === best ? "best" : null },
        h("td", {}, box));
      for (const c of cols) {
        const value = c.get(t);
        tr.appendChild(h("td", { class: c.num ? "num" : null, title: c.key === "note" ? value : null },
          c.cell ? c.cell(t) : (c.key === "index" ? String(value) : fmt(value))));
      }
      body.appendChild(tr);
    }
    const p = pg.view.page, total = p ? p.total : pg.view.trials.length;
    const paged = !embedded && p && p.limit && p.matching > p.limit;
    document.getElementById("trial-count").textContent = rows.length + " of " + total +
      " trials" + (paged ? " (rows " + (p.offset + 1) + "-" + Math.min(p.offset + p.limit,
        p.matching) + " of " + p.matching + ", sorted over all)" : "");
    document.getElementById("page-prev").hidden = !paged;
    document.getElementById("page-next").hidden = !paged;
  }

  // -- plots ------------------------------------------------------------------------------------
  async function renderCurves(pg) {
    const ids = pg.view.trials.map((t) => t.trial_id).filter((id) => pg.selected.has(id));
    const target = document.getElementById("curves-plot");
    const legend = document.getElementById("curves-legend");
    if (!pg.metric || !ids.length) {
      P.lineChart(target, [], { name: "curves", empty: "select trials in the table" });
      legend.textContent = "";
      return;
    }
    let data;
    try { data = await api.curves(pg.name, pg.metric, ids); } catch (err) { return; }
    if (page !== pg) return;
    const series = ids.map((id, i) => ({ id: id, label: id, points: data.curves[id] || [],
      color: P.PALETTE[i % P.PALETTE.length], width: pg.view.best &&
        pg.view.best.trial_id === id ? 3 : 1.8 }));
    const goal = pg.view.objectives.find((o) => o.metric === pg.metric);
    P.lineChart(target, series, { name: "curves", xLabel: "training_iteration",
      yLabel: pg.metric, logY: !!goal });
    legend.textContent = "";
    for (const s of series) {
      legend.appendChild(h("span", {}, h("i", { style: null }), s.id));
      legend.lastChild.firstChild.style.background = s.color;
    }
  }

  function renderParcoords(pg) {
    const v = pg.view, target = document.getElementById("parcoords-plot");
    const metric = v.objectives[0] ? v.objectives[0].metric : pg.metric;
    const mode = v.objectives[0] ? v.objectives[0].mode : "min";
    const params = v.params.filter((p) => new Set(v.trials.map((t) =>
      JSON.stringify(t.config[p]))).size > 1).slice(0, 10);
    const axes = params.map((p) => ({ key: p, label: p, categorical: v.trials.some((t) =>
      t.config[p] !== undefined && typeof t.config[p] !== "number") }));
    axes.push({ key: "__metric__", label: metric || "metric" });
    const rows = filtered(pg).filter((t) => num(t.metrics[metric]) !== null);
    const vals = rows.map((t) => t.metrics[metric]);
    const lo = Math.min(...vals), hi = Math.max(...vals);
    P.parallelCoords(target, rows.map((t) => {
      const x = (t.metrics[metric] - lo) / ((hi - lo) || 1);
      return { id: t.trial_id, label: t.trial_id + ": " + metric + " = " + fmt(t.metrics[metric]),
        values: Object.assign({ __metric__: t.metrics[metric] }, t.config),
        color: P.ramp(mode === "max" ? 1 - x : x), highlight: pg.selected.has(t.trial_id) };
    }), axes, { name: "parcoords", empty: params.length ? "no trial has " + metric + " yet" :
      "no hyperparameter varies" });
  }

  // -- scheduler ----------------------------------------------------------------------------------
  function renderScheduler(pg) {
    const s = pg.view.scheduler, body = document.getElementById("scheduler-body");
    const controls = document.getElementById("scheduler-controls");
    body.textContent = "";
    controls.textContent = "";
    body.dataset.kind = s.kind;
    if (s.kind === "asha") return renderAsha(pg, s, body);
    if (s.kind === "pbt") return renderPbt(pg, s, body, controls);
    body.appendChild(h("p", { class: "muted", text: s.name + ": no scheduler view (it keeps " +
      "no rungs or lineage; every trial runs until it stops)." }));
  }

  function renderAsha(pg, s, body) {
    body.appendChild(h("p", { class: "muted", text: s.name + (s.promotion ? " (promotion form)"
      : " (stopping form)") + ": each rung keeps the metric a trial had when it reached its milestone (" +
      (s.time_attr || "training_iteration") + ")" +
      (s.brackets.some((b) => b.rungs.some((r) => !r.exact)) ? "; \u2248: estimated" : "") +
      "." }));
    for (const b of s.brackets) {
      if (s.brackets.length > 1) body.appendChild(h("h3", { text: "Bracket " + b.bracket }));
      const plot = h("div", { class: "rung-plot" });
      body.appendChild(plot);
      P.rungChart(plot, b, { name: "rungs", yLabel: Array.isArray(s.metric) ? "metric" : s.metric });
      const row = h("div", { class: "rungs" });
      for (const r of b.rungs) {
        const list = h("table", {}, h("tbody", {}, ...r.entries.map((e) => h("tr", {
          "data-trial-id": e.trial_id }, h("td", { text: e.trial_id }), h("td", { class: "num",
          text: Array.isArray(e.value) ? e.value.map(fmt).join(", ") : fmt(e.value) }),
          h("td", { class: "outcome-" + e.outcome, text: e.outcome })))));
        row.appendChild(h("div", { class: "rung" }, h("h3", { text: "Rung " + r.rung +
          (r.at === null ? "" : " (" + (r.exact ? "" : "\u2248") + fmt(r.at) + ")") + ": " + r.entries.length +
          " trials, " + r.promoted + " promoted, " + r.stopped + " stopped" }), list));
      }
      body.appendChild(row);
    }
  }

  function renderPbt(pg, s, body, controls) {
    if (!pg.colorKey || !s.mutated.includes(pg.colorKey)) pg.colorKey = s.mutated[0] || null;
    if (s.mutated.length) {
      fillSelect(pg.nodes.colorSel, s.mutated, pg.colorKey);
      controls.append(h("label", { text: "hyperparameter" }), pg.nodes.colorSel);
    }
    body.appendChild(h("p", { class: "muted", text: s.name + ": " + s.exploits.length +
      " exploits. Each lane is a trial; dashed lines show a trial copying another's " +
      "checkpoint (then perturbing its config)." }));
    const plots = h("div", { class: "grid2" }, h("div", { id: "lineage-plot" }),
      h("div", { id: "schedule-plot" }));
    body.appendChild(plots);
    P.lineage(plots.firstChild, s.lanes, s.exploits, { name: "lineage", colorKey: pg.colorKey });
    const key = pg.colorKey;
    const series = key ? s.lanes.map((lane, i) => ({ id: lane.trial_id, label: lane.trial_id,
      color: P.PALETTE[i % P.PALETTE.length], points: lane.segments.flatMap((g) =>
        num(g.config[key]) === null ? [] : [[g.from, g.config[key]], [g.to, g.config[key]]]) }))
      : [];
    P.lineChart(plots.lastChild, series, { name: "schedule", xLabel: "training_iteration",
      yLabel: key || "", logY: true, empty: "no hyperparameter was perturbed yet" });
    const head = h("tr", {}, ...["Time", "Trial", "Copied from", "At iteration",
      "Checkpoint iteration", "Changes"].map((t) => h("th", { text: t })));
    const changes = (e) => Object.entries(e.changes).map(([k, c]) =>
      k + ": " + fmt(c[0]) + " \u2192 " + fmt(c[1])).join(", ");
    const rows = s.exploits.map((e) => h("tr", {}, h("td", { text: when(e.time) }),
      h("td", { text: e.trial_id }), h("td", { text: e.source }),
      h("td", { class: "num", text: fmt(e.at_iteration) }),
      h("td", { class: "num", text: fmt(e.iteration) }), h("td", { text: changes(e) })));
    const table = h("table", { id: "exploits-table" }, h("thead", {}, head),
      h("tbody", {}, ...rows));
    body.appendChild(h("div", { class: "scroll" }, table));
    if (s.best_lineage) {
      body.appendChild(h("h3", { text: "How the best trial's model was trained" }));
      body.appendChild(h("table", { id: "best-lineage" }, h("tbody", {}, ...s.best_lineage.map(
        (g) => h("tr", {}, h("td", { text: g.trial_id }), h("td", { text: "iterations " +
          g.from_iteration + "-" + g.to_iteration }), h("td", { text: Object.entries(g.config)
          .map(([k, x]) => k + "=" + fmt(x)).join(" ") }))))));
    }
  }

  // -- failures ---------------------------------------------------------------------------------
  function renderFailures(pg) {
    const body = document.getElementById("failures-body"), list = pg.view.failures;
    body.textContent = "";
    if (!list.length) {
      body.appendChild(h("p", { class: "empty", text: "No failures." }));
      return;
    }
    for (const f of list) {
      const node = h("div", { class: "failure" + (f.final ? "" : " retried"),
        "data-trial-id": f.trial_id }, h("div", {}, h("b", { text: f.trial_id }), " ",
        h("span", { class: "muted", text: f.final ? "failed" : "attempt " + (f.attempt + 1) +
          " failed, retried" }), ": ", h("span", { class: "cause", text: f.cause })));
      if (f.traceback) node.appendChild(h("details", { open: f.final ? "" : null },
        h("summary", { text: "traceback" }), h("pre", { class: "traceback", text: f.traceback })));
      if (f.stderr_tail && f.stderr_tail.trim() !== (f.traceback || "").trim()) {
        node.appendChild(h("details", {}, h("summary", { text: "stderr (last lines)" }),
          h("pre", { class: "stderr", text: f.stderr_tail })));
      }
      body.appendChild(node);
    }
  }

  window.addEventListener("hashchange", route);
  route();
})();
