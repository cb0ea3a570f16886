// A tenant's webhook endpoints (docs/webhooks.md): list with each one's last delivery, add
// (URL and event types; the signing secret shown once with a copy button), enable/disable,
// rotate the secret and delete (each confirmed), and a delivery log with redeliver.
import { html, useState } from "../lib.js";
import { ApiError, api, qs } from "../api.js";
import { useResource } from "../hooks.js";
import { Empty, Field, Loaded, attempt, confirmAction, serverErrors, when } from "../ui.js";

// The event types come from the API's own schema (the WebhookCreate body's enum), so the
// list lives once, in the server code. Loaded once per page load.
let eventTypesOnce = null;
function loadEventTypes() {
  eventTypesOnce = eventTypesOnce || api("GET", "/openapi.json").then((doc) => {
    const types = doc.components.schemas.WebhookCreate.properties.event_types.items.enum;
    if (!Array.isArray(types) || !types.length) throw new Error("The API lists no webhook event types.");
    return types;
  }).catch((err) => { eventTypesOnce = null; throw err; });
  return eventTypesOnce;
}

const base = (tenantId) => `/admin/tenants/${tenantId}/webhooks`;
const TONE = { delivered: "good", failed: "bad", pending: "" };

function NewSecret({ secret, url, onDone }) {
  const [copied, setCopied] = useState("");
  const copy = async () => {
    try { await navigator.clipboard.writeText(secret); setCopied("Copied."); }
    catch (err) { setCopied("Copy is not allowed here: select the secret and copy it."); }
  };
  return html`<div class="newkey" role="region" aria-label="new signing secret">
    <p><strong>Signing secret for <code>${url}</code>: copy it now.</strong> It is shown only this
      once; the receiver verifies each delivery's signature with it.</p>
    <div class="copy-row"><input id="new-webhook-secret" readonly value=${secret}
        onFocus=${(e) => e.target.select()} aria-label="new signing secret" />
      <button type="button" id="copy-webhook-secret" onClick=${copy}>Copy</button>
      <button type="button" onClick=${onDone}>Done</button></div>
    ${copied && html`<small>${copied}</small>`}
  </div>`;
}

function AddEndpoint({ tenantId, types, onAdded }) {
  const [url, setUrl] = useState("");
  const [chosen, setChosen] = useState(() => new Set(types));
  const [errors, setErrors] = useState({});
  const toggle = (t) => {
    const next = new Set(chosen);
    if (next.has(t)) next.delete(t); else next.add(t);
    setChosen(next);
    setErrors({ ...errors, event_types: undefined });
  };
  const add = async (e) => {
    e.preventDefault();
    // Only what the page can know for sure; the server judges the URL (its error comes back
    // next to the field).
    const found = {};
    if (!url.trim()) found.url = "The URL deliveries are POSTed to.";
    if (!chosen.size) found.event_types = "Choose at least one event type.";
    setErrors(found);
    if (Object.keys(found).length) return;
    const body = { url: url.trim(), event_types: types.filter((t) => chosen.has(t)) };
    const r = await attempt(() => api("POST", base(tenantId), body), "Webhook endpoint added",
      { inForm: true });
    if (r.ok) { setUrl(""); onAdded(r.out); }
    else if (r.err instanceof ApiError) setErrors(serverErrors(r.err, ["url", "event_types"]));
  };
  return html`<form id="add-webhook" onSubmit=${add} noValidate>
    <${Field} label="Endpoint URL" name="webhook-url" error=${errors.url}>
      <input id="f-webhook-url" type="url" value=${url} placeholder="https://example.com/fairway-hooks"
        aria-invalid=${!!errors.url} aria-describedby=${errors.url ? "err-webhook-url" : undefined}
        onInput=${(e) => { setUrl(e.target.value); setErrors({ ...errors, url: undefined }); }} /></${Field}>
    <fieldset class=${errors.event_types ? "invalid" : ""} id="webhook-events"><legend>Events</legend>
      ${types.map((t) => html`<label class="check" key=${t}><input type="checkbox" name="event_types"
        value=${t} checked=${chosen.has(t)} onChange=${() => toggle(t)} /> ${t}</label>`)}
      ${errors.event_types && html`<p class="field-error" id="err-webhook-events" role="alert">${errors.event_types}</p>`}
    </fieldset>
    ${errors._form && html`<p class="field-error" role="alert">${errors._form}</p>`}
    <button type="submit" class="primary">Add endpoint</button>
  </form>`;
}

