// A tenant's API keys: issue one (name, expiry and its own policy: limits within the
// tenant's, the models it may use), the secret shown once with a copy button, each key's
// policy shown and edited in place, revoke, per-key usage.
import { html, useState } from "../lib.js";
import { ApiError, api, qs } from "../api.js";
import { useResource } from "../hooks.js";
import { Empty, Field, Loaded, attempt, confirmAction, fmt, serverErrors, when } from "../ui.js";

// The key's own limits, as the admin API names them.
const LIMITS = [["requests_per_minute", "Requests / min", "rpm"],
  ["tokens_per_minute", "Tokens / min", "tpm"],
  ["concurrent_requests", "Concurrent", "concurrent"]];
const POLICY_FIELDS = [...LIMITS.map(([f]) => f), "allowed_models", "expires_at"];
const MAX_MODELS = 64;

// raw: what the admin typed. Empty: no limit of its own (the tenant's applies).
export function checkKeyLimit(raw) {
  const text = String(raw ?? "").trim().replace(/[_,]/g, "");
  if (text === "") return { value: null };
  if (!/^\d+$/.test(text) || Number(text) < 1) return { error: "A whole number, 1 or more; empty: the tenant's limit." };
  if (!Number.isSafeInteger(Number(text))) return { error: "Too large." };
  return { value: Number(text) };
}

// Comma-separated model names. Empty: every model.
export function checkModels(raw) {
  const names = [...new Set(String(raw ?? "").split(",").map((m) => m.trim()).filter(Boolean))];
  if (names.length === 0) return { value: null };
  if (names.length > MAX_MODELS) return { error: `At most ${MAX_MODELS} models.` };
  return { value: names };
}

function checkExpiry(raw) {
  if (!raw) return { value: null };
  const at = new Date(raw);
  if (Number.isNaN(at.getTime())) return { error: "Not a date." };
  if (at <= new Date()) return { error: "Must be in the future." };
  return { value: at.toISOString() };
}

// The policy form's values from what was typed, with an error per field.
function checkPolicy(values) {
  const body = {};
  const errors = {};
  for (const [f] of LIMITS) {
    const c = checkKeyLimit(values[f]);
    if (c.error) errors[f] = c.error; else body[f] = c.value;
  }
  for (const [f, check] of [["allowed_models", checkModels], ["expires_at", checkExpiry]]) {
    const c = check(values[f]);
    if (c.error) errors[f] = c.error; else body[f] = c.value;
  }
  return { body, errors };
}

// A datetime-local input's value for an ISO time, in the browser's zone.
const localInput = (iso) => {
  if (!iso) return "";
  const d = new Date(iso);
  return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16);
};

const formValues = (k) => ({
  ...Object.fromEntries(LIMITS.map(([f]) => [f, k && k[f] !== null && k[f] !== undefined ? String(k[f]) : ""])),
  allowed_models: k && k.allowed_models ? k.allowed_models.join(", ") : "",
  expires_at: k ? localInput(k.expires_at) : "",
});

export const policyText = (k) => {
  const parts = LIMITS.filter(([f]) => k[f] !== null && k[f] !== undefined)
    .map(([f, , short]) => `${short} ${fmt(k[f])}`);
  if (k.allowed_models) parts.push(`models: ${k.allowed_models.join(", ")}`);
  return parts.length ? parts.join(" · ") : "tenant's limits, every model";
};

