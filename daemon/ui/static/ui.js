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

  function xs(f, axis) {
    // A point's x on the chosen axis; null (left out) where its time was never recorded.
    if (axis === "step") return f.steps;
    const times = f.times || [];
    if (axis === "wall") return f.steps.map((_, i) => (times[i] === null || times[i] === undefined ? null : times[i]));
    const first = times.find((t) => t !== null && t !== undefined);
    return f.steps.map((_, i) => (times[i] === null || times[i] === undefined ? null : times[i] - first));
  }

  function align(fetched, axis) {
    // uPlot wants one x array: the union of every run's x values, each run's values null where it has none.
    const perRun = fetched.map((f) => xs(f, axis));
    const all = Array.from(new Set(perRun.flat().filter((x) => x !== null))).sort((a, b) => a - b);
    const index = new Map(all.map((x, i) => [x, i]));
    const ys = fetched.map((f, r) => {
      const y = new Array(all.length).fill(null);
      perRun[r].forEach((x, i) => { if (x !== null) y[index.get(x)] = f.values[i]; });
      return y;
    });
    return [all, ...ys];
  }

  function stepRange(fetched, axis, from, to) {
    // The steps a zoomed x range covers, widened to the points on either side so no step inside is missed.
    if (axis === "step") return [from, to];
    let lo = null, hi = null;
    fetched.forEach((f) => {
      const x = xs(f, axis);
      x.forEach((v, i) => {
        if (v === null) return;
        if (v <= from && (lo === null || f.steps[i] > lo)) lo = f.steps[i];
        if (v >= to && (hi === null || f.steps[i] < hi)) hi = f.steps[i];
      });
    });
    const steps = fetched.flatMap((f) => f.steps);
    return [lo === null ? Math.min(...steps) : lo, hi === null ? Math.max(...steps) : hi];
  }

  const AXES = { step: "step", wall: "wall clock", elapsed: "time since first point (s)" };

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
      shape();
    }

    function shape() {
      const fetched = state.fetched;
      state.raw = align(fetched, state.axis);
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
        axes: [{ label: AXES[state.axis] }, {}],
        series: [{ label: AXES[state.axis] }, ...spec.runs.map((run, i) => ({
          label: run, stroke: COLOURS[i % COLOURS.length], width: 1.5, spanGaps: true,
        }))],
        cursor: { drag: { x: true, y: false } },
        hooks: {
          setSelect: [(u) => {
            if (u.select.width < 3) return;
            const from = u.posToVal(u.select.left, "x"), to = u.posToVal(u.select.left + u.select.width, "x");
            [state.lo, state.hi] = stepRange(state.fetched, state.axis, from, to);
            load();
          }],
        },
      };
      if (state.plot) state.plot.destroy();
      state.plot = new uPlot(options, data(), holder);
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

  function start() { document.querySelectorAll("figure.chart[data-chart]").forEach(setUp); }
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