function LastDelivery({ d }) {
  if (!d) return html`<span class="muted">none yet</span>`;
  return html`<span class=${`badge ${TONE[d.status] || ""}`}>${d.status}</span>
    <small class="muted">${` ${when(d.last_attempt_at || d.created_at)}`}</small>`;
}

export function Webhooks({ tenant }) {
  const [secret, setSecret] = useState(null); // {secret, url}: shown once
  const [open, setOpen] = useState(null); // the endpoint whose delivery log is shown
  const types = useResource(loadEventTypes, []);
  const res = useResource(async () => {
    const eps = (await api("GET", base(tenant.id))).data;
    // Each endpoint's newest delivery (at most 20 endpoints a tenant).
    const last = await Promise.all(eps.map((ep) =>
      api("GET", `${base(tenant.id)}/${ep.id}/deliveries${qs({ limit: 1 })}`)));
    return eps.map((ep, i) => ({ ...ep, last: last[i].data[0] || null }));
  }, [tenant.id]);

  const setEnabled = async (ep, enabled) => {
    const ok = await confirmAction(enabled
      ? { title: "Enable this endpoint?", action: "Enable",
        body: html`<p>Events from now on are delivered to <code>${ep.url}</code>.</p>` }
      : { title: "Disable this endpoint?", action: "Disable", danger: true,
        body: html`<p>No new events are delivered to <code>${ep.url}</code> while it is
          disabled; events in that time are not sent later.</p>` });
    if (!ok) return;
    await attempt(() => api("PATCH", `${base(tenant.id)}/${ep.id}`, { enabled }),
      enabled ? "Endpoint enabled" : "Endpoint disabled");
    res.reload();
  };
  const rotate = async (ep) => {
    if (!await confirmAction({ title: "Rotate the signing secret?", action: "Rotate secret",
      danger: true, body: html`<p>A new secret signs deliveries to <code>${ep.url}</code> from
        now on; the old one also signs them for 24 hours, so the receiver can switch.</p>` })) return;
    const r = await attempt(() => api("POST", `${base(tenant.id)}/${ep.id}/rotate_secret`, {}),
      "Secret rotated");
    if (r.ok) setSecret({ secret: r.out.secret, url: ep.url });
    res.reload();
  };
  const remove = async (ep) => {
    if (!await confirmAction({ title: "Delete this endpoint?", action: "Delete endpoint",
      danger: true, body: html`<p><code>${ep.url}</code> and its delivery log are deleted;
        pending deliveries are not sent. This cannot be undone.</p>` })) return;
    const r = await attempt(() => api("DELETE", `${base(tenant.id)}/${ep.id}`), "Endpoint deleted");
    if (r.ok && open === ep.id) setOpen(null);
    res.reload();
  };

  return html`<section class="card" aria-labelledby="webhooks-h" id="webhooks-section">
    <h2 id="webhooks-h">Webhooks</h2>
    ${secret && html`<${NewSecret} secret=${secret.secret} url=${secret.url} onDone=${() => setSecret(null)} />`}
    <${Loaded} res=${types} what="event types">${(list) => html`<${AddEndpoint}
      tenantId=${tenant.id} types=${list}
      onAdded=${(made) => { setSecret({ secret: made.secret, url: made.url }); res.reload(); }} />`}</${Loaded}>
    <${Loaded} res=${res} what="webhook endpoints">${(eps) => (eps.length === 0
      ? html`<${Empty}>No webhook endpoints: add one above.</${Empty}>`
      : html`<div class="table-wrap"><table id="webhooks">
        <thead><tr><th>URL</th><th>Events</th><th>Status</th><th>Last delivery</th>
          <th><span class="sr-only">Actions</span></th></tr></thead>
        <tbody>${eps.map((ep) => html`<tr key=${ep.id} data-webhook=${ep.url}>
          <td><code>${ep.url}</code><br /><small class="muted">secret ${ep.secret_hint}</small></td>
          <td>${ep.event_types.join(", ")}</td>
          <td><span class=${`badge ${ep.enabled ? "good" : "bad"}`}>${ep.enabled ? "enabled" : "disabled"}</span></td>
          <td><${LastDelivery} d=${ep.last} /></td>
          <td><div class="row-actions">
            <button type="button" class="small" aria-pressed=${open === ep.id}
              onClick=${() => setOpen(open === ep.id ? null : ep.id)}>Deliveries</button>
            <button type="button" class=${`small${ep.enabled ? " danger" : ""}`}
              onClick=${() => setEnabled(ep, !ep.enabled)}>${ep.enabled ? "Disable" : "Enable"}</button>
            <button type="button" class="small" onClick=${() => rotate(ep)}>Rotate secret</button>
            <button type="button" class="small danger" onClick=${() => remove(ep)}>Delete</button>
          </div></td></tr>`)}</tbody></table></div>`)}</${Loaded}>
    ${open && res.data && res.data.some((ep) => ep.id === open) && html`<${Deliveries}
      key=${open} tenantId=${tenant.id} ep=${res.data.find((ep) => ep.id === open)}
      onChange=${res.reload} />`}
  </section>`;
}

