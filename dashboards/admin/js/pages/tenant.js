// One tenant: status and plan (confirmed), quotas as a form, keys and their policy
// (pages/tenant_keys.js), webhooks (pages/webhooks.js), LoRA adapters
// (pages/tenant_adapters.js), usage charts, delete.
import { html, useState } from "../lib.js";
import { ApiError, api } from "../api.js";
import { href, navigate, useResource } from "../hooks.js";
import { Empty, Field, Loaded, attempt, confirmAction, serverErrors, when } from "../ui.js";
import { QUOTA_FIELDS, checkQuota, showQuota, usageNow } from "../quotas.js";
import { UsageCharts } from "./usage.js";
import { Keys } from "./tenant_keys.js";
import { Webhooks } from "./webhooks.js";
import { TenantSpend } from "./tenant_spend.js";
import { Adapters } from "./tenant_adapters.js";

// A tenant created from the list arrives with its first key: shown here once, then dropped.
const newKeys = new Map();
export function stashNewKey(tenantId, key) { if (key) newKeys.set(tenantId, key); }
const takeNewKey = (tenantId) => { const key = newKeys.get(tenantId) || ""; newKeys.delete(tenantId); return key; };

function Header({ tenant, plans, reload }) {
  // The API names the tenant's plan "tier".
  const [plan, setPlan] = useState(tenant.tier);
  const patch = (body, text) => attempt(() => api("PATCH", `/admin/tenants/${tenant.id}`, body), text)
    .then(reload);
  const changePlan = async () => {
    if (plan === tenant.tier) return;
    const to = plans.find((p) => p.name === plan);
    if (!await confirmAction({ title: `Move ${tenant.name} to ${plan}?`, action: "Change plan",
      body: html`<p>Its quotas, SLO targets and fair-share weight (now ${tenant.weight},
        then ${to ? to.weight : "?"}) change at once for new requests.</p>` })) { setPlan(tenant.tier); return; }
    await patch({ tier: plan }, `${tenant.name} is now on ${plan}`);
  };
  const toggle = async () => {
    const suspend = !tenant.suspended;
    const ok = await confirmAction(suspend
      ? { title: `Suspend ${tenant.name}?`, action: "Suspend", danger: true,
        body: html`<p>Its keys stop working at once, its queued requests and open batches are
          cancelled. Requests already running finish.</p>` }
      : { title: `Resume ${tenant.name}?`, action: "Resume",
        body: html`<p>Its live keys work again from the next request.</p>` });
    if (ok) await patch({ suspended: suspend }, suspend ? `${tenant.name} suspended` : `${tenant.name} resumed`);
  };
  const remove = async () => {
    if (!await confirmAction({ title: `Delete ${tenant.name}?`, action: "Delete tenant", danger: true,
      typed: tenant.name,
      body: html`<p>The tenant, its keys, jobs, batches, files and usage are deleted for good.
        This cannot be undone.</p>` })) return;
    const r = await attempt(() => api("DELETE", `/admin/tenants/${tenant.id}`), `${tenant.name} deleted`);
    if (r.ok) navigate("tenants");
  };
  return html`<section class="card tenant-head">
    <div class="title-row">
      <h1 id="tenant-name">${tenant.name}</h1>
      <span class="badge">${tenant.tier}</span>
      <span class=${`badge ${tenant.suspended ? "bad" : "good"}`} id="tenant-status">
        ${tenant.suspended ? "suspended" : "active"}</span>
    </div>
    <p class="muted">${`Created ${when(tenant.created_at)} · weight ${tenant.weight}`}${
      tenant.suspended ? ` · suspended ${when(tenant.suspended_at)}` : ""}${" · "}<a
      href=${href("audit", { target: tenant.id })}>audit</a>${" · "}<a
      href=${href("batches", { tenant: tenant.id })}>batches</a></p>
    <div class="actions">
      <label class="inline">Plan <select id="tenant-plan" value=${plan} onChange=${(e) => setPlan(e.target.value)}>
        ${plans.map((p) => html`<option value=${p.name}>${p.name}</option>`)}</select></label>
      <button type="button" id="change-plan" disabled=${plan === tenant.tier} onClick=${changePlan}>Change plan</button>
      <button type="button" id="toggle-suspend" class=${tenant.suspended ? "" : "danger"} onClick=${toggle}>
        ${tenant.suspended ? "Resume" : "Suspend"}</button>
      <button type="button" id="delete-tenant" class="danger" onClick=${remove}>Delete</button>
    </div>
  </section>`;
}

function Quotas({ tenantId }) {
  // Polled: the "Now" column shows the rate limits' live state.
  const res = useResource(() => api("GET", `/admin/tenants/${tenantId}/quotas`), [tenantId],
    { pollMs: 5000 });
  return html`<section class="card" aria-labelledby="quotas-h"><h2 id="quotas-h">Quotas</h2>
    <${Loaded} res=${res} what="quotas">${(q) => html`<${QuotaForm} key=${JSON.stringify(q.overrides)}
      q=${q} tenantId=${tenantId} reload=${res.reload} />`}</${Loaded}></section>`;
}

