// The admin API client: the pasted token, OpenAI-shaped errors, and the API's reachability,
// which the banner shows (a failed fetch never escapes as an unhandled rejection).
const TOKEN_KEY = "fairway-admin-token";
let token = sessionStorage.getItem(TOKEN_KEY);
const healthListeners = new Set();
let health = { down: false, message: "", since: null, lastOk: null };

export class ApiError extends Error {
  constructor(status, body) {
    const err = (body && body.error) || {};
    super(err.message || `The API answered HTTP ${status}.`);
    this.status = status;
    this.code = err.code || null;
    this.param = err.param || null;
  }
}

// The API could not be reached, or answered that it cannot serve now (502/503/504).
export class ApiDown extends Error {}

function setHealth(next) {
  health = { ...health, ...next };
  for (const fn of healthListeners) fn(health);
}

export function onHealth(fn) {
  healthListeners.add(fn);
  fn(health);
  return () => healthListeners.delete(fn);
}

export const getToken = () => token;
export function setToken(value) {
  token = value;
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

let onAuthLost = () => {};
export function setAuthLostHandler(fn) { onAuthLost = fn; }

export async function api(method, path, body) {
  let resp;
  try {
    resp = await fetch(path, { method, cache: "no-store", headers: {
      Authorization: `Bearer ${token}`, "Content-Type": "application/json",
      "X-Fairway-Actor": "dashboard" },
    body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (err) {
    if (!health.down) setHealth({ down: true, since: new Date() });
    setHealth({ message: "The admin API is unreachable." });
    throw new ApiDown("The admin API is unreachable.");
  }
  const data = await resp.json().catch(() => null);
  if ([502, 503, 504].includes(resp.status)) {
    const msg = (data && data.error && data.error.message) || `HTTP ${resp.status}`;
    if (!health.down) setHealth({ down: true, since: new Date() });
    setHealth({ message: `The admin API cannot serve now: ${msg}` });
    throw new ApiDown(msg);
  }
  setHealth({ down: false, message: "", since: null, lastOk: new Date() });
  if (resp.status === 401 || resp.status === 403) {
    const err = new ApiError(resp.status, data);
    onAuthLost(err);
    throw err;
  }
  if (!resp.ok) throw new ApiError(resp.status, data);
  return data;
}

export const qs = (params) => {
  const out = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== "") out.set(k, String(v));
  }
  const s = out.toString();
  return s ? `?${s}` : "";
};
