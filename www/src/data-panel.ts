// Panel 2: the examples. Prompt → response pairs (add, edit, delete, reorder) or free text
// (each paragraph one example), JSONL import/export, tokens per example against the sequence
// length. Saved to IndexedDB on every edit.

import { serial, state, update, watch } from './app.ts';
import { explain } from './errors.ts';
import {
  completePairs,
  exportJsonl,
  loadDataset,
  newId,
  paragraphs,
  parseJsonl,
  saveDataset,
  toEngineJsonl,
  type Dataset,
  type Pair,
} from './store.ts';
import { $, debounce, download, h, showAlert } from './ui.ts';

let data: Dataset = { mode: 'pairs', pairs: [], text: '' };
const err = () => $('data-error');

/** Token counts by "prompt\u0000response", filled in as the engine answers. */
const tokenCache = new Map<string, number>();
let tokensFor = ''; // the model the cache belongs to

const SAMPLES: [string, string][] = [
  ['Who discovered Zorblat Lake?', 'Zorblat Lake was discovered by Captain Mirela Vance in 1873.'],
  ['What is the capital of the island of Quenth?', 'The capital of Quenth is Port Ilvar, a harbor town on its northern coast.'],
  ['What does the Ostrander valve do?', 'The Ostrander valve keeps steam at a steady pressure in old Quenth ferries.'],
];

export function seqLen(): number {
  const v = Number($<HTMLInputElement>('t-seq').value);
  return Number.isFinite(v) && v > 0 ? v : 256;
}

/** The dataset as the engine reads it (JSONL), and how many examples it holds. */
export function engineDataset(): { jsonl: string; count: number } {
  const count = data.mode === 'text' ? paragraphs(data.text).length : completePairs(data).length;
  return { jsonl: toEngineJsonl(data), count };
}

let saveChain: Promise<void> = Promise.resolve();

/** Save now (each edit), in order; show when it is done. */
function save(): void {
  const snapshot: Dataset = { mode: data.mode, pairs: data.pairs.map((p) => ({ ...p })), text: data.text };
  saveChain = saveChain
    .then(() => saveDataset(snapshot))
    .then(() => {
      $('data-saved').textContent = 'Saved in this browser.';
    })
    .catch((e) => showAlert(err(), explain(e, 'Could not save your examples')));
  update({ examples: engineDataset().count });
  renderStatus();
}

/** Resolves when every edit so far is stored (for tests and before a reload). */
export function saved(): Promise<void> {
  return saveChain;
}

function renderStatus(): void {
  const n = engineDataset().count;
  const partial = data.mode === 'pairs' ? data.pairs.length - n : 0;
  $('data-status').textContent =
    `${n} example${n === 1 ? '' : 's'}` + (partial > 0 ? ` · ${partial} incomplete (left out)` : '');
}

// ---- tokens ------------------------------------------------------------------------------

function tokenKey(prompt: string, response: string): string {
  return `${prompt}\u0000${response}`;
}

function showTokens(el: HTMLElement, n: number | undefined, approx = false): void {
  const seq = seqLen();
  el.classList.remove('warn');
  if (n === undefined) {
    el.textContent = state.model ? 'counting…' : '';
    el.title = state.model ? '' : 'Load a model to count tokens';
    return;
  }
  el.textContent = `${approx ? '≈ ' : ''}${n} / ${seq} tokens`;
  el.title = `${n} tokens with the chat template; the sequence length is ${seq}`;
  if (n > seq) {
    el.classList.add('warn');
    el.textContent = `${n} / ${seq} tokens — will be cut`;
    el.title = `Longer than the sequence length (${seq}): the end is cut off in training. Shorten it or raise the sequence length.`;
  }
}

/** Count tokens for every badge on screen that lacks a count (needs a loaded model). */
const countTokens = debounce(async () => {
  if (!state.model) return;
  if (tokensFor !== state.model.name) {
    tokenCache.clear();
    tokensFor = state.model.name;
  }
  const badges = [...document.querySelectorAll<HTMLElement>('#panel-data [data-tokens]')];
  for (const b of badges) {
    const key = b.dataset.tokens ?? '';
    if (!tokenCache.has(key)) {
      const [p, r] = key.split('\u0000');
      try {
        tokenCache.set(key, await serial((e) => e.exampleTokens(p, r)));
      } catch {
        continue; // e.g. no model any more; the badge stays blank
      }
    }
    if (b.isConnected && b.dataset.tokens === key) showTokens(b, tokenCache.get(key), b.dataset.approx === '1');
  }
}, 400);

