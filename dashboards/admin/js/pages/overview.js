// Overview: the fleet, queues by plan and tenant, SLO attainment over time (TTFT and TPOT
// apart, plan targets drawn), per-tenant SLO and fair share, preemptions and recent 429s.
// Refreshed every 5 s.
import { html, useState } from "../lib.js";
import { api, qs } from "../api.js";
import { href, useResource } from "../hooks.js";
import { Chart } from "../chart.js";
import { Empty, Loaded, clock, fmt, pct } from "../ui.js";

const WINDOWS = [[900, 30, "15 min"], [3600, 60, "1 hour"], [6 * 3600, 600, "6 hours"],
  [24 * 3600, 1800, "24 hours"]];
const ms = (v) => (v == null ? "—" : `${Math.round(v).toLocaleString("en-US")} ms`);

async function loadOverview(windowS, bucketS) {
  const [live, queues, slo, refusals] = await Promise.all([
    api("GET", `/admin/live${qs({ window_s: windowS })}`), api("GET", "/admin/queues"),
    api("GET", `/admin/slo/series${qs({ window_s: windowS, bucket_s: bucketS })}`),
    api("GET", `/admin/refusals${qs({ window_s: windowS, limit: 20 })}`)]);
  return { live, queues, slo, refusals };
}

function Stat({ label, value, sub, tone }) {
  return html`<div class=${`stat ${tone || ""}`}><span class="stat-label">${label}</span>
    <strong class="stat-value">${value}</strong>${sub && html`<small>${sub}</small>`}</div>`;
}

function Fleet({ workers }) {
  const running = workers.reduce((a, w) => a + (w.running || 0), 0);
  const slots = workers.reduce((a, w) => a + (w.max_slots || 0), 0);
  const kv = workers.length ? Math.max(...workers.map((w) => w.kv_usage || 0)) : null;
  return html`<section class="card" aria-labelledby="fleet-h">
    <h2 id="fleet-h">Fleet</h2>
    <div class="stats">
      <${Stat} label="Workers" value=${workers.length} tone=${workers.length ? "" : "warn"} />
      <${Stat} label="Running / slots" value=${`${fmt(running)} / ${fmt(slots)}`} />
      <${Stat} label="KV cache (max)" value=${pct(kv)} tone=${kv > 0.9 ? "warn" : ""} />
    </div>
    ${workers.length ? html`<div class="table-wrap"><table id="workers">
      <thead><tr><th>Worker</th><th>Model</th><th>Running / slots</th><th>KV use</th></tr></thead>
      <tbody>${workers.map((w) => html`<tr key=${w.worker_id}>
        <td>${w.worker_id}</td><td>${(w.models || []).join(", ")}</td>
        <td><${Meter} value=${w.running || 0} max=${w.max_slots || 0}
          label=${`${fmt(w.running)} / ${fmt(w.max_slots)}`} /></td>
        <td><${Meter} value=${w.kv_usage || 0} max=${1} label=${pct(w.kv_usage)} /></td>
      </tr>`)}</tbody></table></div>`
      : html`<${Empty}>No live workers: nothing can run until one sends a heartbeat.</${Empty}>`}
  </section>`;
}

function Meter({ value, max, label }) {
  const p = max ? Math.min(100, (100 * value) / max) : 0;
  return html`<span class="meter"><span style=${{ width: `${p}%` }}></span><em>${label}</em></span>`;
}

function Queues({ queues }) {
  const total = queues.by_tier.reduce((a, t) => a + t.queued, 0);
  return html`<section class="card" aria-labelledby="queues-h">
    <h2 id="queues-h">Queues <small>${fmt(total)} queued</small></h2>
    ${queues.by_tier.length === 0 ? html`<${Empty}>No queued or running work.</${Empty}>` : html`
    <div class="grid2">
      <div class="table-wrap"><table id="queue-plans"><caption>By plan</caption>
        <thead><tr><th>Plan</th><th>Queued</th><th>Assigned</th><th>Running</th></tr></thead>
        <tbody>${queues.by_tier.map((t) => html`<tr key=${t.tier}><td>${t.tier}</td>
          <td>${fmt(t.queued)}</td><td>${fmt(t.assigned)}</td><td>${fmt(t.running)}</td></tr>`)}
        </tbody></table></div>
      <div class="table-wrap"><table id="queue-tenants"><caption>By tenant</caption>
        <thead><tr><th>Tenant</th><th>Realtime queued</th><th>Batch queued</th><th>Running</th></tr></thead>
        <tbody>${queues.by_tenant.slice(0, 15).map((t) => html`<tr key=${t.tenant_id}>
          <td><a href=${href(`tenants/${t.tenant_id}`)}>${t.tenant}</a></td>
          <td>${fmt(t.realtime_queued)}</td><td>${fmt(t.batch_queued)}</td>
          <td>${fmt(t.running)}</td></tr>`)}</tbody></table></div>
    </div>`}
  </section>`;
}

