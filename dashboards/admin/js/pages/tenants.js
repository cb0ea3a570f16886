// Tenants: search by name, filter by status and tier, pages; create a tenant.
import { html, useState } from "../lib.js";
import { ApiError, api, qs } from "../api.js";
import { href, navigate, useResource } from "../hooks.js";
import { Empty, Field, Loaded, Pager, attempt, serverErrors } from "../ui.js";
import { stashNewKey } from "./tenant.js";

const LIMIT = 25;

function CreateTenant({ tiers }) {
  const [name, setName] = useState("");
  const [tier, setTier] = useState("standard");
  const [errors, setErrors] = useState({});
  const submit = async (e) => {
    e.preventDefault();
    if (!/^[A-Za-z0-9._-]{1,128}$/.test(name)) {
      setErrors({ name: "Letters, digits, '.', '_' or '-', at most 128." });
      return;
    }
    const r = await attempt(() => api("POST", "/admin/tenants", { name, tier }),
      `Tenant ${name} created`, { inForm: true });
    if (r.ok) {
      stashNewKey(r.out.id, r.out.key);
      navigate(`tenants/${r.out.id}`);
    } else if (r.err instanceof ApiError) {
      setErrors(serverErrors(r.err, ["name", "tier"]));
    }
  };
  return html`<form class="inline-form" id="create-tenant" onSubmit=${submit} noValidate>
    <${Field} label="New tenant" name="new-name" error=${errors.name}>
      <input id="f-new-name" value=${name} placeholder="name" aria-invalid=${!!errors.name}
        onInput=${(e) => { setName(e.target.value); setErrors({}); }} /></${Field}>
    <${Field} label="Tier" name="new-tier" error=${errors.tier}>
      <select id="f-new-tier" value=${tier} onChange=${(e) => setTier(e.target.value)}>
        ${tiers.map((t) => html`<option value=${t.name}>${t.name}</option>`)}</select></${Field}>
    <button type="submit" class="primary">Create</button>
    ${errors._form && html`<p class="field-error">${errors._form}</p>`}
  </form>`;
}

export function Tenants({ params, tiers }) {
  const q = params.q || "";
  const status = params.status || "";
  const tier = params.tier || "";
  const offset = Number(params.offset || 0);
  const [draft, setDraft] = useState(q);
  const res = useResource(() => api("GET", `/admin/search/tenants${qs({ q, status, tier,
    limit: LIMIT, offset })}`), [q, status, tier, offset]);
  const go = (next) => navigate("tenants", { q, status, tier, ...next });
  return html`<div class="page" id="page-tenants">
    <div class="page-head"><h1>Tenants</h1></div>
    <section class="card">
      <${CreateTenant} tiers=${tiers} />
    </section>
    <section class="card">
      <form class="filters" role="search" onSubmit=${(e) => { e.preventDefault(); go({ q: draft, offset: 0 }); }}>
        <input type="search" id="tenant-search" placeholder="Search by name" value=${draft}
          aria-label="Search tenants by name" onInput=${(e) => setDraft(e.target.value)} />
        <button type="submit">Search</button>
        <select aria-label="Status" value=${status} onChange=${(e) => go({ status: e.target.value, offset: 0 })}>
          <option value="">Any status</option><option value="active">Active</option>
          <option value="suspended">Suspended</option></select>
        <select aria-label="Tier" value=${tier} onChange=${(e) => go({ tier: e.target.value, offset: 0 })}>
          <option value="">Any tier</option>
          ${tiers.map((t) => html`<option value=${t.name}>${t.name}</option>`)}</select>
      </form>
      <${Loaded} res=${res} what="tenants">${(d) => (d.data.length === 0
        ? html`<${Empty}>${q || status || tier ? "No tenant matches these filters." : "No tenants yet: create one above."}</${Empty}>`
        : html`<div class="table-wrap"><table id="tenants">
          <thead><tr><th>Name</th><th>Tier</th><th>Status</th><th>Live keys</th><th></th></tr></thead>
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
