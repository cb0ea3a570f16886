// Time-series charts with uPlot: a legend, a y-axis label, dashed target lines, the width of
// their container, and an empty state instead of a flat line when there is nothing to draw.
import { html, uPlot, useEffect, useRef } from "./lib.js";
import { Empty } from "./ui.js";

export const PALETTE = ["#3b6fd8", "#e07b39", "#2e9e6a", "#a24bd0", "#c9a227", "#d8435b",
  "#4aa9c7", "#7a7f8c"];

// x: epoch seconds; series: [{label, values, color?, dash?, points?}]; yFormat: value -> text.
export function Chart({ title, x, series, yLabel, yFormat, height = 220, empty, yRange, bars }) {
  const box = useRef(null);
  const plot = useRef(null);
  const hasData = x.length > 0 && series.some((s) => !s.target && s.values.some((v) => v));

  useEffect(() => {
    if (!hasData || !box.current) return undefined;
    const fmtY = yFormat || ((v) => (v == null ? "—" : v.toLocaleString("en-US")));
    const opts = {
      width: Math.max(280, box.current.clientWidth), height,
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true }, y: yRange ? { range: yRange } : {} },
      axes: [{ stroke: "#5a6170", grid: { stroke: "#eceef2" } },
        { stroke: "#5a6170", grid: { stroke: "#eceef2" }, label: yLabel, size: 64,
          values: (u, ticks) => ticks.map(fmtY) }],
      series: [{}, ...series.map((s, i) => ({
        label: s.label, stroke: s.color || PALETTE[i % PALETTE.length], width: s.target ? 1.5 : 2,
        dash: s.target ? [6, 4] : undefined, spanGaps: false,
        points: { show: s.points ?? x.length < 40 },
        paths: bars && !s.target ? uPlot.paths.bars({ size: [0.6, 24] }) : undefined,
        fill: bars && !s.target ? `${s.color || PALETTE[i % PALETTE.length]}55` : undefined,
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
  }, [hasData, JSON.stringify(x), JSON.stringify(series), height]);

  return html`<figure class="chart">
    <figcaption>${title}</figcaption>
    ${hasData ? html`<div class="chart-box" ref=${box}></div>`
      : html`<${Empty}>${empty || "No data in this period."}</${Empty}>`}
  </figure>`;
}

// "2026-11-30" -> epoch seconds at UTC midnight.
export const daySeconds = (day) => Date.parse(`${day}T00:00:00Z`) / 1000;
