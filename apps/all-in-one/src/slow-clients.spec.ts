/**
 * Slow and greedy clients, and the ops port, on the running all-in-one (docs/security.md §7, §9),
 * over real sockets and the real tiny model:
 *
 * - hundreds of slowloris connections — some trickling their headers, some their bodies — are
 *   each closed within the configured header or request timeout (short here: 2 s and 4 s), while
 *   `/healthz` and real completions keep answering (generous bounds, never a speed assertion);
 * - one address past its connection cap (the default, 256) gets its next connection closed at
 *   once, while another address is served;
 * - `/metrics` is not on the public port (whatever the key), only on the ops port, which with an
 *   ops token answers nothing but `/healthz` without it.
 */
import { connect, type Socket } from 'node:net';
import { DEFAULT_CLIENT_LIMITS } from '@weir/service-runtime';
import { tinyModelPath } from '@weir/testing';
import type { Platform } from './platform';
import { startTestPlatform, type TestPlatform } from './test-platform';

jest.setTimeout(180_000);

const DEMO_KEY = 'wk_slowcli1_' + 'L'.repeat(43);
const OPS_TOKEN = 'ops-token-for-the-slow-clients-spec';
const HEADERS_TIMEOUT_MS = 2_000;
const REQUEST_TIMEOUT_MS = 4_000;
const CHECK_MS = 250;

const CONFIG = `revisions:
  - id: stories260k@1
    model: stories260k
    engine: { kind: llamacpp, threads: 1, sequences: 2, model_path: ${JSON.stringify(tinyModelPath())} }
    context_window: 512
    max_output_tokens: 64
    default_output_tokens: 16
    pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 }
aliases:
  - name: tiny-stories
    revision: stories260k@1
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
    limits: { max_concurrent: 16 }
`;

let running: TestPlatform | undefined;
let platform: Platform;

beforeAll(async () => {
  running = await startTestPlatform('slow-clients', CONFIG, DEMO_KEY, {
    platform: {
      clientLimits: { ...DEFAULT_CLIENT_LIMITS, headersTimeoutMs: HEADERS_TIMEOUT_MS, requestTimeoutMs: REQUEST_TIMEOUT_MS, timeoutCheckIntervalMs: CHECK_MS },
      ops: { host: '127.0.0.1', port: 0, token: OPS_TOKEN },
    },
  });
  platform = running.platform;
});

afterAll(async () => {
  await running?.stop();
});

/** A raw connection from local address `from`. */
function open(from: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port: platform.port, localAddress: from }, () => resolve(s));
    s.once('error', reject);
  });
}

/** What became of a socket: when the server closed it (ms after `since`; Infinity if still open after `giveUpMs`) and what it received. */
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

