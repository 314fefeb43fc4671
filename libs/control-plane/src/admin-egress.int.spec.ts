/**
 * An admin-API user cannot turn a revision into exfiltration (issue 14, part 5): a revision
 * whose credential variable is one the operator did not allow (`DATABASE_URL`,
 * `WEIR_SIGNING_KEY`, …), whose base URL is a link-local / metadata address or a host outside
 * `WEIR_UPSTREAM_HOSTS`, or whose allowed credential is bound to another host, is a 400
 * `invalid_config` naming the field and the fix; nothing is committed.
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

async function post(urlPath: string, body: unknown): Promise<{ status: number; body: { error?: { code: string; message: string; problems?: Array<{ path: string; message: string }> } } }> {
  const res = await fetch(`${base}${urlPath}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as never };
}

const revision = (id: string, engine: Record<string, unknown>) => ({
  id,
  model: 'up',
  engine: { kind: 'openai-compatible', upstream_model: 'm', ...engine },
  context_window: 8192,
  max_output_tokens: 256,
  default_output_tokens: 64,
  pricing: { input_per_mtok: 1, output_per_mtok: 2 },
});

describe('admin API: revisions cannot send credentials or requests where the operator did not allow', () => {
  it.each([
    ['the database URL as the credential', { base_url: 'http://127.0.0.1:8000/v1', api_key_env: 'DATABASE_URL' }, 'engine.api_key_env', 'DATABASE_URL cannot hold an upstream credential'],
    ['the signing key as the credential', { base_url: 'http://127.0.0.1:8000/v1', api_key_env: 'WEIR_SIGNING_KEY' }, 'engine.api_key_env', 'WEIR_SIGNING_KEY cannot hold an upstream credential'],
    ['a variable outside the allowlist', { base_url: 'http://127.0.0.1:8000/v1', api_key_env: 'AWS_SECRET_ACCESS_KEY' }, 'engine.api_key_env', 'add it to WEIR_CREDENTIAL_ENV_ALLOW'],
    ['the cloud metadata address', { base_url: 'http://169.254.169.254/v1' }, 'engine.base_url', 'link-local or cloud metadata address'],
    ['a metadata host name', { base_url: 'http://metadata.google.internal/v1' }, 'engine.base_url', 'link-local or cloud metadata address'],
    ['an attacker\'s server with an allowed key', { base_url: 'https://collector.attacker.example/v1', api_key_env: 'WEIR_UPSTREAM_OPENAI' }, 'engine.base_url', 'not an allowed upstream host'],
  ])('%s is a 400 invalid_config naming the field; nothing is saved', async (_what, engine, field, message) => {
    const id = `evil@${Math.random().toString(36).slice(2, 8)}`;
    const res = await post('/revisions', revision(id, engine));
    expect(res.status).toBe(400);
    expect(res.body.error?.code).toBe('invalid_config');
    expect(res.body.error?.problems).toEqual([{ path: expect.stringMatching(new RegExp(`^revisions\\[\\d+\\]\\.${field.replace('.', '\\.')}$`)), message: expect.stringContaining(message) }]);
    const stored = await database.db.selectFrom('model_revisions').select('id').where('id', '=', id).execute();
    expect(stored).toEqual([]);
  });

  it('an allowed credential on an allowed host is accepted', async () => {
    const res = await post('/revisions', revision('good@1', { base_url: 'http://127.0.0.1:8000/v1', api_key_env: 'WEIR_UPSTREAM_VLLM' }));
    expect(res.status).toBe(201);
  });
});
