// The values the engine (src/wasm.rs, notes/ENGINE_API.md) hands out and takes, as the client
// exposes them. Field names are the engine's (camelCase), except TrainConfig, whose snake_case
// JSON the client writes from the camelCase fields below.

/** The kinds of failure, as `WebtuneError.name`. */
export type ErrorName = 'NoWebGPU' | 'Quota' | 'BadInput' | 'NotFound' | 'Busy' | 'Device' | 'DeviceLost' | 'Budget' | 'Error';

/** The adapter and what it granted. */
export interface DeviceInfo {
  adapter: string;
  backend: string;
  limits: {
    maxBufferSize: number;
    maxStorageBufferBindingSize: number;
    maxStorageBuffersPerShaderStage?: number;
    maxComputeWorkgroupStorageSize: number;
    maxComputeInvocationsPerWorkgroup: number;
  };
  shaderF16: boolean;
  subgroups: boolean;
}

/** A complete model in the store. */
export interface StoredModel {
  name: string;
  bytes: number;
}

/** An import that stopped before its end: `bytes` of `total` stored. Importing the same files
 *  under the same name resumes it; deleteModel(name) drops it. */
export interface PartialImport {
  name: string;
  bytes: number;
  total: number;
}

/** navigator.storage.estimate() and persisted(). */
export interface StorageInfo {
  usage: number;
  quota: number;
  persisted: boolean;
}

/** Import progress, in the transformers.js conventions; `progress` is a percentage. */
export type ProgressEvent =
  | { status: 'initiate'; name: string; file: string }
  | { status: 'download'; name: string; file: string }
  | { status: 'progress'; name: string; file: string; loaded: number; total: number; progress: number }
  | { status: 'done'; name: string; file: string }
  | { status: 'ready'; name: string; bytes: number }
  /** The whole model: bytes stored, of total; bytes per second; seconds left (0 while unknown). */
  | { status: 'total'; name: string; loaded: number; total: number; progress: number; rate: number; eta: number };

/** How the frozen weights are kept on the GPU. */
export type WeightFormat = 'stored' | 'bf16' | 'q8' | 'q4';

/** The loaded model. */
export interface ModelInfo {
  name: string;
  modelType: string;
  layers: number;
  hidden: number;
  heads: number;
  kvHeads: number;
  intermediate: number;
  vocab: number;
  parameters: number;
  /** Bytes of frozen weights on the GPU (a streamed model: only the final norm at rest). */
  weightBytes: number;
  chatTemplate: boolean;
  weights: WeightFormat;
  /** Loaded with `stream`: each block is fetched from IndexedDB when a step needs it. */
  streamed: boolean;
}

/** How to load a model. */
export interface LoadOptions {
  /** Keep only the block being computed on the GPU and fetch each block from IndexedDB when
   *  a step needs it (the next one while the GPU computes the current one): the least GPU and
   *  wasm memory, slower steps. Generation streams too (every block again for each token:
   *  slow; load the model resident to chat fast).
   *  Default false (every weight resident). */
  stream?: boolean;
}

/** LoRA target projections (short names). */
export type Target = 'q' | 'k' | 'v' | 'o' | 'gate' | 'up' | 'down';

/** A training run's configuration; every field is optional and takes the default shown. */
export interface TrainConfig {
  /** LoRA rank. Default 16. */
  rank?: number;
  /** LoRA alpha (the update is scaled by alpha / rank). Default 32. */
  alpha?: number;
  /** Projections that get an adapter. Default all seven. */
  targets?: Target[];
  /** Longest sequence in tokens; longer examples are truncated (with a warning). Default 256. */
  seq?: number;
  /** Examples per micro-batch. Default 4. */
  batch?: number;
  /** Micro-batches per optimizer step. Default 1. */
  accum?: number;
  /** Optimizer steps; when null or absent, `epochs` decides. */
  steps?: number | null;
  /** Passes over the data when `steps` is absent. Default 10. */
  epochs?: number;
  /** Seed of the LoRA init and the data order. Default 0. */
  seed?: number;
  /** Checkpoint every N steps (0: only at the end). Default 50. Webtune.train's saveEvery wins. */
  saveEvery?: number;
  /** 'adamw', 'sgd', or 'mezo' (forward passes only). Default 'adamw'. */
  optimizer?: 'adamw' | 'sgd' | 'mezo';
  /** MeZO's perturbation scale. Default 1e-3. */
  mezoEps?: number;
  /** Peak learning rate. Default 1e-3. */
  lr?: number;
  /** Decoupled weight decay (AdamW). Default 0. */
  weightDecay?: number;
  /** Clip the gradient norm to this (0: no clipping). Default 1. */
  maxGradNorm?: number;
  /** Learning-rate schedule after warmup. Default 'cosine'. */
  schedule?: 'cosine' | 'constant';
  /** Fraction of the steps spent in linear warmup. Default 0.05. */
  warmupRatio?: number;
}

