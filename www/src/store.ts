// The page's own small IndexedDB database ("webtune-page", apart from the engine's "webtune"):
// the examples, saved on every edit, and the page's settings (training form, last model).

import { createStore, get, set } from 'idb-keyval';

const db = createStore('webtune-page', 'kv');

export interface Pair {
  id: string;
  prompt: string;
  response: string;
}

export interface Dataset {
  mode: 'pairs' | 'text';
  pairs: Pair[];
  text: string;
}

export interface Settings {
  /** The model to load again after a reload, and its weight format. */
  lastModel?: { name: string; weights: string; stream?: boolean };
  /** The training form's fields by input id. */
  train?: Record<string, string | boolean>;
  /** The training run shown on the page (to resume after a reload). */
  session?: string;
  /** The chat's generation settings by input id. */
  generate?: Record<string, string>;
  /** The hub fields. */
  hub?: { base: string; repo: string; rev: string };
}

export function newId(): string {
  return Math.random().toString(36).slice(2, 10);
}

export async function loadDataset(): Promise<Dataset> {
  const d = (await get<Dataset>('dataset', db).catch(() => undefined)) ?? null;
  return {
    mode: d?.mode === 'text' ? 'text' : 'pairs',
    pairs: Array.isArray(d?.pairs) ? d.pairs : [],
    text: typeof d?.text === 'string' ? d.text : '',
  };
}

export function saveDataset(d: Dataset): Promise<void> {
  if (d.pairs.length > 0 || d.text.trim() !== '') markStored();
  return set('dataset', d, db);
}

// ---- eviction ----------------------------------------------------------------------------
// Browsers may clear a site's storage (IndexedDB and all) when disk space runs low, unless it
// is kept (navigator.storage.persist()). A cookie, which that clearing leaves alone, remembers
// that this browser had stored something here, so the next visit can tell a cleared store from
// a first visit and say what happened. It holds "1" and nothing else.

const STORED_COOKIE = 'webtune_stored';

/** Remember that this browser stores something of the user's here. */
export function markStored(): void {
  document.cookie = `${STORED_COOKIE}=1; Max-Age=${400 * 24 * 3600}; Path=/; SameSite=Strict`;
}

/** Whether an earlier visit stored something, and forget it (the notice is shown once). */
export function takeStoredMark(): boolean {
  const had = document.cookie.split(/;\s*/).includes(`${STORED_COOKIE}=1`);
  document.cookie = `${STORED_COOKIE}=; Max-Age=0; Path=/; SameSite=Strict`;
  return had;
}

export async function loadSettings(): Promise<Settings> {
  return (await get<Settings>('settings', db).catch(() => undefined)) ?? {};
}

let settingsChain: Promise<void> = Promise.resolve();

/** Merge `patch` into the stored settings (one read-modify-write at a time). */
export function saveSettings(patch: Partial<Settings>): Promise<void> {
  settingsChain = settingsChain
    .catch(() => undefined)
    .then(async () => {
      const s = await loadSettings();
      await set('settings', { ...s, ...patch }, db);
    });
  return settingsChain;
}

// ---- JSONL ------------------------------------------------------------------------------

/** Paragraphs of free text: blocks separated by blank lines, trimmed, empty ones dropped. */
export function paragraphs(text: string): string[] {
  return text
    .split(/\r?\n\s*\r?\n/)
    .map((p) => p.trim())
    .filter((p) => p.length > 0);
}

/** Complete pairs (both sides non-empty) in order. */
export function completePairs(d: Dataset): Pair[] {
  return d.pairs.filter((p) => p.prompt.trim() && p.response.trim());
}

/** What the engine trains on: chat lines for pairs (rendered with the model's chat template,
 *  as exampleTokens counts them), {"text"} lines for free text (loss on every token). */
