/* BashGym web view: charts for figure[data-chart] elements, drawn with uPlot (vendored, MIT).
 *
 * Each chart asks the daemon for the visible step range of its metric, per run, thinned on the server to about as
 * many points as the chart has pixels; zooming (drag a range) asks again for that range at full resolution, double
 * click resets. Smoothing (an exponential moving average), log scale and the step axis are per chart. A chart of a
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

  function align(fetched) {
    // uPlot wants one x array: the union of every run's steps, each run's values null where it has none.
    const steps = Array.from(new Set(fetched.flatMap((f) => f.steps))).sort((a, b) => a - b);
    const index = new Map(steps.map((s, i) => [s, i]));
    const ys = fetched.map((f) => {
      const y = new Array(steps.length).fill(null);
      f.steps.forEach((s, i) => { y[index.get(s)] = f.values[i]; });
      return y;
    });
    return [steps, ...ys];
  }

  function setUp(figure) {
    const spec = JSON.parse(figure.dataset.chart);
    const width = Math.max(320, Math.min(figure.clientWidth || 900, 1300));
    const state = { lo: null, hi: null, weight: 0, log: false, raw: null, plot: null };
    const controls = document.createElement("div");
    controls.className = "controls";
    controls.innerHTML =
      '<label>Smoothing <input type="range" min="0" max="0.99" step="0.01" value="0"></label>' +
      '<label><input type="checkbox"> log scale</label>' +
      '<button type="button">Reset zoom</button><span class="note" aria-live="polite"></span>';
    figure.appendChild(controls);
    const [slider, logBox, reset, note] = [controls.querySelector("input[type=range]"),
      controls.querySelector("input[type=checkbox]"), controls.querySelector("button"), controls.querySelector(".note")];
    const holder = document.createElement("div");
    figure.appendChild(holder);

    async function load() {
      const fetched = await Promise.all(spec.runs.map(async (run) => {
        const answer = await fetch(seriesUrl(spec.project, run, spec.metric, state.lo, state.hi, width),
          { credentials: "same-origin" });
        if (!answer.ok) return { steps: [], values: [], total: 0, decimated: false };
        return answer.json();
      }));
      state.raw = align(fetched);
      const thinned = fetched.some((f) => f.decimated);
      const total = fetched.reduce((n, f) => n + f.total, 0);
      note.textContent = total + " points" + (thinned ? " (thinned to the chart's width; zoom for every point)" : "");
      draw();
    }

    function data() {
      const [x, ...ys] = state.raw;
      return [x, ...ys.map((y) => smooth(y, state.weight))];
    }

    function draw() {
      const options = {
        width: width, height: 280,
        scales: { x: { time: false }, y: { distr: state.log ? 3 : 1 } },
        axes: [{ label: "step" }, {}],
        series: [{ label: "step" }, ...spec.runs.map((run, i) => ({
          label: run, stroke: COLOURS[i % COLOURS.length], width: 1.5, spanGaps: true,
        }))],
        cursor: { drag: { x: true, y: false } },
        hooks: {
          setSelect: [(u) => {
            if (u.select.width < 3) return;
            state.lo = u.posToVal(u.select.left, "x");
            state.hi = u.posToVal(u.select.left + u.select.width, "x");
            load();
          }],
        },
      };
      if (state.plot) state.plot.destroy();
      state.plot = new uPlot(options, data(), holder);
      holder.firstChild.addEventListener("dblclick", () => { state.lo = state.hi = null; load(); });
    }

    slider.addEventListener("input", () => { state.weight = Number(slider.value); if (state.raw) state.plot.setData(data()); });
    logBox.addEventListener("change", () => { state.log = logBox.checked; if (state.raw) draw(); });
    reset.addEventListener("click", () => { state.lo = state.hi = null; load(); });
    load();
    if (spec.live && spec.runs.length === 1 && window.EventSource) {
      const url = "/ui/live/p/" + encodeURIComponent(spec.project) + "/runs/" + encodeURIComponent(spec.runs[0]);
      const events = new EventSource(url);
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
