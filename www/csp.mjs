// The page's Content-Security-Policy: one definition for the <meta> tag that vite.config.ts puts
// in index.html and for the header serve.mjs sends (a worker obeys its own response's header,
// not the page's meta tag). Nothing may be fetched except this origin and the Hugging Face hub
// (which redirects downloads to its CDN); wasm needs 'wasm-unsafe-eval'.
export const HUB_ORIGINS = ['https://huggingface.co', 'https://*.huggingface.co', 'https://*.hf.co'];

/** @param {{ dev?: boolean }} [opts] dev: Vite's dev server injects <style> tags and uses a websocket. */
export function csp({ dev = false } = {}) {
  return [
    "default-src 'self'",
    `connect-src 'self' ${HUB_ORIGINS.join(' ')}${dev ? ' ws: wss:' : ''}`,
    "script-src 'self' 'wasm-unsafe-eval'",
    "worker-src 'self' blob:",
    // uPlot sets styles through the CSSOM only, which CSP does not govern.
    `style-src 'self'${dev ? " 'unsafe-inline'" : ''}`,
    "img-src 'self' data: blob:",
    "font-src 'self'",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'none'",
  ].join('; ');
}
