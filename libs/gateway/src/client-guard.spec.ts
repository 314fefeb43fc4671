/**
 * Slow and greedy clients at the gateway's edge (docs/security.md §7): connection caps per client
 * address (direct peers on distinct loopback addresses, 127.0.0.x), clients behind a trusted
 * proxy told apart by `X-Forwarded-For` (and a spoofed header from anyone else ignored), and the
 * failed-authentication throttle per address and per key prefix (429 with `Retry-After`, a fake
 * clock for its window). Over real sockets and the real gateway.
 */
import { createServer, type IncomingMessage, request, type Server } from 'node:http';
import { type AddressInfo, connect, type Socket } from 'node:net';
import { createInMemoryAdmission } from '@weir/admission';
import type { EngineAdapter, EngineEvent } from '@weir/core';
import { addressKey, type ClientGuard, clientLimitsFromEnv, createClientGuard, DEFAULT_CLIENT_LIMITS, EnvError, normalizeAddress, type ClientLimits } from '@weir/service-runtime';
import { startTestGateway, type TestGateway, twoTenantConfig } from './test-support';

jest.setTimeout(30_000);

const limits = (over: Partial<ClientLimits>): ClientLimits => ({ ...DEFAULT_CLIENT_LIMITS, trustedProxies: [], ...over });

/** One HTTP request from local address `from`, on a connection of its own. */
function send(
  url: string,
  options: { from?: string; method?: string; path?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<{ status: number; headers: IncomingMessage['headers']; text: string }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      { host: u.hostname, port: u.port, method: options.method ?? 'GET', path: options.path ?? '/', headers: options.headers, localAddress: options.from ?? '127.0.0.1', agent: false },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}

/** A raw connection from `from`; resolves once connected. */
function openSocket(port: number, from: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port, localAddress: from }, () => resolve(s));
    s.once('error', reject);
  });
}

/** Resolves with what the server sent before it closed `s` (rejects after `ms`). */
function closedBy(s: Socket, ms: number): Promise<string> {
  return new Promise((resolve, reject) => {
    let got = '';
    s.on('data', (d: Buffer) => (got += d.toString()));
    s.on('error', () => undefined);
    const timer = setTimeout(() => reject(new Error(`still open after ${ms} ms`)), ms);
    s.once('close', () => {
      clearTimeout(timer);
      resolve(got);
    });
  });
}

