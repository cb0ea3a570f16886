// Batches of every tenant: status filter, progress, pages, cancel (confirmed).
import { html } from "../lib.js";
import { api, qs } from "../api.js";
import { href, navigate, useResource } from "../hooks.js";
import { Empty, Loaded, Pager, Progress, attempt, confirmAction, when } from "../ui.js";

const LIMIT = 25;
const STATUSES = ["open", "validating", "in_progress", "finalizing", "cancelling", "completed",
  "failed", "expired", "cancelled"];
const CANCELLABLE = new Set(["validating", "in_progress"]);

// Why a batch is still `cancelling`: the lines its workers have not stopped yet, then the
// result files being written (the dispatcher's next maintenance step).
function cancellingWhy(c) {
  const open = c.total - c.completed - c.failed - (c.cancelled || 0);
  return open > 0 ? `waiting for ${open} running line${open === 1 ? "" : "s"} to stop`
    : "writing the result files";
}

export function Batches({ params }) {
  const status = params.status || "";
  const tenant = params.tenant || "";
  const offset = Number(params.offset || 0);
  const res = useResource(() => api("GET", `/admin/batches${qs({ status, tenant_id: tenant,
    limit: LIMIT, offset })}`), [status, tenant, offset], { pollMs: 10000 });
  const go = (next) => navigate("batches", { status, tenant, ...next });
  const cancel = async (b) => {
    if (!await confirmAction({ title: `Cancel batch for ${b.tenant}?`, action: "Cancel batch",
      danger: true, body: html`<p><code>${b.id}</code>: its unfinished lines stop now (running
        ones are aborted on their workers), and the tenant gets the results of the lines that
        had finished.</p>` })) return;
    await attempt(() => api("POST", `/admin/batches/${b.id}/cancel`), "Batch cancelling");
    res.reload();
  };
  return html`<div class="page" id="page-batches">
    <div class="page-head"><h1>Batches</h1>
      <label class="inline">Status <select id="batch-status" value=${status}
          onChange=${(e) => go({ status: e.target.value, offset: 0 })}>
        <option value="">All</option>
        ${STATUSES.map((s) => html`<option value=${s}>${s.replace("_", " ")}</option>`)}</select></label>
      ${tenant && html`<span class="chip">one tenant <a href=${href("batches", { status })} aria-label="show all tenants">×</a></span>`}
    </div>
    <section class="card">
      <${Loaded} res=${res} what="batches">${(d) => (d.data.length === 0
        ? html`<${Empty}>${status || tenant ? "No batch matches these filters." : "No batches yet."}</${Empty}>`
        : html`<div class="table-wrap"><table id="batches">
          <thead><tr><th>Tenant</th><th>Batch</th><th>Model</th><th>Status</th><th>Progress</th>
            <th>Created</th><th></th></tr></thead>
          <tbody>${d.data.map((b) => html`<tr key=${b.id} data-batch=${b.id}>
            <td><a href=${href(`tenants/${b.tenant_id}`)}>${b.tenant}</a></td>
            <td><a href=${href(`explore/${b.id}`)} title=${`${b.id}: files, lines, slowest and failed lines`}><code>${
              b.id.slice(0, 14)}…</code></a></td><td>${b.model || "—"}</td>
            <td><span class=${`badge status-${b.status}`}>${b.status.replace("_", " ")}</span>
              ${b.status === "cancelling" && html`<small class="hint" data-why="cancelling"><br />${
                cancellingWhy(b.request_counts)}</small>`}</td>
            <td><${Progress} done=${b.request_counts.completed} failed=${b.request_counts.failed}
              total=${b.request_counts.total} /></td>
            <td>${when(new Date(b.created_at * 1000).toISOString())}</td>
            <td>${CANCELLABLE.has(b.status) && html`<button type="button" class="danger small"
              onClick=${() => cancel(b)}>Cancel</button>`}</td></tr>`)}</tbody></table></div>
          <${Pager} total=${d.total} limit=${LIMIT} offset=${offset} onPage=${(o) => go({ offset: o })} />`)}
      </${Loaded}>
    </section>
  </div>`;
}
