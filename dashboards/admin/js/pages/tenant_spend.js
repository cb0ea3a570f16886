// A tenant's spend this month (by key and by model) and its monthly budget: the limit, the
// alert thresholds, alert only or hard stop, and the alerts sent this month.
import { html, useState } from "../lib.js";
import { ApiError, api, qs } from "../api.js";
import { useResource } from "../hooks.js";
import { Field, Loaded, attempt, confirmAction, serverErrors, when } from "../ui.js";
import { checkAmount, money } from "../money.js";
import { SpendTable } from "./spend.js";

const BUDGET_FIELDS = ["monthly_limit", "thresholds", "hard_stop"];

function parseThresholds(text) {
  const parts = String(text).split(",").map((s) => s.trim()).filter(Boolean);
  if (!parts.length || parts.length > 10) return { error: "One to ten percentages, e.g. 50, 80, 100." };
  const values = parts.map(Number);
  if (values.some((v) => !Number.isInteger(v) || v < 1 || v > 100)) {
    return { error: "Whole percentages from 1 to 100, e.g. 50, 80, 100." };
  }
  return { values };
}

function BudgetForm({ tenant, budget, reload }) {
  const [form, setForm] = useState({ monthly_limit: budget.monthly_limit ? String(Number(budget.monthly_limit)) : "",
    thresholds: (budget.thresholds.length ? budget.thresholds : [50, 80, 100]).join(", "),
    hard_stop: budget.hard_stop });
  const [errors, setErrors] = useState({});
  const set = (k, v) => { setForm({ ...form, [k]: v }); setErrors({ ...errors, [k]: undefined }); };
  const save = async (e) => {
    e.preventDefault();
    const found = {};
    const limitError = checkAmount(form.monthly_limit, { positive: true });
    if (limitError) found.monthly_limit = limitError;
    const t = parseThresholds(form.thresholds);
    if (t.error) found.thresholds = t.error;
    setErrors(found);
    if (Object.keys(found).length) return;
    if (form.hard_stop && !budget.hard_stop && !await confirmAction({ title: `Hard stop for ${tenant.name}?`,
      action: "Save with hard stop", danger: true,
      body: html`<p>Once this month's spend reaches ${money(form.monthly_limit.trim(), budget.currency)}, its new
        requests and batches are refused (429 <code>insufficient_quota</code>) until the budget is raised or the
        month ends. Spent so far: ${money(budget.spend, budget.currency)}.</p>` })) return;
    const body = { monthly_limit: form.monthly_limit.trim(), thresholds: t.values, hard_stop: form.hard_stop };
    const r = await attempt(() => api("PUT", `/admin/tenants/${tenant.id}/budget`, body), "Budget saved", { inForm: true });
    if (r.ok) reload(); else if (r.err instanceof ApiError) setErrors(serverErrors(r.err, BUDGET_FIELDS));
  };
  const remove = async () => {
    if (!await confirmAction({ title: `Remove ${tenant.name}'s budget?`, action: "Remove budget", danger: true,
      body: html`<p>No more alerts, and no hard stop.</p>` })) return;
    await attempt(() => api("DELETE", `/admin/tenants/${tenant.id}/budget`), "Budget removed");
    reload();
  };
  return html`<form class="inline-form" id="budget-form" onSubmit=${save} noValidate>
    <${Field} label=${`Monthly budget (${budget.currency})`} name="budget-limit" error=${errors.monthly_limit}>
      <input id="f-budget-limit" inputmode="decimal" value=${form.monthly_limit} aria-invalid=${!!errors.monthly_limit}
        placeholder="e.g. 500" onInput=${(e) => set("monthly_limit", e.target.value)} /></${Field}>
    <${Field} label="Alert at (% of budget)" name="budget-thresholds" error=${errors.thresholds}>
      <input id="f-budget-thresholds" value=${form.thresholds} aria-invalid=${!!errors.thresholds}
        onInput=${(e) => set("thresholds", e.target.value)} /></${Field}>
    <label class="check"><input id="f-budget-hard-stop" type="checkbox" checked=${form.hard_stop}
      onChange=${(e) => set("hard_stop", e.target.checked)} /> Refuse requests at 100% (hard stop)</label>
    <button type="submit" class="primary">Save budget</button>
    ${budget.monthly_limit && html`<button type="button" class="danger" onClick=${remove}>Remove</button>`}
    ${errors._form && html`<p class="field-error" role="alert">${errors._form}</p>`}
  </form>`;
}

export function TenantSpend({ tenant }) {
  const res = useResource(async () => {
    const [budget, byKey, byModel] = await Promise.all([
      api("GET", `/admin/tenants/${tenant.id}/budget`),
      api("GET", `/admin/spend${qs({ tenant_id: tenant.id, group_by: "key" })}`),
      api("GET", `/admin/spend${qs({ tenant_id: tenant.id, group_by: "model" })}`)]);
    return { budget, byKey, byModel };
  }, [tenant.id]);
  return html`<section class="card" id="tenant-spend" aria-labelledby="tenant-spend-h">
    <h2 id="tenant-spend-h">Spend and budget</h2>
    <${Loaded} res=${res} what="spend">${({ budget: b, byKey, byModel }) => html`
      <p id="budget-status">
        <strong>${money(b.spend, b.currency)}</strong> spent in ${b.month}${b.monthly_limit
          ? html` of ${money(b.monthly_limit, b.currency)} (${b.percent_used}%)${" "}
            <span class=${`badge ${b.stopped ? "bad" : "good"}`}>${b.stopped ? "stopped: requests refused"
              : b.hard_stop ? "hard stop at 100%" : "alerts only"}</span>`
          : html` <span class="muted">· no budget</span>`}</p>
      ${b.monthly_limit && html`<span class="meter budget-meter"><span style=${{ width: `${Math.min(100, Number(b.percent_used))}%` }}></span>
        <em>${b.percent_used}%</em></span>`}
      <${BudgetForm} key=${JSON.stringify([b.monthly_limit, b.thresholds, b.hard_stop])} tenant=${tenant} budget=${b} reload=${res.reload} />
      ${b.alerts.length > 0 && html`<ul id="budget-alerts">${b.alerts.map((a) => html`<li key=${a.threshold_pct}>
        ${a.threshold_pct}% alert sent ${when(a.sent_at)} (spend ${money(a.spend, b.currency)}, <code>${a.event_id}</code>)</li>`)}</ul>`}
      <div class="grid2">
        <div><h3>By key</h3><${SpendTable} data=${byKey.data} by="key" currency=${b.currency} id="spend-by-key" /></div>
        <div><h3>By model</h3><${SpendTable} data=${byModel.data} by="model" currency=${b.currency} id="spend-by-model" /></div>
      </div>`}
    </${Loaded}>
  </section>`;
}
