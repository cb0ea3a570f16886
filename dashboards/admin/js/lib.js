// The one place the vendored libraries are imported: Preact, its hooks, htm (JSX-like tagged
// templates, no build step) and uPlot (a global from its IIFE build, loaded by index.html).
import { h, render } from "../vendor/preact.mjs";
import { useCallback, useEffect, useMemo, useRef, useState } from "../vendor/preact-hooks.mjs";
import htm from "../vendor/htm.mjs";

export const html = htm.bind(h);
export { render, useCallback, useEffect, useMemo, useRef, useState };
export const uPlot = window.uPlot;
