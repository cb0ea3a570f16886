// The job and batch explorer: paste any id a user quotes (job_, chatcmpl-, batch_, req_,
// file-, a UUID; a custom_id with its batch) and see the job's timeline as one bar, where its
// time went, its facts, or the batch's files and lines. Deep link: #/explore/<id>
// (#/explore/<custom_id>?batch=<batch id>). Every time is 24-hour UTC with milliseconds.
import { html, useState } from "../lib.js";
import { ApiError, api, qs } from "../api.js";
import { href, navigate, useResource } from "../hooks.js";
import { Loaded, fmt } from "../ui.js";

const PHASES = [["queued", "queued"], ["placed", "placed, not started"],
  ["prefill", "prefill"], ["decode", "generating"], ["parked", "parked (preempted)"]];
const STEP_WORDS = { created: "arrived, queued", requeued: "back in the queue",
  assigned: "placed on a worker", started: "started", first_token: "first token",
  preempted: "preempted", resumed: "resumed", finished: "ended", cancelled: "cancelled" };

// "2026-12-06T01:02:03.456Z" -> "01:02:03.456" (the date is shown once, beside the bar).
const utcClock = (iso) => (iso ? iso.slice(11, 23) : "—");
const utcDay = (iso) => (iso ? iso.slice(0, 10) : "");
const ms = (v) => (v === null || v === undefined ? "—" : `${fmt(v)} ms`);
const exploreHref = (id, params) => href(`explore/${encodeURIComponent(id)}`, params);

// The search box in the top bar: Enter opens the id's page, wherever the operator is.
export function ExploreBox() {
  const [q, setQ] = useState("");
  const go = (e) => {
    e.preventDefault();
    const id = q.trim();
    if (id) { navigate(`explore/${encodeURIComponent(id)}`); setQ(""); }
  };
  return html`<form class="explore-box" role="search" onSubmit=${go}>
    <input id="explore-q" type="search" placeholder="job, batch or request id" value=${q}
      aria-label="Find a job or batch by id" onInput=${(e) => setQ(e.target.value)} />
  </form>`;
}

async function lookUp(id, batch) {
  const found = await api("GET", `/admin/search${qs({ q: id, batch })}`);
  return { found, detail: await api("GET", found.url) };
}

export function Explore({ id, params }) {
  const batch = params.batch || "";
  const res = useResource(() => (id ? lookUp(id, batch) : Promise.resolve(null)), [id, batch]);
  return html`<div class="page" id="page-explore">
    <div class="page-head"><h1>Explore</h1>
      <${ExploreForm} id=${id || ""} batch=${batch} /></div>
    ${!id ? html`<section class="card"><p class="muted">Paste a job id (<code>job_…</code>,
        <code>chatcmpl-…</code>), a batch id (<code>batch_…</code>), a batch output line's
        <code>request_id</code> (<code>req_…</code>), a file id or a UUID. A batch line's
        <code>custom_id</code> is found with its batch.</p></section>`
      : res.error instanceof ApiError && res.error.status === 404
        ? html`<section class="card"><div class="state empty" id="explore-missing">${
            res.error.message}</div></section>`
        : html`<${Loaded} res=${res} what="the id">${(d) => (d.found.kind === "job"
          ? html`<${JobView} job=${d.detail} matched=${d.found.matched_as} />`
          : html`<${BatchView} batch=${d.detail} />`)}</${Loaded}>`}
  </div>`;
}

function ExploreForm({ id, batch }) {
  const [q, setQ] = useState(id);
  const [within, setWithin] = useState(batch);
  const go = (e) => {
    e.preventDefault();
    if (q.trim()) navigate(`explore/${encodeURIComponent(q.trim())}`, { batch: within.trim() });
  };
  return html`<form id="explore-form" class="inline-form" onSubmit=${go}>
    <input id="explore-id" value=${q} placeholder="id" aria-label="id"
      onInput=${(e) => setQ(e.target.value)} size="38" />
    <input id="explore-in-batch" value=${within} placeholder="in batch (for a custom_id)"
      aria-label="batch, for a custom_id" onInput=${(e) => setWithin(e.target.value)} size="22" />
    <button type="submit" class="primary">Find</button></form>`;
}

