// The messages between the client (index.ts) and its worker (worker.ts).
//
//   client → worker  {id, method, args}                      one per call
//   worker → client  {id, ok: true, result}                  the call's answer
//                    {id, ok: false, error: {name, message}} its failure
//                    {event, id, data}                       while the call `id` runs:
//                      progress (importHub, importFiles), token (generate),
//                      session (train, resume: the run as started), step (train, resume)

import type {
  DeviceInfo,
  EngineGenerateOptions,
  EngineTrainConfig,
  ErrorName,
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
  TrainResult,
  WeightFormat,
} from './types.js';

/** What `train` sends: the engine's own values. */
export interface TrainRequest {
  sessionId: string;
  /** TrainConfig as the engine reads it (snake_case fields). */
  config: EngineTrainConfig;
  /** JSONL, one example a line. */
  dataset: string;
  /** Save every N steps (0: only on pause and at the end). */
  saveEvery: number;
  /** Most GPU bytes the run may hold at once; null: no limit but the device's. */
  memoryBudget: number | null;
  /** Time each step's dispatches kernel by kernel (StepReport.profile). */
  profile: boolean;
}

/** Every method the worker answers: its arguments and its result. */
export interface Methods {
  /** Initialise the wasm and open the engine on the IndexedDB database named. */
  open: { args: [dbName: string]; result: DeviceInfo };
  deviceInfo: { args: []; result: DeviceInfo };
  listModels: { args: []; result: StoredModel[] };
  listImports: { args: []; result: PartialImport[] };
  simulateDeviceLoss: { args: []; result: void };
  deleteModel: { args: [name: string]; result: void };
  storage: { args: []; result: StorageInfo };
  importHub: { args: [name: string, base: string, repo: string, revision: string]; result: StoredModel };
  importFiles: { args: [name: string, files: File[]]; result: StoredModel };
  loadModel: {
    args: [name: string, weights: WeightFormat, stream: boolean, referenceKernels: boolean, f16Products: boolean];
    result: ModelInfo;
  };
  exampleTokens: { args: [prompt: string, response: string]; result: number };
  /** Start a run and step it until done, paused or stopped. */
  train: { args: [request: TrainRequest]; result: TrainResult };
  /** Finish the current step, save, and answer the loop's result (null when none runs). */
  pause: { args: []; result: TrainResult | null };
  /** Continue the run in memory, or the stored session `sessionId`. */
  resume: { args: [sessionId: string | null, saveEvery: number | null]; result: TrainResult };
  /** End the loop after the current step, without saving. */
  stop: { args: []; result: void };
  listSessions: { args: []; result: SessionSummary[] };
  resumeSession: { args: [id: string]; result: SessionInfo };
  deleteSession: { args: [id: string]; result: void };
  exportAdapter: { args: []; result: { safetensors: Uint8Array; config: string } };
  importAdapter: { args: [safetensors: Uint8Array, config: string]; result: void };
  generate: { args: [messages: Message[], options: EngineGenerateOptions]; result: string };
  /** Stop the generation started by request `requestId` at its next token. */
  cancel: { args: [requestId: number]; result: void };
  memory: { args: []; result: MemoryReport };
}

export type Method = keyof Methods;

export type Request = { [M in Method]: { id: number; method: M; args: Methods[M]['args'] } }[Method];

export interface ErrorData {
  name: ErrorName;
  message: string;
}

export type Reply = { id: number; ok: true; result: unknown } | { id: number; ok: false; error: ErrorData };

export type WorkerEvent =
  | { event: 'progress'; id: number; data: ProgressEvent }
  | { event: 'token'; id: number; data: string }
  | { event: 'session'; id: number; data: SessionInfo }
  | { event: 'step'; id: number; data: StepReport };

export type FromWorker = Reply | WorkerEvent;

export const ERROR_NAMES: readonly ErrorName[] = ['NoWebGPU', 'Quota', 'BadInput', 'NotFound', 'Busy', 'Device', 'DeviceLost', 'Budget', 'Error'];
