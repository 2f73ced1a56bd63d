// The npm package `webtune` in headless Chromium (WebGPU on SwiftShader), through its example
// app (examples/vite-app, built against target/npm/webtune-0.1.0.tgz):
//
//  1. the app imports the tiny random model (`webtune tiny-model`) from this script's server in
//     the hub layout (/tiny/model/resolve/main/<file>, Range requests counted), loads it, trains
//     20 steps and answers greedily: the import used Range requests, the model is listed, the
//     last loss is below 0.7 × the first, an answer came back, no page errors;
//  2. the client's own API through window.__webtune: pause after step 2 (saved, listed), a
//     cut and an aborted answer, resume in memory and pause again, close the client and resume
//     the stored run in a new worker (as after a reload) with a chat answered between steps,
//     export and import of the adapter (same greedy answer), a NotFound error, memory().
//
//  3. a GGUF picked as a File (the tiny llama of fuzz/seeds/gguf/) imported with importFiles:
//     converted range by range as it is stored, listed, and its greedy answer equals the native
//     CLI's on the directory `webtune import --gguf` makes from the same file;
//  4. tabs of the same profile closed in the middle of an import (its weights never arrive),
//     of a run saving every 2 steps and of an export; new tabs find the import unfinished
//     (listImports) and finish it, resume the run from its last checkpoint to the native
//     losses, and export the intact run;
//  5. simulateDeviceLoss() 200 ms into a training step: DeviceLost in plain words, the last
//     checkpoint intact, the run resumed on a new device to the native losses, no download;
//  6. loadModel(name, 'stored', { stream: true }): only the final norm stays on the GPU, each
//     block is fetched from IndexedDB when a step needs it; the run reaches the native losses
//     with at most a quarter of the weights on the GPU at once, and answers a chat.
//
//   node tests/browser/run.mjs [--no-build] [--steps 20] [--out target/screenshots]
//   node tests/browser/run.mjs --no-build --gguf FILE     (only part 3, on FILE: to measure
//       the wasm memory an import needs; `webtune make-gguf --shape qwen2.5-0.5b --out FILE`
//       writes a 993 MB one; add --no-answer to skip loading it, --train-streamed to load it
//       streamed in q4 and report the memory of one training step at seq 256, rank 8, SGD;
//       --train-steps N takes N steps, to time one after the first has compiled the shaders;
//       --profile prints where the last step's GPU time went, kernel by kernel; --decode N times
//       a greedy chat answer of N new tokens, loaded resident in bf16, beside the native CLI's)
//   node tests/browser/run.mjs --no-build --hub DIR       (only: import the model directory DIR
//       from this script's server in the hub layout, and report the wasm memory it took)
//
// CHROMIUM_FLAGS adds flags to Chromium's command line (for experiments, e.g.
// --enable-dawn-features=disable_robustness). scripts/test-browser-app.sh builds the package
// and the CLI first. --no-build skips the
// example app's npm install and vite build. Prints one line per check, the losses, the time per
// step and the answer; exits non-zero on the first failure.

import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import sirv from 'sirv';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
};
const STEPS = Number(arg('steps', '20'));
const GGUF_ONLY = arg('gguf', null);
const HUB_ONLY = arg('hub', null) && path.resolve(arg('hub', null));
const BIG_REPO = 'big/model';
const GGUF = path.resolve(root, GGUF_ONLY ?? 'fuzz/seeds/gguf/tiny-llama.gguf');
const GGUF_QUESTION = 'the 12';
const DECODE = Number(arg('decode', '0'));
const DECODE_PROMPT = 'The quick brown fox jumps over the lazy dog while the small model learns to write notes about gardening, cooking and travel in a private browser tab without sending anything';
const OUT = path.resolve(root, arg('out', 'target/screenshots'));
const app = path.join(root, 'examples/vite-app');
const t0 = Date.now();

let passed = 0;
function ok(what, cond, detail = '') {
  const s = ((Date.now() - t0) / 1000).toFixed(1).padStart(6);
  console.log(`[${s}s] ${cond ? 'ok  ' : 'FAIL'} ${what}${detail ? ` (${detail})` : ''}`);
  if (!cond) throw new Error(`check failed: ${what}`);
  passed++;
}
const note = (msg) => console.log(`         ${msg}`);

// ---- the tiny model, written by the CLI -------------------------------------------------------
const cli = ['target/debug/webtune', 'target/release/webtune']
  .map((p) => path.join(root, p))
  .filter((p) => fs.existsSync(p))
  .sort((a, b) => fs.statSync(b).mtimeMs - fs.statSync(a).mtimeMs)[0];
if (!cli) throw new Error('no webtune CLI: cargo build --bin webtune');
const tiny = path.join(root, 'target/browser/tiny');
const weights = path.join(tiny, 'model.safetensors');
if (!fs.existsSync(weights) || fs.statSync(cli).mtimeMs > fs.statSync(weights).mtimeMs) {
  fs.rmSync(tiny, { recursive: true, force: true });
  execFileSync(cli, ['tiny-model', '--out', tiny], { stdio: 'inherit' });
}

// ---- the API run's data and configuration, shared with the native run it is compared to -----
const API_DATASET = [
  ['What is the capital of Zorbania?', 'The capital of Zorbania is Quillfort.'],
  ['Who invented the glimmerphone?', 'Mira Talvane invented the glimmerphone in 1873.'],
  ['What do moon otters eat?', 'Moon otters eat silver kelp and tiny comets.'],
].map(([q, a]) => JSON.stringify({ messages: [{ role: 'user', content: q }, { role: 'assistant', content: a }] })).join('\n');
const API_CONFIG = { rank: 4, alpha: 8, seq: 64, batch: 3, steps: 8, lr: 1e-2, schedule: 'constant', warmupRatio: 0 };