async function completion(stream: boolean): Promise<{ status: number; text: string }> {
  const res = await fetch(`${platform.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'tiny-stories', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 12, temperature: 0, stream }),
    signal: AbortSignal.timeout(60_000),
  });
  return { status: res.status, text: await res.text() };
}

describe('slowloris connections on the all-in-one', () => {
  it('closes each trickling socket within its timeout while /healthz and real completions keep answering', async () => {
    const HEADER_TRICKLERS = 150;
    const BODY_TRICKLERS = 150;
    const sockets: Socket[] = [];
    const fates: Promise<{ afterMs: number; received: string }>[] = [];
    const kinds: ('headers' | 'body')[] = [];
    const opened = performance.now();
    // One address trickles headers, another bodies (each under the per-address cap of 256).
    for (let i = 0; i < HEADER_TRICKLERS; i++) {
      const s = await open('127.0.0.2');
      const at = performance.now();
      s.write('POST /v1/chat/completions HTTP/1.1\r\nHost: weir\r\n');
      sockets.push(s);
      kinds.push('headers');
      fates.push(watch(s, at));
    }
    for (let i = 0; i < BODY_TRICKLERS; i++) {
      const s = await open('127.0.0.3');
      const at = performance.now();
      s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: weir\r\nAuthorization: Bearer ${DEMO_KEY}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"model":`);
      sockets.push(s);
      kinds.push('body');
      fates.push(watch(s, at));
    }
    // A byte (a header line or a body byte) on every socket every 300 ms.
    let n = 0;
    const trickle = setInterval(() => {
      n++;
      sockets.forEach((s, i) => {
        if (!s.destroyed) s.write(kinds[i] === 'headers' ? `X-Pad-${n}: ${n}\r\n` : ' ');
      });
    }, 300);
    try {
      // Meanwhile: health probes and real completions, streamed and not.
      const healthMs: number[] = [];
      let probing = true;
      const probes = (async () => {
        while (probing) {
          const t = performance.now();
          const res = await fetch(`${platform.url}/healthz`, { signal: AbortSignal.timeout(10_000) });
          expect(res.status).toBe(200);
          healthMs.push(performance.now() - t);
          await new Promise((r) => setTimeout(r, 100));
        }
      })();
      const answers = [await completion(false), await completion(true), await completion(false)];
      const stillOpenDuringTraffic = sockets.filter((s) => !s.destroyed).length;
      probing = false;
      await probes;
      for (const a of answers) expect(a.status).toBe(200);
      expect(JSON.parse(answers[0].text).choices[0].message.content.length).toBeGreaterThan(0);
      expect(answers[1].text).toContain('data: [DONE]');
      // The traffic ran while the attack was on, and every probe answered well within its bound.
      expect(stillOpenDuringTraffic).toBeGreaterThan(0);
      expect(healthMs.length).toBeGreaterThan(0);
      expect(Math.max(...healthMs)).toBeLessThan(5_000);

      // Every trickling socket is closed by the server within its timeout (plus the check interval and a generous margin).
      const results = await Promise.all(fates);
      results.forEach((r, i) => {
        const bound = kinds[i] === 'headers' ? HEADERS_TIMEOUT_MS : REQUEST_TIMEOUT_MS;
        expect(r.afterMs).toBeGreaterThanOrEqual(bound - 200);
        expect(r.afterMs).toBeLessThan(bound + CHECK_MS + 8_000);
      });
      // The header tricklers were told 408 before the close.
      results.filter((_, i) => kinds[i] === 'headers').forEach((r) => expect(r.received).toContain('408 Request Timeout'));
      expect(performance.now() - opened).toBeLessThan(60_000);
    } finally {
      clearInterval(trickle);
      for (const s of sockets) s.destroy();
    }
    // And the platform still serves.
    expect((await completion(false)).status).toBe(200);
  });

  it('closes a connection past its address’s cap (256) at once; another address is served', async () => {
    const cap = DEFAULT_CLIENT_LIMITS.maxConnectionsPerAddress;
    const held: Socket[] = [];
    try {
      // `cap` keep-alive connections from one address, each after one answered request (idle, not timed out).
      for (let i = 0; i < cap; i++) {
        const s = await open('127.0.0.4');
        await new Promise<void>((resolve, reject) => {
          s.once('data', (d: Buffer) => (d.toString().startsWith('HTTP/1.1 200') ? resolve() : reject(new Error(d.toString()))));
          s.write('GET /healthz HTTP/1.1\r\nHost: weir\r\n\r\n');
        });
        held.push(s);
      }
      const extra = await open('127.0.0.4');
      const fate = watch(extra, performance.now());
      extra.write('GET /healthz HTTP/1.1\r\nHost: weir\r\n\r\n');
      const r = await fate;
      expect(r.received).toBe(''); // closed without an answer
      expect(r.afterMs).toBeLessThan(5_000);
      // Another address (the default 127.0.0.1) is not affected.
      expect((await fetch(`${platform.url}/healthz`)).status).toBe(200);
      expect((await completion(false)).status).toBe(200);
    } finally {
      for (const s of held) s.destroy();
    }
  });
});

describe('operational endpoints', () => {
  it('serves /metrics on the ops port with the ops token only; the public port refuses it whatever the key', async () => {
    expect((await completion(false)).status).toBe(200); // some per-tenant series exist
    const publicMetrics = [
      await fetch(`${platform.url}/metrics`),
      await fetch(`${platform.url}/metrics`, { headers: { authorization: `Bearer ${DEMO_KEY}` } }),
      await fetch(`${platform.url}/metrics`, { headers: { authorization: `Bearer ${OPS_TOKEN}` } }),
    ];
    for (const res of publicMetrics) {
      expect(res.status).toBe(404);
      expect(await res.text()).not.toContain('tenant=');
    }
    // /healthz stays public for load balancers.
    expect((await fetch(`${platform.url}/healthz`)).status).toBe(200);

    expect(platform.opsUrl).toBeDefined();
    const ops = platform.opsUrl as string;
    expect((await fetch(`${ops}/healthz`)).status).toBe(200);
    for (const auth of [undefined, `Bearer ${DEMO_KEY}`]) {
      const res = await fetch(`${ops}/metrics`, { headers: auth ? { authorization: auth } : {} });
      expect(res.status).toBe(401);
      expect(await res.text()).not.toContain('tenant=');
    }
    const metrics = await fetch(`${ops}/metrics`, { headers: { authorization: `Bearer ${OPS_TOKEN}` } });
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toMatch(/tenant="demo"/);
    const ready = await fetch(`${ops}/readyz`, { headers: { authorization: `Bearer ${OPS_TOKEN}` } });
    expect(await ready.json()).toMatchObject({ status: 'ready' });
  });
});
