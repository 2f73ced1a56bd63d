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
import { loadDataset, markStored, takeStoredMark } from './store.ts';
import type { PageEngine } from './types.ts';
import { $, showAlert } from './ui.ts';

/** Say so when the browser cleared this site's storage since an earlier visit that stored
 *  something (see store.ts); otherwise keep remembering whether anything is stored. */
async function checkEviction(engine: PageEngine): Promise<void> {
  const had = takeStoredMark();
  const [models, imports, sessions, data] = await Promise.all([
    engine.listModels(),
    engine.listImports(),
    engine.listSessions(),
    loadDataset(),
  ]).catch(() => [[1], [], [], null] as const); // cannot tell: assume nothing was cleared
  if (models.length + imports.length + sessions.length > 0 || data === null || data.pairs.length > 0 || data.text.trim() !== '') {
    markStored();
  } else if (had) {
    const { persisted } = await engine.storage().catch(() => ({ persisted: false }));
    showAlert(
      $('global-error'),
      'This browser cleared the stored models, training runs and examples since your last visit ' +
        '(browsers do that when disk space runs low, unless a site’s storage is kept).\n' +
        'Import the model again to carry on' +
        (persisted ? '.' : '; allow this site to keep its storage when the browser asks, so it is not cleared again.'),
    );
  }
}

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
    await checkEviction(engine);
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