/** One chat message. */
export interface Message {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

/** One training example: a prompt and its response, or a whole chat. */
export type Example = { prompt: string; completion: string } | { messages: Message[] };

/** A training run as started or resumed. */
export interface SessionInfo {
  sessionId: string;
  model: string;
  totalSteps: number;
  /** Steps done (0 for a new run). */
  step: number;
  examples: number;
  /** Whether the optimizer update is fused into the backward pass. */
  fused: boolean;
  /** The loss of every step done. */
  losses: number[];
  warnings: string[];
}

/** GPU bytes of one category: now and the highest since the last step began. */
export interface Bytes {
  live: number;
  peak: number;
}

/** One phase of the last step: when it ended and the memory at and during it. */
export interface MemorySample {
  phase: string;
  t_ms: number;
  live_total: number;
  peak_total: number;
  peak_by_category: Record<string, number>;
}

/** The GPU memory accounting (every buffer the engine allocates is counted). */
export interface MemoryReport {
  live: number;
  peak: number;
  /** weights, lora, grads, optimizer, checkpoints, activations, scratch, staging */
  categories: Record<string, Bytes>;
  /** One sample per phase of the last step (empty outside training). */
  timeline: MemorySample[];
  /** The wasm linear memory. */
  wasmBytes: number;
  /** A streamed model: the most bytes of stored chunks held in wasm memory at once (about
   *  one block); 0 when the weights are resident. */
  stagedPeakBytes: number;
  maxBufferSize: number;
  maxStorageBufferBindingSize: number;
}

/** One optimizer step. */
export interface StepReport {
  step: number;
  totalSteps: number;
  loss: number;
  lr: number;
  tokens: number;
  ms: number;
  tokensPerSec: number;
  memory: MemoryReport;
  /** The loss or the gradients were not finite (NaN or infinite): nothing was updated and
   *  `step` did not advance. Three in a row stop the run with an error. */
  skipped: boolean;
}

/** A stored training session. */
export interface SessionSummary {
  id: string;
  model: string;
  weights: WeightFormat;
  /** The run's model was streamed (resuming loads it streamed again). */
  streamed: boolean;
  step: number;
  totalSteps: number;
  losses: number[];
  /** Milliseconds since the epoch of the last save. */
  updated: number;
}

/** Why a training loop returned. */
export type TrainStop = 'done' | 'paused' | 'stopped';

/** What Webtune.train and Webtune.resume resolve to. */
export interface TrainResult {
  sessionId: string;
  reason: TrainStop;
  /** Steps done. */
  step: number;
  totalSteps: number;
  /** The loss of every step of the run, earlier sessions' included. */
  losses: number[];
  /** Whether the run's state is in the store as of `step`. */
  saved: boolean;
}

/** How to answer. */
export interface GenerateOptions {
  /** Default 128. */
  maxNewTokens?: number;
  /** 0 (the default) is greedy. */
  temperature?: number;
  /** 0 (the default): no top-k cut. */
  topK?: number;
  /** Default 1. */
  topP?: number;
  seed?: number;
  /** Use the trained or imported adapter (default true). */
  adapter?: boolean;
  /** Aborting stops the answer at its next token; the promise then resolves to the text so far. */
  signal?: AbortSignal;
}

/** A PEFT adapter: adapter_model.safetensors and adapter_config.json. */
export interface AdapterFiles {
  model: Blob;
  config: Blob;
}
