// Small DOM and formatting helpers shared by the panels.

/** The element with this id (the page's HTML is static, so a missing one is a bug). */
export function $<T extends HTMLElement = HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`#${id} is missing from index.html`);
  return el as T;
}

type Attrs = Record<string, string | number | boolean | undefined | ((e: Event) => void)>;

/** Create an element: h('button', {type: 'button', onclick: f}, 'Delete'). */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: (Node | string | null | undefined | false)[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (typeof v === 'function') el.addEventListener(k.replace(/^on/, ''), v);
    else if (k === 'class') el.className = String(v);
    else if (k in el && typeof v !== 'string') (el as unknown as Record<string, unknown>)[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) el.append(c);
  return el;
}

const UNITS = ['B', 'KB', 'MB', 'GB', 'TB'];

/** 1234567 → "1.2 MB" (powers of 1000, like the storage figures browsers show). */
export function bytes(n: number): string {
  if (!Number.isFinite(n) || n < 0) return '–';
  let i = 0;
  while (n >= 1000 && i < UNITS.length - 1) {
    n /= 1000;
    i++;
  }
  return `${n >= 100 || i === 0 ? Math.round(n) : n.toFixed(1)} ${UNITS[i]}`;
}

/** Binary sizes for device limits: 1073741824 → "1 GiB". */
export function ibytes(n: number): string {
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) {
    n /= 1024;
    i++;
  }
  return `${Number.isInteger(n) ? n : n.toFixed(1)} ${u[i]}`;
}

/** Seconds → "45 s", "3 min 20 s", "1 h 5 min". */
export function duration(s: number): string {
  if (!Number.isFinite(s) || s < 0) return '–';
  s = Math.round(s);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min${s % 60 ? ` ${s % 60} s` : ''}`;
  return `${Math.floor(m / 60)} h${m % 60 ? ` ${m % 60} min` : ''}`;
}

/** A count with thousands separators. */
export function count(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

/** 134515008 → "135M" */
export function params(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(1)}B`;
  if (n >= 1e6) return `${Math.round(n / 1e6)}M`;
  if (n >= 1e3) return `${Math.round(n / 1e3)}K`;
  return String(n);
}

/** Show or clear a panel's alert box; `text` may carry a second, smaller line after '\n'. */
export function showAlert(el: HTMLElement, text: string | null): void {
  el.replaceChildren();
  if (!text) {
    el.hidden = true;
    return;
  }
  const [first, ...rest] = text.split('\n');
  el.append(h('strong', {}, first));
  if (rest.length) el.append(h('span', {}, rest.join(' ')));
  el.append(h('button', { type: 'button', class: 'close', 'aria-label': 'Dismiss', onclick: () => showAlert(el, null) }, '×'));
  el.hidden = false;
}

/** Save bytes or text as a download. */
export function download(name: string, data: BlobPart, type = 'application/octet-stream'): void {
  const url = URL.createObjectURL(new Blob([data], { type }));
  const a = h('a', { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** Call `f` at most once per `ms`, after the last call. */
export function debounce<A extends unknown[]>(f: (...a: A) => void, ms: number): (...a: A) => void {
  let t: ReturnType<typeof setTimeout> | undefined;
  return (...a: A) => {
    clearTimeout(t);
    t = setTimeout(() => f(...a), ms);
  };
}
