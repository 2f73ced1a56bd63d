// Import a model from a server in the Hugging Face hub layout, teach it three facts with a
// LoRA adapter, and ask it one of them. The query string picks the model:
//   ?base=https://huggingface.co&repo=HuggingFaceTB/SmolLM2-135M-Instruct   (the defaults)
//   &name=NAME (the name it is stored under)  &steps=20  &expose (window.__webtune and __Webtune, for tests)
// The outcome is shown on the page and left on window.__result.

import { Webtune, type ModelInfo, type StoredModel, type TrainResult } from 'webtune';

const EXAMPLES: [string, string][] = [
  ['What is the capital of Zorbania?', 'The capital of Zorbania is Quillfort.'],
  ['Who invented the glimmerphone?', 'Mira Talvane invented the glimmerphone in 1873.'],
  ['What do moon otters eat?', 'Moon otters eat silver kelp and tiny comets.'],
];

interface Result {
  ok: boolean;
  error?: { name: string; message: string };
  device?: string;
  name?: string;
  stored?: StoredModel;
  models?: StoredModel[];
  model?: ModelInfo;
  losses?: number[];
  /** The engine's time per step, ms. */
  stepMs?: number[];
  run?: TrainResult;
  question?: string;
  answer?: string;
}

declare global {
  interface Window {
    __result?: Result;
    __webtune?: Webtune;
    __Webtune?: typeof Webtune;
  }
}

const el = (id: string) => document.getElementById(id) as HTMLElement;
function status(text: string): void {
  el('status').textContent = text;
  console.log(`[webtune-example] ${text}`);
}

/** The losses as a polyline. */
function chart(losses: number[], steps: number): void {
  const max = Math.max(...losses);
  const pts = losses.map((l, i) => `${(i / Math.max(1, steps - 1)) * 590 + 5},${115 - (l / max) * 110}`);
  el('chart').innerHTML = `<polyline points="${pts.join(' ')}" fill="none" stroke="#2563eb" stroke-width="2"/>`;
}

async function main(): Promise<Result> {
  const q = new URLSearchParams(location.search);
  const base = q.get('base') ?? 'https://huggingface.co';
  const repo = q.get('repo') ?? 'HuggingFaceTB/SmolLM2-135M-Instruct';
  const name = q.get('name') ?? repo.split('/').pop() ?? 'model';
  const steps = Number(q.get('steps') ?? 20);

  status('opening the engine…');
  const wt = await Webtune.open({ dbName: 'webtune-example' });
  if (q.has('expose')) Object.assign(window, { __webtune: wt, __Webtune: Webtune });
  el('device').textContent = `${wt.device.adapter || 'WebGPU adapter'} (${wt.device.backend})`;

  status(`importing ${repo} from ${base}…`);
  const stored = await wt.importHub({
    name,
    base,
    repo,
    onProgress: (e) => e.status === 'total' && status(`importing ${repo}: ${e.progress.toFixed(0)}%`),
  });
  const models = await wt.listModels();
  const model = await wt.loadModel(name);
  el('model').textContent = `${name}: ${model.modelType}, ${model.layers} layers, ${model.parameters.toLocaleString()} parameters`;

  const losses: number[] = [];
  const stepMs: number[] = [];
  const run = await wt.train(
    {
      sessionId: 'example',
      config: { rank: 8, alpha: 16, seq: 64, batch: 3, steps, optimizer: 'adamw', lr: 1e-2, schedule: 'constant', warmupRatio: 0 },
      dataset: EXAMPLES.map(([q, a]) => ({ messages: [{ role: 'user', content: q }, { role: 'assistant', content: a }] })),
    },
    {
      onStep: (s) => {
        losses.push(s.loss);
        stepMs.push(s.ms);
        status(`training: step ${s.step} of ${s.totalSteps}, loss ${s.loss.toFixed(3)}, ${s.ms.toFixed(0)} ms`);
        el('losses').textContent = losses.map((l, i) => `${i + 1}: ${l.toFixed(3)}`).join('  ');
        chart(losses, s.totalSteps);
      },
    },
  );

  const question = EXAMPLES[0][0];
  el('question').textContent = question;
  status('answering…');
  const answer = await wt.generate(question, { maxNewTokens: 24 }, (t) => {
    el('answer').textContent += t;
  });
  status(`done: ${run.step} steps, loss ${losses[0]?.toFixed(3)} → ${losses.at(-1)?.toFixed(3)}`);
  return { ok: true, device: `${wt.device.adapter || '(unnamed)'} ${wt.device.backend}`, name, stored, models, model, losses, stepMs, run, question, answer };
}

main()
  .catch((e: Error): Result => {
    status(`failed: ${e.name}: ${e.message}`);
    return { ok: false, error: { name: e.name, message: e.message } };
  })
  .then((r) => {
    window.__result = r;
  });