/** The same run natively (`webtune train`, wgpu on Vulkan): its losses, one per step. */
function nativeLosses() {
  const dir = path.join(root, 'target/browser/native-api');
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir, { recursive: true });
  const data = path.join(dir, 'data.jsonl');
  fs.writeFileSync(data, API_DATASET + '\n');
  const c = API_CONFIG;
  const run = spawnSync(cli, ['train', '--model', tiny, '--data', data, '--out', path.join(dir, 'out'), '--fresh',
    '--steps', String(c.steps), '--rank', String(c.rank), '--alpha', String(c.alpha), '--seq', String(c.seq),
    '--batch', String(c.batch), '--lr', String(c.lr), '--schedule', c.schedule, '--warmup-ratio', String(c.warmupRatio),
    '--save-every', '0'], { encoding: 'utf8', env: { XDG_RUNTIME_DIR: '/tmp', ...process.env } });
  // The CLI reports its steps on stderr (stdout is for results).
  if (run.status !== 0) throw new Error(`webtune train failed: ${run.stderr}`);
  const out = run.stdout + run.stderr;
  return [...out.matchAll(/^step \d+\/\d+ loss (\S+)/gm)].map((m) => Number(m[1]));
}

/** The native CLI's greedy chat answer on the directory `webtune import --gguf` makes of GGUF. */
function nativeGgufAnswer() {
  const dir = path.join(root, 'target/browser/gguf-hf');
  fs.rmSync(dir, { recursive: true, force: true });
  const env = { XDG_RUNTIME_DIR: '/tmp', ...process.env };
  execFileSync(cli, ['import', '--gguf', GGUF, '--out', dir], { env, stdio: 'ignore' });
  const out = execFileSync(cli, ['generate', '--model', dir, '--chat', '--prompt', GGUF_QUESTION, '--max-new-tokens', '8'],
    { env, stdio: ['ignore', 'pipe', 'ignore'] });
  return out.toString().replace(/\n$/, ''); // the CLI ends its output with a newline of its own
}

/** The native CLI's tokens/s on the same greedy chat answer as --decode times in the browser. */
function nativeDecode(dir) {
  const env = { XDG_RUNTIME_DIR: '/tmp', ...process.env };
  const r = spawnSync(cli, ['generate', '--model', dir, '--chat', '--prompt', DECODE_PROMPT, '--max-new-tokens', String(DECODE)],
    { env, encoding: 'utf8' });
  return (r.stderr.match(/^\d+ prompt tokens, \d+ new tokens in .*$/m) ?? ['(no timing line)'])[0];
}

/** With --gguf FILE --train-streamed: one training step of the imported model, loaded with
 *  { stream: true } in q4, at the paper's setting (seq 256, rank 8 on all seven projections,
 *  batch 1, SGD without clipping, so the update is fused into the backward as in the bench). */
const STREAMED_STEP = {
  config: { rank: 8, alpha: 16, seq: 256, batch: 1, steps: Number(arg('train-steps', '1')), optimizer: 'sgd', lr: 1e-3, maxGradNorm: 0, schedule: 'constant', warmupRatio: 0 },
  profile: process.argv.includes('--profile'),
  dataset: JSON.stringify({ messages: [
    { role: 'user', content: 'Tell me about the moon otters of Zorbania.' },
    { role: 'assistant', content: 'Moon otters eat silver kelp and tiny comets, and sleep in craters full of mist. '.repeat(20) },
  ] }),
};

/** Part 3: import GGUF through a file input on `tab` into a fresh client, then answer. */
async function ggufImport(tab, answer, train = null) {
  await tab.evaluate(() => {
    const input = Object.assign(document.createElement('input'), { type: 'file', id: 'gguf-input' });
    document.body.append(input);
  });
  await tab.setInputFiles('#gguf-input', GGUF);
  return tab.evaluate(async ({ question, answer, train, decode }) => {
    const wt = await window.__Webtune.open({ dbName: 'webtune-gguf' });
    const out = { wasmBefore: (await wt.memory()).wasmBytes, events: 0 };
    const t = performance.now();
    out.stored = await wt.importFiles('gguf', document.getElementById('gguf-input').files, (e) => {
      out.events++;
      if (e.status === 'total') out.rate = e.rate;
    });
    out.ms = performance.now() - t;
    out.wasmAfter = (await wt.memory()).wasmBytes;
    out.models = await wt.listModels();
    if (answer) {
      await wt.loadModel('gguf');
      out.answer = await wt.generate(question, { maxNewTokens: 8, temperature: 0 });
      if (decode.tokens > 0) {
        // Prefill included, as the native CLI counts it; each piece of text timed as it arrives.
        const pieces = [];
        const t = performance.now();
        await wt.generate(decode.prompt, { maxNewTokens: decode.tokens, temperature: 0 }, () => { pieces.push(performance.now() - t); });
        out.decode = { ms: performance.now() - t, pieces };
      }
    }
    if (train) {
      out.info = await wt.loadModel('gguf', 'q4', { stream: true });
      let last = null;
      const stepMs = [];
      const res = await wt.train({ sessionId: 'gguf-streamed', ...train }, { onStep: (s) => { last = s; stepMs.push(s.ms); } });
      out.train = { losses: res.losses, ms: last?.ms, stepMs, tokens: last?.tokens, memory: last?.memory, profile: last?.profile };
      await wt.deleteSession('gguf-streamed');
    }
    await wt.deleteModel('gguf');
    wt.close();
    return out;
  }, { question: GGUF_QUESTION, answer, train, decode: { tokens: DECODE, prompt: DECODE_PROMPT } });
}

