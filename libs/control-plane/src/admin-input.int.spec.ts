/**
 * Input the database cannot store or the router cannot decode gets a 400 naming what to fix,
 * never a 500 (found by a newcomer's hostile-input pass): a NUL character in a body string, a
 * path id or a query value, a lone UTF-16 surrogate in a body string or key (Postgres json
 * refuses it: a 500; text stores U+FFFD: silent damage), and a malformed percent-encoding in
 * the path or the query string. Nothing is committed.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createTestDatabase, type TestDatabase } from '@weir/store-pg';
import { registerBootstrapAdminToken } from './admin-auth';
import { mintAdminToken } from './admin-token';
import { createControlPlane, type ControlPlane } from './control-plane';
import { createEvalRouter } from './eval/eval-routes';
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
  await database.db.insertInto('tenants').values({ id: 'acme', name: 'Acme' }).execute();
  // The eval routes as the apps mount them (behind the admin router's checks); no run is started here.
  const evalRouter = createEvalRouter(
    {},
    {
      db: database.db,
      openGenerator: () => {
        throw new Error('no eval runs in this spec');
      },
      audit: async () => undefined,
    },
  );
  const app = createControlPlaneHttpApp({ controlPlane: cp, extraRoutes: [(router) => void router.use(evalRouter)] });
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

describe('admin API paths with a malformed percent-encoding', () => {
  const BAD_HEX = /malformed percent-encoding \(a % must be followed by two hex digits\)/;
  const NOT_UTF8 = /percent-encoding that is not UTF-8/;
  it.each<[string, string, string, RegExp]>([
    ['bad hex as a tenant id', 'GET', '/tenants/%zz', BAD_HEX],
    ['bad hex as a tenant id, uppercase', 'GET', '/tenants/%ZZ', BAD_HEX],
    ['bad hex before a sub-route', 'GET', '/tenants/%zz/apps', BAD_HEX],
    ['bad hex on an eval route', 'GET', '/tenants/%zz/golden-prompts', BAD_HEX],
    ['bad hex on a write', 'DELETE', '/tenants/%zz', BAD_HEX],
    ['a truncated encoding', 'GET', '/tenants/ab%2', BAD_HEX],
    ['valid hex that is not UTF-8 (an encoded surrogate)', 'GET', '/tenants/%ED%A0%80', NOT_UTF8],
    ['valid hex that is not UTF-8 before a sub-route', 'GET', '/tenants/%ED%A0%80/apps', NOT_UTF8],
    ['a lone continuation byte', 'GET', '/tenants/%80', NOT_UTF8],
    ['an overlong encoding', 'GET', '/tenants/%C0%AF', NOT_UTF8],
  ])('%s is the documented 400 with a reason that fits', async (_what, method, urlPath, message) => {
    const res = await call(method, urlPath);
    expect(res.status).toBe(400);
    expect(res.error).toMatchObject({ code: 'invalid_request', param: null });
    expect(res.error.message).toMatch(message);
  });

  it('says "not UTF-8" for a query value with valid hex that is not UTF-8', async () => {
    const res = await call('GET', '/audit?entity_id=%ED%A0%80');
    expect(res.status).toBe(400);
    expect(res.error.message).toMatch(/query string has a percent-encoding that is not UTF-8/);
  });
});

describe('admin API input that cannot be stored', () => {
  it.each<[string, string, string, unknown, RegExp, string | null]>([
    ['a NUL in a body string', 'POST', '/tenants', { id: 'nul1', name: 'a\u0000b' }, /body's \$\.name contains a NUL character/, 'name'],
    ['a NUL in a nested body string', 'POST', '/tenants', { id: 'nul2', name: 'ok', policy: { redaction_profile: 'x\u0000' } }, /\$\.policy\.redaction_profile/, 'policy.redaction_profile'],
    ['a NUL in a path id', 'GET', '/tenants/%00', undefined, /path contains a NUL character/, null],
    ['a NUL in a query value', 'GET', '/audit?entity_id=%00', undefined, /query parameter entity_id contains a NUL/, 'entity_id'],
    ['a malformed percent-encoding', 'GET', '/tenants/%ZZ', undefined, /malformed percent-encoding/, null],
    ['a malformed percent-encoding in the query', 'GET', '/audit?entity_id=%zz', undefined, /query string has a malformed percent-encoding/, null],
    ['a truncated percent-encoding in a query name', 'GET', '/audit?entity_id=x&a%2=1', undefined, /query string has a malformed percent-encoding/, null],
    ['a lone high surrogate in a golden-prompt message', 'POST', '/tenants/acme/golden-prompts', { use_case: 'support', messages: [{ role: 'user', content: 'x\ud800' }], max_tokens: 8 }, /\$\.messages\[0\]\.content contains a lone UTF-16 surrogate/, 'messages[0].content'],
    ['a lone low surrogate in a golden-prompt expected text', 'POST', '/tenants/acme/golden-prompts', { use_case: 'support', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, expected: '\udc00x' }, /\$\.expected contains a lone UTF-16 surrogate/, 'expected'],
    ['a lone surrogate in an alias description', 'POST', '/aliases', { name: 'sur1', revision: 'stable@1', description: 'x\ud800' }, /\$\.description contains a lone UTF-16 surrogate/, 'description'],
    ['a lone surrogate in allowed_aliases', 'POST', '/tenants', { id: 'sur2', name: 'ok', policy: { allowed_aliases: ['x\ud800'] } }, /\$\.policy\.allowed_aliases\[0\]/, 'policy.allowed_aliases[0]'],
    ['a lone surrogate in a tenant name', 'POST', '/tenants', { id: 'sur3', name: 'a\ud800b' }, /\$\.name contains a lone UTF-16 surrogate/, 'name'],
    ['a lone surrogate in an admin-token label', 'POST', '/admin-tokens', { role: 'viewer', label: 'ops\udfff' }, /\$\.label contains a lone UTF-16 surrogate/, 'label'],
    ['a high surrogate followed by another high one', 'POST', '/tenants', { id: 'sur4', name: '\ud800\ud800\udc00' }, /lone UTF-16 surrogate/, 'name'],
    ['a lone surrogate in a body key', 'POST', '/tenants', { id: 'sur5', name: 'ok', policy: { ['k\ud800']: 1 } }, /\$\.policy\[key\] contains a lone UTF-16 surrogate/, 'policy[key]'],
  ])('%s is a 400 saying what to fix, not a 500', async (_what, method, urlPath, body, message, param) => {
    const res = await call(method, urlPath, body);
    expect(res.status).toBe(400);
    expect(res.error).toMatchObject({ code: 'invalid_request', param });
    expect(res.error.message).toMatch(message);
  });

  it('commits nothing for a refused body', async () => {
    expect((await call('GET', '/tenants/nul1')).status).toBe(404);
    expect(await database.db.selectFrom('audit_log').select('action').where('actor_id', '!=', 'system:bootstrap').execute()).toEqual([]);
    expect(await database.db.selectFrom('tenants').select('id').where('id', '!=', 'acme').execute()).toEqual([]);
    expect(await database.db.selectFrom('model_aliases').select('id').execute()).toEqual([]);
    expect(await database.db.selectFrom('golden_prompts').select('id').execute()).toEqual([]);
  });

  it('accepts a character outside the BMP written as a surrogate pair', async () => {
    const res = await fetch(`${base}/admin-tokens`, {
      method: 'POST',
      headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ role: 'viewer', label: 'ops \ud83d\ude00' }),
    });
    const body = (await res.json()) as { id: string; label: string };
    expect({ status: res.status, label: body.label }).toEqual({ status: 201, label: 'ops \u{1F600}' });
    expect(await database.db.selectFrom('admin_tokens').select('label').where('id', '=', body.id).executeTakeFirstOrThrow()).toEqual({ label: 'ops \u{1F600}' });
  });
});