// The policy inputs, shared by the issue form and a key's edit form (ids prefixed by `id`).
function PolicyInputs({ id, values, errors, onChange }) {
  const input = (f, label, props = {}) => html`<${Field} label=${label} name=${`${id}-${f}`} error=${errors[f]}>
    <input id=${`f-${id}-${f}`} name=${f} value=${values[f]} aria-invalid=${!!errors[f]}
      aria-describedby=${errors[f] ? `err-${id}-${f}` : undefined}
      onInput=${(e) => onChange(f, e.target.value)} ...${props} /></${Field}>`;
  return html`
    ${LIMITS.map(([f, label]) => input(f, label, { inputmode: "numeric", placeholder: "tenant's", class: "num" }))}
    ${input("allowed_models", "Models (comma-separated)", { placeholder: "every model" })}
    ${input("expires_at", "Expires", { type: "datetime-local" })}`;
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

function IssueForm({ tenant, onIssued }) {
  const [name, setName] = useState("");
  const [values, setValues] = useState(formValues(null));
  const [errors, setErrors] = useState({});
  const change = (f, v) => { setValues({ ...values, [f]: v }); setErrors({ ...errors, [f]: undefined }); };
  const issue = async (e) => {
    e.preventDefault();
    const { body, errors: found } = checkPolicy(values);
    if (!name.trim()) found.name = "Give the key a name (who or what uses it).";
    setErrors(found);
    if (Object.keys(found).length) return;
    const r = await attempt(() => api("POST", `/admin/tenants/${tenant.id}/keys`,
      { name: name.trim(), ...body }), `Key ${name.trim()} issued`, { inForm: true });
    if (r.ok) { setName(""); setValues(formValues(null)); onIssued(r.out.key); }
    else if (r.err instanceof ApiError) setErrors(serverErrors(r.err, ["name", ...POLICY_FIELDS]));
  };
  return html`<form class="inline-form key-policy" id="issue-key" onSubmit=${issue} noValidate>
    <${Field} label="Key name" name="key-name" error=${errors.name}>
      <input id="f-key-name" value=${name} placeholder="e.g. production" aria-invalid=${!!errors.name}
        onInput=${(e) => { setName(e.target.value); setErrors({ ...errors, name: undefined }); }} /></${Field}>
    <${PolicyInputs} id="new" values=${values} errors=${errors} onChange=${change} />
    <button type="submit" class="primary">Issue key</button>
    ${errors._form && html`<p class="field-error" role="alert">${errors._form}</p>`}
  </form>`;
}

function EditPolicy({ k, onDone }) {
  const [values, setValues] = useState(formValues(k));
  const [errors, setErrors] = useState({});
  const change = (f, v) => { setValues({ ...values, [f]: v }); setErrors({ ...errors, [f]: undefined }); };
  const save = async (e) => {
    e.preventDefault();
    const { body, errors: found } = checkPolicy(values);
    setErrors(found);
    if (Object.keys(found).length) return;
    const r = await attempt(() => api("PATCH", `/admin/keys/${k.id}`, body),
      `Key ${k.name}: policy saved`, { inForm: true });
    if (r.ok) onDone(true);
    else if (r.err instanceof ApiError) setErrors(serverErrors(r.err, POLICY_FIELDS));
  };
  return html`<form class="inline-form key-policy" id="key-policy-form" data-key=${k.name} onSubmit=${save} noValidate>
    <p class="hint wide">Policy of <strong>${k.name}</strong> (<code>${k.prefix}…</code>): limits
      count this key alone, within the tenant's; it binds from the key's next request.</p>
    <${PolicyInputs} id="edit" values=${values} errors=${errors} onChange=${change} />
    <button type="submit" class="primary" id="save-key-policy">Save policy</button>
    <button type="button" onClick=${() => onDone(false)}>Cancel</button>
    ${errors._form && html`<p class="field-error" role="alert">${errors._form}</p>`}
  </form>`;
}

export function Keys({ tenant, initialSecret }) {
  const [secret, setSecret] = useState(initialSecret || "");
  const [editing, setEditing] = useState(null);
  const res = useResource(async () => {
    const [keys, usage] = await Promise.all([api("GET", `/admin/tenants/${tenant.id}/keys`),
      api("GET", `/admin/usage/keys${qs({ tenant_id: tenant.id, days: 30 })}`)]);
    const byKey = Object.fromEntries(usage.data.map((u) => [u.key_id, u]));
    return keys.data.map((k) => ({ ...k, usage: byKey[k.id] || null }));
  }, [tenant.id]);
  const revoke = async (k) => {
    if (!await confirmAction({ title: `Revoke key ${k.name}?`, action: "Revoke", danger: true,
      body: html`<p>Requests with <code>${k.prefix}…</code> are refused from now on. This cannot be undone.</p>` })) return;
    await attempt(() => api("DELETE", `/admin/keys/${k.id}`), `Key ${k.name} revoked`);
    if (editing === k.id) setEditing(null);
    res.reload();
  };
  const tone = { active: "good", expired: "bad", revoked: "bad" };
  return html`<section class="card" aria-labelledby="keys-h"><h2 id="keys-h">API keys</h2>
    ${secret && html`<${NewKey} secret=${secret} onDone=${() => setSecret("")} />`}
    <${IssueForm} tenant=${tenant} onIssued=${(key) => { setSecret(key); res.reload(); }} />
    <${Loaded} res=${res} what="keys">${(keys) => (keys.length === 0
      ? html`<${Empty}>No keys: issue one above.</${Empty}>`
      : html`<div class="table-wrap"><table id="keys">
        <thead><tr><th>Name</th><th>Key</th><th class="wide-only">Created</th><th>Last used</th><th>Expires</th>
          <th>Status</th><th>Requests (30 d)</th><th>Tokens in / out</th><th>Policy</th><th><span class="sr-only">Actions</span></th></tr></thead>
        <tbody>${keys.map((k) => html`<tr key=${k.id} data-key=${k.name}>
          <td>${k.name}</td><td><code>${k.prefix}…</code></td><td class="wide-only">${when(k.created_at)}</td>
          <td>${when(k.last_used_at)}</td><td>${k.expires_at ? when(k.expires_at) : "never"}</td>
          <td><span class=${`badge ${tone[k.status] || ""}`}>${k.status === "active" ? "live" : k.status}</span></td>
          <td>${fmt(k.usage ? k.usage.requests : 0)}</td>
          <td>${fmt(k.usage ? k.usage.prompt_tokens : 0)} / ${fmt(k.usage ? k.usage.completion_tokens : 0)}</td>
          <td class="key-policy-cell">${policyText(k)}</td>
          <td>${!k.revoked_at && html`<div class="row-actions"><button type="button" class="small edit-policy"
            onClick=${() => setEditing(k.id)}>Edit policy</button><button type="button" class="danger small"
            onClick=${() => revoke(k)}>Revoke</button></div>`}</td></tr>`)}
        </tbody></table></div>
        ${editing && keys.some((k) => k.id === editing) && html`<${EditPolicy} key=${editing}
          k=${keys.find((k) => k.id === editing)}
          onDone=${(saved) => { setEditing(null); if (saved) res.reload(); }} />`}`)}</${Loaded}>
  </section>`;
}
