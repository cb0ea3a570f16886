// Time-series charts with uPlot: a legend, a y-axis label, dashed target lines, the width of
// their container, and an empty state instead of a flat line when there is nothing to draw.
import { html, uPlot, useEffect, useRef } from "./lib.js";
import { Empty } from "./ui.js";

export const PALETTE = ["#3b6fd8", "#e07b39", "#2e9e6a", "#a24bd0", "#c9a227", "#d8435b",
  "#4aa9c7", "#7a7f8c"];

// Short axis numbers: 1,500 -> "1.5k", 2,000,000 -> "2M".
export const compact = (v) => (v == null ? "—" : Intl.NumberFormat("en-US",
  { notation: "compact", maximumFractionDigits: 1 }).format(v));

// Time axis labels in 24-hour time, as the rest of the UI (uPlot's own are 12-hour): the tick
// spacing `incr` (seconds) picks the precision; the day goes under the first tick and under
// each tick that starts a new day.
const DAY_LABEL = uPlot.fmtDate("{D} {MMM}");
const TIME_LABELS = [[365 * 86400, uPlot.fmtDate("{YYYY}")], [28 * 86400, uPlot.fmtDate("{MMM} {YYYY}")],
  [86400, DAY_LABEL], [60, uPlot.fmtDate("{HH}:{mm}")], [0, uPlot.fmtDate("{HH}:{mm}:{ss}")]];

// The legend's time under the cursor, in the same 24-hour words.
const LEGEND_TIME = uPlot.fmtDate("{D} {MMM} {YYYY}, {HH}:{mm}");
export const legendTime = (v) => (v == null ? "—" : LEGEND_TIME(new Date(v * 1000)));

export function timeLabels(splits, incr) {
  const [, fmt] = TIME_LABELS.find(([least]) => incr >= least);
  return splits.map((s, i) => {
    const d = new Date(s * 1000);
    if (incr >= 86400) return fmt(d);
    const prev = i > 0 ? new Date(splits[i - 1] * 1000) : null;
    return !prev || prev.toDateString() !== d.toDateString() ? `${fmt(d)}\n${DAY_LABEL(d)}` : fmt(d);
  });
}

// x: epoch seconds; series: [{label, values, color?, target?}] (a target is a dashed line);
// xRange: [from, to] epoch seconds, the period shown even where it has no data; yFormat:
// value -> text (legend), yAxis: value -> short text (axis); bars: one series as bars.
export function Chart({ title, x, series, yLabel, yFormat, yAxis, height = 220, empty, yRange,
  xRange, bars }) {
  const box = useRef(null);
  const plot = useRef(null);
  // Something measured (0 counts: an interval with 0% attainment is data), not only targets.
  const hasData = x.length > 0 && series.some((s) => !s.target && s.values.some((v) => v != null));

  useEffect(() => {
    if (!hasData || !box.current) return undefined;
    const fmtY = yFormat || ((v) => (v == null ? "—" : v.toLocaleString("en-US")));
    const axisY = yAxis || compact;
    const asBars = bars && series.filter((s) => !s.target).length === 1;
    const opts = {
      width: Math.max(280, box.current.clientWidth), height,
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
      scales: { x: xRange ? { time: true, range: () => xRange } : { time: true },
        y: yRange ? { range: yRange } : { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] } },
      axes: [{ stroke: "#5a6170", grid: { stroke: "#eceef2" },
        values: (u, splits, axisIdx, space, incr) => timeLabels(splits, incr) },
        { stroke: "#5a6170", grid: { stroke: "#eceef2" }, label: yLabel, size: 68,
          values: (u, ticks) => ticks.map(axisY) }],
      series: [{ value: (u, v) => legendTime(v) }, ...series.map((s, i) => ({
        label: s.label, stroke: s.color || PALETTE[i % PALETTE.length], width: s.target ? 1.5 : 2,
        dash: s.target ? [6, 4] : undefined, spanGaps: false,
        points: { show: !s.target && (s.points ?? x.length < 40) },
        paths: asBars && !s.target ? uPlot.paths.bars({ size: [0.6, 24] }) : undefined,
        fill: asBars && !s.target ? `${s.color || PALETTE[i % PALETTE.length]}55` : undefined,
        value: (u, v) => fmtY(v),
      }))],
    };
    plot.current = new uPlot(opts, [x, ...series.map((s) => s.values)], box.current);
    const ro = new ResizeObserver(() => {
      if (plot.current && box.current) {
        plot.current.setSize({ width: Math.max(280, box.current.clientWidth), height });
      }
    });
    ro.observe(box.current);
    return () => { ro.disconnect(); plot.current.destroy(); plot.current = null; };
  }, [hasData, JSON.stringify(x), JSON.stringify(series), JSON.stringify(xRange), height]);

  return html`<figure class="chart">
    <figcaption>${title}</figcaption>
    ${hasData ? html`<div class="chart-box" ref=${box}></div>`
      : html`<${Empty}>${empty || "No data in this period."}</${Empty}>`}
  </figure>`;
}

// "2026-11-30" -> epoch seconds at UTC midnight.
export const daySeconds = (day) => Date.parse(`${day}T00:00:00Z`) / 1000;

// Days on an x axis: half a day of room either side, so the first and last bars show whole.
export const dayRange = (days) => (days.length
  ? [daySeconds(days[0]) - 43200, daySeconds(days[days.length - 1]) + 43200] : undefined);