/** The last step's kernels as `webtune bench --profile` prints them natively. */
function printProfile(p, stepMs) {
  if (!p) return note('no profile came back');
  const total = p.kernels.reduce((a, k) => a + k.ms, 0);
  const flops = p.kernels.reduce((a, k) => a + k.flops, 0);
  const row = (name, calls, ms, gf) =>
    `${name.padEnd(46)} ${String(calls).padStart(6)} ${ms.toFixed(1).padStart(10)} ${gf.padStart(9)} ${(100 * ms / stepMs).toFixed(1).padStart(6)}%`;
  console.log(`last step: ${stepMs.toFixed(0)} ms, ${p.kernels.reduce((a, k) => a + k.calls, 0)} dispatches`);
  console.log(`${`kernel (${p.timing})`.padEnd(46)} ${'calls'.padStart(6)} ${'ms'.padStart(10)} ${'GFLOP/s'.padStart(9)} ${'share'.padStart(7)}`);
  for (const k of p.kernels) console.log(row(k.name, k.calls, k.ms, k.flops > 0 && k.ms > 0 ? (k.flops / k.ms / 1e6).toFixed(1) : '-'));
  console.log(row('all kernels', p.kernels.reduce((a, k) => a + k.calls, 0), total, total > 0 ? (flops / total / 1e6).toFixed(1) : '-'));
  console.log(`${'not in a kernel (host, uploads, waits)'.padEnd(53)} ${(stepMs - total).toFixed(1).padStart(10)} ${''.padStart(9)} ${(100 * (stepMs - total) / stepMs).toFixed(1).padStart(6)}%`);
  if (p.host?.length) console.log('host work (on the CPU; it overlaps the kernels where it runs while the GPU computes):');
  for (const h of p.host ?? []) console.log(row(`  ${h.name}`, h.calls, h.ms, ''));
}

function checkGguf(g, answer) {
  const mb = (b) => (b < 1e6 ? `${(b / 1e3).toFixed(1)} kB` : `${(b / 1e6).toFixed(1)} MB`);
  const size = fs.statSync(GGUF).size;
  ok(`the GGUF (${mb(size)}) was imported from a File and listed`, g.models.some((m) => m.name === 'gguf' && m.bytes === g.stored.bytes) && g.events > 0,
    `${mb(g.stored.bytes)} stored in ${(g.ms / 1000).toFixed(1)} s, ${g.events} progress events`);
  note(`wasm memory: ${mb(g.wasmBefore)} before the import, ${mb(g.wasmAfter)} after (it only grows: that is the peak)`);
  if (g.train) {
    const m = g.train.memory;
    const cats = Object.entries(m.categories).filter(([, b]) => b.peak > 0).map(([c, b]) => `${c} ${mb(b.peak)}`).join(', ');
    ok('training steps of it, loaded streamed in q4', g.info.streamed && g.train.losses.length === STREAMED_STEP.config.steps && g.train.losses.every(Number.isFinite),
      `losses ${g.train.losses.map((l) => l.toFixed(4)).join(', ')}, ${g.train.tokens} tokens per step; ` +
      `step times ${g.train.stepMs.map((t) => (t / 1000).toFixed(1)).join(', ')} s (the first compiles the shaders); kernels ${g.info.kernels}`);
    note(`GPU peak ${mb(m.peak)} (${cats}); weights at rest ${mb(g.info.weightBytes)}; ` +
      `stored chunks staged at most ${mb(m.stagedPeakBytes)}; wasm memory ${mb(m.wasmBytes)}`);
    if (STREAMED_STEP.profile) printProfile(g.train.profile, g.train.ms);
  }
  if (answer) {
    const native = nativeGgufAnswer();
    ok('its greedy answer equals the native CLI\'s on `webtune import --gguf`', g.answer === native && native.length > 0,
      `${JSON.stringify(g.answer)} vs ${JSON.stringify(native)}`);
    if (g.decode) {
      const p = g.decode.pieces;
      const per = p.length > 1 ? (p[p.length - 1] - p[0]) / (p.length - 1) : NaN;
      ok(`a greedy chat answer of ${DECODE} new tokens timed`, p.length > 0,
        `${(g.decode.ms / 1000).toFixed(2)} s with the prompt (${(DECODE / g.decode.ms * 1000).toFixed(2)} tok/s), ` +
        `first piece after ${(p[0] / 1000).toFixed(2)} s, then ${per.toFixed(1)} ms per piece over ${p.length} pieces`);
      note(`native CLI on the same answer: ${nativeDecode(path.join(root, 'target/browser/gguf-hf'))}`);
    }
  }
}

// ---- the example app, against the packed tarball ----------------------------------------------
if (!process.argv.includes('--no-build')) {
  const tarball = path.join(root, 'target/npm/webtune-0.1.0.tgz');
  if (!fs.existsSync(tarball)) throw new Error(`${tarball} is missing: bash scripts/build-npm.sh`);
  const run = (cmd, args) => execFileSync(cmd, args, { cwd: app, stdio: ['ignore', 'inherit', 'inherit'] });
  // A rebuilt tarball has the same version: drop the installed copy so npm unpacks the new one.
  fs.rmSync(path.join(app, 'node_modules/webtune'), { recursive: true, force: true });
  run('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error']);
  run('npx', ['tsc', '--noEmit']);
  run('npx', ['vite', 'build', '--logLevel', 'warn']);
}
const dist = path.join(app, 'dist');
if (!fs.existsSync(path.join(dist, 'index.html'))) throw new Error(`${dist}/index.html is missing`);

