// Tenants: search by name, filter by status and plan, pages; create a tenant. The admin API
// names a tenant's plan "tier" (the field, and the search's filter).
import { html, useState } from "../lib.js";
import { ApiError, api, qs } from "../api.js";
import { href, navigate, useResource } from "../hooks.js";
import { Empty, Field, Loaded, Pager, attempt, serverErrors } from "../ui.js";
import { stashNewKey } from "./tenant.js";

const LIMIT = 25;

function CreateTenant({ plans }) {
  const [name, setName] = useState("");
  const [plan, setPlan] = useState("standard");
  const [errors, setErrors] = useState({});
  const submit = async (e) => {
    e.preventDefault();
    if (!/^[A-Za-z0-9._-]{1,128}$/.test(name)) {
      setErrors({ name: "Letters, digits, '.', '_' or '-', at most 128." });
      return;
    }
    const r = await attempt(() => api("POST", "/admin/tenants", { name, tier: plan }),
      `Tenant ${name} created`, { inForm: true });
    if (r.ok) {
      // The answer's `key` is the key object (id, name, ...); its secret is `key.key`.
      stashNewKey(r.out.id, r.out.key && r.out.key.key);
      navigate(`tenants/${r.out.id}`);
    } else if (r.err instanceof ApiError) {
      setErrors(serverErrors(r.err, ["name", "tier"]));
    }
  };
  return html`<form class="inline-form" id="create-tenant" onSubmit=${submit} noValidate>
    <${Field} label="New tenant" name="new-name" error=${errors.name}>
      <input id="f-new-name" value=${name} placeholder="name" aria-invalid=${!!errors.name}
        onInput=${(e) => { setName(e.target.value); setErrors({}); }} /></${Field}>
    <${Field} label="Plan" name="new-plan" error=${errors.tier}>
      <select id="f-new-plan" value=${plan} onChange=${(e) => setPlan(e.target.value)}>
        ${plans.map((p) => html`<option value=${p.name}>${p.name}</option>`)}</select></${Field}>
    <button type="submit" class="primary">Create</button>
    ${errors._form && html`<p class="field-error">${errors._form}</p>`}
  </form>`;
}

export function Tenants({ params, plans }) {
  const q = params.q || "";
  const status = params.status || "";
  const plan = params.plan || params.tier || "";  // tier: the filter's first name in links
  const offset = Number(params.offset || 0);
  const [draft, setDraft] = useState(q);
  const res = useResource(() => api("GET", `/admin/search/tenants${qs({ q, status, tier: plan,
    limit: LIMIT, offset })}`), [q, status, plan, offset]);
  const go = (next) => navigate("tenants", { q, status, plan, ...next });
  return html`<div class="page" id="page-tenants">
    <div class="page-head"><h1>Tenants</h1></div>
    <section class="card">
      <${CreateTenant} plans=${plans} />
    </section>
    <section class="card">
      <form class="filters" role="search" onSubmit=${(e) => { e.preventDefault(); go({ q: draft, offset: 0 }); }}>
        <input type="search" id="tenant-search" placeholder="Search by name" value=${draft}
          aria-label="Search tenants by name" onInput=${(e) => setDraft(e.target.value)} />
        <button type="submit">Search</button>
        <select aria-label="Status" value=${status} onChange=${(e) => go({ status: e.target.value, offset: 0 })}>
          <option value="">Any status</option><option value="active">Active</option>
          <option value="suspended">Suspended</option></select>
        <select aria-label="Plan" value=${plan} onChange=${(e) => go({ plan: e.target.value, offset: 0 })}>
          <option value="">Any plan</option>
          ${plans.map((p) => html`<option value=${p.name}>${p.name}</option>`)}</select>
      </form>
      <${Loaded} res=${res} what="tenants">${(d) => (d.data.length === 0
        ? html`<${Empty}>${q || status || plan ? "No tenant matches these filters." : "No tenants yet: create one above."}</${Empty}>`
        : html`<div class="table-wrap"><table id="tenants">
          <thead><tr><th>Name</th><th>Plan</th><th>Status</th><th>Live keys</th><th></th></tr></thead>
          <tbody>${d.data.map((t) => html`<tr key=${t.id} data-tenant=${t.name}>
            <td><a href=${href(`tenants/${t.id}`)}>${t.name}</a></td><td>${t.tier}</td>
            <td><span class=${`badge ${t.suspended ? "bad" : "good"}`}>${t.suspended ? "suspended" : "active"}</span></td>
            <td>${t.active_keys}</td>
            <td><a class="button" href=${href(`tenants/${t.id}`)}>Manage</a></td></tr>`)}
          </tbody></table></div>
          <${Pager} total=${d.total} limit=${LIMIT} offset=${offset} onPage=${(o) => go({ offset: o })} />`)}
      </${Loaded}>
    </section>
  </div>`;
}
