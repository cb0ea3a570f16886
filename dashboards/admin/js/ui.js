// Small shared pieces: states (loading, error, empty, stale), paging, the confirmation
// dialog, notices, form fields with their error, and formatting.
import { html, useEffect, useRef, useState } from "./lib.js";
import { ApiDown, ApiError } from "./api.js";

export const fmt = (v) => (v === null || v === undefined ? "—" :
  typeof v === "number" ? Math.round(v).toLocaleString("en-US") : String(v));
export const pct = (v) => (v === null || v === undefined ? "—" : `${(v * 100).toFixed(1)}%`);
// "30 Nov, 13:53" this year, "30 Nov 2025, 13:53" before.
export const when = (iso) => {
  if (!iso) return "—";
  const d = new Date(iso);
  const year = d.getFullYear() === new Date().getFullYear() ? undefined : "numeric";
  return d.toLocaleString("en-GB", { day: "numeric", month: "short", year, hour: "2-digit",
    minute: "2-digit" });
};
export const clock = (d) => (d ? d.toLocaleTimeString("en-GB") : "—");

export function Loading({ what = "Loading" }) {
  return html`<div class="state loading" role="status" aria-live="polite">
    <span class="spinner" aria-hidden="true"></span>${what}…</div>`;
}

export function Empty({ children }) {
  return html`<div class="state empty">${children}</div>`;
}

export function ErrorNote({ error, retry }) {
  if (!error) return null;
  const down = error instanceof ApiDown;
  return html`<div class="state error" role="alert">
    ${down ? "Could not load: the admin API is unreachable. Retrying by itself…" : error.message}
    ${retry && html` <button type="button" onClick=${() => retry()}>Retry</button>`}</div>`;
}

// What every loaded section shows: loading first, an error without data, else the body
// (marked stale when the API went away after it loaded).
export function Loaded({ res, what, children }) {
  if (res.data === null && res.loading) return html`<${Loading} what=${`Loading ${what}`} />`;
  if (res.data === null) return html`<${ErrorNote} error=${res.error} retry=${res.reload} />`;
  return html`<div class=${res.stale ? "loaded stale" : "loaded"} aria-busy=${res.loading ? "true" : "false"}>
    ${res.stale && html`<p class="stale-note">Not live: last updated ${clock(res.at)}.</p>`}
    ${!res.stale && res.error && html`<${ErrorNote} error=${res.error} retry=${res.reload} />`}
    ${children(res.data)}</div>`;
}

export function Pager({ total, limit, offset, onPage }) {
  if (!total) return null;
  const page = Math.floor(offset / limit) + 1;
  const pages = Math.max(1, Math.ceil(total / limit));
  return html`<nav class="pager" aria-label="pages">
    <button type="button" disabled=${page <= 1} onClick=${() => onPage(offset - limit)}>‹ Previous</button>
    <span>Page ${page} of ${pages} (${fmt(total)})</span>
    <button type="button" disabled=${page >= pages} onClick=${() => onPage(offset + limit)}>Next ›</button>
  </nav>`;
}

export function Progress({ done, failed, total }) {
  const d = total ? (100 * done) / total : 0;
  const f = total ? (100 * failed) / total : 0;
  return html`<div class="progress" role="progressbar" aria-valuemin="0" aria-valuemax=${total}
      aria-valuenow=${done + failed} title=${`${done} done, ${failed} failed of ${total}`}>
    <span class="done" style=${{ width: `${d}%` }}></span>
    <span class="failed" style=${{ width: `${f}%` }}></span>
    <em>${fmt(done + failed)} / ${fmt(total)}</em></div>`;
}

// A labelled input with its error (from the page's check or the server's `param`) beside it.
export function Field({ label, name, error, hint, children }) {
  return html`<label class=${`field${error ? " invalid" : ""}`} for=${`f-${name}`}>
    <span class="label">${label}</span>${children}
    ${hint && !error && html`<small class="hint">${hint}</small>`}
    ${error && html`<small class="field-error" id=${`err-${name}`} role="alert">${error}</small>`}
  </label>`;
}