// Short durations for an axis: 850 -> "850 ms", 1500 -> "1.5 s".
const msAxis = (v) => (v == null ? "" : v >= 1000 ? `${+(v / 1000).toFixed(1)} s` : `${Math.round(v)} ms`);

function Slo({ slo }) {
  // The period's two ends join the buckets, so the target lines cross the whole chart.
  const now = Math.floor(Date.now() / 1000);
  const from = now - slo.window_s;
  const x = [from, ...slo.buckets.map((b) => b.t), now];
  const col = (key) => [null, ...slo.buckets.map((b) => b[key]), null];
  const targets = (key) => slo.targets.map((t) => ({ label: `${t.tier} target`, target: true,
    values: x.map(() => t[key]) }));
  const combined = slo.both_attainment;
  return html`<section class="card" aria-labelledby="slo-h">
    <h2 id="slo-h">SLO attainment</h2>
    <div class="stats">
      <${Stat} label="TTFT met" value=${pct(slo.ttft_attainment)} sub=${`${fmt(slo.requests)} requests`} />
      <${Stat} label="TPOT met" value=${pct(slo.tpot_attainment)} />
      <${Stat} label="Both met" value=${pct(combined)} sub="TTFT and TPOT" />
    </div>
    <${Chart} title="Attainment per interval" x=${x} xRange=${[from, now]} yRange=${[0, 1.02]}
      yFormat=${(v) => (v == null ? "—" : `${Math.round(v * 100)}%`)}
      yAxis=${(v) => `${Math.round(v * 100)}%`}
      empty="No finished realtime requests in this period."
      series=${[{ label: "TTFT met", values: col("ttft_attainment") },
        { label: "TPOT met", values: col("tpot_attainment") },
        { label: "both met", values: col("both_attainment") }]} />
    <div class="grid2">
      <${Chart} title="Time to first token (p50, p99) and plan targets" x=${x} xRange=${[from, now]}
        yFormat=${ms} yAxis=${msAxis} empty="No finished realtime requests in this period."
        series=${[{ label: "TTFT p50", values: col("ttft_p50_ms") },
          { label: "TTFT p99", values: col("ttft_p99_ms") },
          ...targets("ttft_slo_ms")]} />
      <${Chart} title="Time per output token (p50, p99) and plan targets" x=${x} xRange=${[from, now]}
        yFormat=${ms} yAxis=${msAxis} empty="No finished realtime requests in this period."
        series=${[{ label: "TPOT p50", values: col("tpot_p50_ms") },
          { label: "TPOT p99", values: col("tpot_p99_ms") },
          ...targets("tpot_slo_ms")]} />
    </div>
  </section>`;
}

const ratio = (v) => (v == null ? "—" : `${v.toFixed(2)}×`);
const jainTone = (v) => (v != null && v < 0.8 ? "warn" : "");