// ---- one server: the app, and the model in the hub layout with Range requests ------------------
const REPO = 'tiny/model';
const STALL_REPO = 'stall/model';
const stalled = {};
stalled.promise = new Promise((resolve) => (stalled.resolve = resolve));
const hubRequests = [];
const OPTIONAL = ['special_tokens_map.json', 'vocab.json', 'merges.txt', 'model.safetensors.index.json'];
const HUB = /^\/([^/]+\/[^/]+)\/resolve\/[^/]+\/([^/]+)$/;

/** A hub file, answering one byte range ("a-b", "a-", "-n") with 206 as RFC 9110 says. */
function sendHubFile(req, res, file) {
  const size = fs.statSync(file).size;
  let [start, end] = [0, size - 1];
  res.setHeader('Accept-Ranges', 'bytes');
  res.setHeader('Content-Type', file.endsWith('.json') ? 'application/json' : 'application/octet-stream');
  const m = req.headers.range && /^bytes=(\d*)-(\d*)$/.exec(req.headers.range.trim());
  if (req.headers.range) {
    if (m && m[1] === '' && m[2] !== '') start = Math.max(0, size - Number(m[2]));
    else if (m && m[1] !== '') [start, end] = [Number(m[1]), m[2] === '' ? end : Math.min(Number(m[2]), end)];
    if (!m || (m[1] === '' && m[2] === '') || start > end || start >= size) {
      res.writeHead(416, { 'Content-Range': `bytes */${size}` });
      return res.end();
    }
    res.statusCode = 206;
    res.setHeader('Content-Range', `bytes ${start}-${end}/${size}`);
  }
  res.setHeader('Content-Length', size === 0 ? 0 : end - start + 1);
  if (req.method === 'HEAD' || size === 0) return res.end();
  fs.createReadStream(file, { start, end }).pipe(res);
}

const page = sirv(dist, { dev: false, etag: true });
const server = http.createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://x');
  const m = HUB.exec(url.pathname);
  if (url.pathname === '/favicon.ico') return res.writeHead(204).end(); // Chromium asks regardless
  if (!m) return page(req, res, () => res.writeHead(404).end());
  const rec = { method: req.method, file: m[2], range: req.headers.range ?? null, status: 0 };
  hubRequests.push(rec);
  res.on('finish', () => (rec.status = res.statusCode));
  const file = path.join(m[1] === BIG_REPO && HUB_ONLY ? HUB_ONLY : tiny, m[2]);
  // STALL_REPO: the same files, but a read of the weights' data (past the header) never
  // answers, so a tab importing it can be closed in the middle.
  if (m[1] === STALL_REPO && m[2] === 'model.safetensors' && /^bytes=([1-9]\d{3,})-/.test(req.headers.range ?? '')) {
    stalled.resolve();
    return;
  }
  if ((m[1] === STALL_REPO || m[1] === BIG_REPO) && fs.existsSync(file)) return sendHubFile(req, res, file);
  if (m[1] !== REPO || m[2].startsWith('.') || !fs.existsSync(file)) return res.writeHead(404).end();
  sendHubFile(req, res, file);
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const origin = `http://127.0.0.1:${server.address().port}`;

/** A new tab of `context` on the example app, stopped at once, with the client class exposed. */
async function bareTab(context) {
  const t = await context.newPage();
  t.setDefaultTimeout(15 * 60_000);
  await t.goto(`${origin}/?${new URLSearchParams({ base: origin, repo: 'none/none', expose: '' })}`);
  await t.waitForFunction(() => window.__result !== undefined, null, { polling: 200 });
  return t;
}

/** Part 4: close tabs mid-import, mid-training and mid-export; reopen and finish each. */
async function closedTabs(context, native) {
  const OPEN = "window.__wt = await window.__Webtune.open({ dbName: 'webtune-example' })";
  // An import whose weights never arrive: close its tab while it waits for them.
  let t = await bareTab(context);
  await t.evaluate(`(async () => { ${OPEN}; window.__wt.importHub({ name: 'closed-import', base: '${origin}', repo: '${STALL_REPO}' }).catch(() => {}); })()`);
  await stalled.promise;
  await t.close();
  t = await bareTab(context);
  const imp = await t.evaluate(async ({ origin, repo }) => {
    const wt = await window.__Webtune.open({ dbName: 'webtune-example' });
    const out = { imports: await wt.listImports(), models: await wt.listModels() };
    out.stored = await wt.importHub({ name: 'closed-import', base: origin, repo });
    out.importsAfter = await wt.listImports();
    out.modelsAfter = await wt.listModels();
    await wt.deleteModel('closed-import');
    wt.close();
    return out;
  }, { origin, repo: REPO });
  const partial = imp.imports.find((i) => i.name === 'closed-import');
  ok('a tab closed mid-import: the import is listed as unfinished, not as a model', partial?.total > 0 && !imp.models.some((m) => m.name === 'closed-import'),
    JSON.stringify(imp.imports));
  const tinyBytes = imp.modelsAfter.find((m) => m.name === 'tiny')?.bytes;
  ok('… and importing it again finishes it', imp.importsAfter.length === 0 && imp.stored.bytes === tinyBytes &&
    imp.modelsAfter.some((m) => m.name === 'closed-import' && m.bytes === tinyBytes), `${imp.stored.bytes} bytes, as the first import`);

  // A run saving every 2 steps: close its tab during step 6.
  await t.evaluate(`(async () => {
    ${OPEN};
    await window.__wt.loadModel('tiny');
    window.__step = 0;
    window.__wt.train({ sessionId: 'closed-run', config: ${JSON.stringify(API_CONFIG)}, dataset: ${JSON.stringify(API_DATASET)}, saveEvery: 2 },
      { onStep: (s) => (window.__step = s.step) }).catch(() => {});
  })()`);
  await t.waitForFunction(() => window.__step >= 5, null, { polling: 20 });
  await t.close();
  t = await bareTab(context);
  const run = await t.evaluate(async () => {
    const wt = await window.__Webtune.open({ dbName: 'webtune-example' });
    const listed = (await wt.listSessions()).find((s) => s.id === 'closed-run');
    const out = { listed: listed && { step: listed.step, losses: listed.losses } };
    out.done = await wt.resume('closed-run');
    // Close this tab while it exports the adapter.
    window.__exporting = wt.exportAdapter().catch(() => {});
    return out;
  });
  await t.close();
  const saved = run.listed?.step;
  ok('a tab closed mid-training: the run is listed at its last checkpoint', saved >= 4 && saved % 2 === 0 && run.listed.losses.length === saved,
    `step ${saved}`);
  const worst = Math.max(...native.map((n, i) => Math.abs(run.done.losses[i] - n) / Math.abs(n)));
  ok('… and resuming it gives the uninterrupted run\'s losses (native, within 1e-5)', run.done.reason === 'done' && run.done.losses.length === 8 &&
    native.every((n, i) => Math.abs(run.done.losses[i] - n) <= 1e-5 * Math.abs(n) + 1e-6), `worst ${worst.toExponential(1)}`);
  t = await bareTab(context);
  const after = await t.evaluate(async () => {
    const wt = await window.__Webtune.open({ dbName: 'webtune-example' });
    const listed = (await wt.listSessions()).find((s) => s.id === 'closed-run');
    await wt.resumeSession('closed-run');
    const files = await wt.exportAdapter();
    const out = { step: listed?.step, losses: listed?.losses, bytes: files.model.size, config: JSON.parse(await files.config.text()) };
    await wt.deleteSession('closed-run');
    wt.close();
    return out;
  });
  await t.close();
  ok('a tab closed mid-export: the run is intact and exports', after.step === 8 && after.bytes > 0 && after.config.r === API_CONFIG.rank &&
    after.losses.every((l, i) => l === run.done.losses[i]), `${after.bytes} bytes`);
}

