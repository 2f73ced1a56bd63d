// webtune: fine-tune a language model with LoRA in a browser tab, on WebGPU.
//
// `Webtune` runs the wasm engine in a dedicated module worker (worker.ts) and talks to it with
// typed messages (protocol.ts); every method is asynchronous and never blocks the page.

import type {
  AdapterFiles,
  DeviceInfo,
  EngineTrainConfig,
  ErrorName,
  Example,
  GenerateOptions,
  LoadOptions,
  MemoryReport,
  Message,
  ModelInfo,
  PartialImport,
  ProgressEvent,
  SessionInfo,
  SessionSummary,
  StepReport,
  StorageInfo,
  StoredModel,
  TrainConfig,
  TrainResult,
  WeightFormat,
} from './types.js';
import type { FromWorker, Methods, WorkerEvent } from './protocol.js';

export type * from './types.js';

/** A failure of the engine or of the worker; `name` says what kind (see ErrorName). */
export class WebtuneError extends Error {
  override name: ErrorName;
  constructor(name: ErrorName, message: string) {
    super(message);
    this.name = name;
  }
}

export interface OpenOptions {
  /** The IndexedDB database of models and sessions. Default "webtune". */
  dbName?: string;
  /** A worker running webtune's worker.js, for bundlers that need to create it themselves. */
  worker?: Worker;
}

export interface HubImport {
  /** The name to store the model under. */
  name: string;
  /** A server in the Hugging Face hub layout: {base}/{repo}/resolve/{revision}/{file}. */
  base?: string;
  repo?: string;
  revision?: string;
  onProgress?: (e: ProgressEvent) => void;
}

export interface TrainOptions {
  /** Names the run in the store; default `run-<time>`. */
  sessionId?: string;
  config?: TrainConfig;
  /** JSONL (one example a line), or the examples. */
  dataset: string | Example[];
  /** Save every N steps (0: only on pause and at the end). Default config.saveEvery, else 50. */
  saveEvery?: number;
  /** Most GPU memory the run may hold at once, in bytes (default: no limit but the device's).
   *  A step that would need more fails with an Error named "Budget" saying how much it
   *  needed; the last saved checkpoint is kept. */
  memoryBudget?: number;
  /** Time every dispatch of each step and report where the GPU time went, kernel by kernel,
   *  in StepReport.profile (a profiled step runs slower: each timed dispatch gets a compute
   *  pass of its own). Default false. */
  profile?: boolean;
}

export interface TrainHandlers {
  /** The run as started or resumed (steps, examples, warnings). */
  onStart?: (info: SessionInfo) => void;
  onStep?: (step: StepReport) => void;
}

/** The answer as it will be; `cancel()` stops it at the next token (it then resolves to the text so far). */
export type Generation = Promise<string> & { cancel(): void };

/** What `on` listens to: each step, import progress, and memory reports (each step's and memory()'s). */
export interface WebtuneEvents {
  step: StepReport;
  progress: ProgressEvent;
  memory: MemoryReport;
}

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: WebtuneError) => void;
  onEvent?: (e: WorkerEvent) => void;
}

/** The camelCase TrainConfig with the engine's snake_case field names (TrainConfig's type holds
 *  the two in step; a field the engine does not know goes through, for it to refuse by name). */
function engineConfig(config: TrainConfig): EngineTrainConfig {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(config)) {
    if (v !== undefined) out[k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)] = v;
  }
  return out as EngineTrainConfig;
}

export class Webtune {
  private next = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly listeners: { [E in keyof WebtuneEvents]: Set<(data: WebtuneEvents[E]) => void> } = {
    step: new Set(),
    progress: new Set(),
    memory: new Set(),
  };
  private closed = false;
  private info: DeviceInfo | null = null;

  private constructor(private readonly worker: Worker) {}

  /** The adapter and its limits, as found when opened. */
  get device(): DeviceInfo {
    return this.info as DeviceInfo;
  }

  /** Start the worker, load the wasm and open the GPU device and the store. Rejects with
   *  `NoWebGPU` when the browser has no WebGPU adapter. */
  static async open(options: OpenOptions = {}): Promise<Webtune> {
    const worker = options.worker ?? new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
    const wt = new Webtune(worker);
    worker.onmessage = (ev: MessageEvent<FromWorker>) => wt.receive(ev.data);
    worker.onerror = (ev: ErrorEvent) => {
      ev.preventDefault();
      wt.failAll(new WebtuneError('Error', `the webtune worker failed${ev.message ? `: ${ev.message}` : ''}`));
    };
    worker.onmessageerror = () => wt.failAll(new WebtuneError('Error', 'a message from the webtune worker could not be read'));
    try {
      wt.info = await wt.call('open', [options.dbName ?? 'webtune']);
      return wt;
    } catch (e) {
      if (!options.worker) worker.terminate();
      throw e;
    }
  }