function TimelineBar({ phases }) {
  const total = phases.reduce((n, p) => n + p.ms, 0) || 1;
  return html`<div class="timeline" id="timeline-bar" role="img"
      aria-label=${phases.map((p) => `${p.phase} ${p.ms} ms`).join(", ")}>
    ${phases.map((p, i) => html`<span key=${i} data-phase=${p.phase}
      class=${`phase phase-${p.phase}${p.open ? " open" : ""}`}
      style=${{ flexGrow: p.ms, flexBasis: 0, minWidth: "3px" }}
      title=${`${p.phase}: ${fmt(p.ms)} ms, ${utcClock(p.start)}–${utcClock(p.end)} UTC${
        p.open ? " (still going)" : ""}`}>${p.ms / total > 0.12 ? html`<em>${fmt(p.ms)} ms</em>` : ""}</span>`)}
  </div>
  <div class="timeline-axis"><span>${utcClock(phases[0] && phases[0].start)}</span>
    <span>${utcDay(phases[0] && phases[0].start)} UTC</span>
    <span>${utcClock(phases.length ? phases[phases.length - 1].end : null)}</span></div>
  <ul class="legend">${PHASES.filter(([k]) => phases.some((p) => p.phase === k)).map(([k, label]) =>
    html`<li key=${k}><i class=${`phase phase-${k}`}></i>${label}</li>`)}</ul>`;
}

function Fact({ label, children, id }) {
  return html`<div class="fact" id=${id}><dt>${label}</dt><dd>${children}</dd></div>`;
}

