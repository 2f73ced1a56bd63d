// Panel 1: get a model (bundled, hub, local files), the stored models, storage, the GPU, and
// loading one onto the GPU.

import { serial, state, task, update, watch, idle } from './app.ts';
import { explain } from './errors.ts';
import { loadSettings, markStored, saveSettings } from './store.ts';
import type { PartialImport, ProgressEvent, StoredModel, WeightFormat } from './types.ts';
import { $, bytes, duration, h, ibytes, params, showAlert } from './ui.ts';

/** The model serve.sh puts beside the page, in the hub layout under ./hub/. */
export const BUNDLED = { name: 'smollm2-135m-instruct', repo: 'smollm2-135m-instruct', label: 'SmolLM2-135M-Instruct' };

const err = () => $('model-error');
let stored: StoredModel[] = [];
/** Imports that stopped before their end (a closed tab, a lost connection). */
let unfinished: PartialImport[] = [];

/** A store name for a repo: "Qwen/Qwen2.5-0.5B-Instruct" → "Qwen--Qwen2.5-0.5B-Instruct". */
export function modelName(repo: string): string {
  return repo.trim().replace(/\/+/g, '--').replace(/[^A-Za-z0-9._-]/g, '-');
}

function bundledBase(): string {
  return new URL('hub', document.baseURI).href;
}

// ---- progress ------------------------------------------------------------------------

function progressShow(what: string): void {
  $('import-progress').hidden = false;
  $('import-what').textContent = what;
  $('import-pct').textContent = '';
  $('import-detail').textContent = 'Starting…';
  $<HTMLProgressElement>('import-bar').removeAttribute('value');
}

function onProgress(e: ProgressEvent): void {
  const bar = $<HTMLProgressElement>('import-bar');
  if (e.status === 'total') {
    const frac = e.total > 0 ? e.loaded / e.total : 0;
    bar.value = frac;
    $('import-pct').textContent = `${Math.floor(frac * 100)}%`;
    const rate = e.rate > 0 ? ` · ${bytes(e.rate)}/s` : '';
    const eta = e.eta > 0 && frac < 1 ? ` · ${duration(e.eta)} left` : '';
    $('import-detail').textContent = `${bytes(e.loaded)} of ${bytes(e.total)}${rate}${eta}`;
  } else if (e.status === 'initiate' || e.status === 'download') {
    $('import-what').textContent = `Getting ${e.file}`;
  } else if (e.status === 'ready') {
    bar.value = 1;
    $('import-pct').textContent = '100%';
    $('import-what').textContent = `Stored ${e.name}`;
  }
}

function progressDone(text: string): void {
  $('import-what').textContent = text;
  $<HTMLProgressElement>('import-bar').value = 1;
  $('import-pct').textContent = '';
}

// ---- lists ---------------------------------------------------------------------------

export async function refreshModels(): Promise<void> {
  try {
    stored = await serial((e) => e.listModels());
    unfinished = await serial((e) => e.listImports());
  } catch (e) {
    showAlert(err(), explain(e, 'Could not list the stored models'));
  }
  renderModels();
  void refreshStorage();
}

async function refreshStorage(): Promise<void> {
  try {
    const s = await serial((e) => e.storage());
    const frac = s.quota > 0 ? s.usage / s.quota : 0;
    $<HTMLMeterElement>('storage-meter').value = frac;
    $('storage-text').textContent = `${bytes(s.usage)} used · ${bytes(Math.max(0, s.quota - s.usage))} free${s.persisted ? ' · kept' : ''}`;
    $('storage-text').title = s.persisted
      ? 'The browser keeps this storage even when disk space runs low.'
      : 'The browser may clear this storage when disk space runs low.';
  } catch {
    $('storage-text').textContent = 'unknown';
  }
}