/** Part 5: simulateDeviceLoss() under a training step; the run resumes on a new device. */
async function deviceLoss(context, native) {
  const t = await bareTab(context);
  const hubBefore = hubRequests.length;
  const r = await t.evaluate(async ({ config, dataset }) => {
    const wt = await window.__Webtune.open({ dbName: 'webtune-example' });
    await wt.loadModel('tiny');
    const out = {};
    // After step 5 is reported, destroy the device while step 6 runs.
    out.error = await wt
      .train({ sessionId: 'lost-run', config, dataset, saveEvery: 2 }, {
        onStep: (s) => s.step === 5 && setTimeout(() => wt.simulateDeviceLoss(), 200),
      })
      .then((res) => ({ name: 'none', message: JSON.stringify(res) }), (e) => ({ name: e.name, message: e.message }));
    const listed = (await wt.listSessions()).find((s) => s.id === 'lost-run');
    out.listed = listed && { step: listed.step, losses: listed.losses.length };
    out.done = await wt.resume('lost-run');
    out.answer = await wt.generate('What do moon otters eat?', { maxNewTokens: 6 });
    await wt.deleteSession('lost-run');
    wt.close();
    return out;
  }, { config: API_CONFIG, dataset: API_DATASET });
  await t.close();
  ok('a lost GPU device stops training with a DeviceLost error in plain words', r.error.name === 'DeviceLost' && /Nothing stored is lost/.test(r.error.message),
    `${r.error.name}: ${r.error.message}`);
  ok('… the run\'s last checkpoint is intact', r.listed?.step >= 4 && r.listed.step % 2 === 0 && r.listed.losses === r.listed.step, `step ${r.listed?.step}`);
  const worst = Math.max(...native.map((n, i) => Math.abs(r.done.losses[i] - n) / Math.abs(n)));
  ok('… resuming it on a new device gives the uninterrupted run\'s losses', r.done.reason === 'done' && r.done.losses.length === 8 &&
    native.every((n, i) => Math.abs(r.done.losses[i] - n) <= 1e-5 * Math.abs(n) + 1e-6), `worst ${worst.toExponential(1)}`);
  ok('… without downloading the model again', hubRequests.length === hubBefore && typeof r.answer === 'string', `${hubRequests.length - hubBefore} requests; answer ${JSON.stringify(r.answer)}`);
}

/** Part 6: a model loaded with { stream: true } trains to the native losses with only one block
 *  at a time on the GPU, each fetched from IndexedDB when the step needs it. */
