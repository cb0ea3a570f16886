// Quota fields and the page's own check of a value (the server checks again). The API writes
// and shows "no limit" as the string "unlimited"; the monthly alert level is a percentage.
export const QUOTA_FIELDS = [
  ["requests_per_minute", "Requests per minute"], ["tokens_per_minute", "Tokens per minute"],
  ["concurrent_requests", "Concurrent requests"], ["batch_enqueued_tokens", "Batch tokens enqueued"],
  ["monthly_tokens", "Monthly tokens"], ["monthly_alert_percent", "Monthly alert at (%)"]];
export const UNLIMITED = "unlimited";
const PERCENT = "monthly_alert_percent";

// raw: what the admin typed. "" -> not set, "unlimited" (or "none") -> no limit.
export function checkQuota(field, raw) {
  const text = String(raw ?? "").trim();
  if (text === "") return { set: false };
  if (["unlimited", "none"].includes(text.toLowerCase())) {
    return field === PERCENT ? { error: "Between 1 and 100." } : { set: true, value: UNLIMITED };
  }
  const digits = text.replace(/[_,]/g, "");
  if (!/^\d+$/.test(digits)) {
    return { error: field === PERCENT ? "Between 1 and 100." : "A whole number, or unlimited." };
  }
  const value = Number(digits);
  if (!Number.isSafeInteger(value)) return { error: "Too large." };
  if (field === PERCENT && (value < 1 || value > 100)) return { error: "Between 1 and 100." };
  return { set: true, value };
}

export const showQuota = (v) => (v === null || v === undefined ? "—"
  : typeof v === "number" ? v.toLocaleString("en-US") : String(v));

// What the tenant uses of a limit right now, from the quota store's live state (the buckets
// refill continuously, so a per-minute limit's use is its capacity minus what is left);
// limit null: unlimited, the use alone is shown where it is counted.
export function usageNow(field, q) {
  const live = q.live || {};
  const limit = typeof q.effective[field] === "number" ? q.effective[field] : null;
  const left = (available) => (limit === null ? null : limit - (available ?? limit));
  const used = {
    requests_per_minute: left(live.requests_per_minute_available),
    tokens_per_minute: left(live.tokens_per_minute_available),
    concurrent_requests: live.concurrent_requests_open,
    batch_enqueued_tokens: live.batch_enqueued_tokens,
    monthly_tokens: live.monthly_tokens_used,
  }[field];
  return used === undefined || used === null ? null : { used: Math.max(0, Math.round(used)), limit };
}
