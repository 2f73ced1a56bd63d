// Panel 3: the training settings, start/pause/resume/stop, progress, the loss and memory
// charts, and the saved runs (resumable after a reload).

import { idle, serial, state, task, update, watch } from './app.ts';
import { LossChart, MemoryChart } from './charts.ts';
import { engineDataset } from './data-panel.ts';
import { explain } from './errors.ts';
import { load } from './model-panel.ts';
import { loadSettings, saveSettings } from './store.ts';
import type { SessionInfo, SessionSummary, StepReport, Target, TrainConfig, TrainResult, WeightFormat } from './types.ts';
import { $, bytes, duration, h, showAlert } from './ui.ts';

const err = () => $('train-error');
let loss: LossChart;
let mem: MemoryChart;

/** The run on the page. */
let run: { id: string; total: number; step: number; stepMs: number[] } | null = null;
let sessions: SessionSummary[] = [];
/** Set by Stop: the run ends (saved) instead of pausing. */
let stopping = false;

/** The client saves the run every this many steps, on pause and at the end. */
const SAVE_EVERY = 10;

const FIELDS = ['t-epochs', 't-steps', 't-lr', 't-optimizer', 't-seq', 't-batch', 't-accum', 't-rank', 't-alpha', 't-budget'];

function num(id: string, fallback: number): number {
  const v = Number($<HTMLInputElement>(id).value);
  return Number.isFinite(v) ? v : fallback;
}

function targets(): Target[] {
  return [...document.querySelectorAll<HTMLInputElement>('input[name="target"]:checked')].map((c) => c.value as Target);
}

/** Optimizer steps for `examples` examples: epochs × examples ÷ (batch × accum), then the cap. */
function plannedSteps(examples: number): { steps: number; capped: boolean } {
  const per = Math.max(1, num('t-batch', 4)) * Math.max(1, num('t-accum', 1));
  const fromEpochs = Math.max(1, Math.ceil((num('t-epochs', 10) * examples) / per));
  const cap = Math.floor(num('t-steps', 0));
  return cap > 0 && fromEpochs > cap ? { steps: cap, capped: true } : { steps: fromEpochs, capped: false };
}

function config(examples: number): TrainConfig | string {
  const lr = Number($<HTMLInputElement>('t-lr').value.trim());
  if (!Number.isFinite(lr) || lr <= 0) return 'The learning rate must be a positive number, such as 1e-3.';
  const t = targets();
  if (!t.length) return 'Pick at least one projection to adapt.';
  const plan = plannedSteps(examples);
  return {
    rank: Math.max(1, Math.round(num('t-rank', 8))),
    alpha: Math.max(1, num('t-alpha', 16)),
    targets: t,
    seq: Math.max(8, Math.round(num('t-seq', 256))),
    batch: Math.max(1, Math.round(num('t-batch', 4))),
    accum: Math.max(1, Math.round(num('t-accum', 1))),
    steps: plan.capped ? plan.steps : null,
    epochs: Math.max(0.01, num('t-epochs', 10)),
    optimizer: $<HTMLSelectElement>('t-optimizer').value as TrainConfig['optimizer'],
    lr,
  };
}

function renderPlan(): void {
  const n = state.examples;
  const el = $('t-plan');
  if (!n) {
    el.textContent = 'Add examples in the Data panel to see how long training takes.';
    return;
  }
  const p = plannedSteps(n);
  const per = Math.max(1, num('t-batch', 4)) * Math.max(1, num('t-accum', 1));
  el.textContent =
    `${n} example${n === 1 ? '' : 's'}, ${per} per step → about ${p.steps} step${p.steps === 1 ? '' : 's'}` +
    (p.capped ? ` (capped by Max steps).` : ` (${num('t-epochs', 10)} epochs; Max steps 0 = no cap).`);
}

function sessionId(): string {
  const d = new Date();
  const p = (n: number) => String(n).padStart(2, '0');
  return `run-${d.getFullYear()}${p(d.getMonth() + 1)}${p(d.getDate())}-${p(d.getHours())}${p(d.getMinutes())}${p(d.getSeconds())}`;
}

// ---- progress ----------------------------------------------------------------------------

function showProgress(r: StepReport | null): void {
  if (!run) return;
  $('train-progress').hidden = false;
  const frac = run.total ? run.step / run.total : 0;
  $<HTMLProgressElement>('train-bar').value = frac;
  $('train-pct').textContent = `${Math.floor(frac * 100)}%`;
  $('train-what').textContent = `Step ${run.step} of ${run.total}`;
  if (!r) return;
  const recent = run.stepMs.slice(-10);
  const avg = recent.reduce((a, b) => a + b, 0) / Math.max(1, recent.length);
  const left = ((run.total - run.step) * avg) / 1000;
  $('train-detail').textContent =
    `loss ${r.loss.toFixed(4)} · ${(avg / 1000).toFixed(avg < 10_000 ? 2 : 1)} s per step · ` +
    `${run.step < run.total ? `${duration(left)} left` : 'done'} · ${Math.round(r.tokensPerSec)} tokens/s · ` +
    `GPU memory peak ${bytes(r.memory.peak)}`;
}

