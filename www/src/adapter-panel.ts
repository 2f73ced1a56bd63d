// Panel 5: download the adapter (PEFT files) and use a saved one.

import { idle, serial, state, task, update, watch } from './app.ts';
import { explain } from './errors.ts';
import { $, bytes, download, showAlert } from './ui.ts';

const err = () => $('adapter-error');

async function exportAdapter(): Promise<void> {
  showAlert(err(), null);
  try {
    const a = await serial((e) => e.exportAdapter());
    download('adapter_model.safetensors', a.model);
    // A second download right away is sometimes dropped by browsers without a pause.
    await new Promise((r) => setTimeout(r, 300));
    download('adapter_config.json', a.config, 'application/json');
    $('adapter-status').textContent = `Downloaded adapter_model.safetensors (${bytes(a.model.size)}) and adapter_config.json.`;
  } catch (e) {
    showAlert(err(), explain(e, 'Could not export the adapter'));
  }
}

async function importAdapter(files: File[]): Promise<void> {
  showAlert(err(), null);
  const st = files.find((f) => f.name.endsWith('.safetensors'));
  const cfg = files.find((f) => f.name.endsWith('.json'));
  if (!st || !cfg) {
    showAlert(err(), 'Pick both files at once: adapter_model.safetensors and adapter_config.json.\nHold Ctrl (or ⌘) to select the second file.');
    return;
  }
  if (!state.model) {
    showAlert(err(), 'Load the model the adapter was trained on first.\nThen pick the adapter files again.');
    return;
  }
  if (!idle()) {
    showAlert(err(), 'Wait for the current task to finish (or pause training), then pick the files again.');
    return;
  }
  try {
    await task('adapter', () => serial((e) => e.importAdapter({ model: st, config: cfg })));
    update({ hasAdapter: true, adapterFrom: 'file', runActive: false });
    $('adapter-status').textContent = `Using ${st.name} (${bytes(st.size)}) for chat.`;
  } catch (e) {
    showAlert(err(), explain(e, 'Could not use that adapter'));
  }
}

export function initAdapterPanel(): void {
  $('adapter-export').addEventListener('click', () => void exportAdapter());
  const input = $<HTMLInputElement>('adapter-input');
  input.addEventListener('change', () => {
    const files = [...(input.files ?? [])];
    input.value = '';
    void importAdapter(files);
  });
  watch(() => {
    $<HTMLButtonElement>('adapter-export').disabled = !(state.model && state.hasAdapter && state.adapterFrom === 'run');
    input.disabled = !state.model || !idle();
    input.parentElement?.classList.toggle('disabled', input.disabled);
    const status = $('adapter-status');
    const said = status.textContent ?? '';
    if (!state.model) status.textContent = 'Load a model first.';
    else if (!state.hasAdapter) status.textContent = 'No adapter yet: train one, or pick saved files.';
    else if (state.adapterFrom === 'run' && !said.startsWith('Downloaded')) status.textContent = 'The trained adapter is ready to download.';
  });
}
