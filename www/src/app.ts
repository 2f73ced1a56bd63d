// The page's shared state: the engine, the loaded model, and what long task is running. The
// client's worker runs one GPU operation at a time in the order asked (a chat or a token count
// during training runs between steps); the page keeps long tasks (import, load, train) apart.

import type { ModelInfo, PageEngine } from './types.ts';

export type Task = 'import' | 'load' | 'train' | 'generate' | 'resume' | 'adapter' | null;

export interface State {
  engine: PageEngine | null;
  /** Why the engine could not start (shown instead of the panels' controls). */
  engineError: unknown;
  model: ModelInfo | null;
  /** The long task in progress; buttons that would start another are disabled. */
  task: Task;
  /** A training run is loaded (started or resumed) and not stopped. */
  runActive: boolean;
  /** Training steps are being taken right now (not paused). */
  stepping: boolean;
  /** The engine holds an adapter (a run's or an imported one) that chat can use. */
  hasAdapter: boolean;
  /** Where that adapter came from: a run can be exported, an imported one is its files. */
  adapterFrom: 'run' | 'file' | null;
  /** Examples ready to train on (from the data panel). */
  examples: number;
}

export const state: State = {
  engine: null,
  engineError: null,
  model: null,
  task: null,
  runActive: false,
  stepping: false,
  hasAdapter: false,
  adapterFrom: null,
  examples: 0,
};

type Listener = () => void;
const listeners: Listener[] = [];

/** Call `f` now and after every change. */
export function watch(f: Listener): void {
  listeners.push(f);
  f();
}

/** Change the state and tell every panel. */
export function update(patch: Partial<State>): void {
  Object.assign(state, patch);
  for (const f of listeners) f();
}

/** Call the engine (rejects like the engine does when it did not start). */
export function serial<T>(f: (e: PageEngine) => Promise<T>): Promise<T> {
  if (!state.engine) return Promise.reject(Object.assign(new Error('the engine did not start'), { name: 'NoWebGPU' }));
  return f(state.engine).catch((e: unknown) => {
    // The engine lost its GPU device and opened a new one: what was on the old one is gone
    // (the model, the run in memory, an adapter); the store still has everything saved.
    if ((e as { name?: unknown })?.name === 'DeviceLost') {
      update({ model: null, runActive: false, stepping: false, hasAdapter: false, adapterFrom: null });
    }
    throw e;
  });
}

/** Run a long task: marks the page busy with it (so other long tasks wait) until it ends. */
export async function task<T>(name: Exclude<Task, null>, f: () => Promise<T>): Promise<T> {
  update({ task: name });
  try {
    return await f();
  } finally {
    update({ task: null });
  }
}

/** Whether a new long task may start now. */
export function idle(): boolean {
  return !!state.engine && state.task === null;
}