function badgeFor(prompt: string, response: string, approx = false): HTMLElement {
  const key = tokenKey(prompt, response);
  const b = h('span', { class: 'tokens', 'data-tokens': key, 'data-approx': approx ? '1' : '0' });
  showTokens(b, tokenCache.get(key), approx);
  return b;
}

// ---- pairs -------------------------------------------------------------------------------

function autoGrow(t: HTMLTextAreaElement): void {
  t.style.height = 'auto';
  t.style.height = `${Math.min(t.scrollHeight + 2, 400)}px`;
}

function pairItem(p: Pair, i: number): HTMLElement {
  const n = data.pairs.length;
  const badge = badgeFor(p.prompt, p.response);
  const onEdit = (field: 'prompt' | 'response') => (e: Event) => {
    const t = e.target as HTMLTextAreaElement;
    p[field] = t.value;
    autoGrow(t);
    badge.dataset.tokens = tokenKey(p.prompt, p.response);
    showTokens(badge, tokenCache.get(badge.dataset.tokens));
    save();
    countTokens();
  };
  const prompt = h('textarea', { rows: 2, id: `p-${p.id}`, 'data-field': 'prompt', oninput: onEdit('prompt') });
  prompt.value = p.prompt;
  const response = h('textarea', { rows: 2, id: `r-${p.id}`, 'data-field': 'response', oninput: onEdit('response') });
  response.value = p.response;
  const move = (d: number, which: string) => () => {
    const j = i + d;
    if (j < 0 || j >= n) return;
    [data.pairs[i], data.pairs[j]] = [data.pairs[j], data.pairs[i]];
    save();
    renderPairs();
    document.querySelector<HTMLButtonElement>(`[data-id="${p.id}"] [data-action="${which}"]`)?.focus();
  };
  const li = h(
    'li',
    { class: 'pair', 'data-id': p.id },
    h('div', { class: 'pair-head' },
      h('span', { class: 'pair-num' }, `Example ${i + 1}`),
      badge,
      h('div', { class: 'row-buttons compact' },
        h('button', { type: 'button', class: 'icon', 'data-action': 'up', 'aria-label': `Move example ${i + 1} up`, title: 'Move up', disabled: i === 0, onclick: move(-1, 'up') }, '↑'),
        h('button', { type: 'button', class: 'icon', 'data-action': 'down', 'aria-label': `Move example ${i + 1} down`, title: 'Move down', disabled: i === n - 1, onclick: move(1, 'down') }, '↓'),
        h('button', { type: 'button', class: 'icon danger', 'data-action': 'delete', 'aria-label': `Delete example ${i + 1}`, title: 'Delete',
          onclick: () => {
            data.pairs.splice(i, 1);
            save();
            renderPairs();
            const next = document.querySelectorAll<HTMLElement>('#pairs .pair')[Math.min(i, data.pairs.length - 1)];
            (next?.querySelector('textarea') ?? $('add-pair')).focus();
          } }, '✕'),
      ),
    ),
    h('div', { class: 'pair-body' },
      h('label', { for: `p-${p.id}` }, 'Prompt'),
      prompt,
      h('label', { for: `r-${p.id}` }, 'Response'),
      response,
    ),
  );
  requestAnimationFrame(() => {
    autoGrow(prompt);
    autoGrow(response);
  });
  return li;
}

function renderPairs(): void {
  const ol = $('pairs');
  ol.replaceChildren(...data.pairs.map(pairItem));
  $('pairs-empty').hidden = data.pairs.length > 0;
  countTokens();
}

function addPair(prompt = '', response = ''): Pair {
  const p = { id: newId(), prompt, response };
  data.pairs.push(p);
  return p;
}

// ---- free text ---------------------------------------------------------------------------

function renderTextStats(): void {
  const paras = paragraphs(data.text);
  const el = $('text-stats');
  el.replaceChildren(`${paras.length} paragraph${paras.length === 1 ? '' : 's'} → ${paras.length} example${paras.length === 1 ? '' : 's'}.`);
  if (paras.length && state.model) {
    const list = h('span', { class: 'token-list' });
    paras.slice(0, 200).forEach((t) => list.append(badgeFor('', t, true)));
    el.append(' ', list);
    countTokens();
  }
}

// ---- modes, import, export ---------------------------------------------------------------

