// The mesh view's plots of the last 15 minutes: jobs per second, queue depth and p50/p99 latency per model, and the
// memory in use per device, with each GPU's temperature and power. The orchestrator keeps the points (GET /v1/series, a ring of 5 s steps); this module
// only draws them, with uPlot (served from node_modules at /web/vendor/uplot/, no build step).

import uPlot from '/web/vendor/uplot/uPlot.esm.js';
import { h } from './dom.js';

/** One colour per series, by position; the same model keeps its colour across the plots. */
const PALETTE = ['#4f46e5', '#1f9d55', '#c27c0e', '#c0262d', '#0e7490', '#9333ea', '#db2777', '#65a30d', '#475569', '#ea580c'];

const PLOTS = [
  { key: 'jobs', title: 'Jobs per second', unit: 'jobs/s', note: 'succeeded per model; failed dotted' },
  { key: 'queue', title: 'Queue depth', unit: 'jobs', note: 'waiting, per model' },
  { key: 'latency', title: 'Latency', unit: 'ms', note: 'admission to result: p50 solid, p99 dashed' },
  { key: 'memory', title: 'Memory in use', unit: 'MB', note: 'per device' },
  { key: 'temperature', title: 'Temperature', unit: '°C', note: 'per GPU, as its driver says', driver: true },
  { key: 'power', title: 'Power', unit: 'W', note: 'per GPU, as its driver says', driver: true },
];

const number = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 });

/** The series of one plot, from the orchestrator's answer: `[{ label, values, colour, dash }]`. */
function seriesFor(key, view) {
  const models = Object.keys(view.models);
  const colour = (i) => PALETTE[i % PALETTE.length];
  if (key === 'jobs') {
    // Failures get a dashed line of their own, only for a model that had some in the window.
    return models.flatMap((name, i) => [
      { label: name, values: view.models[name].succeededPerSecond, colour: colour(i) },
      ...(view.models[name].failedPerSecond.some((value) => value > 0) ? [{ label: `${name} failed`, values: view.models[name].failedPerSecond, colour: colour(i), dash: [2, 3] }] : []),
    ]);
  }
  if (key === 'queue') return models.map((name, i) => ({ label: name, values: view.models[name].queueDepth, colour: colour(i) }));
  if (key === 'latency') {
    return models.flatMap((name, i) => [
      { label: `${name} p50`, values: view.models[name].p50Ms, colour: colour(i) },
      { label: `${name} p99`, values: view.models[name].p99Ms, colour: colour(i), dash: [6, 4] },
    ]);
  }
  const devices = Object.keys(view.devices);
  if (key === 'memory') return devices.map((name, i) => ({ label: name, values: view.devices[name].usedMB, colour: colour(i) }));
  // Temperature and power: the devices whose driver reported them (a CPU reports neither).
  const field = key === 'temperature' ? 'temperatureC' : 'powerW';
  return devices.flatMap((name, i) => ((view.devices[name][field] ?? []).some((value) => value !== null)
    ? [{ label: name, values: view.devices[name][field], colour: colour(i) }] : []));
}

/**
 * The plots under `container`, redrawn from each answer of `/v1/series` given to `update`. A plot is rebuilt only
 * when its series change (a model or device appears); otherwise uPlot takes the new data in place.
 */
export function createPlots(container) {
  const panels = new Map();
  const textColour = () => getComputedStyle(container).color;
  const gridColour = () => getComputedStyle(container).getPropertyValue('--border').trim() || '#ddd';

  for (const plot of PLOTS) {
    const target = h('div', { class: 'plot-canvas' });
    const empty = h('p', { class: 'note small plot-empty' }, 'No points yet: one arrives every 5 s.');
    const figure = h('figure', { class: 'plot', 'data-plot': plot.key, role: 'group', 'aria-label': `${plot.title}, the last 15 minutes` },
      h('figcaption', {}, h('strong', {}, plot.title), h('small', {}, ` ${plot.unit} · ${plot.note}`)),
      target, empty);
    container.append(figure);
    panels.set(plot.key, { ...plot, figure, target, empty, chart: null, labels: '' });
  }

  const width = (panel) => Math.max(200, panel.target.clientWidth || panel.figure.clientWidth - 16);

  function build(panel, series, data) {
    panel.chart?.destroy();
    const stroke = textColour();
    const grid = { stroke: gridColour(), width: 1 };
    panel.chart = new uPlot({
      width: width(panel), height: 170,
      cursor: { drag: { x: false, y: false } },
      legend: { show: true, live: true },
      scales: { x: { time: true }, y: { range: (_u, min, max) => [0, Math.max(max ?? 0, min ?? 0, 1) * 1.1] } },
      axes: [
        { stroke, grid, ticks: grid },
        { stroke, grid, ticks: grid, size: 56, values: (_u, splits) => splits.map((value) => number.format(value)) },
      ],
      series: [{}, ...series.map((entry) => ({
        label: entry.label, stroke: entry.colour, width: 1.5, dash: entry.dash, spanGaps: false, points: { show: false },
        value: (_u, value) => (value == null ? '–' : `${number.format(value)} ${panel.unit}`),
      }))],
    }, data, panel.target);
  }

  function update(view) {
    for (const panel of panels.values()) {
      const series = seriesFor(panel.key, view);
      const data = [view.times, ...series.map((entry) => entry.values)];
      const labels = series.map((entry) => entry.label).join('\n');
      const hasPoints = view.times.length > 0 && series.length > 0;
      panel.empty.hidden = hasPoints;
      panel.empty.textContent = view.times.length > 0 && panel.driver ? 'No GPU in the mesh reports it.' : 'No points yet: one arrives every 5 s.';
      panel.figure.dataset.points = String(view.times.length);
      panel.figure.dataset.series = labels.replaceAll('\n', ',');
      if (!hasPoints) {
        panel.chart?.destroy();
        panel.chart = null;
        panel.labels = '';
        continue;
      }
      if (!panel.chart || panel.labels !== labels) {
        build(panel, series, data);
        panel.labels = labels;
      } else {
        panel.chart.setData(data);
      }
    }
  }

  // uPlot draws at a fixed width: follow the page's (a phone turned sideways, a window resized).
  new ResizeObserver(() => {
    for (const panel of panels.values()) panel.chart?.setSize({ width: width(panel), height: 170 });
  }).observe(container);

  return { update };
}
