/**
 * Guessing admin tokens (issue 14 part 7; docs/security.md §7): the admin API counts failed
 * authentication per client address; past the limit the address gets 429 `rate_limited` with
 * `Retry-After`, whatever token it sends and before the token is looked up, while a right token
 * from another address is served. Behind a trusted proxy the forwarded client is counted. Real
 * sockets from distinct loopback addresses (127.0.0.x), a fake clock for the window.
 */
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { KyselyPlugin, PluginTransformQueryArgs, PluginTransformResultArgs, QueryResult, RootOperationNode, UnknownRow } from 'kysely';
import { type ClientGuard, createClientGuard, DEFAULT_CLIENT_LIMITS } from '@weir/service-runtime';
import { createTestDatabase, type TestDatabase } from '@weir/store-pg';
import { registerBootstrapAdminToken } from './admin-auth';
import { mintAdminToken } from './admin-token';
import { createControlPlane, type ControlPlane } from './control-plane';
import { createControlPlaneHttpApp } from './http-app';
import { createInMemorySnapshotSink } from './snapshot-sink';

jest.setTimeout(30_000);

/** Counts the queries that reach the database. */
class QueryCounter implements KyselyPlugin {
  count = 0;
  transformQuery(args: PluginTransformQueryArgs): RootOperationNode {
    this.count++;
    return args.node;
  }
  async transformResult(args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    return args.result;
  }
}

const LIMIT = 3;
const WINDOW_MS = 60_000;
const adminToken = mintAdminToken().plaintext;
const wrongToken = () => mintAdminToken().plaintext;

let database: TestDatabase;
let cp: ControlPlane;
const queries = new QueryCounter();

interface Reply {
  status: number;
  retryAfter: string | undefined;
  code: string | undefined;
  message: string | undefined;
}

/** GET `/admin/v1/tenants` from local address `from` with `token`. */
function list(port: number, from: string, token: string | undefined, headers: Record<string, string> = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path: '/admin/v1/tenants',
        localAddress: from,
        agent: false,
        headers: { ...headers, ...(token ? { authorization: `Bearer ${token}` } : {}) },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (text += d));
        res.on('end', () => {
          const body = JSON.parse(text) as { error?: { code: string; message: string } };
          resolve({ status: res.statusCode ?? 0, retryAfter: res.headers['retry-after'], code: body.error?.code, message: body.error?.message });
        });
      },
    );
    req.on('error', reject);
    req.end();
  });
}

interface Started {
  server: Server;
  port: number;
  guard?: ClientGuard;
}

/** The control plane's HTTP app on 127.0.0.1, with a guard's throttle (fake clock) or the router's default one. */
async function start(withGuard?: { trustedProxies?: string[]; now: () => number }): Promise<Started> {
  const guard = withGuard
    ? createClientGuard({ ...DEFAULT_CLIENT_LIMITS, trustedProxies: withGuard.trustedProxies ?? [], authFailureLimit: LIMIT, authFailureWindowMs: WINDOW_MS }, { now: withGuard.now })
    : undefined;
  const app = createControlPlaneHttpApp({ controlPlane: cp, ...(guard ? { authFailures: { throttle: guard.auth, clientKey: guard.clientKey } } : {}) });
  const server = createServer(guard?.serverOptions ?? {}, app);
  guard?.attach(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return { server, port: (server.address() as AddressInfo).port, ...(guard ? { guard } : {}) };
}

async function stop(s: Started): Promise<void> {
  s.guard?.close();
  await new Promise<void>((resolve) => s.server.close(() => resolve()));
}

beforeAll(async () => {
  database = await createTestDatabase();
  await registerBootstrapAdminToken(database.db, adminToken);
  cp = createControlPlane({ publishWaitMs: 2_000 }, { db: database.db.withPlugin(queries), sink: createInMemorySnapshotSink() });
});

afterAll(async () => {
  await cp.close();
  await database.close();
});

describe('failed admin authentication is throttled per client address', () => {
  it('past the limit, an address gets 429 with Retry-After whatever it sends, without a token lookup; another address is served', async () => {
    let now = 1_000_000;
    const s = await start({ now: () => now });
    try {
      for (const token of [undefined, wrongToken(), wrongToken()]) expect(await list(s.port, '127.0.0.2', token)).toMatchObject({ status: 401, code: 'authentication_failed' });

      const before = queries.count;
      now += 10_000;
      const refused = await list(s.port, '127.0.0.2', wrongToken());
      expect(refused).toMatchObject({ status: 429, code: 'rate_limited' });
      expect(Number(refused.retryAfter)).toBe(50); // the rest of the 60 s window
      // It speaks of the admin token, not of the /v1 API's keys.
      expect(refused.message).toMatch(/retry in 50 s with a valid admin token/);
      expect(refused.message).not.toMatch(/API key/);
      // Even the right token is refused from there, and neither reached the database.
      expect(await list(s.port, '127.0.0.2', adminToken)).toMatchObject({ status: 429, code: 'rate_limited' });
      expect(queries.count).toBe(before);

      // Another address with the right token is served.
      expect(await list(s.port, '127.0.0.1', adminToken)).toMatchObject({ status: 200 });

      // When the window has passed, the right token is served from the throttled address again.
      now += 50_000;
      expect(await list(s.port, '127.0.0.2', adminToken)).toMatchObject({ status: 200 });
    } finally {
      await stop(s);
    }
  });

  it('served requests do not count towards the limit', async () => {
    const s = await start({ now: () => 2_000_000 });
    try {
      for (let i = 0; i < LIMIT + 2; i++) expect(await list(s.port, '127.0.0.4', adminToken)).toMatchObject({ status: 200 });
      for (let i = 0; i < LIMIT - 1; i++) expect(await list(s.port, '127.0.0.4', wrongToken())).toMatchObject({ status: 401 });
      expect(await list(s.port, '127.0.0.4', adminToken)).toMatchObject({ status: 200 });
    } finally {
      await stop(s);
    }
  });

  it('behind a trusted proxy, the forwarded client is counted, not the proxy', async () => {
    const s = await start({ trustedProxies: ['127.0.0.3'], now: () => 3_000_000 });
    try {
      const via = (client: string) => ({ 'x-forwarded-for': client });
      for (let i = 0; i < LIMIT; i++) expect(await list(s.port, '127.0.0.3', wrongToken(), via('198.51.100.7'))).toMatchObject({ status: 401 });
      expect(await list(s.port, '127.0.0.3', adminToken, via('198.51.100.7'))).toMatchObject({ status: 429, code: 'rate_limited' });
      // Another client through the same proxy is served.
      expect(await list(s.port, '127.0.0.3', adminToken, via('198.51.100.8'))).toMatchObject({ status: 200 });
    } finally {
      await stop(s);
    }
  });

  it('without a throttle of its own, the router throttles with the defaults (20 failures per 60 s)', async () => {
    const s = await start();
    try {
      for (let i = 0; i < DEFAULT_CLIENT_LIMITS.authFailureLimit; i++) expect((await list(s.port, '127.0.0.5', wrongToken())).status).toBe(401);
      const refused = await list(s.port, '127.0.0.5', adminToken);
      expect(refused).toMatchObject({ status: 429, code: 'rate_limited' });
      expect(Number(refused.retryAfter)).toBeGreaterThan(0);
      expect(refused.message).toMatch(/failed admin-token attempts from this client; retry in \d+ s with a valid admin token/);
      expect(await list(s.port, '127.0.0.1', adminToken)).toMatchObject({ status: 200 });
    } finally {
      await stop(s);
    }
  });
});