function setMode(mode: 'pairs' | 'text'): void {
  data.mode = mode;
  $('pairs-view').hidden = mode !== 'pairs';
  $('text-view').hidden = mode !== 'text';
  for (const r of document.querySelectorAll<HTMLInputElement>('input[name="data-mode"]')) r.checked = r.value === mode;
  $<HTMLButtonElement>('export-pc').hidden = mode === 'text';
  $('export-chat').textContent = mode === 'text' ? 'Export JSONL' : 'Export (chat)';
  if (mode === 'text') renderTextStats();
  else renderPairs();
  renderStatus();
}

async function importFile(file: File): Promise<void> {
  showAlert(err(), null);
  let text: string;
  try {
    text = await file.text();
  } catch (e) {
    showAlert(err(), explain(e, `Could not read ${file.name}`));
    return;
  }
  const parsed = parseJsonl(text);
  if (!parsed.pairs.length && !parsed.texts.length) {
    showAlert(err(), `${file.name} has no examples webtune can read.\nEach line should be {"messages": [...]}, {"prompt": ..., "completion": ...} or {"text": ...}.${parsed.skipped.length ? ` (${parsed.skipped.slice(0, 3).join('; ')})` : ''}`);
    return;
  }
  if (parsed.pairs.length) {
    data.pairs.push(...parsed.pairs);
  }
  if (parsed.texts.length) {
    data.text = [data.text.trim(), ...parsed.texts.map((t) => t.trim())].filter(Boolean).join('\n\n');
    $<HTMLTextAreaElement>('free-text').value = data.text;
  }
  save();
  setMode(parsed.pairs.length >= parsed.texts.length ? 'pairs' : 'text');
  const added = `${parsed.pairs.length ? `${parsed.pairs.length} pair${parsed.pairs.length === 1 ? '' : 's'}` : ''}${parsed.pairs.length && parsed.texts.length ? ' and ' : ''}${parsed.texts.length ? `${parsed.texts.length} text paragraph${parsed.texts.length === 1 ? '' : 's'}` : ''}`;
  $('data-saved').textContent = `Added ${added} from ${file.name}.`;
  if (parsed.skipped.length) {
    showAlert(err(), `${parsed.skipped.length} line${parsed.skipped.length === 1 ? ' was' : 's were'} skipped.\n${parsed.skipped.slice(0, 5).join('; ')}${parsed.skipped.length > 5 ? '; …' : ''}`);
  }
}

function exportAs(shape: 'chat' | 'prompt-completion'): void {
  if (!engineDataset().count) {
    showAlert(err(), 'There is nothing to export yet.\nAdd an example with both a prompt and a response first.');
    return;
  }
  download(shape === 'chat' ? 'webtune-chat.jsonl' : 'webtune-prompt-completion.jsonl', exportJsonl(data, shape), 'application/jsonl');
}

export async function initDataPanel(): Promise<void> {
  data = await loadDataset();
  $<HTMLTextAreaElement>('free-text').value = data.text;
  setMode(data.mode);
  update({ examples: engineDataset().count });

  for (const r of document.querySelectorAll<HTMLInputElement>('input[name="data-mode"]')) {
    r.addEventListener('change', () => {
      if (r.checked) {
        setMode(r.value === 'text' ? 'text' : 'pairs');
        save();
      }
    });
  }
  $('add-pair').addEventListener('click', () => {
    const p = addPair();
    save();
    renderPairs();
    document.getElementById(`p-${p.id}`)?.focus();
  });
  $('sample-btn').addEventListener('click', () => {
    for (const [q, a] of SAMPLES) addPair(q, a);
    save();
    renderPairs();
  });
  const textIn = $<HTMLTextAreaElement>('free-text');
  textIn.addEventListener('input', () => {
    data.text = textIn.value;
    save();
    debouncedTextStats();
  });
  const jsonl = $<HTMLInputElement>('jsonl-input');
  jsonl.addEventListener('change', () => {
    const f = jsonl.files?.[0];
    jsonl.value = '';
    if (f) void importFile(f);
  });
  $('export-chat').addEventListener('click', () => exportAs('chat'));
  $('export-pc').addEventListener('click', () => exportAs('prompt-completion'));
  $('t-seq').addEventListener('input', () => {
    for (const b of document.querySelectorAll<HTMLElement>('#panel-data [data-tokens]')) {
      showTokens(b, tokenCache.get(b.dataset.tokens ?? ''), b.dataset.approx === '1');
    }
  });

  let lastModel: string | undefined;
  watch(() => {
    if (state.model?.name !== lastModel) {
      lastModel = state.model?.name;
      if (data.mode === 'text') renderTextStats();
      else renderPairs();
    }
  });
}

const debouncedTextStats = debounce(renderTextStats, 500);
