// Fairway admin dashboard: talks only to the admin API (/admin/...) with the pasted token.
// Preact + htm, no build step; pages by hash route (#/overview, #/tenants, #/tenants/<id>,
// #/batches, #/plans, #/spend, #/audit, #/explore/<id>; #/tiers, the plans page's first route, still leads there).
import { html, render, useEffect, useState } from "./js/lib.js";
import { api, getToken, onHealth, setAuthLostHandler, setToken } from "./js/api.js";
import { useRoute } from "./js/hooks.js";
import { ConfirmHost, Notices, clock } from "./js/ui.js";
import { Overview } from "./js/pages/overview.js";
import { Tenants } from "./js/pages/tenants.js";
import { Tenant } from "./js/pages/tenant.js";
import { Batches } from "./js/pages/batches.js";
import { Plans } from "./js/pages/plans.js";
import { Audit } from "./js/pages/audit.js";
import { Spend } from "./js/pages/spend.js";
import { Explore, ExploreBox } from "./js/pages/explore.js";

const PAGES = [["overview", "Overview"], ["tenants", "Tenants"], ["batches", "Batches"],
  ["plans", "Plans"], ["spend", "Spend"], ["audit", "Audit"], ["explore", "Explore"]];

function Login({ message, onLogin }) {
  const [token, setDraft] = useState("");
  const [error, setError] = useState(message || "");
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setToken(token);
    try {
      const plans = (await api("GET", "/admin/tiers")).data;
      onLogin(plans);
    } catch (err) {
      setToken(null);
      setError(`Login failed: ${err.message}`);
    } finally { setBusy(false); }
  };
  return html`<main class="login card">
    <h1>Fairway admin</h1>
    <p>Paste the admin token (<code>FAIRWAY_ADMIN_TOKEN</code>). It stays in this tab only.</p>
    <form id="login-form" onSubmit=${submit}>
      <input id="token" type="password" autocomplete="off" placeholder="admin token" required
        value=${token} onInput=${(e) => setDraft(e.target.value)} aria-label="admin token" />
      <button type="submit" class="primary" disabled=${busy}>Log in</button>
    </form>
    <p id="login-error" class="field-error" role="alert">${error}</p>
  </main>`;
}

function Banner() {
  const [health, setHealth] = useState({ down: false });
  useEffect(() => onHealth(setHealth), []);
  if (!health.down) return null;
  return html`<div class="banner" id="api-down" role="alert">
    <strong>${health.message || "The admin API is unreachable."}</strong>
    ${" "}What you see is from ${clock(health.lastOk)} and is not live. Retrying…</div>`;
}

function Page({ route, plans, reloadPlans }) {
  const [name, id] = route.path;
  if (name === "tenants" && id) return html`<${Tenant} key=${id} id=${id} plans=${plans} />`;
  if (name === "tenants") return html`<${Tenants} params=${route.params} plans=${plans} />`;
  if (name === "batches") return html`<${Batches} params=${route.params} />`;
  if (name === "plans") return html`<${Plans} onChanged=${reloadPlans} />`;
  if (name === "audit") return html`<${Audit} params=${route.params} />`;
  if (name === "spend") return html`<${Spend} params=${route.params} />`;
  if (name === "explore") return html`<${Explore} key=${id || ""} id=${id} params=${route.params} />`;
  if (name === "overview") return html`<${Overview} />`;
  return html`<div class="page"><p class="state empty">No page here. <a href="#/overview">Overview</a></p></div>`;
}

function App() {
  const [plans, setPlans] = useState(null);
  const [authMessage, setAuthMessage] = useState("");
  const route = useRoute();
  const reloadPlans = () => api("GET", "/admin/tiers").then((r) => setPlans(r.data), () => {});
  useEffect(() => {
    setAuthLostHandler(() => {
      setToken(null);
      setPlans(null);
      setAuthMessage("The admin token was refused: log in again.");
    });
    if (getToken()) {
      api("GET", "/admin/tiers").then((r) => setPlans(r.data), () => setPlans([]));
    }
  }, []);
  if (!getToken() || plans === null) {
    if (getToken()) return html`<${Banner} /><p class="state loading">Loading…</p>`;
    return html`<${Banner} /><${Login} message=${authMessage} onLogin=${(p) => { setAuthMessage(""); setPlans(p); }} />`;
  }
  const current = route.path[0];
  return html`
    <header class="top">
      <a class="brand" href="#/overview"><img src="/favicon.ico" alt="" width="20" height="20" /> Fairway admin</a>
      <nav aria-label="pages">${PAGES.map(([p, label]) => html`<a href=${`#/${p}`}
        class=${current === p ? "active" : ""} aria-current=${current === p ? "page" : undefined}>${label}</a>`)}</nav>
      <${ExploreBox} />
      <button type="button" id="logout" onClick=${() => { setToken(null); setPlans(null); }}>Log out</button>
    </header>
    <${Banner} />
    <${Notices} />
    <main id="app"><${Page} route=${route} plans=${plans} reloadPlans=${reloadPlans} /></main>
    <${ConfirmHost} />`;
}

render(html`<${App} />`, document.getElementById("root"));