function renderModels(): void {
  const list = $('model-list');
  list.replaceChildren();
  if (!stored.length && !unfinished.length) {
    list.append(h('li', { class: 'empty' }, 'Nothing stored yet.'));
    return;
  }
  for (const p of unfinished) {
    const done = p.total > 0 ? ` (${bytes(p.bytes)} of ${bytes(p.total)})` : '';
    list.append(
      h(
        'li',
        { class: 'item', 'data-unfinished': p.name },
        h('div', { class: 'item-main' }, h('span', { class: 'item-name' }, p.name),
          h('span', { class: 'item-meta' }, `unfinished import${done}: import the same model again to resume it`)),
        h('div', { class: 'row-buttons' },
          h('button', { type: 'button', class: 'danger', 'aria-label': `Delete the unfinished import of ${p.name}`, disabled: !idle(), onclick: () => void remove(p.name) }, 'Delete'),
        ),
      ),
    );
  }
  for (const m of stored) {
    const loaded = state.model?.name === m.name;
    const li = h(
      'li',
      { class: loaded ? 'item current' : 'item', 'data-model': m.name },
      h('div', { class: 'item-main' }, h('span', { class: 'item-name' }, m.name), h('span', { class: 'item-meta' }, bytes(m.bytes) + (loaded ? ' · loaded' : ''))),
      h('div', { class: 'row-buttons' },
        h('button', { type: 'button', class: loaded ? '' : 'primary', 'data-action': 'load', 'aria-label': `Load ${m.name}`, disabled: !idle(), onclick: () => void load(m.name) }, loaded ? 'Reload' : 'Load'),
        h('button', { type: 'button', class: 'danger', 'data-action': 'delete', 'aria-label': `Delete ${m.name}`, disabled: !idle(), onclick: () => void remove(m.name) }, 'Delete'),
      ),
    );
    list.append(li);
  }
}

// ---- actions -------------------------------------------------------------------------

/** Load a stored model onto the GPU with the chosen weight format. */
export async function load(name: string, weights?: WeightFormat, streamed?: boolean): Promise<boolean> {
  if (!idle()) return false;
  const w = weights ?? ($<HTMLSelectElement>('weights-select').value as WeightFormat);
  const stream = streamed ?? $<HTMLInputElement>('stream-check').checked;
  $<HTMLSelectElement>('weights-select').value = w;
  $<HTMLInputElement>('stream-check').checked = stream;
  showAlert(err(), null);
  $('model-status').textContent = `Loading ${name} onto the GPU…`;
  try {
    const f16Products = $<HTMLInputElement>('f16-check').checked;
    const info = await task('load', () => serial((e) => e.loadModel(name, w, { stream, f16Products })));
    update({ model: info, runActive: false, stepping: false, hasAdapter: false, adapterFrom: null });
    void saveSettings({ lastModel: { name, weights: w, stream } });
    return true;
  } catch (e) {
    update({ model: null, runActive: false, stepping: false, hasAdapter: false, adapterFrom: null });
    showAlert(err(), explain(e, `Could not load ${name}`));
    return false;
  } finally {
    renderModels();
  }
}

async function remove(name: string): Promise<void> {
  if (!idle()) return;
  if (!confirm(`Delete ${name} from this browser's storage? You can import it again later.`)) return;
  try {
    await task('import', () => serial((e) => e.deleteModel(name)));
    if (state.model?.name === name) update({ model: null, runActive: false, hasAdapter: false, adapterFrom: null });
  } catch (e) {
    showAlert(err(), explain(e, `Could not delete ${name}`));
  }
  await refreshModels();
}

async function importThen(label: string, name: string, run: () => Promise<StoredModel>): Promise<boolean> {
  if (!idle()) return false;
  showAlert(err(), null);
  progressShow(label);
  try {
    const m = await task('import', run);
    markStored();
    progressDone(`Stored ${m.name} (${bytes(m.bytes)})`);
    await refreshModels();
    return true;
  } catch (e) {
    $('import-progress').hidden = true;
    showAlert(err(), explain(e, `Could not import ${name}`));
    await refreshModels();
    return false;
  }
}