  // ---- plumbing ------------------------------------------------------------------------

  private call<M extends keyof Methods>(
    method: M,
    args: Methods[M]['args'],
    onEvent?: (e: WorkerEvent) => void,
    transfer: Transferable[] = [],
  ): Promise<Methods[M]['result']> & { id: number } {
    const id = this.next++;
    const promise = new Promise<Methods[M]['result']>((resolve, reject) => {
      if (this.closed) return reject(new WebtuneError('Error', 'webtune is closed'));
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject, onEvent });
      this.worker.postMessage({ id, method, args }, transfer);
    });
    return Object.assign(promise, { id });
  }

  private receive(m: FromWorker): void {
    if ('event' in m) {
      if (m.event === 'step') {
        this.emit('step', m.data);
        this.emit('memory', m.data.memory);
      } else if (m.event === 'progress') {
        this.emit('progress', m.data);
      }
      this.pending.get(m.id)?.onEvent?.(m);
      return;
    }
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    if (m.ok) p.resolve(m.result);
    else p.reject(new WebtuneError(m.error.name, m.error.message));
  }

  private failAll(e: WebtuneError): void {
    for (const p of this.pending.values()) p.reject(e);
    this.pending.clear();
  }

  private emit<E extends keyof WebtuneEvents>(event: E, data: WebtuneEvents[E]): void {
    for (const cb of this.listeners[event]) cb(data);
  }

  /** Listen to an event; returns the function that stops listening. */
  on<E extends keyof WebtuneEvents>(event: E, cb: (data: WebtuneEvents[E]) => void): () => void {
    this.listeners[event].add(cb);
    return () => this.off(event, cb);
  }

  off<E extends keyof WebtuneEvents>(event: E, cb: (data: WebtuneEvents[E]) => void): void {
    this.listeners[event].delete(cb);
  }

  // ---- device and stored models --------------------------------------------------------

  deviceInfo(): Promise<DeviceInfo> {
    return this.call('deviceInfo', []);
  }

  /** Complete models in the store. */
  listModels(): Promise<StoredModel[]> {
    return this.call('listModels', []);
  }

  /** Imports that stopped before their end (a closed tab, a lost connection, a full disk):
   *  importing the same files under the same name again resumes one. */
  listImports(): Promise<PartialImport[]> {
    return this.call('listImports', []);
  }

  deleteModel(name: string): Promise<void> {
    return this.call('deleteModel', [name]);
  }

  /** The origin's storage use and quota, and whether it is persistent. */
  storage(): Promise<StorageInfo> {
    return this.call('storage', []);
  }

  /** Import a model from a server in the Hugging Face hub layout (config.json, tokenizer files,
   *  safetensors, sharded or not), streamed into IndexedDB with Range requests; an interrupted
   *  import of the same name resumes. */
  importHub({
    name,
    base = 'https://huggingface.co',
    repo = 'Qwen/Qwen2.5-0.5B-Instruct',
    revision = 'main',
    onProgress,
  }: HubImport): Promise<StoredModel> {
    return this.call('importHub', [name, base, repo, revision], (e) => {
      if (e.event === 'progress') onProgress?.(e.data);
    });
  }

  /** Import a model from a folder's files (or one .gguf file). */
  importFiles(name: string, files: File[] | FileList, onProgress?: (e: ProgressEvent) => void): Promise<StoredModel> {
    return this.call('importFiles', [name, Array.from(files)], (e) => {
      if (e.event === 'progress') onProgress?.(e.data);
    });
  }

  // ---- the loaded model ----------------------------------------------------------------

  /** Load a stored model onto the GPU (one at a time; this closes any run in memory);
   *  `{ stream: true }` keeps only the block being computed there (see {@link LoadOptions}). */
  loadModel(name: string, weights: WeightFormat = 'stored', options: LoadOptions = {}): Promise<ModelInfo> {
    return this.call('loadModel', [
      name,
      weights,
      options.stream ?? false,
      options.referenceKernels ?? false,
      options.f16Products ?? false,
    ]);
  }

  /** Tokens of one prompt → response chat example, as the trainer renders it. */
  exampleTokens(prompt: string, response: string): Promise<number> {
    return this.call('exampleTokens', [prompt, response]);
  }

  // ---- training ------------------------------------------------------------------------

  /** Start a run on the loaded model and step it until it is done, paused or stopped
   *  (a paused run can be resumed, also after a reload). Saves every `saveEvery` steps, on
   *  pause and at the end. Chat and export requests made meanwhile run between steps. */
  train(options: TrainOptions, handlers: TrainHandlers = {}): Promise<TrainResult> {
    const config = options.config ?? {};
    const dataset =
      typeof options.dataset === 'string' ? options.dataset : options.dataset.map((e) => JSON.stringify(e)).join('\n');
    const request = {
      sessionId: options.sessionId ?? `run-${Date.now()}`,
      config: engineConfig(config),
      dataset,
      saveEvery: options.saveEvery ?? config.saveEvery ?? 50,
      memoryBudget: options.memoryBudget ?? null,
      profile: options.profile ?? false,
    };
    return this.call('train', [request], (e) => this.trainEvent(e, handlers));
  }

  private trainEvent(e: WorkerEvent, handlers: TrainHandlers): void {
    if (e.event === 'session') handlers.onStart?.(e.data);
    else if (e.event === 'step') handlers.onStep?.(e.data);
  }

  /** Finish the current step, save the run, and resolve to where it stopped (null when no
   *  run is training). */
  pause(): Promise<TrainResult | null> {
    return this.call('pause', []);
  }

  /** Continue the run in memory, or the stored session `sessionId` (after a reload). */
  resume(sessionId?: string, handlers: TrainHandlers & { saveEvery?: number } = {}): Promise<TrainResult> {
    return this.call('resume', [sessionId ?? null, handlers.saveEvery ?? null], (e) => this.trainEvent(e, handlers));
  }

  /** End the loop after the current step without saving (the run stays loaded: its adapter can
   *  still chat and be exported, and `resume()` continues it). */
  stop(): Promise<void> {
    return this.call('stop', []);
  }

  /** The runs in the store. */
  listSessions(): Promise<SessionSummary[]> {
    return this.call('listSessions', []);
  }

  /** Load a stored run (and its model) without stepping it; `resume()` then continues it. */
  resumeSession(id: string): Promise<SessionInfo> {
    return this.call('resumeSession', [id]);
  }

  deleteSession(id: string): Promise<void> {
    return this.call('deleteSession', [id]);
  }

  // ---- adapters and chat ---------------------------------------------------------------

  /** The run's adapter as PEFT files (adapter_model.safetensors, adapter_config.json). */
  async exportAdapter(): Promise<AdapterFiles> {
    const { safetensors, config } = await this.call('exportAdapter', []);
    return {
      model: new Blob([safetensors as Uint8Array<ArrayBuffer>], { type: 'application/octet-stream' }),
      config: new Blob([config], { type: 'application/json' }),
    };
  }

  /** Chat with a PEFT LoRA adapter (this closes any run in memory). */
  async importAdapter(files: AdapterFiles): Promise<void> {
    const bytes = new Uint8Array(await files.model.arrayBuffer());
    const config = await files.config.text();
    return this.call('importAdapter', [bytes, config], undefined, [bytes.buffer]);
  }

  /** Answer a chat (a string is one user message). `onToken` gets each new piece of text;
   *  returning false from it, `cancel()`, or aborting `options.signal` stops the answer. */
  generate(
    messages: Message[] | string,
    options: GenerateOptions = {},
    onToken?: (text: string) => boolean | void,
  ): Generation {
    const { signal, ...rest } = options;
    const msgs: Message[] = typeof messages === 'string' ? [{ role: 'user', content: messages }] : messages;
    // The worker hears of a cancel a token or so late: the pieces after it are dropped here, so
    // the answer ends exactly where it was cut.
    let text = '';
    let cancelled = false;
    const cancel = () => {
      if (cancelled) return;
      cancelled = true;
      this.call('cancel', [p.id]).catch(() => undefined);
    };
    const p = this.call('generate', [msgs, rest], (e) => {
      if (e.event !== 'token' || cancelled) return;
      text += e.data;
      if (onToken?.(e.data) === false) cancel();
    });
    if (signal?.aborted) cancel();
    signal?.addEventListener('abort', cancel, { once: true });
    const done = p
      .then((answer) => (cancelled ? text : answer))
      .finally(() => signal?.removeEventListener('abort', cancel));
    return Object.assign(done, { cancel });
  }

  /** Destroy the GPU device now, under whatever runs, as a driver reset would: for testing an
   *  app's recovery (what WebGL's WEBGL_lose_context is for). The operation running (or the
   *  next) rejects with `DeviceLost`; later calls get a new device. */
  simulateDeviceLoss(): Promise<void> {
    return this.call('simulateDeviceLoss', []);
  }

  /** GPU memory by category, the last step's timeline, wasm memory and the limits. */
  async memory(): Promise<MemoryReport> {
    const m = await this.call('memory', []);
    this.emit('memory', m);
    return m;
  }

  /** End the worker (and with it the engine); calls still running reject. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.worker.terminate();
    this.failAll(new WebtuneError('Error', 'webtune is closed'));
  }
}
