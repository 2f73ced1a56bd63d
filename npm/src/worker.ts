// The dedicated module worker that owns the wasm Engine (notes/ENGINE_API.md): it answers the
// client's requests (protocol.ts), runs one GPU operation at a time in the order asked, and
// drives the training loop, which lets queued requests (a chat, an export) run between steps.

import init, { Engine } from '../wasm/webtune.js';
import type {
  DeviceInfo,
  EngineGenerateOptions,
  EngineTrainConfig,
  MemoryReport,
  Message,
  ModelInfo,
  ProgressEvent,
  SessionInfo,
  SessionSummary,
  StepReport,
  StorageInfo,
  PartialImport,
  StoredModel,
  TrainResult,
} from './types.js';
import { ERROR_NAMES, type ErrorData, type FromWorker, type Methods, type Request } from './protocol.js';

/** The Engine as the contract types it (wasm-bindgen declares its promises, and the objects it
 *  takes, as `any`). `Checked` holds it to wasm-bindgen's declaration of the Engine. */
interface EngineApi {
  deviceInfo(): DeviceInfo;
  listModels(): Promise<StoredModel[]>;
  listImports(): Promise<PartialImport[]>;
  deleteModel(name: string): Promise<void>;
  storage(): Promise<StorageInfo>;
  importHub(name: string, base: string, repo: string, revision: string, onProgress: (e: ProgressEvent) => void): Promise<StoredModel>;
  importFiles(name: string, files: File[], onProgress: (e: ProgressEvent) => void): Promise<StoredModel>;
  loadModel(name: string, weights: string, stream: boolean): Promise<ModelInfo>;
  exampleTokens(prompt: string, response: string): number;
  startTraining(sessionId: string, config: EngineTrainConfig, dataset: string): Promise<SessionInfo>;
  setMemoryBudget(bytes: number | null): void;
  setProfile(on: boolean): void;
  useReferenceKernels(on: boolean): void;
  useF16Products(on: boolean): boolean;
  trainStep(): Promise<StepReport>;
  trainingDone(): boolean;
  saveSession(): Promise<void>;
  listSessions(): Promise<SessionSummary[]>;
  resumeSession(id: string): Promise<SessionInfo>;
  deleteSession(id: string): Promise<void>;
  exportAdapter(): Promise<{ safetensors: Uint8Array; config: string }>;
  importAdapter(safetensors: Uint8Array, config: string): Promise<void>;
  generate(messages: Message[], options: EngineGenerateOptions, onToken: (text: string) => boolean): Promise<string>;
  memory(): MemoryReport;
  loseDevice(): void;
}

/** `Api`, which tsc accepts only when each of its methods is one of the wasm Engine's and takes
 *  arguments that the Engine's declaration accepts: a method renamed, dropped or given other
 *  parameters in src/wasm.rs is a compile error here. */
type Checked<
  Api extends {
    [K in keyof Api]: K extends keyof Engine
      ? Api[K] extends (...args: infer A) => unknown
        ? Engine[K] extends (...args: infer E) => unknown
          ? A extends E
            ? Api[K]
            : never
          : never
        : never
      : never;
  },
> = Api;

const scope = globalThis as unknown as DedicatedWorkerGlobalScope;
const post = (m: FromWorker, transfer: Transferable[] = []) => scope.postMessage(m, transfer);

class Failure extends Error {
  constructor(name: ErrorData['name'], message: string) {
    super(message);
    this.name = name;
  }
}

let engine: Checked<EngineApi> | null = null;

// ---- one GPU operation at a time ---------------------------------------------------------

let tail: Promise<unknown> = Promise.resolve();

/** Run `f` on the engine after every operation queued before it. */
function gpu<T>(f: (e: EngineApi) => T | Promise<T>): Promise<T> {
  const op = tail.then(async () => {
    if (!engine) throw new Failure('Error', 'the engine is not open');
    try {
      return await f(engine);
    } catch (e) {
      // The engine opens a new device on the next call; the run it had in memory is gone.
      if ((e as Error)?.name === 'DeviceLost') run = null;
      throw e;
    }
  });
  tail = op.catch(() => undefined);
  return op;
}

// ---- the training loop -----------------------------------------------------------------