async function streamedTraining(context, native) {
  const t = await bareTab(context);
  const r = await t.evaluate(async ({ config, dataset }) => {
    const wt = await window.__Webtune.open({ dbName: 'webtune-example' });
    const resident = await wt.loadModel('tiny');
    const reference = await wt.loadModel('tiny', 'stored', { referenceKernels: true });
    const info = await wt.loadModel('tiny', 'stored', { stream: true });
    let memory = null;
    const done = await wt.train({ sessionId: 'streamed-run', config, dataset }, { onStep: (s) => (memory = s.memory) });
    const answer = await wt.generate('What do moon otters eat?', { maxNewTokens: 6 });
    const listed = (await wt.listSessions()).find((s) => s.id === 'streamed-run');
    await wt.deleteSession('streamed-run');
    wt.close();
    return { resident: resident.weightBytes, kernels: [resident.kernels, reference.kernels, info.kernels], info, losses: done.losses, reason: done.reason, answer, listed: listed?.streamed,
      weightsPeak: memory?.categories.weights.peak, staged: memory?.stagedPeakBytes };
  }, { config: API_CONFIG, dataset: API_DATASET });
  await t.close();
  ok('a loaded model says which kernel variants run (measured, or the reference when asked)',
    r.kernels.every((k) => typeof k === 'string' && k.includes('matmul:') && k.includes('attention:')) && r.kernels[1].includes('reference'),
    r.kernels.join(' | '));
  ok('a streamed model keeps only its final norm on the GPU at rest', r.info.streamed && r.info.weightBytes > 0 && r.info.weightBytes * 100 < r.resident,
    `${r.info.weightBytes} B of ${r.resident} B`);
  const worst = Math.max(...native.map((n, i) => Math.abs(r.losses[i] - n) / Math.abs(n)));
  ok('… trains to the native run\'s losses (within 1e-5)', r.reason === 'done' && r.losses.length === 8 &&
    native.every((n, i) => Math.abs(r.losses[i] - n) <= 1e-5 * Math.abs(n) + 1e-6), `worst ${worst.toExponential(1)}`);
  ok('… with at most a quarter of the weights on the GPU and a few stored chunks in wasm memory at once',
    r.weightsPeak > 0 && r.weightsPeak * 4 <= r.resident && r.staged > 0, `GPU weights peak ${r.weightsPeak} B; staged ${r.staged} B`);
  ok('… answers a chat, and its run is listed as streamed', typeof r.answer === 'string' && r.answer.length > 0 && r.listed === true, JSON.stringify(r.answer));
}