function renderStatus(): void {
  const el = $('train-status');
  if (!state.model) el.textContent = 'Load a model first.';
  else if (!run) el.textContent = state.examples ? 'Ready to train.' : 'Add examples in the Data panel first.';
  else if (state.stepping) el.textContent = `Training ${run.id}…`;
  else if (run.step >= run.total) el.textContent = `Finished ${run.id}: try it below, or download the adapter.`;
  else el.textContent = `Paused ${run.id} at step ${run.step} of ${run.total}.`;
}

function renderButtons(): void {
  const canStart = idle() && !!state.model && state.examples > 0 && !state.stepping;
  $<HTMLButtonElement>('train-start').disabled = !canStart;
  $<HTMLButtonElement>('train-pause').disabled = !state.stepping;
  $<HTMLButtonElement>('train-resume').disabled = !(run && !state.stepping && state.runActive && run.step < run.total && idle());
  $<HTMLButtonElement>('train-stop').disabled = !(run && state.runActive && (state.stepping || run.step < run.total));
  for (const id of FIELDS) $<HTMLInputElement>(id).disabled = state.stepping;
  for (const c of document.querySelectorAll<HTMLInputElement>('input[name="target"]')) c.disabled = state.stepping;
}

// ---- the loop ----------------------------------------------------------------------------

/** What the client calls while its worker trains. */
const handlers = {
  onStart: (info: SessionInfo) => begin(info),
  onStep: (r: StepReport) => {
    if (!run) return;
    run.step = r.step;
    run.total = r.totalSteps;
    run.stepMs.push(r.ms);
    if (r.skipped) {
      $('train-detail').textContent =
        `Step ${r.step + 1} was skipped: its loss was not a number. If this repeats, lower the learning rate.`;
      return;
    }
    loss.add(r.step, r.loss);
    mem.addStep(r.step, r.memory);
    showProgress(r);
  },
};

/** Wait for the client's training loop (train or resume) to end: done, paused or stopped.
 *  Chats and token counts asked for meanwhile run between steps. */
async function follow(loop: () => Promise<TrainResult>): Promise<void> {
  stopping = false;
  update({ stepping: true, task: 'train' });
  try {
    const r = await loop();
    if (run) {
      run.step = r.step;
      run.total = r.totalSteps;
    }
  } catch (e) {
    showAlert(err(), explain(e, 'Training stopped'));
  } finally {
    update({ stepping: false, task: null });
  }
  if (stopping) update({ runActive: false });
  stopping = false;
  await refreshSessions();
  renderStatus();
  renderButtons();
}

function begin(info: SessionInfo): void {
  run = { id: info.sessionId, total: info.totalSteps, step: info.step ?? 0, stepMs: [] };
  loss.set(info.losses ?? []);
  mem.clear();
  const warn = $('train-warnings');
  if (info.warnings?.length) showAlert(warn, `Note\n${info.warnings.join(' ')}`);
  else showAlert(warn, null);
  update({ runActive: true, hasAdapter: true, adapterFrom: 'run' });
  void saveSettings({ session: info.sessionId });
  showProgress(null);
}

async function start(ev: Event): Promise<void> {
  ev.preventDefault();
  if (!idle() || !state.model) return;
  showAlert(err(), null);
  const { jsonl, count } = engineDataset();
  if (!count) {
    showAlert(err(), 'There are no complete examples to train on.\nAdd some in the Data panel: each needs a prompt and a response.');
    return;
  }
  const cfg = config(count);
  if (typeof cfg === 'string') {
    showAlert(err(), `${cfg}\nFix the field and press Start again.`);
    return;
  }
  const budgetText = $<HTMLInputElement>('t-budget').value.trim();
  const budgetMb = budgetText ? Number(budgetText) : undefined;
  if (budgetMb !== undefined && !(budgetMb > 0)) {
    showAlert(err(), 'The memory budget must be a number of megabytes above 0, or empty for no limit.\nFix the field and press Start again.');
    return;
  }
  const memoryBudget = budgetMb === undefined ? undefined : Math.round(budgetMb * 1e6);
  await follow(() =>
    serial((e) => e.train({ sessionId: sessionId(), config: cfg, dataset: jsonl, saveEvery: SAVE_EVERY, memoryBudget }, handlers)),
  );
}

async function resumeSaved(s: SessionSummary): Promise<void> {
  if (!idle()) return;
  showAlert(err(), null);
  if (state.model?.name !== s.model || (s.weights && state.model.weights && state.model.weights !== s.weights)) {
    if (!(await load(s.model, s.weights as WeightFormat, s.streamed))) return;
  }
  if (s.step < s.totalSteps) {
    await follow(() => serial((e) => e.resume(s.id, { ...handlers, saveEvery: SAVE_EVERY })));
    return;
  }
  // A finished run: load it (its adapter chats and exports) without stepping.
  try {
    const info = await task('resume', () => serial((e) => e.resumeSession(s.id)));
    begin({ ...info, step: info.step ?? s.step, losses: info.losses ?? s.losses });
  } catch (e) {
    showAlert(err(), explain(e, `Could not open ${s.id}`));
  }
  renderStatus();
}

