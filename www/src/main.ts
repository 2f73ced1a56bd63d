// The page: five panels over one engine (the npm client, which runs the wasm engine in a
// worker). Panels that need no engine (the data) work even where WebGPU is missing.

import './style.css';
import { update } from './app.ts';
import { initAdapterPanel } from './adapter-panel.ts';
import { initChatPanel } from './chat-panel.ts';
import { initDataPanel } from './data-panel.ts';
import { openEngine } from './engine.ts';
import { explain } from './errors.ts';
import { initModelPanel, startModelPanel } from './model-panel.ts';
import { initTrainPanel, startTrainPanel } from './train-panel.ts';
import { $, showAlert } from './ui.ts';

async function main(): Promise<void> {
  await Promise.all([initDataPanel(), initModelPanel(), initTrainPanel(), initChatPanel()]);
  initAdapterPanel();
  // A worker that never answers (a stale build, a hung GPU driver) should not look like a wait.
  const slow = setTimeout(() => {
    showAlert($('global-error'), 'The engine is taking long to start.\nKeep waiting a little, or reload the page; your examples are kept.');
  }, 45_000);
  try {
    const engine = await openEngine();
    clearTimeout(slow);
    showAlert($('global-error'), null);
    update({ engine });
  } catch (e) {
    clearTimeout(slow);
    update({ engineError: e });
    showAlert($('global-error'), explain(e, 'webtune cannot start here'));
    document.body.classList.add('no-engine');
    return;
  }
  await startModelPanel();
  await startTrainPanel();
}

void main();
