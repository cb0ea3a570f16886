// One tenant: status and plan (confirmed), quotas as a form, keys (issue with name and expiry,
// the secret shown once with a copy button, revoke, per-key usage), webhooks (pages/webhooks.js),
// usage charts, delete.
import { html, useState } from "../lib.js";
import { ApiError, api, qs } from "../api.js";
import { href, navigate, useResource } from "../hooks.js";
import { Empty, Field, Loaded, attempt, confirmAction, fmt, serverErrors, when } from "../ui.js";
import { QUOTA_FIELDS, checkQuota, showQuota, usageNow } from "../quotas.js";
import { UsageCharts } from "./usage.js";
import { Webhooks } from "./webhooks.js";
import { TenantSpend } from "./tenant_spend.js";

// A tenant created from the list arrives with its first key: shown here once, then dropped.
const newKeys = new Map();
export function stashNewKey(tenantId, key) { if (key) newKeys.set(tenantId, key); }

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

function NewKey({ secret, onDone }) {
  const [copied, setCopied] = useState("");
  const copy = async () => {
    try { await navigator.clipboard.writeText(secret); setCopied("Copied."); }
    catch (err) { setCopied("Copy is not allowed here: select the key and copy it."); }
  };
  return html`<div class="newkey" role="region" aria-label="new key">
    <p><strong>New key: copy it now.</strong> It is shown only this once; Fairway keeps only its hash.</p>
    <div class="copy-row"><input id="new-key-secret" readonly value=${secret}
        onFocus=${(e) => e.target.select()} aria-label="new key" />
      <button type="button" id="copy-key" onClick=${copy}>Copy</button>
      <button type="button" onClick=${onDone}>Done</button></div>
    ${copied && html`<small>${copied}</small>`}
  </div>`;
}

function Keys({ tenant }) {
  const [secret, setSecret] = useState(newKeys.get(tenant.id) || "");
  newKeys.delete(tenant.id);
  const [name, setName] = useState("");
  const [expires, setExpires] = useState("");
  const [errors, setErrors] = useState({});
  const res = useResource(async () => {
    const [keys, usage] = await Promise.all([api("GET", `/admin/tenants/${tenant.id}/keys`),
      api("GET", `/admin/usage/keys${qs({ tenant_id: tenant.id, days: 30 })}`)]);
    const byKey = Object.fromEntries(usage.data.map((u) => [u.key_id, u]));
    return keys.data.map((k) => ({ ...k, usage: byKey[k.id] || null }));
  }, [tenant.id]);
  const issue = async (e) => {
    e.preventDefault();
    const found = {};
    if (!name.trim()) found.name = "Give the key a name (who or what uses it).";
    let expiresAt = null;
    if (expires) {
      const at = new Date(expires);
      if (Number.isNaN(at.getTime())) found.expires_at = "Not a date.";
      else if (at <= new Date()) found.expires_at = "Must be in the future.";
      else expiresAt = at.toISOString();
    }
    setErrors(found);
    if (Object.keys(found).length) return;
    const r = await attempt(() => api("POST", `/admin/tenants/${tenant.id}/keys`,
      { name: name.trim(), expires_at: expiresAt }), `Key ${name.trim()} issued`, { inForm: true });
    if (r.ok) { setSecret(r.out.key); setName(""); setExpires(""); res.reload(); }
    else if (r.err instanceof ApiError) setErrors(serverErrors(r.err, ["name", "expires_at"]));
  };
  const revoke = async (k) => {
    if (!await confirmAction({ title: `Revoke key ${k.name}?`, action: "Revoke", danger: true,
      body: html`<p>Requests with <code>${k.prefix}…</code> are refused from now on. This cannot be undone.</p>` })) return;
    await attempt(() => api("DELETE", `/admin/tenants/${tenant.id}/keys/${k.id}`), `Key ${k.name} revoked`);
    res.reload();
  };
  const status = (k) => (k.revoked_at ? ["revoked", "bad"]
    : k.expires_at && new Date(k.expires_at) <= new Date() ? ["expired", "bad"] : ["live", "good"]);
  return html`<section class="card" aria-labelledby="keys-h"><h2 id="keys-h">API keys</h2>
    ${secret && html`<${NewKey} secret=${secret} onDone=${() => setSecret("")} />`}
    <form class="inline-form" id="issue-key" onSubmit=${issue} noValidate>
      <${Field} label="Key name" name="key-name" error=${errors.name}>
        <input id="f-key-name" value=${name} placeholder="e.g. production" aria-invalid=${!!errors.name}
          onInput=${(e) => setName(e.target.value)} /></${Field}>
      <${Field} label="Expires (optional)" name="key-expires" error=${errors.expires_at}>
        <input id="f-key-expires" type="datetime-local" value=${expires}
          onInput=${(e) => setExpires(e.target.value)} /></${Field}>
      <button type="submit" class="primary">Issue key</button>
      ${errors._form && html`<p class="field-error">${errors._form}</p>`}
    </form>
    <${Loaded} res=${res} what="keys">${(keys) => (keys.length === 0
      ? html`<${Empty}>No keys: issue one above.</${Empty}>`
      : html`<div class="table-wrap"><table id="keys">
        <thead><tr><th>Name</th><th>Key</th><th class="wide-only">Created</th><th>Last used</th><th>Expires</th>
          <th>Status</th><th>Requests (30 d)</th><th>Tokens in / out</th><th><span class="sr-only">Actions</span></th></tr></thead>
        <tbody>${keys.map((k) => { const [s, tone] = status(k); return html`<tr key=${k.id} data-key=${k.name}>
          <td>${k.name}</td><td><code>${k.prefix}…</code></td><td class="wide-only">${when(k.created_at)}</td>
          <td>${when(k.last_used_at)}</td><td>${k.expires_at ? when(k.expires_at) : "never"}</td>
          <td><span class=${`badge ${tone}`}>${s}</span></td>
          <td>${fmt(k.usage ? k.usage.requests : 0)}</td>
          <td>${fmt(k.usage ? k.usage.prompt_tokens : 0)} / ${fmt(k.usage ? k.usage.completion_tokens : 0)}</td>
          <td>${!k.revoked_at && html`<button type="button" class="danger small"
            onClick=${() => revoke(k)}>Revoke</button>`}</td></tr>`; })}
        </tbody></table></div>`)}</${Loaded}>
  </section>`;
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
      <${Keys} tenant=${t} />
      <${Quotas} tenantId=${t.id} />
      <${Webhooks} tenant=${t} />
      <${TenantSpend} tenant=${t} />
      <${UsageCharts} tenantId=${t.id} />`}</${Loaded}>
  </div>`;
}