async function deleteSaved(s: SessionSummary): Promise<void> {
  if (!idle()) return;
  if (!confirm(`Delete the training run ${s.id}? Download its adapter first if you want to keep it.`)) return;
  try {
    await serial((e) => e.deleteSession(s.id));
    if (run?.id === s.id) {
      run = null;
      update({ runActive: false, hasAdapter: false, adapterFrom: null });
      $('train-progress').hidden = true;
    }
  } catch (e) {
    showAlert(err(), explain(e, `Could not delete ${s.id}`));
  }
  await refreshSessions();
}

export async function refreshSessions(): Promise<void> {
  try {
    sessions = await serial((e) => e.listSessions());
  } catch {
    return;
  }
  sessions.sort((a, b) => b.updated - a.updated);
  renderSessions();
}

function renderSessions(): void {
  const ul = $('session-list');
  ul.replaceChildren();
  if (!sessions.length) {
    ul.append(h('li', { class: 'empty' }, 'None yet.'));
    return;
  }
  for (const s of sessions) {
    const current = run?.id === s.id && state.runActive;
    const last = s.losses.length ? s.losses[s.losses.length - 1] : undefined;
    const when = s.updated > 1e12 ? new Date(s.updated).toLocaleString() : '';
    const done = s.step >= s.totalSteps;
    ul.append(
      h('li', { class: current ? 'item current' : 'item', 'data-session': s.id },
        h('div', { class: 'item-main' },
          h('span', { class: 'item-name' }, s.id),
          h('span', { class: 'item-meta' },
            `${s.model}${s.weights ? ` (${s.weights}${s.streamed ? ', streamed' : ''})` : ''} · step ${s.step} of ${s.totalSteps}` +
              (last !== undefined ? ` · loss ${last.toFixed(3)}` : '') + (when ? ` · ${when}` : '')),
        ),
        h('div', { class: 'row-buttons' },
          current
            ? h('span', { class: 'pill' }, state.stepping ? 'training' : 'open')
            : h('button', { type: 'button', class: done ? '' : 'primary', 'data-action': 'resume', disabled: !idle(), 'aria-label': `${done ? 'Open' : 'Resume'} ${s.id}`, onclick: () => void resumeSaved(s) }, done ? 'Open' : 'Resume'),
          h('button', { type: 'button', class: 'danger', 'data-action': 'delete', disabled: !idle() || current, 'aria-label': `Delete ${s.id}`, onclick: () => void deleteSaved(s) }, 'Delete'),
        ),
      ),
    );
  }
}

export async function initTrainPanel(): Promise<void> {
  loss = new LossChart($('loss-chart'), $('loss-empty'));
  mem = new MemoryChart($('mem-chart'), $('mem-note'), $('mem-empty'));
  const toScale = $<HTMLInputElement>('mem-scale');
  toScale.addEventListener('change', () => mem.setToScale(toScale.checked));

  const s = await loadSettings();
  for (const [id, v] of Object.entries(s.train ?? {})) {
    const el = document.getElementById(id) as HTMLInputElement | null;
    if (!el) continue;
    if (el.type === 'checkbox') el.checked = !!v;
    else el.value = String(v);
  }
  const form = $<HTMLFormElement>('train-form');
  form.addEventListener('submit', (e) => void start(e));
  form.addEventListener('input', () => {
    const train: Record<string, string | boolean> = {};
    for (const id of FIELDS) train[id] = $<HTMLInputElement>(id).value;
    for (const c of document.querySelectorAll<HTMLInputElement>('input[name="target"]')) train[`target-${c.value}`] = c.checked;
    void saveSettings({ train });
    renderPlan();
  });
  for (const c of document.querySelectorAll<HTMLInputElement>('input[name="target"]')) {
    c.id = `target-${c.value}`;
    const v = s.train?.[c.id];
    if (typeof v === 'boolean') c.checked = v;
  }
  // Pause and Stop both finish the step in flight and save the run; after Stop the page treats
  // the run as ended (its adapter still chats and exports; Saved training runs can continue it).
  $('train-pause').addEventListener('click', () => {
    $('train-status').textContent = 'Pausing after this step…';
    void serial((e) => e.pause()).catch((e) => showAlert(err(), explain(e, 'Could not pause')));
  });
  $('train-resume').addEventListener('click', () => {
    showAlert(err(), null);
    void follow(() => serial((e) => e.resume(undefined, { ...handlers, saveEvery: SAVE_EVERY })));
  });
  $('train-stop').addEventListener('click', () => {
    if (state.stepping) {
      stopping = true;
      $('train-status').textContent = 'Stopping after this step…';
      void serial((e) => e.pause()).catch((e) => showAlert(err(), explain(e, 'Could not stop')));
    } else {
      update({ runActive: false });
    }
  });

  watch(() => {
    renderButtons();
    renderStatus();
    renderPlan();
    renderSessions();
  });
}

export async function startTrainPanel(): Promise<void> {
  await refreshSessions();
}
