// Tenant plans as forms: weight, SLO targets, admission mode, what happens past a rate limit,
// allowed service tiers, default quotas. Saving a
// plan that has tenants changes their service: it asks first (and says when it reweights them).
// The admin API still calls a plan a tier: /admin/tiers, and the tenant search's tier filter.
import { html, useState } from "../lib.js";
import { ApiError, api, qs } from "../api.js";
import { useResource } from "../hooks.js";
import { Empty, Field, Loaded, attempt, confirmAction, fmt, serverErrors } from "../ui.js";
import { QUOTA_FIELDS, checkQuota } from "../quotas.js";

const SERVICE_TIERS = ["auto", "default", "flex", "priority"];
const FIELDS = ["name", "weight", "ttft_slo_ms", "tpot_slo_ms", "admission_mode",
  "max_queue_wait_ms", "over_quota", "allowed_service_tiers", ...QUOTA_FIELDS.map(([f]) => f)];
const MODES = [["queue", "Queue within the wait budget"], ["shed", "Refuse what would miss the TTFT target"]];
const OVER_QUOTA = [["refuse", "Refuse (429)"], ["overflow", "Run at batch priority when idle"]];

function toForm(t) {
  return { name: t ? t.name : "", weight: t ? String(t.weight) : "1",
    ttft_slo_ms: t ? String(t.ttft_slo_ms) : "1000", tpot_slo_ms: t ? String(t.tpot_slo_ms) : "100",
    admission_mode: t ? t.admission_mode : "queue",
    max_queue_wait_ms: t ? String(t.max_queue_wait_ms) : "30000",
    over_quota: t ? t.over_quota : "refuse",
    allowed: t ? [...t.allowed_service_tiers] : ["auto", "default"],
    quotas: Object.fromEntries(QUOTA_FIELDS.map(([f]) => [f, t && t.quotas[f] != null
      ? String(t.quotas[f]) : f === "monthly_alert_percent" ? "80" : "unlimited"])) };
}

function check(form, isNew) {
  const errors = {};
  const num = (v) => Number(String(v).trim());
  if (isNew && !/^[A-Za-z0-9._-]{1,32}$/.test(form.name)) errors.name = "Letters, digits, '.', '_' or '-', at most 32.";
  const w = num(form.weight);
  if (!(w > 0 && w <= 1000)) errors.weight = "A number above 0, at most 1000.";
  for (const f of ["ttft_slo_ms", "tpot_slo_ms", "max_queue_wait_ms"]) {
    const v = num(form[f]);
    if (!Number.isInteger(v) || v <= 0 || v > 86400000) errors[f] = "Whole milliseconds, above 0.";
  }
  if (!form.allowed.length) errors.allowed_service_tiers = "Allow at least one.";
  const quotas = {};
  for (const [f] of QUOTA_FIELDS) {
    const c = checkQuota(f, form.quotas[f]);
    if (c.error) errors[f] = c.error;
    else if (c.set) quotas[f] = c.value;
    else if (f !== "monthly_alert_percent") errors[f] = "A whole number, or unlimited.";
  }
  return { errors, body: { weight: w, ttft_slo_ms: num(form.ttft_slo_ms), tpot_slo_ms: num(form.tpot_slo_ms),
    admission_mode: form.admission_mode, max_queue_wait_ms: num(form.max_queue_wait_ms),
    over_quota: form.over_quota,
    allowed_service_tiers: SERVICE_TIERS.filter((s) => form.allowed.includes(s)), quotas } };
}

// The plans every install has (service/plans/defaults.py): the API refuses to delete them.
const BUILTIN = new Set(["free", "standard", "premium", "enterprise"]);

