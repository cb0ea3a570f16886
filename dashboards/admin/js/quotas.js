// Quota fields and the page's own check of a value (the server checks again).
export const QUOTA_FIELDS = [
  ["requests_per_minute", "Requests per minute"], ["tokens_per_minute", "Tokens per minute"],
  ["concurrent_requests", "Concurrent requests"], ["batch_enqueued_tokens", "Batch tokens enqueued"],
  ["monthly_tokens", "Monthly tokens"], ["monthly_alert_percent", "Monthly alert at (%)"]];

// raw: what the admin typed. "" -> not set (inherit), "none" -> null (no limit).
export function checkQuota(field, raw) {
  const text = String(raw ?? "").trim();
  if (text === "") return { set: false };
  if (text.toLowerCase() === "none") return { set: true, value: null };
  if (!/^\d+$/.test(text.replace(/[_,]/g, ""))) return { error: "A whole number, or none." };
  const value = Number(text.replace(/[_,]/g, ""));
  if (!Number.isSafeInteger(value)) return { error: "Too large." };
  if (field === "monthly_alert_percent" && (value < 1 || value > 100)) {
    return { error: "Between 1 and 100." };
  }
  return { set: true, value };
}