// Newest first; "Older" pages by the last id shown (the API's `before`), "Newer" goes back.
function Deliveries({ tenantId, ep, onChange }) {
  const [status, setStatus] = useState("");
  const [cursors, setCursors] = useState([]); // the `before` of each page opened after the first
  const before = cursors.length ? cursors[cursors.length - 1] : undefined;
  const res = useResource(() => api("GET", `${base(tenantId)}/${ep.id}/deliveries${qs({
    limit: 20, status, before })}`), [tenantId, ep.id, status, before], { pollMs: 3000 });
  const redeliver = async (d) => {
    const r = await attempt(() => api("POST",
      `${base(tenantId)}/${ep.id}/deliveries/${d.id}/redeliver`), `Delivery ${d.id} queued again`);
    if (r.ok) { res.reload(); onChange(); }
  };
  return html`<div class="deliveries" id="webhook-deliveries" role="region"
      aria-label=${`deliveries to ${ep.url}`}>
    <div class="page-head"><h3>Deliveries to <code>${ep.url}</code></h3>
      <label class="inline">Status <select id="delivery-status" value=${status}
        onChange=${(e) => { setStatus(e.target.value); setCursors([]); }}>
        ${[["", "all"], ["pending", "pending"], ["delivered", "delivered"], ["failed", "failed"]]
          .map(([v, l]) => html`<option value=${v}>${l}</option>`)}</select></label></div>
    <${Loaded} res=${res} what="deliveries">${(page) => (page.data.length === 0
      ? html`<${Empty}>${status ? `No ${status} deliveries.` : "No deliveries yet."}</${Empty}>`
      : html`<div class="table-wrap"><table id="deliveries">
        <thead><tr><th>Event</th><th class="wide-only">Created</th><th>Status</th><th>Attempts</th>
          <th>Last response</th><th>Next retry</th><th><span class="sr-only">Actions</span></th></tr></thead>
        <tbody>${page.data.map((d) => html`<tr key=${d.id} data-delivery=${d.id}>
          <td>${d.event_type}<br /><small class="muted"><code>${(d.event_data && d.event_data.id) || d.event_id}</code></small></td>
          <td class="wide-only">${when(d.created_at)}</td>
          <td><span class=${`badge ${TONE[d.status] || ""}`}>${d.status}</span></td>
          <td>${d.attempts}</td>
          <td>${d.last_status_code ? `HTTP ${d.last_status_code}` : ""}${
            d.last_error ? html`${d.last_status_code ? " · " : ""}<small class="muted">${d.last_error}</small>` : ""}${
            !d.last_status_code && !d.last_error ? "—" : ""}</td>
          <td>${d.next_attempt_at ? when(d.next_attempt_at) : "—"}</td>
          <td>${d.status !== "pending" && html`<button type="button" class="small"
            onClick=${() => redeliver(d)}>Redeliver</button>`}</td></tr>`)}</tbody></table></div>`)}</${Loaded}>
    <nav class="pager" aria-label="delivery pages">
      <button type="button" disabled=${!cursors.length} onClick=${() => setCursors(cursors.slice(0, -1))}>‹ Newer</button>
      <button type="button" disabled=${!(res.data && res.data.has_more)}
        onClick=${() => setCursors([...cursors, res.data.data[res.data.data.length - 1].id])}>Older ›</button>
    </nav>
  </div>`;
}
