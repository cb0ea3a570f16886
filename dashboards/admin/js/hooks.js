// Data loading for the pages: loading, error and stale states, polling, and retries that back
// off while the API is down, so every page recovers by itself once it is back.
import { useCallback, useEffect, useRef, useState } from "./lib.js";
import { ApiDown } from "./api.js";

// How a page that does not poll retries while the API is unreachable: 1 s, 2 s, 4 s ... 30 s.
const RETRY_FIRST_MS = 1000;
const RETRY_MAX_MS = 30000;

// load: async () => data. deps: reload when they change. pollMs: refresh while shown.
export function useResource(load, deps, { pollMs = 0 } = {}) {
  const [state, setState] = useState({ data: null, error: null, loading: true, stale: false,
    at: null });
  const alive = useRef(true);
  const generation = useRef(0);
  const run = useCallback(async () => {
    const mine = ++generation.current;
    try {
      const data = await load();
      if (alive.current && mine === generation.current) {
        setState({ data, error: null, loading: false, stale: false, at: new Date() });
      }
      return null;
    } catch (err) {
      if (alive.current && mine === generation.current) {
        // Keep what was shown, marked stale: the banner says the API is down.
        setState((s) => ({ ...s, error: err, loading: false, stale: err instanceof ApiDown }));
      }
      return err;
    }
  }, deps);

  useEffect(() => {
    alive.current = true;
    setState((s) => ({ ...s, loading: true, error: null }));
    let timer = null;
    let retry = RETRY_FIRST_MS;
    const tick = async () => {
      const err = await run();
      if (!alive.current) return;
      if (!err) {
        retry = RETRY_FIRST_MS;
        if (pollMs) timer = setTimeout(tick, pollMs);
      } else if (pollMs || err instanceof ApiDown) {
        // Every page comes back by itself after an outage, soon after the API does (not a
        // doubled poll interval later): retry, backing off. A page that does not poll waits
        // for a click only on other errors (a 404, a refused value), which retrying won't fix.
        timer = setTimeout(tick, retry);
        retry = Math.min(retry * 2, RETRY_MAX_MS);
      }
    };
    tick();
    return () => { alive.current = false; generation.current += 1; clearTimeout(timer); };
  }, [run]);

  return { ...state, reload: run };
}

// Pages' earlier routes, so bookmarks and links keep working: the plans page was "tiers".
const RENAMED = { tiers: "plans" };

// The hash route: "#/tenants/abc?q=x" -> { path: ["tenants", "abc"], params: {q: "x"} }.
export function parseHash(hash) {
  const raw = (hash || "").replace(/^#\/?/, "");
  const [pathPart, query = ""] = raw.split("?");
  const path = pathPart.split("/").filter(Boolean).map(decodeURIComponent);
  if (path.length && RENAMED[path[0]]) path[0] = RENAMED[path[0]];
  return { path: path.length ? path : ["overview"],
    params: Object.fromEntries(new URLSearchParams(query)) };
}

// The current route; an earlier route's hash is rewritten in place to the page's route now.
function currentRoute() {
  const route = parseHash(window.location.hash);
  const first = (window.location.hash || "").replace(/^#\/?/, "").split(/[/?]/)[0];
  if (RENAMED[first]) {
    window.history.replaceState(null, "", href(route.path.map(encodeURIComponent).join("/"), route.params));
  }
  return route;
}

export function useRoute() {
  const [route, setRoute] = useState(currentRoute());
  useEffect(() => {
    const onChange = () => setRoute(currentRoute());
    window.addEventListener("hashchange", onChange);
    return () => window.removeEventListener("hashchange", onChange);
  }, []);
  return route;
}

export function href(path, params = {}) {
  const q = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== "" && v != null));
  const s = q.toString();
  return `#/${path}${s ? `?${s}` : ""}`;
}

export function navigate(path, params = {}) {
  window.location.hash = href(path, params);
}