// The server's error for a form: to its field when `param` names one (its last part: the
// API says "overrides.tokens_per_minute" or "tokens_per_minute"), else to the whole form.
export function serverErrors(err, fields) {
  const param = err && err.param ? String(err.param) : "";
  const leaf = param.split(".").pop();
  if (leaf && fields.includes(leaf)) return { [leaf]: err.message };
  return { _form: err ? err.message : "" };
}

// --- confirmation dialog: confirm({title, body, action, danger, typed}) -> Promise<boolean>
// typed: a word (a tenant's name) the admin must type before the action can be taken, for
// what cannot be undone: one click, or Enter on a focused button, is not enough.
let showConfirm = null;
export function confirmAction(opts) {
  return new Promise((resolve) => showConfirm({ ...opts, resolve }));
}

export function ConfirmHost() {
  const [ask, setAsk] = useState(null);
  const [typed, setTyped] = useState("");
  const okRef = useRef(null);
  const typedRef = useRef(null);
  showConfirm = (a) => { setTyped(""); setAsk(a); };
  useEffect(() => {
    const first = ask && (ask.typed ? typedRef.current : okRef.current);
    if (first) first.focus();
  }, [ask]);
  if (!ask) return null;
  const done = (answer) => { setAsk(null); ask.resolve(answer); };
  const blocked = !!ask.typed && typed !== ask.typed;
  return html`<div class="modal-backdrop" onClick=${(e) => e.target === e.currentTarget && done(false)}>
    <div class="modal" role="dialog" aria-modal="true" aria-labelledby="confirm-title"
        onKeyDown=${(e) => e.key === "Escape" && done(false)}>
      <h2 id="confirm-title">${ask.title}</h2>
      <div class="modal-body">${ask.body}</div>
      ${ask.typed && html`<label class="typed-confirm" for="confirm-typed">Type
        <code>${ask.typed}</code> to confirm
        <input id="confirm-typed" ref=${typedRef} value=${typed} autocomplete="off"
          spellcheck="false" onInput=${(e) => setTyped(e.target.value)} /></label>`}
      <div class="modal-actions">
        <button type="button" onClick=${() => done(false)}>Cancel</button>
        <button type="button" ref=${okRef} class=${ask.danger ? "danger solid" : "primary"}
          disabled=${blocked} onClick=${() => !blocked && done(true)}>${ask.action}</button>
      </div>
    </div></div>`;
}

// --- notices: notify(text, kind) shows a short message over the top bar; a click dismisses it
let pushNotice = null;
export function notify(text, kind = "ok") { if (pushNotice) pushNotice({ text, kind, id: Math.random() }); }

export function Notices() {
  const [items, setItems] = useState([]);
  pushNotice = (n) => {
    setItems((xs) => [...xs.slice(-2), n]);
    setTimeout(() => setItems((xs) => xs.filter((x) => x.id !== n.id)), 6000);
  };
  return html`<div class="notices" role="status" aria-live="polite">
    ${items.map((n) => html`<p key=${n.id} class=${`notice ${n.kind}`} title="Dismiss"
      onClick=${() => setItems((xs) => xs.filter((x) => x.id !== n.id))}>${n.text}</p>`)}</div>`;
}

// Run an action with its error shown as a notice (never an unhandled rejection). A form
// passes inForm: its 400s are shown next to their fields instead.
export async function attempt(fn, okText, { inForm = false } = {}) {
  try {
    const out = await fn();
    if (okText) notify(okText);
    return { ok: true, out };
  } catch (err) {
    if (inForm && err instanceof ApiError && err.status === 400) return { ok: false, err };
    notify(err instanceof ApiDown ? "Not done: the admin API is unreachable." : err.message, "error");
    return { ok: false, err };
  }
}
