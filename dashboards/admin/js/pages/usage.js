// Usage charts of one tenant (or all): per UTC day over 7, 30 or 90 days from the usage table,
// or the last hour per minute from the usage API's 1-minute buckets (/admin/usage/completions),
// refreshed while shown. Requests, tokens in and tokens out, split by model, class, key or
// tenant.
import { html, useState } from "../lib.js";
import { api, qs } from "../api.js";
import { useResource } from "../hooks.js";
import { Chart, dayRange, daySeconds } from "../chart.js";
import { Loaded, fmt } from "../ui.js";

const GROUPS = [["model", "Model"], ["job_class", "Class"], ["key", "Key"]];
const PERIODS = [["hour", "Last hour"], ["7", "7 days"], ["30", "30 days"], ["90", "90 days"]];
const METRICS = ["requests", "prompt_tokens", "completion_tokens"];
// The dashboard's group as the usage API's group_by, and how a result names its group.
const MINUTE_GROUPS = {
  model: ["model", (r) => r.model],
  job_class: ["batch", (r) => (r.batch ? "batch" : "realtime")],
  key: ["api_key_id", (r, keys) => (r.api_key_id ? keys[r.api_key_id] || r.api_key_id : "(batch lines, no key)")],
  tenant: ["tenant_id", (r) => r.tenant_name || r.tenant_id],
};
const MINUTE_POLL_MS = 15000;

// The last 60 minutes, this one included, as the daily view's shape: {x, series, totals}.
async function lastHour(tenantId, group) {
  const [groupBy, name] = MINUTE_GROUPS[group];
  const start = Math.floor(Date.now() / 60000) * 60 - 59 * 60;
  const [page, keys] = await Promise.all([
    api("GET", `/admin/usage/completions${qs({ tenant_id: tenantId, start_time: start,
      bucket_width: "1m", limit: 60, group_by: groupBy })}`),
    group === "key" ? api("GET", `/admin/tenants/${tenantId}/keys`) : null]);
  const keyNames = Object.fromEntries((keys?.data || []).map((k) => [k.id, `${k.name} (${k.prefix}…)`]));
  const x = page.data.map((b) => b.start_time);
  const series = new Map();
  page.data.forEach((bucket, i) => {
    for (const r of bucket.results) {
      const label = name(r, keyNames);
      if (!series.has(label)) {
        series.set(label, { key: label, label, ...Object.fromEntries(METRICS.map((m) => [m, x.map(() => 0)])) });
      }
      const s = series.get(label);
      s.requests[i] += r.num_model_requests;
      s.prompt_tokens[i] += r.input_tokens;
      s.completion_tokens[i] += r.output_tokens;
    }
  });
  const all = [...series.values()];
  const sum = (m) => all.reduce((n, s) => n + s[m].reduce((a, b) => a + b, 0), 0);
  return { x, xRange: x.length ? [x[0] - 30, x[x.length - 1] + 30] : undefined, series: all,
    totals: Object.fromEntries(METRICS.map((m) => [m, sum(m)])) };
}

async function daily(tenantId, days, group) {
  const u = await api("GET", `/admin/usage/series${qs({ tenant_id: tenantId, days, group_by: group })}`);
  return { x: u.days.map(daySeconds), xRange: dayRange(u.days), series: u.series, totals: u.totals };
}

export function UsageCharts({ tenantId, title = "Usage" }) {
  const [period, setPeriod] = useState("30");
  const [group, setGroup] = useState("model");
  const hour = period === "hour";
  const res = useResource(() => (hour ? lastHour(tenantId, group) : daily(tenantId, Number(period), group)),
    [tenantId, period, group], { pollMs: hour ? MINUTE_POLL_MS : 0 });
  const per = hour ? "minute" : "day";
  return html`<section class="card" aria-labelledby="usage-h">
    <div class="page-head"><h2 id="usage-h">${title}</h2>
      <label class="inline">Period <select id="usage-period" value=${period} onChange=${(e) => setPeriod(e.target.value)}>
        ${PERIODS.map(([p, l]) => html`<option value=${p}>${l}</option>`)}</select></label>
      <label class="inline">By <select id="usage-group" value=${group} onChange=${(e) => setGroup(e.target.value)}>
        ${GROUPS.filter(([g]) => tenantId || g !== "key").map(([g, l]) => html`<option value=${g}>${l}</option>`)}
        ${!tenantId && html`<option value="tenant">Tenant</option>`}</select></label>
    </div>
    <${Loaded} res=${res} what="usage">${(u) => {
      const by = (metric) => u.series.map((s) => ({ label: s.label || s.key, values: s[metric] }));
      const none = hour ? "No usage in the last hour." : `No usage in the last ${period} days.`;
      const span = hour ? "last hour, per minute" : "UTC days";
      return html`<p class="muted" id="usage-totals">${`${fmt(u.totals.requests)} requests, ${fmt(u.totals.prompt_tokens)} tokens in, ${fmt(u.totals.completion_tokens)} tokens out (${span}).`}</p>
        <div class="grid3" id="usage-charts" data-period=${period}>
          <${Chart} title=${`Requests per ${per}`} x=${u.x} xRange=${u.xRange} series=${by("requests")} empty=${none} bars=${true} />
          <${Chart} title=${`Tokens in (prompt) per ${per}`} x=${u.x} xRange=${u.xRange} series=${by("prompt_tokens")} empty=${none} bars=${true} />
          <${Chart} title=${`Tokens out (completion) per ${per}`} x=${u.x} xRange=${u.xRange} series=${by("completion_tokens")} empty=${none} bars=${true} />
        </div>`;
    }}</${Loaded}>
  </section>`;
}