async function useBundled(): Promise<void> {
  const { name, repo, label } = BUNDLED;
  if (!stored.some((m) => m.name === name)) {
    const ok = await importThen(`Copying ${label} into this browser`, label, () =>
      serial((e) => e.importHub({ name, base: bundledBase(), repo, revision: 'main', onProgress })),
    );
    if (!ok) return;
  }
  await load(name);
}

async function fromHub(ev: Event): Promise<void> {
  ev.preventDefault();
  const base = $<HTMLInputElement>('hub-base').value.trim().replace(/\/+$/, '');
  const repo = $<HTMLInputElement>('hub-repo').value.trim();
  const rev = $<HTMLInputElement>('hub-rev').value.trim() || 'main';
  if (!/^https?:\/\//.test(base)) {
    showAlert(err(), 'The server must be an address starting with https://\nFor the Hugging Face Hub it is https://huggingface.co');
    return;
  }
  if (!repo) return;
  void saveSettings({ hub: { base, repo, rev } });
  const name = modelName(repo);
  await importThen(`Downloading ${repo}`, repo, () => serial((e) => e.importHub({ name, base, repo, revision: rev, onProgress })));
}

/** Import a folder's files or one .gguf, named after the folder or the file. */
async function fromFiles(files: File[]): Promise<void> {
  if (!files.length) return;
  const gguf = files.find((f) => f.name.toLowerCase().endsWith('.gguf'));
  let picked = files;
  let base: string;
  if (gguf) {
    picked = [gguf];
    base = gguf.name.replace(/\.gguf$/i, '');
  } else {
    const rel = (files[0] as File & { webkitRelativePath?: string }).webkitRelativePath ?? '';
    base = rel.includes('/') ? rel.split('/')[0] : 'local-model';
    // Only the files the engine reads; a folder may hold much else (.git, other formats).
    picked = files.filter((f) => /\.(json|safetensors|jinja)$/i.test(f.name));
    if (!picked.some((f) => f.name === 'config.json')) {
      showAlert(err(), 'That folder has no config.json.\nPick the folder that holds config.json, tokenizer.json and model.safetensors, or one .gguf file.');
      return;
    }
  }
  const name = modelName(base);
  await importThen(`Importing ${gguf ? gguf.name : base}`, base, () => serial((e) => e.importFiles(name, picked, onProgress)));
}

/** The adapter's vendor and architecture as the page's own navigator.gpu tells them (the
 *  engine's wgpu reports no name on the web). */
async function adapterName(): Promise<string> {
  try {
    const gpu = (navigator as Navigator & { gpu?: { requestAdapter(): Promise<{ info?: Record<string, string> } | null> } }).gpu;
    const info = (await gpu?.requestAdapter())?.info;
    return [info?.vendor, info?.architecture, info?.description].filter(Boolean).join(' · ');
  } catch {
    return '';
  }
}

async function showDevice(): Promise<void> {
  try {
    const d = await serial((e) => e.deviceInfo());
    $('device-name').textContent = d.adapter || (await adapterName()) || d.backend || 'WebGPU';
    const dl = $('device-limits');
    dl.replaceChildren();
    const add = (k: string, v: string) => dl.append(h('dt', {}, k), h('dd', {}, v));
    add('Backend', d.backend === 'BrowserWebGpu' ? 'WebGPU (browser)' : d.backend);
    add('Largest buffer', ibytes(d.limits.maxBufferSize));
    add('Largest storage binding', ibytes(d.limits.maxStorageBufferBindingSize));
    if (d.limits.maxStorageBuffersPerShaderStage) add('Storage buffers per shader', String(d.limits.maxStorageBuffersPerShaderStage));
    if (d.limits.maxComputeWorkgroupStorageSize) add('Workgroup memory', ibytes(d.limits.maxComputeWorkgroupStorageSize));
    if (d.limits.maxComputeInvocationsPerWorkgroup) add('Threads per workgroup', String(d.limits.maxComputeInvocationsPerWorkgroup));
    add('16-bit floats in shaders', d.shaderF16 ? 'yes' : 'no');
    add('Subgroups', d.subgroups ? 'yes' : 'no');
  } catch (e) {
    $('device-name').textContent = 'unavailable';
  }
}

