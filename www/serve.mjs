#!/usr/bin/env node
// Serve the built page (www/dist) and model directories in the Hugging Face hub layout, so the
// page can import a model from this server exactly as from the hub:
//
//   node www/serve.mjs [--dist DIR] [--hub NAME=DIR]... [--port 8080] [--host 127.0.0.1] [--log]
//
// GET /hub/NAME/resolve/REVISION/FILE serves DIR/FILE (any revision), with Range requests
// (206 + Content-Range) as the engine's streaming import uses them. Every response carries the
// page's Content-Security-Policy (a worker obeys its own response's header, not the page's
// meta tag) and nosniff; .wasm goes out as application/wasm.

import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import sirv from 'sirv';
import { csp } from './csp.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));

function parseArgs(argv) {
  const o = { dist: path.join(here, 'dist'), hub: new Map(), port: Number(process.env.PORT || 8080), host: process.env.HOST || '127.0.0.1', log: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) fail(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--dist') o.dist = path.resolve(val());
    else if (a === '--hub') {
      const v = val();
      const eq = v.indexOf('=');
      if (eq <= 0) fail(`--hub wants NAME=DIR, got ${v}`);
      o.hub.set(v.slice(0, eq), path.resolve(v.slice(eq + 1)));
    } else if (a === '--port') o.port = Number(val());
    else if (a === '--host') o.host = val();
    else if (a === '--log') o.log = true;
    else if (a === '-h' || a === '--help') {
      console.log('usage: node serve.mjs [--dist DIR] [--hub NAME=DIR]... [--port N] [--host ADDR] [--log]');
      process.exit(0);
    } else fail(`unknown argument ${a}`);
  }
  return o;
}

function fail(msg) {
  console.error(`serve: ${msg}`);
  process.exit(2);
}

const opts = parseArgs(process.argv.slice(2));
if (!fs.existsSync(path.join(opts.dist, 'index.html'))) fail(`${opts.dist}/index.html is missing: build the page first (npm run build in www/)`);
for (const [name, dir] of opts.hub) if (!fs.existsSync(path.join(dir, 'config.json'))) fail(`--hub ${name}: ${dir}/config.json is missing`);

const policy = csp();
const setHeaders = (res, pathname) => {
  if (pathname.endsWith('.wasm')) res.setHeader('Content-Type', 'application/wasm');
  // Vite's hashed assets never change; index.html and the hub files are checked each time.
  res.setHeader('Cache-Control', pathname.includes('/assets/') ? 'public, max-age=31536000, immutable' : 'no-cache');
};
const page = sirv(opts.dist, { etag: true, dev: false, single: false, setHeaders });

const TYPES = { '.json': 'application/json', '.jinja': 'text/plain; charset=utf-8', '.txt': 'text/plain; charset=utf-8' };

/** One file of a hub directory, with single byte ranges ("a-b", "a-", "-n") as RFC 9110 says
 *  (sirv's own range code answers "bytes=0-0" with the whole file, and "bytes=-n" wrongly). */
function sendHubFile(req, res, dir, rel, notFound) {
  const file = path.resolve(dir, rel);
  if (!file.startsWith(dir + path.sep) || rel.split('/').some((p) => p.startsWith('.'))) return notFound();
  let st;
  try {
    st = fs.statSync(file);
  } catch {
    return notFound();
  }
  if (!st.isFile()) return notFound();
  const size = st.size;
  const etag = `"${size.toString(16)}-${Math.floor(st.mtimeMs).toString(16)}"`;
  res.setHeader('ETag', etag);
  res.setHeader('Last-Modified', st.mtime.toUTCString());
  res.setHeader('Cache-Control', 'no-cache');
  res.setHeader('Content-Type', TYPES[path.extname(file)] ?? 'application/octet-stream');
  let start = 0;
  let end = size - 1;
  const range = req.headers.range;
  const ifRange = req.headers['if-range'];
  if (range && (!ifRange || ifRange === etag)) {
    const m = /^bytes=(\d*)-(\d*)$/.exec(range.trim());
    let ok = !!m && (m[1] !== '' || m[2] !== '');
    if (ok && m[1] === '') {
      const n = Number(m[2]); // the last n bytes
      start = Math.max(0, size - n);
      ok = n > 0;
    } else if (ok) {
      start = Number(m[1]);
      if (m[2] !== '') end = Math.min(Number(m[2]), size - 1);
      ok = start <= end && start < size;
    }
    if (!ok) {
      res.statusCode = 416;
      res.setHeader('Content-Range', `bytes */${size}`);
      return res.end();
    }
    res.statusCode = 206;
    res.setHeader('Content-Range', `bytes ${start}-${end}/${size}`);
  } else if (req.headers['if-none-match'] === etag) {
    res.statusCode = 304;
    return res.end();
  }
  res.setHeader('Content-Length', size === 0 ? 0 : end - start + 1);
  if (req.method === 'HEAD' || size === 0) return res.end();
  fs.createReadStream(file, { start, end }).pipe(res);
}

const HUB = /^\/hub\/([^/]+)\/resolve\/[^/]+\/(.+)$/;

const server = http.createServer((req, res) => {
  const t0 = Date.now();
  res.setHeader('Content-Security-Policy', policy);
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('Referrer-Policy', 'no-referrer');
  res.setHeader('Cross-Origin-Resource-Policy', 'same-origin');
  res.setHeader('Accept-Ranges', 'bytes');
  if (opts.log) {
    res.on('finish', () => console.log(`${req.method} ${req.url} ${req.headers.range ?? ''} → ${res.statusCode} ${Date.now() - t0} ms`));
  }
  const notFound = () => {
    res.statusCode = 404;
    res.setHeader('Content-Type', 'text/plain; charset=utf-8');
    res.end('not found\n');
  };
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.statusCode = 405;
    res.setHeader('Allow', 'GET, HEAD');
    res.end();
    return;
  }
  const url = new URL(req.url ?? '/', 'http://x');
  const m = HUB.exec(url.pathname);
  if (m) {
    const dir = opts.hub.get(decodeURIComponent(m[1]));
    if (!dir) return notFound();
    return sendHubFile(req, res, dir, decodeURIComponent(m[2]), notFound);
  }
  if (url.pathname.startsWith('/hub/')) return notFound();
  page(req, res, notFound);
});

server.on('error', (e) => fail(e.code === 'EADDRINUSE' ? `port ${opts.port} is in use (set PORT=...)` : e.message));
server.listen(opts.port, opts.host, () => {
  const { port } = server.address();
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  console.log(`webtune: http://${host}:${port}/`);
  for (const [name, dir] of opts.hub) console.log(`  hub ${name}: /hub/${name}/resolve/main/ → ${dir}`);
});

for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => server.close(() => process.exit(0)));