// Per tenant: SLO attainment judged against the targets each job was admitted under, and
// its service against its weighted fair share, with its queue waits (the same window).
function Tenants({ slo, fairness }) {
  const fair = new Map(fairness.by_tenant.map((f) => [`${f.tenant_id}/${f.class}`, f]));
  const names = new Map([...slo.by_tenant, ...fairness.by_tenant].map((t) => [t.tenant_id, t.tenant]));
  const sloRows = new Map();
  for (const s of slo.by_tenant) (sloRows.get(s.tenant_id) || sloRows.set(s.tenant_id, []).get(s.tenant_id)).push(s);
  const rows = [...names.keys()].sort((a, b) => names.get(a).localeCompare(names.get(b)));
  const byClass = fairness.by_class;
  const cell = (f, key) => (f ? ms(f[key]) : "—");
  return html`<section class="card" aria-labelledby="tenants-h">
    <h2 id="tenants-h">By tenant <small>SLO and fair share</small></h2>
    <div class="stats">
      <${Stat} label="Fairness, realtime" value=${byClass.realtime?.jain == null ? "—" : byClass.realtime.jain.toFixed(3)}
        tone=${jainTone(byClass.realtime?.jain)} sub="Jain's index, 1 = all got their share" />
      <${Stat} label="Fairness, batch" value=${byClass.batch?.jain == null ? "—" : byClass.batch.jain.toFixed(3)}
        tone=${jainTone(byClass.batch?.jain)} sub="Jain's index over batch and flex" />
    </div>
    ${rows.length === 0 ? html`<${Empty}>No tenant was served in this period.</${Empty}>` : html`
    <div class="table-wrap"><table id="tenant-slo">
      <thead><tr><th>Tenant</th><th>Plan</th><th>Realtime requests</th><th>TTFT met</th>
        <th>TTFT p50 / p99 (target)</th><th>Realtime share</th><th>Queue wait p50 / p99</th>
        <th>Batch share</th><th>Batch wait p99</th></tr></thead>
      <tbody>${rows.flatMap((id) => {
        const plans = sloRows.get(id) || [null];
        const rt = fair.get(`${id}/realtime`);
        const bt = fair.get(`${id}/batch`);
        return plans.map((s, i) => html`<tr key=${`${id}/${s ? s.tier : "-"}`}>
          <td>${i === 0 ? html`<a href=${href(`tenants/${id}`)}>${names.get(id)}</a>` : ""}</td>
          <td>${s ? s.tier : "—"}</td><td>${s ? fmt(s.requests) : "—"}</td>
          <td class=${s && s.ttft_attainment != null && s.ttft_attainment < 0.9 ? "warn" : ""}>${s ? pct(s.ttft_attainment) : "—"}</td>
          <td>${s ? `${ms(s.ttft_p50_ms)} / ${ms(s.ttft_p99_ms)} (${ms(s.ttft_slo_ms)})` : "—"}</td>
          <td class=${rt && rt.share_ratio != null && rt.share_ratio < 0.8 ? "warn" : ""}>${i === 0 && rt ? ratio(rt.share_ratio) : ""}</td>
          <td>${i === 0 ? `${cell(rt, "queue_wait_p50_ms")} / ${cell(rt, "queue_wait_p99_ms")}` : ""}</td>
          <td>${i === 0 && bt ? ratio(bt.share_ratio) : ""}</td>
          <td>${i === 0 ? cell(bt, "queue_wait_p99_ms") : ""}</td></tr>`);
      })}</tbody></table></div>
    <p class="hint">A tenant's share is its service (input + 2 × output tokens) over its weighted
      fair share of what was served; below 1× it got less than its share. A tenant moved to
      another plan has a row per plan: each job is judged under the plan it was admitted on.</p>`}
  </section>`;
}

function Refusals({ refusals, preemptions }) {
  return html`<section class="card" aria-labelledby="refusals-h">
    <h2 id="refusals-h">Refusals and preemptions</h2>
    <div class="stats">
      <${Stat} label="429s in period" value=${fmt(refusals.total)}
        tone=${refusals.total ? "warn" : ""} sub="this API process" />
      <${Stat} label="Preempted jobs" value=${fmt(preemptions.jobs)}
        sub=${`${fmt(preemptions.preemptions)} preemptions, ${fmt(preemptions.recomputed_tokens)} tokens recomputed`} />
    </div>
    ${refusals.data.length ? html`<div class="table-wrap"><table id="refusals">
      <thead><tr><th>When</th><th>Tenant</th><th>Reason</th></tr></thead>
      <tbody>${refusals.data.map((r, i) => html`<tr key=${i}>
        <td>${clock(new Date(r.at * 1000))}</td>
        <td>${r.tenant ? html`<a href=${href(`tenants/${r.tenant_id}`)}>${r.tenant}</a>` : r.tenant_id}</td>
        <td><code>${r.reason}</code></td></tr>`)}</tbody></table></div>`
      : html`<${Empty}>No requests refused in this period.</${Empty}>`}
  </section>`;
}

export function Overview() {
  const [win, setWin] = useState(1);
  const [windowS, bucketS] = WINDOWS[win];
  const res = useResource(() => loadOverview(windowS, bucketS), [windowS], { pollMs: 5000 });
  return html`<div class="page" id="page-overview">
    <div class="page-head"><h1>Overview</h1>
      <label class="inline">Period <select value=${win} onChange=${(e) => setWin(Number(e.target.value))}>
        ${WINDOWS.map((w, i) => html`<option value=${i}>${w[2]}</option>`)}</select></label>
      <span class="updated">${res.at && !res.stale ? `live, updated ${clock(res.at)}` : ""}</span>
    </div>
    <${Loaded} res=${res} what="the overview">${(d) => html`
      <div class="grid2">
        <${Fleet} workers=${d.live.workers || []} />
        <${Refusals} refusals=${d.refusals} preemptions=${d.slo.preemptions} />
      </div>
      <${Queues} queues=${d.queues} />
      <${Slo} slo=${d.slo} />
      <${Tenants} slo=${d.live.slo} fairness=${d.live.fairness} />`}
    </${Loaded}>
  </div>`;
}
