// The engine's types, as the npm client (npm/src/types.ts) declares them.
export type * from '../../npm/src/types.ts';
export type { Webtune as PageEngine } from '../../npm/src/index.ts';
