// A tenant's LoRA adapters: each with its ft: model name, base model, rank, size, its use
// over the API's window (requests, tokens, last request), its last and median load time on the
// live workers (their beats' recent loads) and the workers holding it warm now.
import { html } from "../lib.js";
import { api } from "../api.js";
import { useResource } from "../hooks.js";
import { Empty, Loaded, fmt, when } from "../ui.js";

// "3.1 MiB": binary units, one decimal from KiB up.
export function size(bytes) {
  if (bytes === null || bytes === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB"];
  let v = bytes;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}

// "0.21 s": a load time; "—" when no live worker has loaded it lately.
export function seconds(s) {
  if (s === null || s === undefined) return "—";
  return s < 10 ? `${s.toFixed(2)} s` : `${s.toFixed(1)} s`;
}

export function Adapters({ tenant }) {
  const res = useResource(() => api("GET", `/admin/tenants/${tenant.id}/adapters`), [tenant.id]);
  return html`<section class="card" id="tenant-adapters" aria-labelledby="adapters-h">
    <h2 id="adapters-h">LoRA adapters</h2>
    <${Loaded} res=${res} what="adapters">${(v) => html`
      ${v.data.length === 0
        ? html`<${Empty}>No adapters</${Empty}>`
        : html`<div class="table-wrap"><table id="adapters">
          <thead><tr><th>Name</th><th>Model</th><th class="wide-only">Base model</th><th>Rank</th>
            <th>Size</th><th class="wide-only">Created</th><th>${`Requests (${v.window_days} d)`}</th>
            <th>${`Tokens (${v.window_days} d)`}</th><th>Last used</th>
            <th title="on the live workers, their recent loads">Load (last / median)</th>
            <th>Warm on</th></tr></thead>
          <tbody>${v.data.map((a) => html`<tr key=${a.id} data-adapter=${a.name}>
            <td>${a.name}</td><td><code>${a.model}</code></td><td class="wide-only">${a.base_model}</td>
            <td>${a.rank}</td><td>${size(a.bytes)}</td><td class="wide-only">${when(a.created_at)}</td>
            <td class="requests">${fmt(a.requests)}</td><td class="tokens">${fmt(a.tokens)}</td>
            <td class="last-used">${a.last_used_at ? when(a.last_used_at) : "not in this window"}</td>
            <td class="load" title=${`${a.load_samples} recent loads`}>${a.load_samples
              ? `${seconds(a.last_load_s)} / ${seconds(a.median_load_s)}` : "not loaded lately"}</td>
            <td class="warm-on">${a.warm_on.length ? a.warm_on.join(", ") : "no worker"}</td></tr>`)}
          </tbody></table></div>`}
      <p class="hint" id="adapter-load-times">Load times are the live workers' recent loads
        (a worker keeps its last 8 per adapter); the whole history is the histogram <code>${
          v.load_time_metric}</code> in Prometheus.</p>`}</${Loaded}>
  </section>`;
}
