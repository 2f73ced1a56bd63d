// Opens the engine: the npm client (npm/src), which runs the wasm Engine in a Web Worker.
// The page imports the client's TypeScript directly (Vite compiles it) and creates the worker
// itself from the client's worker.ts, so Vite bundles the worker and its .wasm under dev and
// `vite build` alike.

import { Webtune } from '../../npm/src/index.ts';

export async function openEngine(): Promise<Webtune> {
  const worker = new Worker(new URL('../../npm/src/worker.ts', import.meta.url), { type: 'module', name: 'webtune' });
  return Webtune.open({ worker });
}
