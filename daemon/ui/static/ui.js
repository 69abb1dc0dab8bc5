/* BashGym web view: charts for figure[data-chart] elements, drawn with uPlot (vendored, MIT).
 *
 * Each chart asks the daemon for the visible step range of its metric, per run, thinned on the server to about as
 * many points as the chart has pixels; zooming (drag a range) asks again for that range at full resolution, double
 * click resets. Smoothing (an exponential moving average), log scale and the x axis (step, wall clock, or time since
 * each run's first point, which overlays runs started at different times) are per chart. A chart of a
 * run still active listens to the run's server-sent events and refetches when its metrics grow: no series is polled.
 */
(function () {
  "use strict";
  const COLOURS = ["#0b57d0", "#d93025", "#188038", "#e37400", "#a142f4", "#12b5cb", "#b3261e", "#5f6368",
    "#f538a0", "#1e8e3e", "#9334e6", "#c26401", "#007b83", "#8e24aa", "#3949ab", "#00897b", "#6d4c41", "#546e7a",
    "#c0ca33", "#f4511e"];

  function seriesUrl(project, run, metric, lo, hi, points) {
    const q = new URLSearchParams({ metric: metric, points: String(points) });
    if (lo !== null) q.set("lo", String(Math.floor(lo)));
    if (hi !== null) q.set("hi", String(Math.ceil(hi)));
    return "/ui/data/p/" + encodeURIComponent(project) + "/runs/" + encodeURIComponent(run) + "/series?" + q;
  }

  function smooth(values, weight) {
    if (!weight) return values;
    const out = new Array(values.length);
    let last = null;
    for (let i = 0; i < values.length; i++) {
      const v = values[i];
      if (v === null || v === undefined) { out[i] = null; continue; }
      last = last === null ? v : last * weight + v * (1 - weight);
      out[i] = last;
    }
    return out;
  }

  function xs(f, axis, start, firstStep) {
    // A point's x on the chosen axis; null (left out) where its time was never recorded. The time-since-start axis
    // counts from the run's recorded start where the page gives it, else from the run's first timed point; the
    // relative-step axis from the run's first step (a run resumed from another's checkpoint starts past 0).
    if (axis === "step") return f.steps;
    if (axis === "relstep") {
      const first = typeof firstStep === "number" ? firstStep : (f.steps.length ? f.steps[0] : 0);
      return f.steps.map((s) => s - first);
    }
    const times = f.times || [];
    if (axis === "wall") return f.steps.map((_, i) => (times[i] === null || times[i] === undefined ? null : times[i]));
    const first = typeof start === "number" ? start : times.find((t) => t !== null && t !== undefined);
    return f.steps.map((_, i) => (times[i] === null || times[i] === undefined ? null : times[i] - first));
  }

  function align(fetched, axis, starts, firsts) {
    // uPlot wants one x array: the union of every run's x values, each run's values null where it has none.
    const perRun = fetched.map((f, r) => xs(f, axis, starts[r], firsts[r]));
    const all = Array.from(new Set(perRun.flat().filter((x) => x !== null))).sort((a, b) => a - b);
    const index = new Map(all.map((x, i) => [x, i]));
    const ys = fetched.map((f, r) => {
      const y = new Array(all.length).fill(null);
      perRun[r].forEach((x, i) => { if (x !== null) y[index.get(x)] = f.values[i]; });
      return y;
    });
    return [all, ...ys];
  }

  function stepRange(fetched, axis, starts, firsts, from, to) {
    // The steps a zoomed x range covers, widened to the points on either side so no step inside is missed.
    if (axis === "step") return [from, to];
    let lo = null, hi = null;
    fetched.forEach((f, r) => {
      const x = xs(f, axis, starts[r], firsts[r]);
      x.forEach((v, i) => {
        if (v === null) return;
        if (v <= from && (lo === null || f.steps[i] > lo)) lo = f.steps[i];
        if (v >= to && (hi === null || f.steps[i] < hi)) hi = f.steps[i];
      });
    });
    const steps = fetched.flatMap((f) => f.steps);
    return [lo === null ? Math.min(...steps) : lo, hi === null ? Math.max(...steps) : hi];
  }

  const AXES = {
    step: "step", relstep: "steps since the run's first", wall: "wall clock", elapsed: "time since the run's start (s)",
  };

  function axisSize(u, values, axisIdx, cycleNum) {
    // As wide as the longest tick label measured in the axis's font (uPlot's fixed 50 px clips "12,500" to
    // "2,500"); on uPlot's later sizing passes the width it settled on stays, so the layout converges.
    const axis = u.axes[axisIdx];
    if (cycleNum > 1) return axis._size;
    let size = axis.ticks.size + axis.gap;
    const longest = (values || []).reduce((a, v) => (String(v).length > a.length ? String(v) : a), "");
    if (longest) {
      u.ctx.font = axis.font[0];
      size += u.ctx.measureText(longest).width / (window.devicePixelRatio || 1);
    }
    return Math.ceil(size) + 2;
  }

  const streams = new Map();
  function liveStream(project, run) {
    // One stream a page, whatever its charts: each holds one of the viewer's few long-poll slots on the daemon.
    const url = "/ui/live/p/" + encodeURIComponent(project) + "/runs/" + encodeURIComponent(run);
    if (!streams.has(url)) {
      const source = new EventSource(url);
      // The session may no longer read the run (signed out, its token revoked): stop; the page then says why.
      source.addEventListener("ended", () => { source.close(); window.location.reload(); });
      streams.set(url, source);
    }
    return streams.get(url);
  }

  function setUp(figure) {
    const spec = JSON.parse(figure.dataset.chart);
    const width = Math.max(320, Math.min(figure.clientWidth || 900, 1300));
    const state = { lo: null, hi: null, weight: 0, log: false, axis: "step", fetched: null, raw: null, plot: null };
    const starts = spec.runs.map((run) => (spec.starts || {})[run]);
    const firsts = spec.runs.map(() => undefined); // each run's first step, from its whole (unzoomed) series
    const controls = document.createElement("div");
    controls.className = "controls";
    controls.innerHTML =
      '<label>Smoothing <input type="range" min="0" max="0.99" step="0.01" value="0"></label>' +
      '<label><input type="checkbox"> log scale</label>' +
      '<label>x axis <select>' + Object.entries(AXES).map(([k, v]) => '<option value="' + k + '">' + v +
        "</option>").join("") + "</select></label>" +
      '<button type="button">Reset zoom</button><span class="note" aria-live="polite"></span>';
    figure.appendChild(controls);
    const [slider, logBox, axisBox, reset, note] = [controls.querySelector("input[type=range]"),
      controls.querySelector("input[type=checkbox]"), controls.querySelector("select"), controls.querySelector("button"),
      controls.querySelector(".note")];
    const holder = document.createElement("div");
    figure.appendChild(holder);

    async function load() {
      const fetched = await Promise.all(spec.runs.map(async (run) => {
        const answer = await fetch(seriesUrl(spec.project, run, spec.metric, state.lo, state.hi, width),
          { credentials: "same-origin" });
        if (!answer.ok) return { steps: [], values: [], times: [], total: 0, decimated: false };
        return answer.json();
      }));
      state.fetched = fetched;
      if (state.lo === null && state.hi === null) {
        fetched.forEach((f, r) => { if (f.steps.length) firsts[r] = f.steps[0]; });
      }
      shape();
    }

    function shape() {
      const fetched = state.fetched;
      state.raw = align(fetched, state.axis, starts, firsts);
      const thinned = fetched.some((f) => f.decimated);
      const total = fetched.reduce((n, f) => n + f.total, 0);
      const missing = (f) => (f.times || []).filter((t) => t === null || t === undefined).length;
      const untimed = state.axis === "step" ? 0 : fetched.reduce((n, f) => n + missing(f), 0);
      note.textContent = total + " points" + (thinned ? " (thinned to the chart's width; zoom for every point)" : "") +
        (untimed ? "; " + untimed + " shown have no recorded time and are left off this axis" : "");
      draw();
    }

    function data() {
      const [x, ...ys] = state.raw;
      return [x, ...ys.map((y) => smooth(y, state.weight))];
    }

    function draw() {
      const options = {
        width: width, height: 280,
        scales: { x: { time: state.axis === "wall" }, y: { distr: state.log ? 3 : 1 } },
        axes: [{ label: AXES[state.axis] }, { size: axisSize }],
        series: [{ label: AXES[state.axis] }, ...spec.runs.map((run, i) => ({
          label: run, stroke: COLOURS[i % COLOURS.length], width: 1.5, spanGaps: true,
        }))],
        cursor: { drag: { x: true, y: false } },
        hooks: {
          setSelect: [(u) => {
            if (u.select.width < 3) return;
            const from = u.posToVal(u.select.left, "x"), to = u.posToVal(u.select.left + u.select.width, "x");
            [state.lo, state.hi] = stepRange(state.fetched, state.axis, starts, firsts, from, to);
            load();
          }],
        },
      };
      if (state.plot) state.plot.destroy();
      state.plot = new uPlot(options, data(), holder);
      figure.uplot = state.plot; // for tests/e2e/ui's browser tests: the axes uPlot laid out
      // For bench/ui_bench.py: when each draw finished, on the page's own clock (no cost to anyone else).
      if (window.performance && performance.mark) performance.mark("bashgym-chart-drawn", { detail: { points: state.raw[0].length } });
      holder.firstChild.addEventListener("dblclick", () => { state.lo = state.hi = null; load(); });
    }

    slider.addEventListener("input", () => { state.weight = Number(slider.value); if (state.raw) state.plot.setData(data()); });
    logBox.addEventListener("change", () => { state.log = logBox.checked; if (state.raw) draw(); });
    axisBox.addEventListener("change", () => { state.axis = axisBox.value; if (state.fetched) shape(); });
    reset.addEventListener("click", () => { state.lo = state.hi = null; load(); });
    load();
    if (spec.live && spec.runs.length === 1 && window.EventSource) {
      const events = liveStream(spec.project, spec.runs[0]);
      let pending = false;
      events.addEventListener("points", () => {
        if (pending || state.hi !== null) return; // a zoomed view stays where the reader put it
        pending = true;
        setTimeout(() => { pending = false; load(); }, 200);
      });
      events.addEventListener("status", () => load());
    }
  }

  // The compare page's parameter views, drawn in SVG from the figure's data (compare_views.py): a scatter of one
  // parameter against one metric and parallel coordinates, a point or a line a run, coloured as in the curves.
  const SVG = "http://www.w3.org/2000/svg";

  function el(parent, name, attrs, text) {
    const node = document.createElementNS(SVG, name);
    Object.entries(attrs).forEach(([k, v]) => node.setAttribute(k, String(v)));
    if (text !== undefined) node.textContent = text; // text, never markup: run ids and keys come from tenants
    parent.appendChild(node);
    return node;
  }

  function shown(v) {
    if (typeof v !== "number") return String(v);
    if (v !== 0 && (Math.abs(v) < 1e-3 || Math.abs(v) >= 1e6)) return v.toExponential(2);
    return v.toLocaleString("en-US", { maximumSignificantDigits: 4 });
  }

  function scaleOf(values, from, to) {
    // Where a value sits between the pixels `from` and `to`: numbers linearly, or by decades where all are positive
    // and span two or more (learning rates), text as evenly spaced categories. `ticks`: [label, pixel] pairs.
    const present = values.filter((v) => v !== null && v !== undefined);
    if (!present.every((v) => typeof v === "number")) {
      const kinds = Array.from(new Set(present.map(String))).sort();
      const at = (v) => (kinds.length < 2 ? (from + to) / 2 : from + (to - from) * kinds.indexOf(String(v)) / (kinds.length - 1));
      return { at: at, ticks: kinds.map((k) => [k, at(k)]) };
    }
    const min = Math.min(...present), max = Math.max(...present);
    const log = min > 0 && max / min >= 100;
    const f = log ? Math.log10 : (x) => x;
    let lo = f(min), hi = f(max);
    const pad = lo === hi ? Math.abs(lo) * 0.1 || 1 : (hi - lo) * 0.06;
    lo -= pad; hi += pad;
    const at = (v) => from + (to - from) * (f(v) - lo) / (hi - lo);
    const marks = present.length ? (log ? decades(min, max) : [0, 1, 2, 3, 4].map((i) => min + (max - min) * i / 4)) : [];
    return { at: at, ticks: Array.from(new Set(marks.length > 1 && min === max ? [min] : marks)).map((m) => [shown(m), at(m)]) };
  }

  function decades(min, max) {
    const out = [];
    for (let d = Math.floor(Math.log10(min)); d <= Math.ceil(Math.log10(max)); d++) {
      if (10 ** d >= min / 10 ** 0.3 && 10 ** d <= max * 10 ** 0.3) out.push(10 ** d);
    }
    return out.length ? out : [min, max];
  }

  function figureWidth(figure, most) { return Math.max(320, Math.min(figure.clientWidth || most, most)); }

  function drawScatter(figure) {
    const data = JSON.parse(figure.dataset.scatter);
    const xv = data.values[data.param], yv = data.values[data.metric];
    const width = figureWidth(figure, 720), height = 340, top = 16, bottom = 44;
    const svg = el(figure, "svg", { width: width, height: height, role: "img", class: "scatter-plot",
      "aria-label": data.param + " against " + data.metric + ", one point a run" });
    const y = scaleOf(yv, height - bottom, top);
    // The left margin fits the widest y label, measured once drawn (none clipped, whatever its length).
    const labels = y.ticks.map(([text, at]) => el(svg, "text", { y: at + 4, "text-anchor": "end", class: "tick" }, text));
    const left = 14 + Math.max(0, ...labels.map((t) => t.getBBox().width)) + 8;
    labels.forEach((t) => t.setAttribute("x", left - 6));
    const x = scaleOf(xv, left + 10, width - 16);
    el(svg, "line", { x1: left, y1: height - bottom, x2: width - 8, y2: height - bottom, class: "axis" });
    el(svg, "line", { x1: left, y1: top, x2: left, y2: height - bottom, class: "axis" });
    x.ticks.forEach(([text, at]) => el(svg, "text", { x: at, y: height - bottom + 16, "text-anchor": "middle", class: "tick" }, text));
    el(svg, "text", { x: (left + width) / 2, y: height - 6, "text-anchor": "middle", class: "axis-name" }, data.param);
    el(svg, "text", { x: 2, y: top - 4, class: "axis-name" }, data.metric);
    let missing = 0;
    data.runs.forEach((run, i) => {
      if (xv[i] === null || xv[i] === undefined || yv[i] === null || yv[i] === undefined) { missing++; return; }
      const point = el(svg, "circle", { cx: x.at(xv[i]), cy: y.at(yv[i]), r: 6, fill: COLOURS[i % COLOURS.length],
        class: "point", "data-run": run });
      el(point, "title", {}, run + ": " + data.param + " = " + shown(xv[i]) + ", " + data.metric + " = " + shown(yv[i]));
    });
    legend(figure, data.runs, missing ? missing + " run(s) without both values are left off" : "");
  }

  function legend(figure, runs, note) {
    const list = document.createElement("ul");
    list.className = "plot-legend";
    runs.forEach((run, i) => {
      const item = document.createElement("li");
      const swatch = document.createElement("span");
      swatch.style.background = COLOURS[i % COLOURS.length];
      item.append(swatch, run);
      list.appendChild(item);
    });
    figure.appendChild(list);
    if (note) {
      const p = document.createElement("p");
      p.className = "note";
      p.textContent = note;
      figure.appendChild(p);
    }
  }

  function drawParallel(figure) {
    const data = JSON.parse(figure.dataset.parallel);
    const width = figureWidth(figure, 1100), height = 340, top = 40, bottom = 24, side = 70;
    const svg = el(figure, "svg", { width: width, height: height, role: "img", class: "parallel-plot",
      "aria-label": "parallel coordinates of the runs' parameters and " + data.metric });
    const gap = data.axes.length > 1 ? (width - 2 * side) / (data.axes.length - 1) : 0;
    const scales = data.axes.map((name, a) => {
      const at = side + a * gap;
      const scale = scaleOf(data.values[name], height - bottom, top);
      el(svg, "line", { x1: at, y1: top, x2: at, y2: height - bottom, class: "axis" });
      const title = el(svg, "text", { x: at, y: 14 + (a % 2) * 14, "text-anchor": "middle", class: "axis-name" },
        name.length > 24 ? name.slice(0, 23) + "…" : name);
      el(title, "title", {}, name);
      scale.ticks.forEach(([text, y]) => el(svg, "text", { x: at + 4, y: y + 4, class: "tick" }, text));
      return { at: at, scale: scale, values: data.values[name] };
    });
    data.runs.forEach((run, i) => {
      // A run without a value on an axis breaks its line there.
      let points = [];
      const flush = () => {
        if (points.length > 1) {
          const line = el(svg, "polyline", { points: points.join(" "), stroke: COLOURS[i % COLOURS.length],
            class: "line", "data-run": run });
          el(line, "title", {}, run);
        }
        points = [];
      };
      scales.forEach((s) => {
        const v = s.values[i];
        if (v === null || v === undefined) flush(); else points.push(s.at + "," + s.scale.at(v));
      });
      flush();
    });
    legend(figure, data.runs, "");
  }

  function alignAll(control) {
    // The compare page's one control: every chart's own x axis follows it (each can still be changed alone).
    control.addEventListener("change", () => {
      document.querySelectorAll("figure.chart[data-chart] .controls select").forEach((box) => {
        box.value = control.value;
        box.dispatchEvent(new Event("change"));
      });
    });
  }

  function start() {
    document.querySelectorAll("figure.chart[data-chart]").forEach(setUp);
    document.querySelectorAll(".align-all select").forEach(alignAll);
    document.querySelectorAll("figure.scatter[data-scatter]").forEach(drawScatter);
    document.querySelectorAll("figure.parallel[data-parallel]").forEach(drawParallel);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();

// The runs table's chosen columns, kept per project in this browser: a search remembers its columns, and a page
// whose address names none shows the last ones chosen (runs_table.py serves the table; nothing here sorts or filters).
(function () {
  function keepColumns(form) {
    const key = "bashgym.columns." + form.dataset.project;
    const box = form.querySelector('input[name="columns"]');
    if (!box) return;
    form.addEventListener("submit", () => {
      try { localStorage.setItem(key, box.value.trim()); } catch (err) { /* storage refused: the address keeps them */ }
    });
    const address = new URL(window.location.href);
    let kept = null;
    try { kept = localStorage.getItem(key); } catch (err) { return; }
    if (kept && !address.searchParams.has("columns")) {
      address.searchParams.set("columns", kept);
      address.searchParams.delete("after");
      window.location.replace(address.toString());
    }
  }
  function start() { document.querySelectorAll("form.runs-search[data-project]").forEach(keepColumns); }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
