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

// The hash route: "#/tenants/abc?q=x" -> { path: ["tenants", "abc"], params: {q: "x"} }.
export function parseHash(hash) {
  const raw = (hash || "").replace(/^#\/?/, "");
  const [pathPart, query = ""] = raw.split("?");
  const path = pathPart.split("/").filter(Boolean).map(decodeURIComponent);
  return { path: path.length ? path : ["overview"],
    params: Object.fromEntries(new URLSearchParams(query)) };
}

export function useRoute() {
  const [route, setRoute] = useState(parseHash(window.location.hash));
  useEffect(() => {
    const onChange = () => setRoute(parseHash(window.location.hash));
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