interface Run {
  sessionId: string;
  step: number;
  totalSteps: number;
  losses: number[];
  saveEvery: number;
  /** Whether the engine's state is in the store as of `step`. */
  saved: boolean;
  /** What the loop is asked to do after the current step. */
  want: 'run' | 'pause' | 'stop';
  /** The loop, while it runs. */
  loop: Promise<TrainResult> | null;
}

/** The engine's run, as far as this worker knows (null when the engine has none). */
let run: Run | null = null;

function newRun(info: SessionInfo, saveEvery: number, saved: boolean): Run {
  const losses = [...info.losses];
  return { sessionId: info.sessionId, step: info.step, totalSteps: info.totalSteps, losses, saveEvery, saved, want: 'run', loop: null };
}

function startLoop(r: Run, id: number): Promise<TrainResult> {
  r.want = 'run';
  r.loop = withSessionLock(r.sessionId, () => loop(r, id)).finally(() => {
    r.loop = null;
  });
  return r.loop;
}

/** Run `body` holding the Web Lock of a session, so that a second tab (or worker) of this
 *  origin cannot train the same session at the same time and overwrite its checkpoints: it
 *  gets a Busy error at once instead. Browsers without the Web Locks API run unguarded. */
async function withSessionLock<T>(sessionId: string, body: () => Promise<T>): Promise<T> {
  const locks = (self.navigator as { locks?: LockManager }).locks;
  if (!locks) return body();
  return locks.request(`webtune-session:${sessionId}`, { ifAvailable: true }, async (lock) => {
    if (!lock) {
      throw new Failure(
        'Busy',
        `session ${sessionId} is training in another tab or window of this site: pause it there (or close that tab), then resume it here`,
      );
    }
    return body();
  }) as Promise<T>;
}

async function loop(r: Run, id: number): Promise<TrainResult> {
  let done = await gpu((e) => e.trainingDone());
  while (r.want === 'run' && !done) {
    // Each step is its own queued operation, so requests that came meanwhile go first.
    const [rep, finished] = await gpu(async (e) => {
      const rep = await e.trainStep();
      return [rep, e.trainingDone()] as const;
    });
    done = finished;
    r.step = rep.step;
    r.totalSteps = rep.totalSteps;
    post({ event: 'step', id, data: rep });
    if (rep.skipped) continue; // nothing changed (three in a row make trainStep throw)
    r.losses.push(rep.loss);
    r.saved = false;
    if (r.saveEvery > 0 && rep.step % r.saveEvery === 0 && !done) {
      await gpu((e) => e.saveSession());
      r.saved = true;
    }
  }
  const reason = done ? 'done' : r.want === 'stop' ? 'stopped' : 'paused';
  if (reason !== 'stopped' && !r.saved) {
    await gpu((e) => e.saveSession());
    r.saved = true;
  }
  return { sessionId: r.sessionId, reason, step: r.step, totalSteps: r.totalSteps, losses: [...r.losses], saved: r.saved };
}

function busyTraining(): Failure {
  return new Failure('Busy', `run ${run?.sessionId} is training: pause or stop it first`);
}

// ---- the requests --------------------------------------------------------------------------

/** Generations that may still be cancelled, and those that were. */
const generating = new Set<number>();
const cancelled = new Set<number>();

type Handlers = { [M in keyof Methods]: (id: number, ...args: Methods[M]['args']) => Promise<Methods[M]['result']> };

