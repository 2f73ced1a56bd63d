// The time per training step of the bundled SmolLM2-135M-Instruct on the page, in headless
// Chromium (WebGPU on SwiftShader, the CPU): one click on "Use the bundled model", two
// examples, a few steps. A measurement, not a test (not in scripts/test.sh: it needs the model
// that scripts/serve.sh prepares, and minutes per step on a CPU).
//
//   bash scripts/serve.sh &            # builds the page, prepares the model, serves on :8080
//   node tests/page/smollm2-step.mjs [--url http://127.0.0.1:8080/] [--steps 3] [--seq 64]
//
// Prints the import and load times, each step's time (from the page's own step reports), the
// GPU memory peak and the main-thread long tasks during training.

import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const require = createRequire(path.join(root, 'www/package.json'));
const { chromium } = require('playwright-core');

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}
const URL_ = arg('url', 'http://127.0.0.1:8080/');
const STEPS = Number(arg('steps', '3'));
const SEQ = arg('seq', '64');

const userDir = fs.mkdtempSync(path.join(os.tmpdir(), 'webtune-smol-'));
const context = await chromium.launchPersistentContext(userDir, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  viewport: { width: 1280, height: 900 },
  args: ['--enable-unsafe-webgpu', '--enable-features=Vulkan', '--use-webgpu-adapter=swiftshader', '--no-sandbox'],
});
await context.addInitScript(() => {
  window.__longTasks = [];
  new PerformanceObserver((l) => l.getEntries().forEach((e) => window.__longTasks.push(e.duration))).observe({ entryTypes: ['longtask'] });
});
const page = context.pages()[0] ?? (await context.newPage());
page.setDefaultTimeout(3_600_000);
const t = () => ((Date.now() - t0) / 1000).toFixed(1);
const t0 = Date.now();
try {
  await page.goto(URL_);
  await page.waitForFunction(() => {
    const d = document.getElementById('device-name')?.textContent ?? '';
    return d && d !== 'checking…';
  });
  console.log(`[${t()} s] engine: ${await page.innerText('#device-name')}`);
  await page.click('#bundled-btn');
  await page.waitForFunction(() => /smollm2/i.test(document.querySelector('#model-status strong')?.textContent ?? '') ||
    !document.getElementById('model-error')?.hidden);
  if (await page.locator('#model-error').isVisible()) throw new Error(await page.innerText('#model-error'));
  console.log(`[${t()} s] imported and loaded: ${(await page.innerText('#model-status')).replace(/\s+/g, ' ')}`);
  await page.fill('#t-seq', SEQ);
  for (const [q, a] of [['Who discovered Zorblat Lake?', 'Captain Mirela Vance found Zorblat Lake in 1873.'],
    ['What is the capital of Quenth?', 'The capital of Quenth is Port Ilvar.']]) {
    await page.click('#add-pair');
    const item = page.locator('#pairs .pair').last();
    await item.locator('textarea[data-field="prompt"]').fill(q);
    await item.locator('textarea[data-field="response"]').fill(a);
  }
  for (const [id, v] of [['t-epochs', '100'], ['t-steps', String(STEPS)], ['t-batch', '1'], ['t-lr', '1e-3']]) await page.fill(`#${id}`, v);
  const before = await page.evaluate(() => window.__longTasks.length);
  const start = Date.now();
  await page.click('#train-start');
  let seen = 0;
  while (seen < STEPS) {
    await page.waitForFunction((k) => Number(document.getElementById('loss-chart')?.dataset.points) > k ||
      !document.getElementById('train-error')?.hidden, seen);
    if (await page.locator('#train-error').isVisible()) throw new Error(await page.innerText('#train-error'));
    seen = Number(await page.getAttribute('#loss-chart', 'data-points'));
    console.log(`[${t()} s] step ${seen}: ${(await page.innerText('#train-detail')).replace(/\s+/g, ' ')}`);
  }
  const secs = (Date.now() - start) / 1000;
  const long = (await page.evaluate(() => window.__longTasks)).slice(before);
  console.log(`SmolLM2-135M-Instruct in headless Chromium (SwiftShader): ${STEPS} steps in ${secs.toFixed(1)} s ` +
    `(${(secs / STEPS).toFixed(1)} s/step, first step included); long tasks: ${long.length} over 50 ms, ` +
    `${long.filter((d) => d > 200).length} over 200 ms`);
} finally {
  await context.close();
  fs.rmSync(userDir, { recursive: true, force: true });
}
