import { defineConfig } from 'vite';

export default defineConfig({
  // Relative asset URLs, so dist/ works from any path.
  base: './',
  // webtune starts its worker with new URL('./worker.js', import.meta.url); pre-bundling would
  // move the package and break that URL in the dev server.
  optimizeDeps: { exclude: ['webtune'] },
  // The worker imports the wasm-bindgen glue as an ES module.
  worker: { format: 'es' },
  build: { target: 'es2022', chunkSizeWarningLimit: 8192 },
});
