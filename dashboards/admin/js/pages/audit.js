// The audit log: who changed what, with tenant and key names; filters and pages.
import { html, useState } from "../lib.js";
import { api, qs } from "../api.js";
import { href, navigate, useResource } from "../hooks.js";
import { Empty, Loaded, Pager, when } from "../ui.js";

const LIMIT = 25;
// A plan's changes are logged as tier.* (the actions keep the name the admin API gives plans).
const ACTIONS = [["", "All actions"], ["tenant.", "Tenants"], ["key.", "Keys"],
  ["quota.", "Quotas"], ["tier.", "Plans"], ["batch.", "Batches"]];

function Details({ e }) {
  const d = { ...e.details };
  delete d.key_id;
  const text = Object.entries(d).map(([k, v]) => `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`)
    .join(" · ");
  return html`<span class="details" title=${text}>${text || "—"}</span>`;
}

export function Audit({ params }) {
  const action = params.action || "";
  const actor = params.actor || "";
  const target = params.target || "";
  const offset = Number(params.offset || 0);
  const [draftActor, setDraftActor] = useState(actor);
  const res = useResource(() => api("GET", `/admin/audit${qs({ action, actor, target_id: target,
    limit: LIMIT, offset })}`), [action, actor, target, offset]);
  const go = (next) => navigate("audit", { action, actor, target, ...next });
  return html`<div class="page" id="page-audit">
    <div class="page-head"><h1>Audit log</h1></div>
    <section class="card">
      <form class="filters" onSubmit=${(e) => { e.preventDefault(); go({ actor: draftActor, offset: 0 }); }}>
        <select id="audit-action" aria-label="Action" value=${action}
          onChange=${(e) => go({ action: e.target.value, offset: 0 })}>
          ${ACTIONS.map(([v, l]) => html`<option value=${v}>${l}</option>`)}</select>
        <input type="search" id="audit-actor" placeholder="Actor (e.g. admin:dashboard)" value=${draftActor}
          aria-label="Actor" onInput=${(e) => setDraftActor(e.target.value)} />
        <button type="submit">Filter</button>
        ${target && html`<span class="chip">${(res.data && res.data.data[0] && res.data.data[0].target_name) || "one target"}
          <a href=${href("audit", { action, actor })} aria-label="all targets">×</a></span>`}
      </form>
      <${Loaded} res=${res} what="the audit log">${(d) => (d.data.length === 0
        ? html`<${Empty}>No audit entries${action || actor || target ? " match these filters" : " yet"}.</${Empty}>`
        : html`<div class="table-wrap"><table id="audit">
          <thead><tr><th>When</th><th>Who</th><th>What</th><th>Target</th><th>Key</th><th>Details</th></tr></thead>
          <tbody>${d.data.map((e) => html`<tr key=${e.id}>
            <td>${when(e.at)}</td><td>${e.actor}</td><td><code>${e.action}</code></td>
            <td>${e.target_type === "tenant"
              ? html`<a href=${href(`tenants/${e.target_id}`)}>${e.target_name || `(deleted) ${e.target_id.slice(0, 8)}`}</a>`
              : html`${e.target_type} ${e.target_name || e.target_id}`}</td>
            <td>${e.key_name || ""}</td><td><${Details} e=${e} /></td></tr>`)}</tbody></table></div>
          <${Pager} total=${d.total} limit=${LIMIT} offset=${offset} onPage=${(o) => go({ offset: o })} />`)}
      </${Loaded}>
    </section>
  </div>`;
}
