// Data loading for the pages: loading, error and stale states, and polling that backs off
// while the API is down instead of failing every few seconds.
import { useCallback, useEffect, useRef, useState } from "./lib.js";
import { ApiDown } from "./api.js";

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
      return true;
    } catch (err) {
      if (alive.current && mine === generation.current) {
        // Keep what was shown, marked stale: the banner says the API is down.
        setState((s) => ({ ...s, error: err, loading: false, stale: err instanceof ApiDown }));
      }
      return false;
    }
  }, deps);

  useEffect(() => {
    alive.current = true;
    setState((s) => ({ ...s, loading: true, error: null }));
    let timer = null;
    let delay = pollMs;
    const tick = async () => {
      const ok = await run();
      if (!alive.current || !pollMs) return;
      delay = ok ? pollMs : Math.min(delay * 2, 60000);
      timer = setTimeout(tick, delay);
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
