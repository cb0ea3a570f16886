// Fairway admin dashboard: talks only to the admin API (/admin/...), with the pasted token.
"use strict";

const QUOTA_FIELDS = ["requests_per_minute", "tokens_per_minute", "concurrent_requests",
  "batch_enqueued_tokens", "monthly_tokens", "monthly_alert_percent"];
const LIVE_FIELDS = { requests_per_minute: "requests_per_minute_available",
  tokens_per_minute: "tokens_per_minute_available", concurrent_requests:
  "concurrent_requests_open", batch_enqueued_tokens: "batch_enqueued_tokens",
  monthly_tokens: "monthly_tokens_used" };
const state = { token: sessionStorage.getItem("fairway-admin-token"), tiers: [],
  tenantId: null, liveTimer: null };
const $ = (id) => document.getElementById(id);

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "className") el.className = v;
    else el.setAttribute(k, v);
  }
  for (const c of children) el.append(c instanceof Node ? c : String(c ?? ""));
  return el;
}

async function api(method, path, body) {
  const resp = await fetch(path, { method, headers: {
    Authorization: `Bearer ${state.token}`, "Content-Type": "application/json",
    "X-Fairway-Actor": "dashboard" }, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error((data.error && data.error.message) || `HTTP ${resp.status}`);
  return data;
}

function flash(text, isError) {
  $("flash").textContent = text;
  $("flash").className = isError ? "flash error" : "flash";
}

function rows(tbodyParent, items, render) {
  const tbody = $(tbodyParent).querySelector("tbody");
  tbody.replaceChildren(...items.map(render));
}

const fmt = (v) => (v === null || v === undefined ? "—" :
  typeof v === "number" ? Math.round(v).toLocaleString() : String(v));
const when = (iso) => (iso ? new Date(iso).toLocaleString() : "—");

async function login(token) {
  state.token = token;
  try {
    state.tiers = (await api("GET", "/admin/tiers")).data;
  } catch (err) {
    $("login-error").textContent = `Login failed: ${err.message}`;
    state.token = null;
    return;
  }
  sessionStorage.setItem("fairway-admin-token", token);
  $("login").classList.add("hidden");
  $("app").classList.remove("hidden");
  $("logout").classList.remove("hidden");
  $("whoami").textContent = "admin";
  for (const sel of [$("new-tenant-tier"), $("tenant-tier")]) {
    sel.replaceChildren(...state.tiers.map((t) => h("option", { value: t.name }, t.name)));
  }
  $("new-tenant-tier").value = "standard";
  await Promise.all([loadTenants(), loadTiers(), loadLive(), loadAudit()]);
  state.liveTimer = setInterval(() => { loadLive(); loadAudit(); }, 5000);
}

async function loadTenants() {
  const tenants = (await api("GET", "/admin/tenants")).data;
  rows("tenants", tenants, (t) => h("tr", { "data-tenant": t.name,
    className: t.id === state.tenantId ? "selected" : "" },
    h("td", {}, t.name), h("td", {}, t.tier), h("td", {}, t.weight),
    h("td", { className: t.suspended ? "suspended" : "" }, t.suspended ? "suspended" : "active"),
    h("td", {}, t.active_keys),
    h("td", {}, h("button", { type: "button", onclick: () => openTenant(t.id) }, "Manage"))));
}

async function openTenant(id) {
  state.tenantId = id;
  $("new-key").classList.add("hidden");
  const [tenant, quotas, keys, usage] = await Promise.all([
    api("GET", `/admin/tenants/${id}`), api("GET", `/admin/tenants/${id}/quotas`),
    api("GET", `/admin/tenants/${id}/keys`), api("GET", `/admin/usage?tenant_id=${id}&days=30`)]);
  $("tenant").classList.remove("hidden");
  $("tenant-name").textContent = tenant.name;
  $("tenant-tier").value = tenant.tier;
  $("toggle-suspend").textContent = tenant.suspended ? "Unsuspend" : "Suspend";
  $("toggle-suspend").dataset.suspended = tenant.suspended ? "1" : "0";
  renderQuotas(quotas);
  rows("keys", keys.data, (k) => h("tr", {}, h("td", {}, h("code", {}, k.prefix)),
    h("td", {}, k.name), h("td", {}, when(k.created_at)), h("td", {}, when(k.last_used_at)),
    h("td", {}, when(k.expires_at)), h("td", {}, k.revoked_at ? "revoked" : "live"),
    h("td", {}, k.revoked_at ? "" : h("button", { type: "button", className: "danger",
      onclick: () => change("DELETE", `/admin/tenants/${id}/keys/${k.id}`, "Key revoked") },
    "Revoke"))));
  window.FairwayCharts.usageChart($("usage-chart"), usageByDay(usage.data));
  await loadTenants();
}

function renderQuotas(q) {
  rows("quota-table", QUOTA_FIELDS, (f) => {
    const has = Object.prototype.hasOwnProperty.call(q.overrides, f);
    const value = has ? (q.overrides[f] === null ? "none" : String(q.overrides[f])) : "";
    return h("tr", {}, h("td", {}, f), h("td", {}, fmt(q.tier_defaults[f])),
      h("td", {}, h("input", { className: "quota", name: f, id: `quota-${f}`, value,
        placeholder: "inherit" })),
      h("td", {}, fmt(q.effective[f])), h("td", {}, LIVE_FIELDS[f] ? fmt(q.live[LIVE_FIELDS[f]]) : ""));
  });
}

function usageByDay(data) {
  const byDay = new Map();
  const today = new Date();
  for (let i = 29; i >= 0; i -= 1) {
    const d = new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate() - i));
    byDay.set(d.toISOString().slice(0, 10), { day: d.toISOString().slice(0, 10), prompt: 0,
      completion: 0 });
  }
  for (const r of data) {
    const d = byDay.get(r.day);
    if (d) { d.prompt += r.prompt_tokens; d.completion += r.completion_tokens; }
  }
  return [...byDay.values()];
}