const handlers: Handlers = {
  async open(_id, dbName) {
    if (!engine) {
      await init();
      engine = (await Engine.create(dbName)) as unknown as EngineApi;
    }
    return gpu((e) => e.deviceInfo());
  },
  deviceInfo: () => gpu((e) => e.deviceInfo()),
  listModels: () => gpu((e) => e.listModels()),
  listImports: () => gpu((e) => e.listImports()),
  deleteModel: (_id, name) => gpu((e) => e.deleteModel(name)),
  storage: () => gpu((e) => e.storage()),
  importHub: (id, name, base, repo, revision) =>
    gpu((e) => e.importHub(name, base, repo, revision, (data) => post({ event: 'progress', id, data }))),
  importFiles: (id, name, files) => gpu((e) => e.importFiles(name, files, (data) => post({ event: 'progress', id, data }))),
  async loadModel(_id, name, weights, stream, referenceKernels, f16Products) {
    if (run?.loop) throw busyTraining();
    const info = await gpu((e) => {
      e.useReferenceKernels(referenceKernels);
      e.useF16Products(f16Products);
      return e.loadModel(name, weights, stream);
    });
    run = null; // loading a model closes the engine's run
    return info;
  },
  exampleTokens: (_id, prompt, response) => gpu((e) => e.exampleTokens(prompt, response)),

  async train(id, req) {
    if (run?.loop) throw busyTraining();
    const info = await gpu(async (e) => {
      e.setMemoryBudget(req.memoryBudget);
      e.setProfile(req.profile);
      return e.startTraining(req.sessionId, req.config, req.dataset);
    });
    post({ event: 'session', id, data: info });
    run = newRun(info, req.saveEvery, false);
    return startLoop(run, id);
  },
  async pause() {
    if (!run?.loop) return null;
    if (run.want === 'run') run.want = 'pause';
    return run.loop;
  },
  async resume(id, sessionId, saveEvery) {
    const want = sessionId ?? run?.sessionId;
    if (!want) throw new Failure('BadInput', 'no run to resume: name a stored session');
    if (run?.loop) {
      if (run.sessionId !== want) throw busyTraining();
      run.want = 'run'; // a pause asked for and not yet taken is called off
      return run.loop;
    }
    if (run?.sessionId !== want) {
      const info = await gpu((e) => e.resumeSession(want));
      post({ event: 'session', id, data: info });
      run = newRun(info, saveEvery ?? run?.saveEvery ?? 50, true);
    } else if (saveEvery !== null) {
      run.saveEvery = saveEvery;
    }
    return startLoop(run, id);
  },
  async stop() {
    if (!run?.loop) return;
    run.want = 'stop';
    await run.loop.catch(() => undefined);
  },
  listSessions: () => gpu((e) => e.listSessions()),
  async resumeSession(id, sessionId) {
    if (run?.loop) throw busyTraining();
    const info = await gpu((e) => e.resumeSession(sessionId));
    post({ event: 'session', id, data: info });
    run = newRun(info, run?.saveEvery ?? 50, true);
    return info;
  },
  async deleteSession(_id, sessionId) {
    if (run?.loop && run.sessionId === sessionId) throw busyTraining();
    await gpu((e) => e.deleteSession(sessionId));
    if (run?.sessionId === sessionId) run = null;
  },
  exportAdapter: () => gpu((e) => e.exportAdapter()),
  async importAdapter(_id, safetensors, config) {
    if (run?.loop) throw busyTraining();
    await gpu((e) => e.importAdapter(safetensors, config));
    run = null; // the engine closes its run for the imported adapter
  },
  async generate(id, messages, options) {
    generating.add(id);
    try {
      return await gpu((e) => {
        if (cancelled.has(id)) return '';
        return e.generate(messages, options, (data) => {
          post({ event: 'token', id, data });
          return !cancelled.has(id);
        });
      });
    } finally {
      generating.delete(id);
      cancelled.delete(id);
    }
  },
  async cancel(_id, requestId) {
    if (generating.has(requestId)) cancelled.add(requestId);
  },
  memory: () => gpu((e) => e.memory()),
  // Not queued: it destroys the device under the operation running, as a real loss would.
  simulateDeviceLoss: async () => engine?.loseDevice(),
};

function errorData(e: unknown): ErrorData {
  if (e instanceof Error) {
    const known = (ERROR_NAMES as readonly string[]).includes(e.name);
    if (known) return { name: e.name as ErrorData['name'], message: e.message };
    // A wasm trap (a Rust panic) or a JS error of the glue.
    return { name: 'Error', message: `${e.name}: ${e.message}` };
  }
  return { name: 'Error', message: String(e) };
}

scope.onmessage = async (ev: MessageEvent<Request>) => {
  const { id, method, args } = ev.data;
  const handler = handlers[method] as (id: number, ...a: unknown[]) => Promise<unknown>;
  try {
    if (!handler) throw new Failure('BadInput', `unknown method ${String(method)}`);
    const result = await handler(id, ...args);
    const bytes = method === 'exportAdapter' ? (result as Methods['exportAdapter']['result']).safetensors : null;
    post({ id, ok: true, result }, bytes ? [bytes.buffer as ArrayBuffer] : []);
  } catch (e) {
    post({ id, ok: false, error: errorData(e) });
  }
};