function PlanForm({ plan, tenants, reload }) {
  const isNew = !plan;
  const [form, setForm] = useState(toForm(plan));
  const [errors, setErrors] = useState({});
  // Set when a save was called off at its confirmation: the form still shows the edits,
  // which are not saved, and says so until a save goes through.
  const [unsaved, setUnsaved] = useState(false);
  const set = (k, v) => { setForm({ ...form, [k]: v }); setErrors({ ...errors, [k]: undefined }); };
  const setQuota = (k, v) => { setForm({ ...form, quotas: { ...form.quotas, [k]: v } }); setErrors({ ...errors, [k]: undefined }); };
  const name = isNew ? form.name : plan.name;
  const save = async (e) => {
    e.preventDefault();
    const { errors: found, body } = check(form, isNew);
    setErrors(found);
    if (Object.keys(found).length) return;
    if (!isNew && tenants > 0) {
      const reweights = body.weight !== plan.weight;
      if (!await confirmAction({ title: `Save plan ${name}?`, action: "Save plan",
        body: html`<p>This changes service for ${fmt(tenants)} tenant${tenants === 1 ? "" : "s"} at once:
          ${reweights ? html` <strong>their fair-share weight goes from ${plan.weight} to ${body.weight}</strong>,` : ""}
          their SLO targets, admission mode, allowed service tiers and default quotas are what this form says.</p>` })) {
        setUnsaved(true);
        return;
      }
    }
    const r = await attempt(() => api("PUT", `/admin/tiers/${encodeURIComponent(name)}`, body), `Plan ${name} saved`,
      { inForm: true });
    if (r.ok) { setUnsaved(false); if (isNew) setForm(toForm(null)); reload(); }
    else if (r.err instanceof ApiError) setErrors(serverErrors(r.err, FIELDS));
  };
  const remove = async () => {
    if (!await confirmAction({ title: `Delete plan ${name}?`, action: "Delete plan", danger: true,
      body: html`<p>No tenant is on it. New tenants can no longer choose it.</p>` })) return;
    await attempt(() => api("DELETE", `/admin/tiers/${encodeURIComponent(name)}`), `Plan ${name} deleted`);
    reload();
  };
  const input = (k, label, hint) => html`<${Field} label=${label} name=${`${name}-${k}`} error=${errors[k]} hint=${hint}>
    <input id=${`f-${name}-${k}`} name=${k} inputmode="decimal" value=${form[k]} aria-invalid=${!!errors[k]}
      onInput=${(e) => set(k, e.target.value)} /></${Field}>`;
  return html`<form class="card plan-form" data-plan=${name} onSubmit=${save} noValidate>
    <div class="title-row">${isNew ? html`<h2>New plan</h2>` : html`<h2>${name}</h2>
      <span class="muted">${fmt(tenants)} tenant${tenants === 1 ? "" : "s"}</span>`}</div>
    <div class="form-grid">
      ${isNew && input("name", "Name")}
      ${input("weight", "Fair-share weight")}
      ${input("ttft_slo_ms", "TTFT target (ms)")}
      ${input("tpot_slo_ms", "TPOT target (ms)")}
      <${Field} label="Realtime admission" name=${`${name}-admission_mode`} error=${errors.admission_mode}>
        <select id=${`f-${name}-admission_mode`} name="admission_mode" value=${form.admission_mode}
          onChange=${(e) => set("admission_mode", e.target.value)}>
          ${MODES.map(([v, label]) => html`<option value=${v} selected=${form.admission_mode === v}>${label}</option>`)}
        </select></${Field}>
      ${form.admission_mode === "queue" && input("max_queue_wait_ms", "Longest queue wait (ms)")}
      <${Field} label="Past a rate limit" name=${`${name}-over_quota`} error=${errors.over_quota}>
        <select id=${`f-${name}-over_quota`} name="over_quota" value=${form.over_quota}
          onChange=${(e) => set("over_quota", e.target.value)}>
          ${OVER_QUOTA.map(([v, label]) => html`<option value=${v} selected=${form.over_quota === v}>${label}</option>`)}
        </select></${Field}>
    </div>
    <fieldset class=${errors.allowed_service_tiers ? "invalid" : ""}><legend>Allowed service_tier values</legend>
      ${SERVICE_TIERS.map((s) => html`<label class="check"><input type="checkbox" checked=${form.allowed.includes(s)}
        onChange=${(e) => set("allowed", e.target.checked ? [...form.allowed, s] : form.allowed.filter((x) => x !== s))} /> ${s}</label>`)}
      ${errors.allowed_service_tiers && html`<small class="field-error" role="alert">${errors.allowed_service_tiers}</small>`}
    </fieldset>
    <fieldset><legend>Default quotas (<code>unlimited</code> = no limit)</legend><div class="form-grid">
      ${QUOTA_FIELDS.map(([f, label]) => html`<${Field} label=${label} name=${`${name}-${f}`} error=${errors[f]}>
        <input id=${`f-${name}-${f}`} name=${f} inputmode="numeric" value=${form.quotas[f]} aria-invalid=${!!errors[f]}
          onInput=${(e) => setQuota(f, e.target.value)} /></${Field}>`)}
    </div></fieldset>
    ${errors._form && html`<p class="field-error" role="alert">${errors._form}</p>`}
    ${unsaved && html`<p class="unsaved-note" role="status">Not saved: the form still shows your
      changes. Save to apply them, or reload the page to discard them.</p>`}
    <div class="actions"><button type="submit" class="primary">${isNew ? "Create plan" : "Save"}</button>
      ${!isNew && tenants === 0 && !BUILTIN.has(plan.name) && html`<button type="button" class="danger" onClick=${remove}>Delete</button>`}
      ${!isNew && BUILTIN.has(plan.name) && html`<small class="hint">Built-in plan: it can be edited, not deleted.</small>`}</div>
  </form>`;
}

export function Plans({ onChanged }) {
  const res = useResource(async () => {
    const plans = (await api("GET", "/admin/tiers")).data;
    const counts = await Promise.all(plans.map((p) => api("GET",
      `/admin/search/tenants${qs({ tier: p.name, limit: 1 })}`)));
    return plans.map((p, i) => ({ plan: p, tenants: counts[i].total }));
  }, []);
  const reload = () => { res.reload(); onChanged(); };
  return html`<div class="page" id="page-plans">
    <div class="page-head"><h1>Plans</h1></div>
    <${Loaded} res=${res} what="plans">${(rows) => html`
      ${rows.length === 0 && html`<${Empty}>No plans.</${Empty}>`}
      <div class="grid2">${rows.map(({ plan, tenants }) => html`<${PlanForm}
        key=${JSON.stringify(plan)} plan=${plan} tenants=${tenants} reload=${reload} />`)}
        <${PlanForm} key="new" plan=${null} tenants=${0} reload=${reload} /></div>`}
    </${Loaded}>
  </div>`;
}