function QuotaForm({ q, tenantId, reload }) {
  const initial = Object.fromEntries(QUOTA_FIELDS.map(([f]) => [f,
    f in q.overrides && q.overrides[f] !== null ? String(q.overrides[f]) : ""]));
  const [values, setValues] = useState(initial);
  const [errors, setErrors] = useState({});
  const save = async (e) => {
    e.preventDefault();
    const overrides = {};
    const found = {};
    for (const [f] of QUOTA_FIELDS) {
      const checked = checkQuota(f, values[f]);
      if (checked.error) found[f] = checked.error;
      else if (checked.set) overrides[f] = checked.value;
    }
    setErrors(found);
    if (Object.keys(found).length) return;
    // It changes what the tenant may do from its next request: confirmed, with what changes.
    const changed = QUOTA_FIELDS.filter(([f]) => values[f] !== initial[f]);
    if (!await confirmAction({ title: "Save these quotas?", action: "Save quotas",
      body: html`<p>The tenant's limits change at once, for its next requests.</p>${changed.length
        ? html`<ul>${changed.map(([f, label]) => html`<li key=${f}>${
          `${label}: ${initial[f] || "inherit"} → ${values[f].trim() || "inherit"}`}</li>`)}</ul>`
        : html`<p>No field changed.</p>`}` })) return;
    const r = await attempt(() => api("PUT", `/admin/tenants/${tenantId}/quotas`, { overrides }),
      "Quotas saved", { inForm: true });
    if (r.ok) reload();
    else if (r.err instanceof ApiError) setErrors(serverErrors(r.err, QUOTA_FIELDS.map(([f]) => f)));
  };
  return html`<form id="quota-form" onSubmit=${save} noValidate>
    <p class="hint">Empty inherits the plan default; <code>unlimited</code> lifts the limit.</p>
    <div class="table-wrap"><table id="quota-table">
      <thead><tr><th>Limit</th><th>Plan default</th><th>Override</th><th>Effective</th><th>Now</th></tr></thead>
      <tbody>${QUOTA_FIELDS.map(([f, label]) => html`<tr key=${f}>
        <td>${label}</td><td>${showQuota(q.tier_defaults[f])}</td>
        <td><${Field} label="" name=${f} error=${errors[f]}>
          <input id=${`f-${f}`} name=${f} inputmode="numeric" placeholder="inherit" value=${values[f]}
            aria-label=${`${label} override`} aria-invalid=${!!errors[f]}
            aria-describedby=${errors[f] ? `err-${f}` : undefined}
            onInput=${(e) => { setValues({ ...values, [f]: e.target.value }); setErrors({ ...errors, [f]: undefined }); }} />
        </${Field}></td>
        <td>${showQuota(q.effective[f])}</td>
        <td><${UsageGauge} now=${usageNow(f, q)} alert=${f === "monthly_alert_percent" && q.live?.monthly_alert} /></td>
      </tr>`)}</tbody></table></div>
    ${errors._form && html`<p class="field-error" role="alert">${errors._form}</p>`}
    <button type="submit" id="save-quotas" class="primary">Save quotas</button>
  </form>`;
}

function UsageGauge({ now, alert }) {
  if (alert) return html`<span class="badge warn">alert reached</span>`;
  if (!now) return "—";
  if (now.limit === null) return html`<span class="hint">${now.used.toLocaleString("en-US")} used</span>`;
  const p = now.limit > 0 ? Math.min(100, (100 * now.used) / now.limit) : 100;
  return html`<span class="meter quota-now" title=${`${now.used} of ${now.limit}`}>
    <span class=${p >= 90 ? "hot" : ""} style=${{ width: `${p}%` }}></span>
    <em>${now.used.toLocaleString("en-US")} / ${now.limit.toLocaleString("en-US")}</em></span>`;
}

export function Tenant({ id, plans }) {
  const res = useResource(() => api("GET", `/admin/tenants/${id}`), [id]);
  if (res.error instanceof ApiError && res.error.status === 404) {
    return html`<div class="page"><${Empty}>No such tenant (deleted?). <a href="#/tenants">All tenants</a></${Empty}></div>`;
  }
  return html`<div class="page" id="page-tenant">
    <p class="crumbs"><a href="#/tenants">Tenants</a> ›</p>
    <${Loaded} res=${res} what="the tenant">${(t) => html`
      <${Header} key=${`${t.tier}-${t.suspended}`} tenant=${t} plans=${plans} reload=${res.reload} />
      <${Keys} tenant=${t} initialSecret=${takeNewKey(t.id)} />
      <${Quotas} tenantId=${t.id} />
      <${Webhooks} tenant=${t} />
      <${TenantSpend} tenant=${t} />
      <${Adapters} tenant=${t} />
      <${UsageCharts} tenantId=${t.id} />`}</${Loaded}>
  </div>`;
}
