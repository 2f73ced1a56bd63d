// Panel 4: ask a question; the base model and the adapted model answer side by side, streamed.
// Chats go through the engine queue, so they also work between training steps.

import { serial, state, watch } from './app.ts';
import { explain } from './errors.ts';
import type { GenerateOptions, Message } from './types.ts';
import { loadSettings, saveSettings } from './store.ts';
import { $, h, showAlert } from './ui.ts';

const GEN_FIELDS = ['g-max', 'g-temp', 'g-topp', 'g-system'];

const err = () => $('try-error');
let generating = false;
let cancel = false;

function options(adapter: boolean): GenerateOptions {
  const n = (id: string, d: number) => {
    const v = Number($<HTMLInputElement>(id).value);
    return Number.isFinite(v) ? v : d;
  };
  return {
    maxNewTokens: Math.max(1, Math.round(n('g-max', 128))),
    temperature: Math.max(0, n('g-temp', 0)),
    topP: Math.min(1, Math.max(0.01, n('g-topp', 0.9))),
    seed: 0,
    adapter,
  };
}

function blocked(): boolean {
  return generating || !state.model || state.task === 'import' || state.task === 'load' || state.task === 'resume';
}

async function answer(out: HTMLElement, messages: Message[], adapter: boolean): Promise<string> {
  out.classList.add('streaming');
  out.textContent = '';
  let text = '';
  try {
    text = await serial((e) =>
      e.generate(messages, options(adapter), (piece) => {
        text += piece;
        out.textContent = text;
        return !cancel;
      }),
    );
    out.textContent = text;
    if (!text.trim()) {
      out.textContent = text ? '(only blank space)' : '(no answer: the model ended at once)';
      out.classList.add('muted');
    }
    out.dataset.raw = text;
  } catch (e) {
    out.textContent = text;
    out.append(h('span', { class: 'inline-error' }, explain(e, 'Could not answer').split('\n')[0]));
  } finally {
    out.classList.remove('streaming');
    if (cancel) out.append(h('span', { class: 'muted' }, ' (stopped)'));
  }
  return text;
}

async function send(ev: Event): Promise<void> {
  ev.preventDefault();
  const input = $<HTMLTextAreaElement>('chat-input');
  const q = input.value.trim();
  if (!q || blocked()) return;
  showAlert(err(), null);
  const system = $<HTMLInputElement>('g-system').value.trim();
  const messages: Message[] = [...(system ? [{ role: 'system' as const, content: system }] : []), { role: 'user', content: q }];
  input.value = '';

  const thread = $('thread');
  thread.querySelector('.empty')?.remove();
  const baseOut = h('div', { class: 'answer', 'data-answer': 'base' });
  const tunedOut = h('div', { class: 'answer', 'data-answer': 'adapted' });
  const withAdapter = state.hasAdapter;
  if (!withAdapter) {
    tunedOut.classList.add('muted');
    tunedOut.textContent = 'No adapter yet: train one, or import one in the Adapter panel.';
  }
  const ex = h('article', { class: 'exchange' },
    h('p', { class: 'question' }, q),
    h('div', { class: 'answers' },
      h('section', { class: 'side' }, h('h4', {}, 'Base model'), baseOut),
      h('section', { class: 'side tuned' }, h('h4', {}, 'With your adapter'), tunedOut),
    ),
  );
  thread.append(ex);
  ex.scrollIntoView({ block: 'nearest' });

  generating = true;
  cancel = false;
  renderButtons();
  $('try-status').textContent = 'Answering…';
  try {
    await answer(baseOut, messages, false);
    if (withAdapter && !cancel) await answer(tunedOut, messages, true);
  } finally {
    generating = false;
    $('try-status').textContent = '';
    renderButtons();
    input.focus();
  }
}

function renderButtons(): void {
  $<HTMLButtonElement>('chat-send').disabled = blocked();
  $<HTMLButtonElement>('chat-stop').disabled = !generating;
  if (!generating) {
    $('try-status').textContent = state.model
      ? state.hasAdapter
        ? 'Base model and adapter ready.'
        : 'Base model ready; no adapter yet.'
      : 'Load a model first.';
  }
}

export async function initChatPanel(): Promise<void> {
  const s = await loadSettings();
  for (const id of GEN_FIELDS) {
    const v = s.generate?.[id];
    if (v !== undefined) $<HTMLInputElement>(id).value = v;
    $(id).addEventListener('input', () => {
      void saveSettings({ generate: Object.fromEntries(GEN_FIELDS.map((f) => [f, $<HTMLInputElement>(f).value])) });
    });
  }
  $('chat-form').addEventListener('submit', (e) => void send(e));
  $('chat-input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $<HTMLFormElement>('chat-form').requestSubmit();
    }
  });
  $('chat-stop').addEventListener('click', () => {
    cancel = true;
  });
  watch(renderButtons);
}
