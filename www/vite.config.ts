import { defineConfig, type Plugin } from 'vite';
import { fileURLToPath } from 'node:url';
import { csp } from './csp.mjs';

// The page imports the client straight from ../npm/src (TypeScript, compiled by Vite); the
// client starts its worker with `new URL('./worker.ts', import.meta.url)`, which Vite bundles
// (as an ES module, since it imports the wasm-bindgen glue) with the .wasm beside it.
const repoRoot = fileURLToPath(new URL('..', import.meta.url));

/** Put the Content-Security-Policy meta tag first in <head>. */
function cspMeta(): Plugin {
  let dev = false;
  return {
    name: 'webtune-csp',
    configResolved(c) {
      dev = c.command === 'serve';
    },
    transformIndexHtml() {
      return [
        {
          tag: 'meta',
          attrs: { 'http-equiv': 'Content-Security-Policy', content: csp({ dev }) },
          injectTo: 'head-prepend',
        },
      ];
    },
  };
}

export default defineConfig({
  base: './',
  plugins: [cspMeta()],
  server: {
    fs: { allow: [repoRoot] },
    // In dev, models in the hub layout come from a running serve.mjs (scripts/serve.sh).
    proxy: { '/hub': process.env.WEBTUNE_HUB ?? 'http://127.0.0.1:8080' },
  },
  worker: { format: 'es' },
  build: {
    target: 'es2022',
    outDir: 'dist',
    emptyOutDir: true,
    assetsInlineLimit: 0,
    chunkSizeWarningLimit: 4096,
  },
});
