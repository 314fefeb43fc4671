/**
 * Input the database cannot store or the router cannot decode gets a 400 naming what to fix,
 * never a 500 (found by a newcomer's hostile-input pass): a NUL character in a body string, a
 * path id or a query value, and a malformed percent-encoding. Nothing is committed.
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

beforeAll(async () => {
  database = await createTestDatabase();
  cp = createControlPlane({ publishWaitMs: 2_000 }, { db: database.db, sink: createInMemorySnapshotSink() });
  await registerBootstrapAdminToken(database.db, adminToken);
  const app = createControlPlaneHttpApp({ controlPlane: cp });
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

async function call(method: string, urlPath: string, body?: unknown): Promise<{ status: number; error: { code: string; message: string; param: string | null } }> {
  const res = await fetch(`${base}${urlPath}`, {
    method,
    headers: { authorization: `Bearer ${adminToken}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, error: ((await res.json()) as { error: { code: string; message: string; param: string | null } }).error };
}

describe('admin API input that cannot be stored', () => {
  it.each<[string, string, string, unknown, RegExp, string | null]>([
    ['a NUL in a body string', 'POST', '/tenants', { id: 'nul1', name: 'a\u0000b' }, /body's \$\.name contains a NUL character/, 'name'],
    ['a NUL in a nested body string', 'POST', '/tenants', { id: 'nul2', name: 'ok', policy: { redaction_profile: 'x\u0000' } }, /\$\.policy\.redaction_profile/, 'policy.redaction_profile'],
    ['a NUL in a path id', 'GET', '/tenants/%00', undefined, /path contains a NUL character/, null],
    ['a NUL in a query value', 'GET', '/audit?entity_id=%00', undefined, /query parameter entity_id contains a NUL/, 'entity_id'],
    ['a malformed percent-encoding', 'GET', '/tenants/%ZZ', undefined, /malformed percent-encoding/, null],
  ])('%s is a 400 saying what to fix, not a 500', async (_what, method, urlPath, body, message, param) => {
    const res = await call(method, urlPath, body);
    expect(res.status).toBe(400);
    expect(res.error).toMatchObject({ code: 'invalid_request', param });
    expect(res.error.message).toMatch(message);
  });

  it('commits nothing for a refused body', async () => {
    expect((await call('GET', '/tenants/nul1')).status).toBe(404);
    expect(await database.db.selectFrom('audit_log').select('id').where('entity_id', 'in', ['nul1', 'nul2']).execute()).toEqual([]);
    expect(await database.db.selectFrom('tenants').select('id').where('id', 'in', ['nul1', 'nul2']).execute()).toEqual([]);
  });
});
