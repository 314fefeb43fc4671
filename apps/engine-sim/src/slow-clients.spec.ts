/**
 * Slow clients of an engine replica's listener (issue 14 part 7; docs/security.md §7):
 * `listenEngineServer` with short header and request timeouts closes a connection trickling its
 * request head (408) and one trickling its body, while a streamed generation that lasts longer
 * than both timeouts is answered in full (the request timeout bounds receiving the request, not
 * the answer). Over real sockets, with the simulated engine's server.
 */
import type { Server } from 'node:http';
import { type AddressInfo, connect, type Socket } from 'node:net';
import { DEFAULT_ENGINE_CLIENT_LIMITS, listenEngineServer } from '@weir/engine-server';
import { createSimulatedEngine, type SimulatedEngine, silentLogger } from '@weir/engines';
import { clientLimitsFromEnv } from '@weir/service-runtime';
import { createSimServer } from './sim-server';

jest.setTimeout(60_000);

const HEADERS_TIMEOUT_MS = 1_000;
const REQUEST_TIMEOUT_MS = 2_000;
/** Tokens of the long answer, one every {@link STEP_MS}: about 3 s, longer than both timeouts. */
const TOKENS = 60;
const STEP_MS = 50;

let engine: SimulatedEngine;
let server: Server;
let port: number;

beforeAll(async () => {
  engine = createSimulatedEngine(
    { kind: 'simulated', prefillTokensPerSecond: 1_000_000, decodeStepMs: [[1, STEP_MS]], kvTokens: 4096, maxSequences: 4, seed: 1 },
    { logger: silentLogger },
  );
  // Read as the engine apps read them, from the variables operators set.
  const limits = clientLimitsFromEnv({ WEIR_HEADERS_TIMEOUT_MS: String(HEADERS_TIMEOUT_MS), WEIR_REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS) }, DEFAULT_ENGINE_CLIENT_LIMITS);
  server = await new Promise<Server>((resolve, reject) => {
    const s = listenEngineServer(createSimServer(engine, { modelName: 'sim', logger: silentLogger }), { port: 0, host: '127.0.0.1', limits: { ...limits, timeoutCheckIntervalMs: 250 } }, () => resolve(s));
    s.once('error', reject);
  });
  port = (server.address() as AddressInfo).port;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
  await engine.close();
});

function open(): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port }, () => resolve(s));
    s.once('error', reject);
  });
}

/** When the server closed `s` (ms after `since`; Infinity if still open after `giveUpMs`) and what it received. */
function watch(s: Socket, since: number, giveUpMs = 30_000): Promise<{ afterMs: number; received: string }> {
  return new Promise((resolve) => {
    let received = '';
    s.on('data', (d: Buffer) => (received += d.toString('latin1')));
    s.on('error', () => undefined);
    const timer = setTimeout(() => resolve({ afterMs: Infinity, received }), giveUpMs);
    s.once('close', () => {
      clearTimeout(timer);
      resolve({ afterMs: performance.now() - since, received });
    });
  });
}

describe('engine listener limits', () => {
  it('defaults: the per-address cap is the global one (callers pool connections), timeouts as the gateway', () => {
    expect(clientLimitsFromEnv({}, DEFAULT_ENGINE_CLIENT_LIMITS)).toMatchObject({
      headersTimeoutMs: 15_000,
      requestTimeoutMs: 60_000,
      maxConnections: 4_096,
      maxConnectionsPerAddress: 4_096,
    });
  });

  it('closes connections trickling their head or body, while a generation longer than both timeouts streams in full', async () => {
    const since = performance.now();
    const headSocket = await open();
    const bodySocket = await open();
    const head = watch(headSocket, since);
    const body = watch(bodySocket, since);
    headSocket.write('POST /v1/chat/completions HTTP/1.1\r\nHost: engine\r\n');
    bodySocket.write('POST /v1/chat/completions HTTP/1.1\r\nHost: engine\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{');
    let n = 0;
    const trickle = setInterval(() => {
      n++;
      if (!headSocket.destroyed) headSocket.write(`X-Slow-${n}: a\r\n`);
      if (!bodySocket.destroyed) bodySocket.write(' ');
    }, 100);
    try {
      const started = performance.now();
      const res = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: TOKENS, stream: true, stream_options: { include_usage: true } }),
        signal: AbortSignal.timeout(50_000),
      });
      expect(res.status).toBe(200);
      const text = await res.text();
      const streamedMs = performance.now() - started;
      expect(text).toContain('data: [DONE]');
      expect(text).toContain(`"completion_tokens":${TOKENS}`);
      // The answer outlived the request timeout: it is not bounded by it.
      expect(streamedMs).toBeGreaterThan(REQUEST_TIMEOUT_MS);

      const [h, b] = await Promise.all([head, body]);
      // Each trickler is closed within its timeout, plus the check interval and a generous margin.
      expect(h.afterMs).toBeLessThan(HEADERS_TIMEOUT_MS + 10_000);
      expect(h.received).toContain('408 Request Timeout');
      expect(b.afterMs).toBeLessThan(REQUEST_TIMEOUT_MS + 10_000);
      expect(b.afterMs).toBeGreaterThanOrEqual(REQUEST_TIMEOUT_MS - 100);
      // The server still answers.
      expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
    } finally {
      clearInterval(trickle);
      headSocket.destroy();
      bodySocket.destroy();
    }
  });
});
