#!/usr/bin/env node
// The bare node:http pass-through, a peer of tools/bench/run.ts: node:http in, node:http out
// (a keep-alive agent), request and response bodies piped through untouched, hop-by-hop
// headers dropped, nothing parsed. It is the floor under any Node gateway: what a Node gateway
// costs above it is its own logic and framework. Plain JavaScript, no dependencies, so it runs
// with `node` alone (no TypeScript loader in the measured process).
//
//   node tools/bench/passthrough.mjs --port 18090 --upstream http://127.0.0.1:18080
//
// Prints `listening <url>` once it listens; SIGTERM/SIGINT close it.
import http from 'node:http';

const arg = (name, fallback) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : fallback;
};
const PORT = Number(arg('--port', process.env.PORT ?? 0));
const UP = new URL(arg('--upstream', process.env.UPSTREAM ?? 'http://127.0.0.1:18080'));
const agent = new http.Agent({ keepAlive: true, keepAliveMsecs: 60_000, maxSockets: 4096, maxFreeSockets: 4096, scheduling: 'lifo' });
const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te', 'trailer', 'host']);

function filter(headers) {
  const out = {};
  for (const [k, v] of Object.entries(headers)) if (!HOP.has(k)) out[k] = v;
  return out;
}

const server = http.createServer({ keepAliveTimeout: 65_000, noDelay: true }, (req, res) => {
  const up = http.request({ host: UP.hostname, port: UP.port, method: req.method, path: req.url, agent, headers: { ...filter(req.headers), host: UP.host } }, (upRes) => {
    res.writeHead(upRes.statusCode ?? 502, filter(upRes.headers));
    upRes.pipe(res);
    upRes.on('error', () => res.destroy());
  });
  up.on('error', (e) => {
    if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: String(e), type: 'bad_gateway' } }));
    else res.destroy();
  });
  req.pipe(up);
  res.on('close', () => {
    if (!res.writableFinished) up.destroy();
  });
});
server.headersTimeout = 60_000;
server.requestTimeout = 0;
server.listen(PORT, '127.0.0.1', () => process.stdout.write(`listening http://127.0.0.1:${server.address().port}\n`));
for (const s of ['SIGTERM', 'SIGINT']) {
  process.on(s, () => {
    server.close();
    server.closeAllConnections();
    process.exit(0);
  });
}
