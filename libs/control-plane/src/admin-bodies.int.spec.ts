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

/** `text` as UTF-16 big-endian bytes. */
function utf16be(text: string): Buffer {
  const le = Buffer.from(text, 'utf16le');
  for (let i = 0; i + 1 < le.length; i += 2) [le[i], le[i + 1]] = [le[i + 1] as number, le[i] as number];
  return le;
}

/** POST `bytes` to `/admin-tokens` (a route that takes a body on an empty configuration) as `contentType`. */
async function sendBytes(bytes: Uint8Array, contentType: string): Promise<{ status: number; label?: string; error?: { code: string; message: string; param: string | null } }> {
  const res = await fetch(`${base}/admin-tokens`, { method: 'POST', headers: { authorization: `Bearer ${adminToken}`, 'content-type': contentType }, body: bytes });
  const body = (await res.json()) as { label?: string; error?: { code: string; message: string; param: string | null } };
  return { status: res.status, ...(body.label !== undefined ? { label: body.label } : {}), ...(body.error ? { error: body.error } : {}) };
}

describe('admin API bodies in a charset other than UTF-8', () => {
  // `\u006cabel` is "label" written as an escape: a second "label" key the last-key-wins parse would take.
  const DUPLICATE = '{"role":"viewer","label":"u16x","\\u006cabel":"u16y"}';
  // U+2200 is the bytes 22 00 in UTF-16LE (00 22 in BE): a quote to a UTF-8 reading of the bytes.
  const DEEP_BEHIND_QUOTE = `{"role":"viewer","label":"deep","x":["\u2200",${'['.repeat(50_000)}${']'.repeat(50_000)}]}`;
  it.each<[string, Uint8Array, string, string]>([
    ['a duplicate key in UTF-16LE', Buffer.from(DUPLICATE, 'utf16le'), 'application/json; charset=utf-16le', 'utf-16le'],
    ['a duplicate key in UTF-16BE', utf16be(DUPLICATE), 'application/json; charset=utf-16be', 'utf-16be'],
    ['a duplicate key in UTF-16 with a byte-order mark', Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(DUPLICATE, 'utf16le')]), 'application/json; charset=UTF-16', 'utf-16'],
    ['50,000 levels behind a U+2200 string in UTF-16LE', Buffer.from(DEEP_BEHIND_QUOTE, 'utf16le'), 'application/json; charset=utf-16le', 'utf-16le'],
    ['50,000 levels behind a U+2200 string in UTF-16BE', utf16be(DEEP_BEHIND_QUOTE), 'application/json; charset=utf-16be', 'utf-16be'],
    ['a well-formed body in UTF-16LE', Buffer.from('{"role":"viewer","label":"u16ok"}', 'utf16le'), 'application/json; charset=utf-16le', 'utf-16le'],
    ['a well-formed body in UTF-7', Buffer.from('{"role":"viewer","label":"u7ok"}', 'latin1'), 'application/json; charset=utf-7', 'utf-7'],
    ['a body in Latin-1', Buffer.from('{"role":"viewer","label":"l1ok"}', 'latin1'), 'application/json; charset=iso-8859-1', 'iso-8859-1'],
  ])('%s: 415 naming the charset, nothing created', async (_what, bytes, contentType, charset) => {
    const res = await sendBytes(bytes, contentType);
    expect(res).toMatchObject({ status: 415, error: { code: 'unsupported_media_type' } });
    expect(res.error?.message).toContain(`charset ${charset}`);
    expect(res.error?.message).toMatch(/send the body as UTF-8 JSON/);
    expect(faults).toEqual([]);
  });

  it('refuses a duplicate key and deep nesting in UTF-8 behind a byte-order mark', async () => {
    const bom = Buffer.from([0xef, 0xbb, 0xbf]);
    const dup = await sendBytes(Buffer.concat([bom, Buffer.from(DUPLICATE)]), 'application/json');
    expect(dup).toMatchObject({ status: 400, error: { code: 'invalid_request', param: 'label' } });
    const deep = await sendBytes(Buffer.concat([bom, Buffer.from(DEEP_BEHIND_QUOTE)]), 'application/json');
    expect(deep).toMatchObject({ status: 400, error: { code: 'invalid_request' } });
    expect(deep.error?.message).toMatch(/nests deeper than 64 levels/);
  });

  it('created none of them', async () => {
    expect(await database.db.selectFrom('admin_tokens').select('label').where('label', 'in', ['u16x', 'u16y', 'deep', 'u16ok', 'u7ok', 'l1ok']).execute()).toEqual([]);
  });

  it.each([['application/json; charset=utf-8'], ['application/json; charset=UTF-8'], ['application/json; charset="utf-8"'], ['application/json']])('takes a UTF-8 body sent as %s', async (contentType) => {
    const label = `Caf\u00e9 \u2200 ${contentType}`;
    const res = await sendBytes(Buffer.from(JSON.stringify({ role: 'viewer', label })), contentType);
    expect({ status: res.status, label: res.label, error: res.error }).toEqual({ status: 201, label, error: undefined });
  });
});
