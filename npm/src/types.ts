// The values the engine (src/wasm.rs, notes/ENGINE_API.md) hands out and takes, as the client
// exposes them. Most are the Rust types themselves: ts-rs makes their TypeScript into
// ./generated/ (one file per Rust type, under its Rust name), and `cargo test` fails when those
// files fall behind the Rust (src/runtime/ts_types.rs says how to write them again). Here they
// are re-exported under the client's names, a few narrowed (a string the engine reads as one
// of a few names gets a union of them). TrainConfig keeps its hand-written, camelCase form
// (the client renames its fields to the engine's snake_case ones), checked field by field
// against the Rust one at compile time.

import type { GenerateRequest } from './generated/GenerateRequest.js';
import type { Message as EngineMessage } from './generated/Message.js';
import type { ModelInfo as EngineModelInfo } from './generated/ModelInfo.js';
import type { Progress } from './generated/Progress.js';
import type { SessionSummary as EngineSessionSummary } from './generated/SessionSummary.js';
import type { StepInfo } from './generated/StepInfo.js';
import type { TrainConfig as RustTrainConfig } from './generated/TrainConfig.js';

export type { Bytes } from './generated/Bytes.js';
export type { DeviceInfo } from './generated/DeviceInfo.js';
export type { DeviceLimits } from './generated/DeviceLimits.js';
export type { KernelProfile } from './generated/KernelProfile.js';
export type { HostProfile } from './generated/HostProfile.js';
export type { Profile as StepProfile } from './generated/Profile.js';
export type { Timing as ProfileTiming } from './generated/Timing.js';
export type { MemoryReport } from './generated/MemoryReport.js';
export type { Sample as MemorySample } from './generated/Sample.js';
export type { PartialImport } from './generated/PartialImport.js';
export type { SessionInfo } from './generated/SessionInfo.js';
export type { StorageInfo } from './generated/StorageInfo.js';
export type { StoredModel } from './generated/StoredModel.js';

/** Import progress, in the transformers.js conventions; `progress` is a percentage. `total`:
 *  the whole model (bytes stored, of total; bytes per second; seconds left, 0 while unknown). */
export type ProgressEvent = Progress;

/** One optimizer step, with the memory it used (Rust: runtime::StepInfo). */
export type StepReport = StepInfo;

/** TrainConfig as the engine reads it (snake_case); what is left out takes the defaults. */
export type EngineTrainConfig = Partial<RustTrainConfig>;

/** The kinds of failure, as `WebtuneError.name`. */
export type ErrorName = 'NoWebGPU' | 'Quota' | 'BadInput' | 'NotFound' | 'Busy' | 'Device' | 'DeviceLost' | 'Budget' | 'Error';

/** How the frozen weights are kept on the GPU. */
export type WeightFormat = 'stored' | 'bf16' | 'q8' | 'q4';

/** The loaded model. */
export interface ModelInfo extends EngineModelInfo {
  weights: WeightFormat;
}

/** How to load a model. */
export interface LoadOptions {
  /** Keep only the block being computed on the GPU and fetch each block from IndexedDB when
   *  a step needs it (the next one while the GPU computes the current one): the least GPU and
   *  wasm memory, slower steps. Generation streams too (every block again for each token:
   *  slow; load the model resident to chat fast).
   *  Default false (every weight resident). */
  stream?: boolean;
  /** Run the reference kernels instead of the variants measured fastest on this GPU (each
   *  variant is checked against the reference before use; this rules them out, to compare).
   *  `ModelInfo.kernels` says which run. Default false. */
  referenceKernels?: boolean;
  /** Let the kernel choice take matrix products that multiply in f16 and accumulate in f32,
   *  where the GPU has shader-f16: faster on many GPUs, but gradients then lie within ~1e-2 of
   *  the exact ones instead of float rounding. Default false (every product in f32). */
  f16Products?: boolean;
}

/** LoRA target projections (short names). */
export type Target = 'q' | 'k' | 'v' | 'o' | 'gate' | 'up' | 'down';

/** A training run's configuration; every field is optional and takes the default shown. */
export type TrainConfig = Mirror<TrainConfigFields, CamelFields<RustTrainConfig>>;

/** `snake_case` as `camelCase`, as the client renames TrainConfig's fields for the engine. */
type CamelCase<S extends string> = S extends `${infer Head}_${infer Tail}` ? `${Head}${Capitalize<CamelCase<Tail>>}` : S;
/** T's fields under their camelCase names. */
type CamelFields<T> = { [K in keyof T as CamelCase<K & string>]: T[K] };
/** `Fields`, which tsc accepts only when it has exactly the fields of `Engine`, each (optional
 *  and) of a type that the engine reads: a field added, dropped or retyped on either side is a
 *  compile error here. */
type Mirror<
  Fields extends { [K in keyof Fields]?: K extends keyof Engine ? Engine[K] : never },
  Engine extends { [K in keyof Engine]: K extends keyof Fields ? unknown : never },
> = Fields;

interface TrainConfigFields {
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
export interface Message extends EngineMessage {
  role: 'system' | 'user' | 'assistant';
}

/** One training example: a prompt and its response, or a whole chat. */
export type Example = { prompt: string; completion: string } | { messages: Message[] };

/** A stored training session. */
export interface SessionSummary extends EngineSessionSummary {
  weights: WeightFormat;
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

/** How to answer, as the engine reads it (each field optional). */
export type EngineGenerateOptions = Partial<GenerateRequest>;

/** How to answer. */
export interface GenerateOptions extends EngineGenerateOptions {
  /** Aborting stops the answer at its next token; the promise then resolves to the text so far. */
  signal?: AbortSignal;
}

/** A PEFT adapter: adapter_model.safetensors and adapter_config.json. */
export interface AdapterFiles {
  model: Blob;
  config: Blob;
}