export function toEngineJsonl(d: Dataset): string {
  if (d.mode === 'text') return paragraphs(d.text).map((t) => JSON.stringify({ text: t })).join('\n');
  return completePairs(d)
    .map((p) => JSON.stringify({ messages: [{ role: 'user', content: p.prompt }, { role: 'assistant', content: p.response }] }))
    .join('\n');
}

/** Export: pairs as chat ("messages") or "prompt"/"completion" lines; free text as "text" lines. */
export function exportJsonl(d: Dataset, shape: 'chat' | 'prompt-completion'): string {
  if (d.mode === 'text') return toEngineJsonl(d) + '\n';
  const lines = completePairs(d).map((p) =>
    shape === 'chat'
      ? JSON.stringify({ messages: [{ role: 'user', content: p.prompt }, { role: 'assistant', content: p.response }] })
      : JSON.stringify({ prompt: p.prompt, completion: p.response }),
  );
  return lines.join('\n') + '\n';
}

export interface Parsed {
  pairs: Pair[];
  texts: string[];
  /** Lines skipped, with why ("line 3: ..."). */
  skipped: string[];
}

/** Read JSONL: {"messages": [...]} (each user turn followed by an assistant turn becomes a
 *  pair; system turns are dropped), {"prompt", "completion"} (or "response"/"output"), and
 *  {"text"} (a free-text paragraph). A file that is one JSON array of such objects also works. */
export function parseJsonl(text: string): Parsed {
  const out: Parsed = { pairs: [], texts: [], skipped: [] };
  text = text.replace(/^\uFEFF/, '');
  let rows: { line: number; value: unknown }[] = [];
  const trimmed = text.trim();
  if (trimmed.startsWith('[')) {
    try {
      const arr = JSON.parse(trimmed) as unknown[];
      rows = arr.map((value, i) => ({ line: i + 1, value }));
    } catch {
      /* fall through to lines */
    }
  }
  if (!rows.length) {
    text.split('\n').forEach((raw, i) => {
      const line = raw.trim();
      if (!line) return;
      try {
        rows.push({ line: i + 1, value: JSON.parse(line) });
      } catch {
        out.skipped.push(`line ${i + 1}: not valid JSON`);
      }
    });
  }
  const str = (v: unknown) => (typeof v === 'string' ? v : null);
  for (const { line, value } of rows) {
    if (!value || typeof value !== 'object' || Array.isArray(value)) {
      out.skipped.push(`line ${line}: not a JSON object`);
      continue;
    }
    const o = value as Record<string, unknown>;
    if (Array.isArray(o.messages)) {
      const msgs = o.messages as { role?: unknown; content?: unknown }[];
      let found = 0;
      for (let i = 0; i + 1 < msgs.length; i++) {
        const u = msgs[i];
        const a = msgs[i + 1];
        if (u?.role === 'user' && a?.role === 'assistant' && str(u.content) !== null && str(a.content) !== null) {
          out.pairs.push({ id: newId(), prompt: u.content as string, response: a.content as string });
          found++;
          i++;
        }
      }
      if (!found) out.skipped.push(`line ${line}: no user turn followed by an assistant turn`);
    } else if ('prompt' in o || 'completion' in o) {
      const p = str(o.prompt);
      const c = str(o.completion) ?? str(o.response) ?? str(o.output);
      if (p === null || c === null) out.skipped.push(`line ${line}: "prompt" and "completion" must both be text`);
      else if (!p.trim()) out.texts.push(c);
      else out.pairs.push({ id: newId(), prompt: p, response: c });
    } else if (str(o.text) !== null) {
      out.texts.push(o.text as string);
    } else if (str(o.instruction) !== null && str(o.output) !== null) {
      const input = str(o.input);
      out.pairs.push({ id: newId(), prompt: input ? `${o.instruction}\n\n${input}` : (o.instruction as string), response: o.output as string });
    } else {
      out.skipped.push(`line ${line}: expected "messages", "prompt"/"completion" or "text"`);
    }
  }
  return out;
}