function JobView({ job, matched }) {
  const t = job.durations;
  const slo = job.slo;
  const missed = slo.ttft_slo_ms !== null && t.ttft_ms !== null && t.ttft_ms > slo.ttft_slo_ms;
  return html`<section class="card" id="explore-job" data-job=${job.id}>
    <div class="title-row"><h2><code>${job.id}</code></h2>
      <span class=${`badge status-${job.status} ${job.status === "succeeded" ? "good"
        : job.status === "failed" ? "bad" : ""}`} id="job-status">${job.status}</span>
      <span class="muted">found as ${matched.replace("_", " ")}</span></div>
    <p id="explore-verdict" class="verdict">${job.verdict}</p>
    <${TimelineBar} phases=${job.phases} />
  </section>
  <div class="grid2">
    <section class="card"><h2>Facts</h2><dl class="facts" id="job-facts">
      <${Fact} label="Tenant" id="fact-tenant"><a href=${href(`tenants/${job.tenant.id}`)}>${
        job.tenant.name || job.tenant.id}</a> <span class="badge">${job.tenant.plan || "—"}</span><//>
      ${job.batch && html`<${Fact} label="Batch" id="fact-batch"><a href=${exploreHref(job.batch.id)}><code>${
        job.batch.id}</code></a> line ${job.batch.line_no}, <code>${job.batch.custom_id}</code><//>`}
      <${Fact} label="Class">${job.kind} · ${job.service_tier} · priority ${job.priority}<//>
      <${Fact} label="Model">${job.model} · ${job.endpoint}${job.stream ? " · streamed" : ""}<//>
      <${Fact} label="Attempt">${job.attempt}${job.preemption.preemptions
        ? ` · preempted ${job.preemption.preemptions}×, ${fmt(job.preemption.recomputed_tokens)} tokens recomputed` : ""}<//>
      <${Fact} label="Worker"><code>${job.worker_id || "—"}</code><//>
      <${Fact} label="Tokens" id="fact-tokens">${`${fmt(job.tokens.prompt)} prompt (${
        fmt(job.tokens.cached)} cached) · ${fmt(job.tokens.completion)} completion of ${
        fmt(job.max_tokens)}`}<//>
      <${Fact} label="Finish">${job.finish_reason || "—"}<//>
      <${Fact} label="SLO" id="fact-slo">${slo.plan ? `${slo.plan}: TTFT ${ms(slo.ttft_slo_ms)}, TPOT ${
        ms(slo.tpot_slo_ms)} · predicted at the door ${ms(slo.predicted_ttft_ms)}`
        : "no target (batch class)"}<//>
      ${job.error && html`<${Fact} label="Error" id="fact-error"><code>${job.error.code || ""}</code>${
        " "}${job.error.message || ""}<//>`}
      ${job.deadline_at && html`<${Fact} label="Deadline">${job.deadline_at.replace("T", " ")}<//>`}
    </dl></section>
    <section class="card"><h2>Durations</h2><dl class="facts" id="job-durations">
      <${Fact} label="Queue wait" id="took-queue">${ms(t.queue_ms)}<//>
      <${Fact} label="Time to first token" id="took-ttft"><span class=${missed ? "bad-text" : ""}>${
        ms(t.ttft_ms)}</span>${slo.ttft_slo_ms !== null ? ` (target ${fmt(slo.ttft_slo_ms)} ms)` : ""}<//>
      <${Fact} label="Per output token">${ms(t.tpot_ms)}<//>
      <${Fact} label="Total">${ms(t.total_ms)}<//>
      <${Fact} label="Parked">${ms(t.parked_ms)}<//>
    </dl></section>
  </div>
  <section class="card"><h2>Steps <small class="muted">(UTC)</small></h2>
    <div class="table-wrap"><table id="timeline-steps">
      <thead><tr><th>Time</th><th>Step</th><th>Worker</th><th>Detail</th></tr></thead>
      <tbody>${job.steps.map((s, i) => html`<tr key=${i} data-step=${s.type}>
        <td><code>${utcClock(s.at)}</code></td><td>${STEP_WORDS[s.type] || s.type}</td>
        <td>${s.worker ? html`<code>${s.worker}</code>` : "—"}</td>
        <td class="muted">${Object.entries(s.detail).filter(([, v]) => v !== null)
          .map(([k, v]) => `${k}=${v}`).join(" ")}</td></tr>`)}</tbody></table></div>
    <p class="hint">In the logs: <code>fairway logs --job ${job.id}</code></p>
  </section>`;
}

function LineTable({ id, lines, columns }) {
  if (!lines.length) return html`<p class="muted" id=${id}>None.</p>`;
  return html`<div class="table-wrap"><table id=${id}>
    <thead><tr><th>Line</th><th>custom_id</th><th>Job</th>${columns.map(([, h]) => html`<th>${h}</th>`)}</tr></thead>
    <tbody>${lines.map((l) => html`<tr key=${l.job_id} data-custom-id=${l.custom_id}>
      <td>${l.line_no}</td><td><code>${l.custom_id}</code></td>
      <td><a href=${exploreHref(l.job_id)}><code>${l.job_id.slice(0, 16)}…</code></a></td>
      ${columns.map(([k]) => html`<td>${k === "run_ms" ? ms(l[k]) : (l[k] ?? "—")}</td>`)}</tr>`)}</tbody>
  </table></div>`;
}

function BatchView({ batch }) {
  const c = batch.request_counts;
  const when = (s) => (s ? new Date(s * 1000).toISOString().replace("T", " ").slice(0, 19) : "—");
  return html`<section class="card" id="explore-batch" data-batch=${batch.id}>
    <div class="title-row"><h2><code>${batch.id}</code></h2>
      <span class=${`badge status-${batch.status}`} id="batch-status">${batch.status.replace("_", " ")}</span></div>
    <dl class="facts" id="batch-facts">
      <${Fact} label="Tenant" id="fact-tenant"><a href=${href(`tenants/${batch.tenant.id}`)}>${
        batch.tenant.name || batch.tenant.id}</a> <span class="badge">${batch.tenant.plan || "—"}</span><//>
      <${Fact} label="Model">${batch.model || "—"} · ${batch.endpoint} · ${batch.completion_window}<//>
      <${Fact} label="Lines" id="fact-counts">${`${fmt(c.total)}: ${fmt(c.completed)} completed, ${
        fmt(c.failed)} failed, ${fmt(c.cancelled || 0)} cancelled`}<//>
      <${Fact} label="Created">${when(batch.created_at)} UTC<//>
      <${Fact} label="Ended">${when(batch.completed_at || batch.failed_at || batch.expired_at
        || batch.cancelled_at)} UTC<//>
    </dl>
  </section>
  <div class="grid2">
    <section class="card"><h2>Files</h2><div class="table-wrap"><table id="batch-files">
      <thead><tr><th>File</th><th>Id</th><th>Name</th><th>Size</th><th>Lines</th></tr></thead>
      <tbody>${batch.files.map((f) => html`<tr key=${f.id} data-role=${f.role}><td>${f.role}</td>
        <td><code>${f.id}</code></td><td>${f.filename || "—"}</td>
        <td>${f.bytes === null ? "—" : `${fmt(f.bytes)} B`}</td><td>${fmt(f.lines)}</td></tr>`)}</tbody>
    </table></div></section>
    <section class="card"><h2>Lines by status</h2><table id="batch-lines">
      <tbody>${Object.entries(batch.lines_by_status).map(([k, n]) => html`<tr key=${k}
        data-status=${k}><td>${k}</td><td>${fmt(n)}</td></tr>`)}</tbody></table></section>
  </div>
  <section class="card"><h2>Slowest lines</h2>
    <${LineTable} id="slowest-lines" lines=${batch.slowest_lines}
      columns=${[["run_ms", "Ran"], ["status", "Status"], ["completion_tokens", "Tokens"], ["worker_id", "Worker"]]} /></section>
  <section class="card"><h2>Failed lines</h2>
    <${LineTable} id="failed-lines" lines=${batch.failed_lines}
      columns=${[["code", "Code"], ["message", "Message"]]} /></section>`;
}