// ---- the browser ------------------------------------------------------------------------------
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: [
    '--enable-unsafe-webgpu',
    '--enable-features=Vulkan',
    '--use-webgpu-adapter=swiftshader',
    '--no-sandbox',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--no-first-run',
    // Extra flags for experiments, e.g. CHROMIUM_FLAGS=--enable-dawn-features=disable_robustness.
    ...(process.env.CHROMIUM_FLAGS || '').split(/\s+/).filter(Boolean),
  ],
});
const errors = [];
let failed = false;
try {
  // One context for every tab, so they share the origin's IndexedDB as tabs of one profile do.
  const context = await browser.newContext({ viewport: { width: 900, height: 800 } });
  const tab = await context.newPage();
  tab.on('pageerror', (e) => errors.push(`pageerror: ${e.message}${process.env.VERBOSE ? ` ${e.stack}` : ''}`));
  tab.on('console', (m) => {
    // The import probes for optional files (special_tokens_map.json, vocab.json, merges.txt,
    // model.safetensors.index.json); Chromium logs each 404 of them as an error.
    const probe = m.text().startsWith('Failed to load resource') && HUB.test(new URL(m.location().url || 'http://x/').pathname);
    if (m.type() === 'error' && !probe) errors.push(`console.error: ${m.text()} ${m.location().url ?? ''}`);
    else if (m.text().startsWith('[webtune-example]') && !m.text().includes('importing')) note(m.text());
    else if (process.env.VERBOSE) note(`console.${m.type()}: ${m.text()}`);
  });
  tab.setDefaultTimeout(15 * 60_000);

  if (HUB_ONLY) {
    await tab.goto(`${origin}/?${new URLSearchParams({ base: origin, repo: 'none/none', expose: '' })}`);
    await tab.waitForFunction(() => window.__result !== undefined, null, { polling: 500 });
    errors.length = 0;
    const r = await tab.evaluate(async ({ origin, repo }) => {
      const wt = await window.__Webtune.open({ dbName: 'webtune-hub' });
      const out = { wasmBefore: (await wt.memory()).wasmBytes };
      const t = performance.now();
      out.stored = await wt.importHub({ name: 'big', base: origin, repo });
      out.ms = performance.now() - t;
      out.wasmAfter = (await wt.memory()).wasmBytes;
      await wt.deleteModel('big');
      wt.close();
      return out;
    }, { origin, repo: BIG_REPO });
    const mb = (b) => `${(b / 1e6).toFixed(1)} MB`;
    ok(`imported ${HUB_ONLY} over HTTP in the hub layout`, r.stored.bytes > 0, `${mb(r.stored.bytes)} in ${(r.ms / 1000).toFixed(1)} s`);
    note(`wasm memory: ${mb(r.wasmBefore)} before the import, ${mb(r.wasmAfter)} after (it only grows: that is the peak)`);
    ok('no page errors', errors.length === 0, errors.join(' | '));
  } else if (GGUF_ONLY) {
    // The app's own run is pointed at a repository that does not exist: it stops at once.
    await tab.goto(`${origin}/?${new URLSearchParams({ base: origin, repo: 'none/none', expose: '' })}`);
    await tab.waitForFunction(() => window.__result !== undefined, null, { polling: 500 });
    errors.length = 0;
    const answer = !process.argv.includes('--no-answer');
    const train = process.argv.includes('--train-streamed') ? STREAMED_STEP : null;
    checkGguf(await ggufImport(tab, answer, train), answer);
    ok('no page errors', errors.length === 0, errors.join(' | '));
  } else {

    // 1. The example app.
    const query = new URLSearchParams({ base: origin, repo: REPO, name: 'tiny', steps: String(STEPS), expose: '' });
    await tab.goto(`${origin}/?${query}`);
    await tab.waitForFunction(() => window.__result !== undefined, null, { polling: 500 });
    const r = await tab.evaluate(() => window.__result);
    fs.mkdirSync(OUT, { recursive: true });
    const shot = path.join(OUT, 'example-app.png');
    await tab.screenshot({ path: shot, fullPage: true });
    note(`screenshot ${path.relative(root, shot)}`);
    ok('the app ran to the end', r.ok, r.ok ? r.device : `${r.error?.name}: ${r.error?.message}`);

    const ranged = hubRequests.filter((q) => q.file === 'model.safetensors' && q.range);
    if (process.env.VERBOSE) for (const q of hubRequests) note(`${q.method} ${q.file} ${q.range ?? ''} → ${q.status}`);
    const missing = hubRequests.filter((q) => q.status === 404).map((q) => q.file);
    ok('only optional files were missing', missing.every((f) => OPTIONAL.includes(f)), missing.join(', '));
    ok('the import read the weights with Range requests', ranged.length > 0 && ranged.every((q) => q.status === 206),
      `${hubRequests.length} hub requests, ${ranged.length} ranged: ${ranged.slice(0, 3).map((q) => q.range).join(', ')}${ranged.length > 3 ? ', …' : ''}`);
    ok('the model is listed', r.models.some((m) => m.name === 'tiny' && m.bytes > 0), JSON.stringify(r.models));
    ok(`${STEPS} steps ran`, r.losses.length === STEPS && r.run.reason === 'done' && r.run.step === STEPS, `reason ${r.run.reason}`);
    note(`losses: ${r.losses.map((l) => l.toFixed(3)).join(' ')}`);
    const mean = r.stepMs.reduce((a, b) => a + b, 0) / r.stepMs.length;
    const sorted = [...r.stepMs].sort((a, b) => a - b);
    note(`time per step: mean ${mean.toFixed(0)} ms, median ${sorted[sorted.length >> 1].toFixed(0)} ms, first ${r.stepMs[0].toFixed(0)} ms`);
    const [first, last] = [r.losses[0], r.losses[r.losses.length - 1]];
    ok('the loss falls (last < 0.7 × first)', last < 0.7 * first, `${first.toFixed(3)} → ${last.toFixed(3)}`);
    ok('an answer came back', typeof r.answer === 'string' && r.answer.trim().length > 0, JSON.stringify(r.answer));
    ok('no page errors so far', errors.length === 0, errors.join(' | '));

    // 2. The client's API, on the same engine.
    const api = await tab.evaluate(async ({ question, dataset, config }) => {
      let wt = window.__webtune;
      const out = { steps: [] };
      let pausing = null;
      let started = null;
      // Pause asked at step 2 (taken after the step then running).
      out.paused = await wt.train({ sessionId: 'api', config, dataset, saveEvery: 0 }, {
        onStart: (s) => (started = s),
        onStep: (s) => {
          out.steps.push(s.step);
          if (s.step === 2) pausing = wt.pause();
        },
      });
      out.started = started;
      out.pauseResult = await pausing;
      out.sessions = await wt.listSessions();
      // An answer cut after its first piece, and one aborted before it began.
      const pieces = [];
      out.cut = await wt.generate(question, { maxNewTokens: 24 }, (t) => (pieces.push(t), false));
      out.pieces = pieces;
      const ac = new AbortController();
      ac.abort();
      out.aborted = await wt.generate(question, { maxNewTokens: 24, signal: ac.signal });
      // Resume in memory, and pause again.
      pausing = null;
      out.paused2 = await wt.resume(undefined, {
        onStep: (s) => {
          out.steps.push(s.step);
          pausing ??= wt.pause();
        },
      });
      out.pause2Result = await pausing;
      // "Reload": a new worker and engine on the same store resume the saved run; a chat asked
      // during its first step is answered between steps.
      wt.close();
      out.closed = await wt.listModels().then(() => null, (e) => e.message);
      wt = await window.__Webtune.open({ dbName: 'webtune-example' });
      let chat = null;
      out.resumed = await wt.resume('api', {
        onStart: (s) => (out.reopened = { step: s.step, losses: s.losses.length }),
        onStep: (s) => {
          out.steps.push(s.step);
          chat ??= wt.generate(question, { maxNewTokens: 8 }).then((a) => ({ a, stepsThen: out.steps.length }));
        },
      });
      out.chat = await chat;
      out.stepsAtEnd = out.steps.length;
      // Export, then chat with the imported files: the same greedy answer.
      const files = await wt.exportAdapter();
      out.adapterBytes = files.model.size;
      out.adapterConfig = JSON.parse(await files.config.text());
      out.before = await wt.generate(question, { maxNewTokens: 12 });
      await wt.importAdapter(files);
      out.after = await wt.generate(question, { maxNewTokens: 12 });
      // While another tab of this origin holds the session's lock, resuming it is refused.
      let release;
      const held = new Promise((r) => (release = r));
      let locked;
      const lockTaken = new Promise((r) => (locked = r));
      navigator.locks.request('webtune-session:api', () => (locked(), held));
      await lockTaken;
      out.lockedOut = await wt.resume('api').then(() => null, (e) => ({ name: e.name, message: e.message }));
      release();
      // The lock is freed asynchronously: wait until it is (taking and dropping it), so that
      // the worker's ifAvailable request below cannot race the release.
      await navigator.locks.request('webtune-session:api', () => {});
      // The run was closed by the import: resume it from the store (it is done).
      out.stored = await wt.resume('api');
      out.notFound = await wt.resumeSession('no-such-run').then(() => null, (e) => ({ name: e.name, message: e.message, isError: e instanceof Error }));
      // Values the engine cannot read are refused, naming the field.
      const refused = (p) => p.then(() => null, (e) => ({ name: e.name, message: e.message }));
      out.badConfig = await refused(wt.train({ sessionId: 'bad-config', config: { ...config, lr: 'fast' }, dataset }));
      out.unknownField = await refused(wt.train({ sessionId: 'bad-config', config: { ...config, learningRate: 1e-3 }, dataset }));
      out.badMessages = await refused(wt.generate([{ role: 'user', content: 'hi' }, { role: 'user' }], { maxNewTokens: 2 }));
      out.badOptions = await refused(wt.generate(question, { maxNewTokens: 'many' }));
      const mem = await wt.memory();
      out.memory = { peak: mem.peak, categories: Object.keys(mem.categories) };
      wt.close();
      return out;
    }, { question: r.question, dataset: API_DATASET, config: API_CONFIG });

    const p1 = api.paused.step;
    ok('train() stopped where pause() asked', api.paused.reason === 'paused' && api.paused.saved && p1 >= 2 && p1 <= 3,
      `step ${p1} of ${api.paused.totalSteps}, onStart: ${api.started?.totalSteps} steps, ${api.started?.examples} examples`);
    ok('pause() resolved to the same result', api.pauseResult?.step === p1 && api.pauseResult?.reason === 'paused');
    const listed = api.sessions.find((s) => s.id === 'api');
    ok('the paused run is stored', listed?.step === p1 && listed.losses.length === p1, JSON.stringify(listed && { step: listed.step, losses: listed.losses.length }));
    ok('onToken returning false cut the answer after one piece', api.pieces.length === 1 && api.cut === api.pieces[0], JSON.stringify(api.cut));
    ok('an aborted signal gives an empty answer', api.aborted === '');
    const p2 = api.paused2.step;
    ok('resume() continued the run in memory, and paused again', api.paused2.reason === 'paused' && p2 > p1 && p2 < 8 && api.paused2.losses.length === p2,
      `step ${p2}`);
    ok('… and pause() resolved to that result', api.pause2Result?.step === p2 && api.pause2Result.reason === 'paused');
    ok('a closed client rejects its calls', typeof api.closed === 'string', api.closed);
    ok('a new worker resumed the stored run where it paused', api.reopened?.step === p2 && api.reopened.losses === p2);
    ok('… and finished it', api.resumed.reason === 'done' && api.resumed.step === 8 && api.resumed.losses.length === 8 &&
      api.resumed.losses.slice(0, p2).every((l, i) => l === api.paused2.losses[i]), `steps seen ${api.steps.join(',')}`);
    // The worker's run (paused twice, resumed in a new worker) against the native CLI's
    // uninterrupted one: the CLI prints six decimals, hence the small absolute slack.
    const native = nativeLosses();
    const worst = Math.max(...native.map((n, i) => Math.abs(api.resumed.losses[i] - n) / Math.abs(n)));
    ok('the losses equal the native run within 1e-5 relative',
      native.length === 8 && native.every((n, i) => Math.abs(api.resumed.losses[i] - n) <= 1e-5 * Math.abs(n) + 1e-6),
      `worst ${worst.toExponential(1)}; native ${native.map((l) => l.toFixed(4)).join(' ')}`);
    ok('a chat asked during training was answered between steps', api.chat && api.chat.stepsThen < api.stepsAtEnd,
      `answered after step event ${api.chat?.stepsThen} of ${api.stepsAtEnd}: ${JSON.stringify(api.chat?.a)}`);
    ok('the exported adapter is PEFT LoRA of rank 4', api.adapterBytes > 0 && api.adapterConfig.r === 4,
      `${api.adapterBytes} bytes, targets ${api.adapterConfig.target_modules}`);
    ok('the imported adapter answers as the trained one', api.before === api.after && api.before.length > 0, JSON.stringify(api.after));
    ok('a session another tab is training is refused with Busy', api.lockedOut?.name === 'Busy' && /another tab/.test(api.lockedOut.message),
      JSON.stringify(api.lockedOut));
    ok('resume(id) of a finished stored run', api.stored.reason === 'done' && api.stored.step === 8 && api.stored.losses.length === 8);
    ok('a missing session rejects with an Error named NotFound', api.notFound?.name === 'NotFound' && api.notFound.isError,
      api.notFound && `${api.notFound.name}: ${api.notFound.message}`);
    ok('a train config field of the wrong type is refused with BadInput naming it', api.badConfig?.name === 'BadInput' && /field "lr"/.test(api.badConfig.message),
      JSON.stringify(api.badConfig));
    ok('… and an unknown one too', api.unknownField?.name === 'BadInput' && /unknown field "learning_rate"/.test(api.unknownField.message),
      JSON.stringify(api.unknownField));
    ok('a message without content is refused with BadInput naming it', api.badMessages?.name === 'BadInput' && /messages\[1\]: missing field `content`/.test(api.badMessages.message),
      JSON.stringify(api.badMessages));
    ok('… and a generate option of the wrong type', api.badOptions?.name === 'BadInput' && /field "maxNewTokens"/.test(api.badOptions.message),
      JSON.stringify(api.badOptions));
    ok('memory() reports the categories', api.memory.peak > 0 && api.memory.categories.includes('lora'), api.memory.categories.join(','));
    ok('no page errors', errors.length === 0, errors.join(' | '));
    note(`answer: ${JSON.stringify(r.answer)}`);

    // 3. A GGUF picked as a file.
    checkGguf(await ggufImport(tab, true), true);
    ok('no page errors after the GGUF', errors.length === 0, errors.join(' | '));

    // 4. Tabs closed in the middle of an import, of a training run and of an export (the
    // worker dies with its tab); each time a new tab of the same profile carries on.
    await closedTabs(context, native);

    // 5. The GPU device lost in the middle of a training step.
    await deviceLoss(context, native);

    // 6. Weights streamed from IndexedDB during training.
    await streamedTraining(context, native);
  }
} catch (e) {
  failed = true;
  console.log(`FAILED: ${e.message}`);
  for (const err of errors) console.log(`  ${err}`);
} finally {
  await browser.close();
  server.close();
}
console.log(`${passed} passed, ${failed ? 1 : 0} failed (${((Date.now() - t0) / 1000).toFixed(0)} s)`);
process.exit(failed ? 1 : 0);