async function until(what: string, check: () => boolean, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A plain server under a guard that answers with the client address the guard sees. */
async function echoServer(guard: ClientGuard): Promise<{ url: string; port: number; server: Server; close(): Promise<void> }> {
  const server = createServer(guard.serverOptions, (req, res) => {
    const refusal = guard.enter(req, res);
    if (refusal) {
      res.writeHead(429, { 'retry-after': '1' });
      res.end(refusal.message);
      return;
    }
    res.end(guard.clientAddress(req));
  });
  guard.attach(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    server,
    async close() {
      guard.close();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

describe('client addresses', () => {
  it.each([
    ['::ffff:10.1.2.3', '10.1.2.3'],
    ['10.1.2.3', '10.1.2.3'],
    ['::1', '::1'],
    ['::ffff:zz', '::ffff:zz'],
  ])('normalizes %s to %s', (given, want) => expect(normalizeAddress(given)).toBe(want));

  it.each([
    ['10.1.2.3', '10.1.2.3'],
    ['2001:db8:0:1:aaaa:bbbb:cccc:dddd', '2001:db8:0:1::/64'],
    ['2001:DB8:0:1::5', '2001:db8:0:1::/64'],
    ['2001:db8::1', '2001:db8:0:0::/64'],
    ['::1', '0:0:0:0::/64'],
    ['fe80::1%eth0', 'fe80:0:0:0::/64'],
  ])('counts %s as %s (an IPv6 client is its /64)', (given, want) => expect(addressKey(given)).toBe(want));
});

describe('clientLimitsFromEnv', () => {
  it('defaults well above a benchmark’s 64 connections', () => {
    const d = clientLimitsFromEnv({});
    expect(d).toEqual(DEFAULT_CLIENT_LIMITS);
    expect(d.maxConnectionsPerAddress).toBeGreaterThanOrEqual(256);
    expect(d.maxConnections).toBeGreaterThanOrEqual(4096);
  });

  it('reads every variable, and names each bad one', () => {
    expect(
      clientLimitsFromEnv({
        WEIR_HEADERS_TIMEOUT_MS: '5000',
        WEIR_REQUEST_TIMEOUT_MS: '20000',
        WEIR_MAX_CONNECTIONS_PER_ADDRESS: '32',
        WEIR_TRUSTED_PROXIES: '10.0.0.0/8, fd00::/8 ,127.0.0.1',
        WEIR_AUTH_FAILURE_LIMIT: '0',
      }),
    ).toMatchObject({ headersTimeoutMs: 5000, requestTimeoutMs: 20000, maxConnectionsPerAddress: 32, trustedProxies: ['10.0.0.0/8', 'fd00::/8', '127.0.0.1'], authFailureLimit: 0 });
    let err: unknown;
    try {
      clientLimitsFromEnv({ WEIR_MAX_CONNECTIONS: 'lots', WEIR_TRUSTED_PROXIES: '10.0.0.0/33,proxy.local', WEIR_HEADERS_TIMEOUT_MS: '9000', WEIR_REQUEST_TIMEOUT_MS: '1000' });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(EnvError);
    const problems = (err as EnvError).problems.join('\n');
    expect(problems).toContain('WEIR_MAX_CONNECTIONS: expected an integer');
    expect(problems).toContain('"10.0.0.0/33": the prefix length must be 0 to 32');
    expect(problems).toContain('"proxy.local" is not an IP address or CIDR');
    expect(problems).toContain('WEIR_HEADERS_TIMEOUT_MS: must not exceed WEIR_REQUEST_TIMEOUT_MS');
  });
});

describe('connection caps per client address', () => {
  it('closes a connection beyond its address’s cap at once, while other addresses connect, and takes it again once one closed', async () => {
    const guard = createClientGuard(limits({ maxConnectionsPerAddress: 3 }));
    const s = await echoServer(guard);
    const held: Socket[] = [];
    try {
      for (let i = 0; i < 3; i++) held.push(await openSocket(s.port, '127.0.0.2'));
      await until('three connections counted', () => guard.stats().connections === 3);
      const fourth = await openSocket(s.port, '127.0.0.2');
      fourth.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
      expect(await closedBy(fourth, 5_000)).toBe(''); // closed without an answer
      expect(guard.stats().refusedConnections).toBe(1);
      // Another address is not affected.
      expect(await send(s.url, { from: '127.0.0.3' })).toMatchObject({ status: 200, text: '127.0.0.3' });
      // One of the three leaves: the address may connect again.
      held.pop()?.destroy();
      await until('a connection released', () => guard.stats().connections === 2);
      expect(await send(s.url, { from: '127.0.0.2' })).toMatchObject({ status: 200, text: '127.0.0.2' });
    } finally {
      for (const h of held) h.destroy();
      await s.close();
    }
  });

  it('ignores X-Forwarded-For from a peer that is not a trusted proxy: the peer is the client and its cap holds', async () => {
    const guard = createClientGuard(limits({ maxConnectionsPerAddress: 2, trustedProxies: ['127.0.0.1'] }));
    const s = await echoServer(guard);
    const held: Socket[] = [];
    try {
      expect(await send(s.url, { from: '127.0.0.2', headers: { 'x-forwarded-for': '198.51.100.9' } })).toMatchObject({ status: 200, text: '127.0.0.2' });
      for (let i = 0; i < 2; i++) held.push(await openSocket(s.port, '127.0.0.2'));
      await until('two connections counted', () => guard.stats().connections === 2);
      // A third connection claiming to forward for someone else is still 127.0.0.2's third.
      const third = await openSocket(s.port, '127.0.0.2');
      third.write('GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.10\r\n\r\n');
      expect(await closedBy(third, 5_000)).toBe('');
    } finally {
      for (const h of held) h.destroy();
      await s.close();
    }
  });

  it('behind a trusted proxy: the client is the rightmost untrusted X-Forwarded-For hop, and the proxy’s own connections are not capped per address', async () => {
    const guard = createClientGuard(limits({ maxConnectionsPerAddress: 2, trustedProxies: ['127.0.0.1', '10.0.0.0/8'] }));
    const s = await echoServer(guard);
    const held: Socket[] = [];
    try {
      const seen = async (xff: string | undefined) => (await send(s.url, { headers: xff === undefined ? {} : { 'x-forwarded-for': xff } })).text;
      expect(await seen('198.51.100.7')).toBe('198.51.100.7');
      expect(await seen('203.0.113.1, 198.51.100.7, 10.1.1.1')).toBe('198.51.100.7'); // a spoofed left part is not believed
      expect(await seen('10.2.2.2, 10.1.1.1')).toBe('10.2.2.2'); // all trusted: the leftmost
      expect(await seen('::ffff:198.51.100.7')).toBe('198.51.100.7');
      expect(await seen('not-an-address, 198.51.100.7')).toBe('198.51.100.7');
      expect(await seen(undefined)).toBe('127.0.0.1');
      // Five connections from the proxy, over the per-address cap of 2: all served.
      for (let i = 0; i < 5; i++) held.push(await openSocket(s.port, '127.0.0.1'));
      expect(await send(s.url)).toMatchObject({ status: 200 });
      expect(guard.stats().refusedConnections).toBe(0);
    } finally {
      for (const h of held) h.destroy();
      await s.close();
    }
  });
});

/** An engine whose generations wait at `gate` before answering (requests held in flight). */
function gatedEngine(): EngineAdapter & { open(): void; waiting(): number } {
  let release!: () => void;
  let gate = new Promise<void>((r) => (release = r));
  let waiting = 0;
  return {
    kind: 'gated',
    capacity: { slots: 8, contextTokens: 64 },
    async countInputTokens() {
      return 2;
    },
    async *generate(): AsyncIterable<EngineEvent> {
      waiting++;
      await gate;
      waiting--;
      yield { type: 'delta', text: 'hi', tokens: 1 };
      yield { type: 'end', reason: 'stop', usage: { inputTokens: 2, outputTokens: 1 }, usageSource: 'reported' };
    },
    async close() {},
    open() {
      release();
      gate = new Promise<void>((r) => (release = r));
    },
    waiting: () => waiting,
  };
}

describe('the gateway behind a trusted proxy', () => {
  let gw: TestGateway | undefined;
  afterEach(async () => {
    await gw?.close();
    gw = undefined;
  });

  it('caps each forwarded client at its share of requests in flight (429 with Retry-After) while another client behind the same proxy is served', async () => {
    const config = twoTenantConfig();
    const engine = gatedEngine();
    gw = await startTestGateway({
      config,
      engine,
      slots: 8,
      admission: createInMemoryAdmission({ tenants: config.tenants }),
      clients: createClientGuard(limits({ maxConnectionsPerAddress: 2, trustedProxies: ['127.0.0.1'] })),
    });
    const g = gw;
    const chat = (client: string) =>
      send(g.url, {
        method: 'POST',
        path: '/v1/chat/completions',
        headers: { authorization: `Bearer ${g.key.plaintext}`, 'content-type': 'application/json', 'x-forwarded-for': client },
        body: JSON.stringify({ model: 'fake', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
      });
    const first = [chat('198.51.100.7'), chat('198.51.100.7')];
    await until('two generations held', () => engine.waiting() === 2);
    const third = await chat('198.51.100.7');
    expect(third.status).toBe(429);
    expect(third.headers['retry-after']).toBe('1');
    expect(JSON.parse(third.text).error.code).toBe('rate_limited');
    // Another client of the same proxy is its own client.
    const other = chat('198.51.100.8');
    await until('the other client’s generation held', () => engine.waiting() === 3);
    engine.open();
    for (const r of await Promise.all([...first, other])) expect(r.status).toBe(200);
    // Its requests finished: the client may send again.
    const again = chat('198.51.100.7');
    await until('held again', () => engine.waiting() === 1);
    engine.open();
    expect((await again).status).toBe(200);
  });
});

describe('failed-authentication throttle', () => {
  let gw: TestGateway | undefined;
  afterEach(async () => {
    await gw?.close();
    gw = undefined;
  });
  const okEngine: EngineAdapter = {
    kind: 'ok',
    capacity: { slots: 4, contextTokens: 64 },
    async countInputTokens() {
      return 2;
    },
    async *generate(): AsyncIterable<EngineEvent> {
      yield { type: 'delta', text: 'hi', tokens: 1 };
      yield { type: 'end', reason: 'stop', usage: { inputTokens: 2, outputTokens: 1 }, usageSource: 'reported' };
    },
    async close() {},
  };

  async function start(now: () => number, over: Partial<ClientLimits> = {}): Promise<TestGateway> {
    const config = twoTenantConfig();
    gw = await startTestGateway({ config, engine: okEngine, admission: createInMemoryAdmission({ tenants: config.tenants }), clients: createClientGuard(limits({ authFailureLimit: 3, authFailureWindowMs: 60_000, ...over }), { now }) });
    return gw;
  }
  const models = (g: TestGateway, key: string | undefined, from: string, xff?: string) =>
    send(g.url, { path: '/v1/models', from, headers: { ...(key !== undefined ? { authorization: `Bearer ${key}` } : {}), ...(xff ? { 'x-forwarded-for': xff } : {}) } });
  const wrongSecret = (prefix: string) => `wk_${prefix}_${'x'.repeat(43)}`;

  it('refuses an address with 429 and Retry-After after its failures, whatever key it sends, until its window ends; other addresses are served', async () => {
    let t = 1_000_000;
    const g = await start(() => t);
    for (const key of [undefined, 'nonsense', wrongSecret('aaaaaaaa')]) expect((await models(g, key, '127.0.0.2')).status).toBe(401);
    const refused = await models(g, wrongSecret('bbbbbbbb'), '127.0.0.2');
    expect(refused.status).toBe(429);
    expect(refused.headers['retry-after']).toBe('60');
    expect(JSON.parse(refused.text).error).toMatchObject({ code: 'rate_limited', message: expect.stringContaining('Too many failed authentication attempts from this address') });
    // The address is refused whatever key it sends; other addresses are not.
    expect((await models(g, g.key.plaintext, '127.0.0.2')).status).toBe(429);
    expect((await models(g, g.key.plaintext, '127.0.0.3')).status).toBe(200);
    expect((await models(g, 'nonsense', '127.0.0.3')).status).toBe(401);
    t += 30_000;
    expect((await models(g, g.key.plaintext, '127.0.0.2')).headers['retry-after']).toBe('30');
    t += 30_000; // the window ended
    expect((await models(g, g.key.plaintext, '127.0.0.2')).status).toBe(200);
  });

  it('refuses a key prefix hammered from many addresses, but not the key of that prefix that authenticated', async () => {
    const t = 1_000_000;
    const g = await start(() => t);
    expect((await models(g, g.key.plaintext, '127.0.0.9')).status).toBe(200); // the owner, once
    for (const from of ['127.0.0.3', '127.0.0.4', '127.0.0.5']) expect((await models(g, wrongSecret(g.key.prefix), from)).status).toBe(401);
    const refused = await models(g, wrongSecret(g.key.prefix), '127.0.0.6');
    expect(refused.status).toBe(429);
    expect(JSON.parse(refused.text).error.message).toContain(`with the key prefix wk_${g.key.prefix}`);
    expect((await models(g, g.key.plaintext, '127.0.0.7')).status).toBe(200);
    // Another prefix from a fresh address is still only a 401.
    expect((await models(g, wrongSecret('cccccccc'), '127.0.0.8')).status).toBe(401);
  });

  it('never locks out the owner of a hammered prefix, even one that has not authenticated since the process started', async () => {
    const t = 1_000_000;
    const g = await start(() => t);
    for (const from of ['127.0.0.3', '127.0.0.4', '127.0.0.5', '127.0.0.6']) await models(g, wrongSecret(g.key.prefix), from);
    expect((await models(g, wrongSecret(g.key.prefix), '127.0.0.8')).status).toBe(429);
    // The owner's first request after a restart: its key is right, so the prefix's throttle does not apply.
    expect((await models(g, g.key.plaintext, '127.0.0.7')).status).toBe(200);
  });

  it('counts clients behind a trusted proxy by their forwarded address', async () => {
    const g = await start(() => 1_000_000, { trustedProxies: ['127.0.0.1'] });
    for (let i = 0; i < 3; i++) expect((await models(g, 'nonsense', '127.0.0.1', '198.51.100.7')).status).toBe(401);
    expect((await models(g, g.key.plaintext, '127.0.0.1', '198.51.100.7')).status).toBe(429);
    expect((await models(g, g.key.plaintext, '127.0.0.1', '198.51.100.8')).status).toBe(200);
  });

  it('is off with a limit of 0', async () => {
    const g = await start(() => 1_000_000, { authFailureLimit: 0 });
    for (let i = 0; i < 10; i++) expect((await models(g, 'nonsense', '127.0.0.2')).status).toBe(401);
    expect((await models(g, g.key.plaintext, '127.0.0.2')).status).toBe(200);
  });
});