async function change(method, path, message, body) {
  try {
    const out = await api(method, path, body);
    flash(message);
    if (state.tenantId) await openTenant(state.tenantId);
    await loadAudit();
    return out;
  } catch (err) {
    flash(err.message, true);
    return null;
  }
}

async function saveQuotas(event) {
  event.preventDefault();
  const overrides = {};
  for (const f of QUOTA_FIELDS) {
    const raw = $(`quota-${f}`).value.trim();
    if (raw === "") continue;
    overrides[f] = raw.toLowerCase() === "none" ? null : Number(raw);
  }
  await change("PUT", `/admin/tenants/${state.tenantId}/quotas`, "Quotas saved", { overrides });
}

async function loadTiers() {
  state.tiers = (await api("GET", "/admin/tiers")).data;
  rows("tiers", state.tiers, (t) => {
    const weight = h("input", { className: "quota", value: String(t.weight) });
    const ttft = h("input", { className: "quota", value: String(t.ttft_slo_ms) });
    const tpot = h("input", { className: "quota", value: String(t.tpot_slo_ms) });
    const allowed = h("input", { value: t.allowed_service_tiers.join(",") });
    const quotas = h("textarea", {}, JSON.stringify(t.quotas));
    const save = () => change("PUT", `/admin/tiers/${t.name}`, `Tier ${t.name} saved`, {
      weight: Number(weight.value), ttft_slo_ms: Number(ttft.value),
      tpot_slo_ms: Number(tpot.value), quotas: JSON.parse(quotas.value),
      allowed_service_tiers: allowed.value.split(",").map((s) => s.trim()).filter(Boolean),
    }).then(loadTiers);
    return h("tr", {}, h("td", {}, t.name), h("td", {}, weight), h("td", {}, allowed),
      h("td", {}, ttft), h("td", {}, tpot), h("td", {}, quotas),
      h("td", {}, h("button", { type: "button", onclick: save }, "Save")));
  });
}

async function loadLive() {
  let live;
  try { live = await api("GET", "/admin/live?window_s=300"); } catch (err) { return; }
  $("live-at").textContent = `updated ${new Date().toLocaleTimeString()}`;
  rows("queues", live.queues.by_tenant, (q) => h("tr", {}, h("td", {}, q.class),
    h("td", {}, q.tenant), h("td", {}, q.status), h("td", {}, q.count)));
  rows("workers", live.workers, (w) => h("tr", {}, h("td", {}, w.worker_id),
    h("td", {}, (w.models || []).join(", ")), h("td", {}, fmt(w.running)),
    h("td", {}, fmt(w.max_slots)), h("td", {}, `${Math.round((w.kv_usage || 0) * 100)}%`)));
  const pct = (v) => (v === null || v === undefined ? "—" : `${(v * 100).toFixed(1)}%`);
  $("slo-total").textContent = `${pct(live.slo.attainment)} of ${live.slo.requests} requests`;
  rows("slo", live.slo.by_tenant, (s) => h("tr", {}, h("td", {}, s.tenant), h("td", {}, s.tier),
    h("td", {}, s.requests), h("td", {}, s.met), h("td", {}, pct(s.attainment)),
    h("td", {}, `${fmt(s.ttft_p50_ms)} ms`), h("td", {}, `${fmt(s.ttft_p99_ms)} ms`)));
}

async function loadAudit() {
  const entries = (await api("GET", "/admin/audit?limit=20")).data;
  rows("audit", entries, (e) => h("tr", {}, h("td", {}, when(e.at)), h("td", {}, e.actor),
    h("td", {}, e.action), h("td", {}, `${e.target_type} ${e.target_id.slice(0, 8)}`),
    h("td", {}, h("code", {}, JSON.stringify(e.details)))));
}

function wire() {
  $("login-form").addEventListener("submit", (e) => { e.preventDefault(); login($("token").value); });
  $("logout").addEventListener("click", () => {
    sessionStorage.removeItem("fairway-admin-token");
    window.location.reload();
  });
  $("quota-form").addEventListener("submit", saveQuotas);
  $("new-tenant").addEventListener("submit", async (e) => {
    e.preventDefault();
    const out = await change("POST", "/admin/tenants", "Tenant created",
      { name: $("new-tenant-name").value, tier: $("new-tenant-tier").value });
    if (out) { await openTenant(out.id); showKey(out.key.key); }
  });
  $("save-tier").addEventListener("click", () => change("PATCH",
    `/admin/tenants/${state.tenantId}`, "Tier changed", { tier: $("tenant-tier").value }));
  $("toggle-suspend").addEventListener("click", () => change("PATCH",
    `/admin/tenants/${state.tenantId}`, "Status changed",
    { suspended: $("toggle-suspend").dataset.suspended !== "1" }));
  $("issue-key").addEventListener("click", async () => {
    const out = await change("POST", `/admin/tenants/${state.tenantId}/keys`, "Key issued",
      { name: "dashboard" });
    if (out) showKey(out.key);
  });
  $("delete-tenant").addEventListener("click", async () => {
    if (!window.confirm("Delete this tenant and all its data?")) return;
    const id = state.tenantId;
    state.tenantId = null;
    $("tenant").classList.add("hidden");
    await change("DELETE", `/admin/tenants/${id}`, "Tenant deleted");
    await loadTenants();
  });
  if (state.token) login(state.token);
}

function showKey(key) {
  $("new-key").textContent = `New key (shown once, copy it now): ${key}`;
  $("new-key").classList.remove("hidden");
}

wire();
