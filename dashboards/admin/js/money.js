// Money as the spend pages show it and check it. The API sends amounts as decimal strings
// (never floats); they are turned into numbers only to be displayed, never summed here.
import { getToken } from "./api.js";

// "12.345600" -> "12.35"; under a cent, the six decimals the API keeps ("0.000450").
export function money(text, currency) {
  if (text === null || text === undefined) return "—";
  const n = Number(text);
  const shown = n !== 0 && Math.abs(n) < 0.01 ? n.toFixed(6)
    : n.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  return currency ? `${shown} ${currency}` : shown;
}

// What the API takes: 0 or more, at most 12 digits before the point and 6 after.
const AMOUNT = /^\d{1,12}(\.\d{1,6})?$/;
export function checkAmount(value, { positive = false } = {}) {
  const v = String(value).trim();
  if (!AMOUNT.test(v)) return "An amount such as 0.15 (at most 6 decimals).";
  if (positive && Number(v) === 0) return "More than 0.";
  return null;
}

export function checkPercent(value) {
  const v = String(value).trim();
  if (!/^\d{1,3}(\.\d{1,2})?$/.test(v) || Number(v) > 100) return "A percentage from 0 to 100.";
  return null;
}

// The CSV export needs the token in a header, so it is fetched, then saved from a blob.
export async function downloadCsv(path, filename) {
  const resp = await fetch(path, { headers: { Authorization: `Bearer ${getToken()}`,
    "X-Fairway-Actor": "dashboard" }, cache: "no-store" });
  if (!resp.ok) {
    const body = await resp.json().catch(() => null);
    throw new Error((body && body.error && body.error.message) || `HTTP ${resp.status}`);
  }
  const url = URL.createObjectURL(await resp.blob());
  const a = document.createElement("a");
  a.href = url;
  a.download = filename;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// A price as set, never rounded (0.075 stays 0.075): trailing zeros past two decimals dropped.
export function price(text) {
  if (text === null || text === undefined) return "—";
  const [whole, frac = ""] = String(text).split(".");
  return `${whole}.${frac.replace(/0+$/, "").padEnd(2, "0")}`;
}
