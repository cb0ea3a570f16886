// Spend: money spent in a window (this month by default) per tenant, model, class or day, a
// chart of cost per day, the CSV export, and the model prices (set, unprice) they come from.
import { html, useState } from "../lib.js";
import { ApiError, api, qs } from "../api.js";
import { href, navigate, useResource } from "../hooks.js";
import { Chart, dayRange, daySeconds } from "../chart.js";
import { Empty, Field, Loaded, attempt, confirmAction, fmt, serverErrors, when } from "../ui.js";
import { checkAmount, checkPercent, downloadCsv, money, price } from "../money.js";

const GROUPS = [["tenant", "Tenant"], ["model", "Model"], ["job_class", "Class"], ["day", "Day"]];
const CLASSES = ["realtime", "batch", "flex"];

function Stat({ label, value, sub }) {
  return html`<div class="stat"><span class="stat-label">${label}</span>
    <strong class="stat-value">${value}</strong>${sub && html`<small>${sub}</small>`}</div>`;
}

export function SpendTable({ data, by, currency, id }) {
  if (!data.length) return html`<${Empty}>No requests ended in this period.</${Empty}>`;
  const label = (r) => (by === "tenant" ? html`<a href=${href(`tenants/${r.tenant}`)}>${r.tenant_name}</a>`
    : by === "key" ? r.key_name : r[by]);
  return html`<div class="table-wrap"><table id=${id}>
    <thead><tr><th>${(GROUPS.find(([g]) => g === by) || [by, "Key"])[1]}</th><th>Cost</th><th>Requests</th>
      <th class="wide-only">Tokens in</th><th class="wide-only">Tokens out</th><th>Unpriced</th></tr></thead>
    <tbody>${data.map((r) => html`<tr key=${r[by] || "none"} data-row=${r[by] || "none"}>
      <td>${label(r)}</td><td class="num cost">${money(r.cost, currency)}</td><td>${fmt(r.requests)}</td>
      <td class="wide-only">${fmt(r.prompt_tokens)}</td><td class="wide-only">${fmt(r.completion_tokens)}</td>
      <td>${r.unpriced_requests ? html`<span class="badge" title="requests of models without a price then: they cost 0">${fmt(r.unpriced_requests)}</span>` : ""}</td>
    </tr>`)}</tbody></table></div>`;
}

function Summary({ params }) {
  const by = params.by || "tenant";
  const window = { since: params.since, until: params.until };
  const res = useResource(() => api("GET", `/admin/spend${qs({ ...window, group_by: by })}`),
    [by, params.since, params.until]);
  const [since, setSince] = useState(params.since || "");
  const [until, setUntil] = useState(params.until || "");
  const apply = (e) => { e.preventDefault(); navigate("spend", { by, since, until }); };
  const exportCsv = () => attempt(() => downloadCsv(`/admin/spend/export.csv${qs(window)}`,
    `fairway-spend-${res.data ? `${res.data.since}-${res.data.until}` : "window"}.csv`), "CSV exported");
  return html`<section class="card" aria-labelledby="spend-h">
    <div class="title-row"><h2 id="spend-h">Spend</h2>
      ${res.data && html`<span class="muted">${res.data.since} to ${res.data.until} (UTC days)</span>`}</div>
    <form class="inline-form" id="spend-window" onSubmit=${apply} noValidate>
      <label class="inline">From <input id="f-since" type="date" value=${since} onInput=${(e) => setSince(e.target.value)} /></label>
      <label class="inline">To <input id="f-until" type="date" value=${until} onInput=${(e) => setUntil(e.target.value)} /></label>
      <button type="submit">Show</button>
      <label class="inline">By <select id="spend-by" value=${by}
        onChange=${(e) => navigate("spend", { ...window, by: e.target.value })}>
        ${GROUPS.map(([g, label]) => html`<option value=${g} selected=${g === by}>${label}</option>`)}</select></label>
      <button type="button" id="export-csv" onClick=${exportCsv}>Export CSV</button>
    </form>
    <${Loaded} res=${res} what="spend">${(s) => html`
      <div class="stats">
        <${Stat} label="Total" value=${money(s.totals.cost, s.currency)} />
        <${Stat} label="Requests" value=${fmt(s.totals.requests)} />
        <${Stat} label="Tokens in / out" value=${`${fmt(s.totals.prompt_tokens)} / ${fmt(s.totals.completion_tokens)}`} />
        ${s.totals.unpriced_requests > 0 && html`<${Stat} label="Unpriced requests"
          value=${fmt(s.totals.unpriced_requests)} sub="their models had no price: they cost 0" />`}
      </div>
      <${Chart} title=${`Cost per UTC day (${s.currency})`} x=${s.days.map(daySeconds)} xRange=${dayRange(s.days)}
        bars=${true} series=${[{ label: "cost", values: s.daily_cost.map(Number) }]}
        yFormat=${(v) => money(v, s.currency)} yAxis=${(v) => money(v)} empty="Nothing spent in this period." />
      <${SpendTable} data=${s.data} by=${by} currency=${s.currency} id="spend-table" />`}
    </${Loaded}>
  </section>`;
}

