/**
 * Bodies a parser chokes on, sent to the running admin API (issue 14, part 3; docs/security.md
 * §3): 100,000-deep arrays and objects, a body over the size limit, and duplicate keys at the
 * top and nested are 4xx errors naming the limit or the key — never a 500 or a stack overflow —
 * nothing is committed, and the API answers a normal request after each.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createTestDatabase, type TestDatabase } from '@weir/store-pg';
import { registerBootstrapAdminToken } from './admin-auth';
import { mintAdminToken } from './admin-token';
import { createControlPlane, type ControlPlane } from './control-plane';
import { createControlPlaneHttpApp } from './http-app';
import { createInMemorySnapshotSink } from './snapshot-sink';

let database: TestDatabase;
let cp: ControlPlane;
let server: Server;
let base: string;
const adminToken = mintAdminToken().plaintext;
const faults: unknown[] = [];

beforeAll(async () => {
  database = await createTestDatabase();
  cp = createControlPlane({ publishWaitMs: 2_000 }, { db: database.db, sink: createInMemorySnapshotSink() });
  await registerBootstrapAdminToken(database.db, adminToken);
  const logger = { info() {}, warn() {}, error: (obj: object) => void faults.push(obj) };
  const app = createControlPlaneHttpApp({ controlPlane: cp, logger });
  server = await new Promise<Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/admin/v1`;
});

afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await cp.close();
  await database.close();
});

const DEEP = 100_000;

async function send(method: string, urlPath: string, body: string): Promise<{ status: number; error: { code: string; message: string; param: string | null } }> {
  const res = await fetch(`${base}${urlPath}`, { method, headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' }, body });
  return { status: res.status, error: ((await res.json()) as { error: { code: string; message: string; param: string | null } }).error };
}

describe('admin API bodies a parser chokes on', () => {
  it.each<[string, string, string, string, number, string, RegExp, string | null]>([
    ['100,000 nested arrays', 'POST', '/tenants', '['.repeat(DEEP) + ']'.repeat(DEEP), 400, 'invalid_request', /nests deeper than 64 levels/, null],
    ['100,000 nested objects', 'POST', '/tenants', '{"a":'.repeat(DEEP) + '1' + '}'.repeat(DEEP), 400, 'invalid_request', /nests deeper than 64 levels/, null],
    ['a tenant whose policy hides 100,000 levels', 'POST', '/tenants', `{"id":"deep1","name":"Deep","policy":${'{"a":'.repeat(DEEP)}1${'}'.repeat(DEEP)}}`, 400, 'invalid_request', /nests deeper than 64 levels of arrays and objects \(at \$\.policy\.a/, null],
    ['a body over 1 MiB', 'POST', '/tenants', JSON.stringify({ id: 'big1', name: 'x'.repeat((1 << 20) + 1) }), 413, 'payload_too_large', /exceeds 1 MiB/, null],
    ['a duplicate top-level key', 'POST', '/tenants', '{"id":"dup1","name":"A","id":"dup2"}', 400, 'invalid_request', /Duplicate key "id" in the request body/, 'id'],
    ['a duplicate nested key', 'POST', '/tenants', '{"id":"dup3","name":"A","policy":{"allowed_aliases":["a"],"allowed_aliases":["*"]}}', 400, 'invalid_request', /Duplicate key "allowed_aliases" in `policy`/, 'policy.allowed_aliases'],
  ])('%s: a 4xx (never a 500) naming the limit or key, and the API still answers', async (_what, method, urlPath, body, status, code, message, param) => {
    const res = await send(method, urlPath, body);
    expect(res.status).toBe(status);
    expect(res.error).toMatchObject({ code, param });
    expect(res.error.message).toMatch(message);
    expect(faults).toEqual([]);
    const list = await fetch(`${base}/tenants`, { headers: { authorization: `Bearer ${adminToken}` } });
    expect(list.status).toBe(200);
    await list.arrayBuffer();
  });

  it('committed none of the refused bodies', async () => {
    expect(await database.db.selectFrom('tenants').select('id').execute()).toEqual([]);
  });

  it('takes a normal body', async () => {
    const res = await fetch(`${base}/admin-tokens`, {
      method: 'POST',
      headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ role: 'viewer', label: 'ops' }),
    });
    const body = (await res.json()) as { error?: unknown };
    expect({ status: res.status, error: body.error }).toEqual({ status: 201, error: undefined });
  });
});
