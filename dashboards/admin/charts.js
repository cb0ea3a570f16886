// Inline-SVG charts for the admin page: no libraries, nothing fetched from elsewhere.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";

function svgEl(name, attrs, text) {
  const el = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

// days: [{day: "YYYY-MM-DD", prompt: n, completion: n}], one bar per day, stacked.
function usageChart(container, days) {
  container.replaceChildren();
  const width = 720, height = 180, left = 48, bottom = 20, top = 8;
  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, role: "img",
                             "aria-label": "tokens per day" });
  const max = Math.max(1, ...days.map((d) => d.prompt + d.completion));
  const plotH = height - bottom - top;
  const barW = (width - left) / Math.max(1, days.length);
  svg.appendChild(svgEl("text", { x: 2, y: top + 8 }, max.toLocaleString()));
  svg.appendChild(svgEl("text", { x: 2, y: height - bottom }, "0"));
  days.forEach((d, i) => {
    const x = left + i * barW + 1;
    const hp = (d.prompt / max) * plotH, hc = (d.completion / max) * plotH;
    const base = height - bottom;
    const p = svgEl("rect", { x, y: base - hp, width: Math.max(1, barW - 2), height: hp,
                              class: "prompt" });
    p.appendChild(svgEl("title", {}, `${d.day}: prompt ${d.prompt}`));
    const c = svgEl("rect", { x, y: base - hp - hc, width: Math.max(1, barW - 2), height: hc,
                              class: "completion" });
    c.appendChild(svgEl("title", {}, `${d.day}: completion ${d.completion}`));
    svg.append(p, c);
    if (i % 5 === 0 || i === days.length - 1) {
      svg.appendChild(svgEl("text", { x, y: height - 6 }, d.day.slice(5)));
    }
  });
  container.appendChild(svg);
}

window.FairwayCharts = { usageChart };