function renderStatus(): void {
  const m = state.model;
  const el = $('model-status');
  if (state.task === 'load') return;
  if (state.task === 'import' && !m) {
    el.textContent = 'Importing a model…';
    return;
  }
  if (!m) {
    el.textContent = state.engine ? 'No model loaded.' : state.engineError ? 'Unavailable in this browser.' : 'Starting the engine…';
    return;
  }
  const w = (m.weights ? ` · ${m.weights} weights` : '') + (m.streamed ? ' · streamed from storage' : '');
  el.replaceChildren(
    h('span', { class: 'dot ok', 'aria-hidden': 'true' }),
    h('strong', {}, m.name),
    ` · ${m.modelType} · ${m.layers} layers · ${params(m.parameters)} parameters${w} · ${bytes(m.weightBytes)} on the GPU`,
    h('span', { class: 'kernels', title: 'The kernel variants measured fastest on this GPU (checked against the reference kernels)' }, ` · kernels: ${m.kernels.replace(/^matmul: /, '')}`),
  );
}

export async function initModelPanel(): Promise<void> {
  $('bundled-btn').addEventListener('click', () => void useBundled());
  $('hub-form').addEventListener('submit', (e) => void fromHub(e));
  const folder = $<HTMLInputElement>('folder-input');
  const filesIn = $<HTMLInputElement>('files-input');
  folder.addEventListener('change', () => {
    void fromFiles([...(folder.files ?? [])]);
    folder.value = '';
  });
  filesIn.addEventListener('change', () => {
    void fromFiles([...(filesIn.files ?? [])]);
    filesIn.value = '';
  });
  const drop = $('drop-zone');
  drop.addEventListener('dragover', (e) => {
    e.preventDefault();
    drop.classList.add('over');
  });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (e) => {
    e.preventDefault();
    drop.classList.remove('over');
    void fromFiles([...(e.dataTransfer?.files ?? [])]);
  });

  const s = await loadSettings();
  if (s.hub) {
    $<HTMLInputElement>('hub-base').value = s.hub.base;
    $<HTMLInputElement>('hub-repo').value = s.hub.repo;
    $<HTMLInputElement>('hub-rev').value = s.hub.rev;
  }
  if (s.lastModel) {
    $<HTMLSelectElement>('weights-select').value = s.lastModel.weights;
    $<HTMLInputElement>('stream-check').checked = s.lastModel.stream ?? false;
  }

  watch(() => {
    const busy = !idle();
    for (const id of ['bundled-btn', 'hub-btn']) $<HTMLButtonElement>(id).disabled = busy;
    for (const id of ['folder-input', 'files-input']) {
      $<HTMLInputElement>(id).disabled = busy;
      $(id).parentElement?.classList.toggle('disabled', busy);
    }
    $<HTMLSelectElement>('weights-select').disabled = busy;
    $<HTMLInputElement>('stream-check').disabled = busy;
    if (state.engineError) $('device-name').textContent = 'unavailable';
    renderStatus();
    renderModels();
  });
}

/** After the engine starts: the GPU, the stored models, and the last model loaded again. */
export async function startModelPanel(): Promise<void> {
  void showDevice();
  await refreshModels();
  const s = await loadSettings();
  if (s.lastModel && stored.some((m) => m.name === s.lastModel?.name) && !state.model) {
    await load(s.lastModel.name, s.lastModel.weights as WeightFormat, s.lastModel.stream ?? false);
  }
}