const PRICE_FIELDS = ["model", "input_per_mtok", "output_per_mtok", "batch_discount_pct", "flex_discount_pct"];

function PriceForm({ reload, models }) {
  const blank = { model: "", input_per_mtok: "", output_per_mtok: "", batch_discount_pct: "50",
    flex_discount_pct: "50" };
  const [form, setForm] = useState(blank);
  const [errors, setErrors] = useState({});
  const set = (k, v) => { setForm({ ...form, [k]: v }); setErrors({ ...errors, [k]: undefined }); };
  const save = async (e) => {
    e.preventDefault();
    const found = {};
    if (!form.model.trim()) found.model = "The model's name, as requests give it.";
    for (const f of ["input_per_mtok", "output_per_mtok"]) { const m = checkAmount(form[f]); if (m) found[f] = m; }
    for (const f of ["batch_discount_pct", "flex_discount_pct"]) { const m = checkPercent(form[f]); if (m) found[f] = m; }
    setErrors(found);
    if (Object.keys(found).length) return;
    const body = Object.fromEntries(PRICE_FIELDS.map((f) => [f, form[f].trim()]));
    const r = await attempt(() => api("PUT", "/admin/prices", body), `Price of ${body.model} set`, { inForm: true });
    if (r.ok) { setForm(blank); reload(); } else if (r.err instanceof ApiError) setErrors(serverErrors(r.err, PRICE_FIELDS));
  };
  const input = (k, label, hint) => html`<${Field} label=${label} name=${`price-${k}`} error=${errors[k]} hint=${hint}>
    <input id=${`f-price-${k}`} name=${k} value=${form[k]} aria-invalid=${!!errors[k]}
      inputmode=${k === "model" ? "text" : "decimal"} list=${k === "model" ? "price-models" : undefined}
      onInput=${(e) => set(k, e.target.value)} /></${Field}>`;
  return html`<form class="card" id="price-form" onSubmit=${save} noValidate>
    <h2>Set a price</h2>
    <p class="muted">Per million tokens, in force from now: jobs that ended before keep the price they ended
      under. Batch and flex pay the input and output prices less their discount (OpenAI's Batch API is 50% off).</p>
    <datalist id="price-models">${models.map((m) => html`<option value=${m} />`)}</datalist>
    <div class="form-grid">
      ${input("model", "Model")}
      ${input("input_per_mtok", "Input price / 1M tokens")}
      ${input("output_per_mtok", "Output price / 1M tokens")}
      ${input("batch_discount_pct", "Batch discount (%)")}
      ${input("flex_discount_pct", "Flex discount (%)")}
    </div>
    ${errors._form && html`<p class="field-error" role="alert">${errors._form}</p>`}
    <div class="actions"><button type="submit" class="primary">Set price</button></div>
  </form>`;
}

function Prices() {
  const res = useResource(() => api("GET", "/admin/prices"), []);
  const unprice = async (p) => {
    if (!await confirmAction({ title: `Unprice ${p.model}?`, action: "Unprice", danger: true,
      body: html`<p>Its requests cost nothing from now on (shown as unpriced). What ended before
        keeps its price.</p>` })) return;
    await attempt(() => api("DELETE", `/admin/prices${qs({ model: p.model })}`), `${p.model} unpriced`);
    res.reload();
  };
  return html`<section class="card" aria-labelledby="prices-h"><h2 id="prices-h">Prices</h2>
    <${Loaded} res=${res} what="prices">${(out) => html`
      ${out.data.length === 0 ? html`<${Empty}>No models yet.</${Empty}>` : html`<div class="table-wrap"><table id="prices">
        <thead><tr><th>Model</th>${CLASSES.map((c) => html`<th>${c} in / out</th>`)}<th class="wide-only">Since</th>
          <th><span class="sr-only">Actions</span></th></tr></thead>
        <tbody>${out.data.map((p) => html`<tr key=${p.model} data-model=${p.model}>
          <td><code>${p.model}</code></td>
          ${p.status === "priced" ? CLASSES.map((c) => html`<td>${price(p.classes[c].input_per_mtok)} / ${price(p.classes[c].output_per_mtok)}</td>`)
            : html`<td colspan="3"><span class="badge">unpriced</span> <small class="muted">costs 0</small></td>`}
          <td class="wide-only">${p.effective_from ? when(p.effective_from) : "—"}</td>
          <td>${p.status === "priced" && html`<button type="button" class="danger small" onClick=${() => unprice(p)}>Unprice</button>`}</td>
        </tr>`)}</tbody></table></div>
        <p class="muted">In ${out.currency} per million tokens.</p>`}
      <${PriceForm} reload=${res.reload} models=${out.data.map((p) => p.model)} />`}
    </${Loaded}>
  </section>`;
}

export function Spend({ params }) {
  return html`<div class="page" id="page-spend">
    <div class="page-head"><h1>Spend</h1></div>
    <${Summary} params=${params} />
    <${Prices} />
  </div>`;
}
