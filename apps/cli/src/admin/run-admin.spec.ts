import type { FetchFn } from './http';
import { runAdminCommand } from './run-admin';

/** A recorded request. */
interface Call {
  method: string;
  url: string;
  authorization: string | undefined;
  body: unknown;
}

/**
 * A hand-written fake server: `routes` maps `METHOD path` (path after the host, with the query)
 * to a status and body (a string is sent as is, anything else as JSON); unknown routes are 404s
 * in the admin API's error shape. `down` makes every request fail as a refused connection.
 */
function fakeServer(routes: Record<string, [number, unknown]>, options: { down?: boolean } = {}) {
  const calls: Call[] = [];
  const fetch: FetchFn = async (url, init) => {
    const u = new URL(url);
    calls.push({ method: init.method, url: `${u.pathname}${u.search}`, authorization: init.headers.authorization, body: init.body === undefined ? undefined : JSON.parse(init.body) });
    if (options.down) throw new TypeError('fetch failed', { cause: Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }) });
    const [status, body] = routes[`${init.method} ${u.pathname}${u.search}`] ?? [404, { error: { message: `No admin route ${init.method} ${u.pathname}`, type: 'not_found_error', param: null, code: 'not_found' } }];
    return new Response(typeof body === 'string' ? body : JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });
  };
  return { calls, fetch };
}

async function weir(argv: string[], server: ReturnType<typeof fakeServer>, env: Record<string, string> = { WEIR_ADMIN_TOKEN: 'wa_test_token', WEIR_ADMIN_URL: 'http://cp:8090' }, files: Record<string, string> = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const readFile = (p: string) => {
    if (!(p in files)) throw new Error(`ENOENT: ${p}`);
    return files[p];
  };
  const status = await runAdminCommand(argv, { out: (t) => out.push(t), err: (t) => err.push(t), env, fetch: server.fetch, readFile });
  return { status, out: out.join(''), err: err.join('') };
}

const alias = (spec: object) => ({ name: 'chat', spec: { name: 'chat', ...spec }, created_at: '2030-01-01T00:00:00.000Z', updated_at: '2030-01-01T00:00:00.000Z' });

describe('runAdminCommand', () => {
  it('sends the admin token as a bearer credential to <url>/admin/v1 and prints a table', async () => {
    const server = fakeServer({ 'GET /admin/v1/aliases': [200, { data: [alias({ revision: 'r1' })] }] });
    const r = await weir(['aliases', 'list'], server);
    expect(r).toEqual({ status: 0, out: 'NAME  ARMS  FALLBACKS  UPDATED\nchat  r1    -          2030-01-01 00:00:00Z\n', err: '' });
    expect(server.calls).toEqual([{ method: 'GET', url: '/admin/v1/aliases', authorization: 'Bearer wa_test_token', body: undefined }]);
  });

  it('prints the API response as JSON with --json', async () => {
    const server = fakeServer({ 'GET /admin/v1/aliases': [200, { data: [alias({ revision: 'r1' })] }] });
    const r = await weir(['aliases', 'list', '--json'], server);
    expect(r.status).toBe(0);
    expect(JSON.parse(r.out)).toEqual([alias({ revision: 'r1' })]);
  });

  it('set-weights replaces the arms and keeps the rest of the alias', async () => {
    const before = alias({ revision: 'r1', fallbacks: ['r0'], description: 'chat model' });
    const after = alias({ targets: [{ revision: 'r1', weight: 95 }, { revision: 'r2', weight: 5 }], fallbacks: ['r0'], description: 'chat model' });
    const server = fakeServer({ 'GET /admin/v1/aliases/chat': [200, before], 'PUT /admin/v1/aliases/chat': [200, after] });
    const r = await weir(['aliases', 'set-weights', 'chat', '--weights', 'r1=95,r2=5'], server);
    expect(r).toEqual({ status: 0, out: 'alias chat: r1=95,r2=5 (was r1)\n', err: '' });
    expect(server.calls[1]).toMatchObject({ method: 'PUT', body: { targets: [{ revision: 'r1', weight: 95 }, { revision: 'r2', weight: 5 }], fallbacks: ['r0'], description: 'chat model' } });
  });

  it('refuses bad weights before calling the API (exit 2)', async () => {
    const server = fakeServer({});
    expect(await weir(['aliases', 'set-weights', 'chat', '--weights', 'r1:95'], server)).toEqual({
      status: 2,
      out: '',
      err: 'weir: --weights: expected revision=weight pairs such as rev1=90,rev2=10, got "r1:95" in "r1:95"\n',
    });
    expect(server.calls).toEqual([]);
  });

  it('percent-encodes ids in paths', async () => {
    const server = fakeServer({ 'GET /admin/v1/revisions/org%2Fm%401': [200, { id: 'org/m@1', spec: {}, deprecation: null }] });
    expect((await weir(['revisions', 'get', 'org/m@1'], server)).out).toBe('id: org/m@1\nspec: {}\ndeprecation: null\n');
  });

  it('policy set: flags merge into the current limits; --file replaces the policy; not both', async () => {
    const server = fakeServer({
      'GET /admin/v1/tenants/acme/policy': [200, { limits: { max_concurrent: 2, tokens_per_minute: 1000 }, kill_switch: false }],
      'PATCH /admin/v1/tenants/acme/policy': [200, { limits: { max_concurrent: 8 }, content_logging: true }],
      'PUT /admin/v1/tenants/acme/policy': [200, { limits: { max_concurrent: 3 } }],
    });
    const r = await weir(['policy', 'set', 'acme', '--max-concurrent', '8', '--tokens-per-minute', 'none', '--content-logging', 'on'], server);
    expect(r).toEqual({ status: 0, out: 'updated the policy of tenant acme: limits max_concurrent=8 (status: active)\n', err: '' });
    expect(server.calls.at(-1)).toMatchObject({ method: 'PATCH', body: { limits: { max_concurrent: 8 }, content_logging: true } });

    const files = { 'p.yaml': 'limits: { max_concurrent: 3 }\n' };
    expect((await weir(['policy', 'set', 'acme', '--file', 'p.yaml'], server, undefined, files)).status).toBe(0);
    expect(server.calls.at(-1)).toMatchObject({ method: 'PUT', body: { limits: { max_concurrent: 3 } } });

    const calls = server.calls.length;
    expect(await weir(['policy', 'set', 'acme', '--file', 'p.yaml', '--max-concurrent', '1'], server, undefined, files)).toMatchObject({
      status: 2,
      err: 'weir: --file replaces the whole policy; give the other flags (--max-concurrent) without it, or put them in the file\n',
    });
    expect(await weir(['policy', 'set', 'acme'], server)).toMatchObject({ status: 2, err: 'weir: policy set: give --file FILE or at least one limit or policy flag (weir policy set --help lists them)\n' });
    expect(server.calls.length).toBe(calls);
  });

  it('removes the limits field when the last limit goes', async () => {
    const server = fakeServer({ 'GET /admin/v1/tenants/acme/policy': [200, { limits: { max_concurrent: 2 } }], 'PATCH /admin/v1/tenants/acme/policy': [200, {}] });
    expect((await weir(['policy', 'set', 'acme', '--max-concurrent', 'none'], server)).out).toBe('updated the policy of tenant acme: limits - (status: active)\n');
    expect(server.calls.at(-1)?.body).toEqual({ limits: null });
  });

  it('asks for --yes before deleting', async () => {
    const server = fakeServer({ 'DELETE /admin/v1/tenants/acme': [200, { id: 'acme', deleted: true }] });
    expect(await weir(['tenants', 'delete', 'acme'], server)).toEqual({ status: 2, out: '', err: 'weir: tenants delete removes tenant acme with its apps, API keys and policy; add --yes to confirm\n' });
    expect(server.calls).toEqual([]);
    expect(await weir(['tenants', 'delete', 'acme', '--yes'], server)).toEqual({ status: 0, out: 'deleted tenant acme\n', err: '' });
  });

  it('prints a new key once on stdout and the warning on stderr, also with --json', async () => {
    const created = { id: 'key_1', prefix: 'abcd1234', display: 'wk_abcd1234_…', tenant_id: 'acme', app_id: 'web', label: '', created_at: '2030-01-01T00:00:00.000Z', revoked_at: null, key: 'wk_abcd1234_secret' };
    const server = fakeServer({ 'POST /admin/v1/tenants/acme/apps/web/keys': [201, created] });
    const text = await weir(['keys', 'create', 'acme', 'web'], server);
    expect(text.out).toBe('created API key key_1 (wk_abcd1234_…) for app web of tenant acme:\n\n  wk_abcd1234_secret\n\n');
    expect(text.err).toBe('warning: this is the only time the secret is shown; Weir keeps only its hash. Store it in your secret manager now.\n');
    expect(server.calls[0].body).toEqual({});
    const json = await weir(['keys', 'create', 'acme', 'web', '--json'], server);
    expect(JSON.parse(json.out)).toEqual(created);
    expect(json.err).toContain('only time the secret is shown');
  });

  it('shows capacity decisions for every pool, or one with its arithmetic', async () => {
    const d = {
      pool: 'gpu/a100',
      desired_replicas: 5,
      recommended_replicas: 6,
      current_replicas: 4,
      healthy_replicas: 4,
      demand_tokens_per_second: 12_000,
      replica_tokens_per_second: 2_500.25,
      basis: 'measured',
      lines: ['demand 12,000 tokens/s', 'ceil(12,000 / 2,500) = 5'],
      telemetry_age_ms: 1_500,
    };
    const server = fakeServer({ 'GET /admin/v1/capacity': [200, { data: [d] }], 'GET /admin/v1/capacity/gpu%2Fa100': [200, d] });
    const table = 'POOL      DESIRED  RECOMMENDED  CURRENT  HEALTHY  DEMAND TOK/S  REPLICA TOK/S       TELEMETRY AGE\ngpu/a100  5        6            4        4        12,000        2,500.3 (measured)  1s\n';
    expect((await weir(['capacity', 'show'], server)).out).toBe(table);
    expect((await weir(['capacity', 'show', 'gpu/a100'], server)).out).toBe(`${table}  demand 12,000 tokens/s\n  ceil(12,000 / 2,500) = 5\n`);
  });

  it("reads usage from the gateway with the tenant's API key", async () => {
    const zero = { tokens: { input: 0, output: 0, cached_input: 0, total: 0 }, cost_usd: 0, cost_nano_usd: '0', requests: 0 };
    const server = fakeServer({
      'GET /v1/usage?window=day': [200, { ...zero, object: 'usage', tenant_id: 'acme', window: 'day', period_start: '2030-01-31T00:00:00.000Z', period_end: '2030-02-01T00:00:00.000Z', by_model: [], by_app: [], by_use_case: [] }],
    });
    const r = await weir(['usage', '--window', 'day', '--api-url', 'http://gw:8080'], server, { WEIR_API_KEY: 'wk_tenant_key' });
    expect(r.status).toBe(0);
    expect(r.out.split('\n')[0]).toBe('tenant acme, day 2030-01-31 00:00:00Z → 2030-02-01 00:00:00Z: 0 requests, 0 input + 0 output tokens (0 cached), $0.00');
    expect(server.calls).toEqual([{ method: 'GET', url: '/v1/usage?window=day', authorization: 'Bearer wk_tenant_key', body: undefined }]);
  });

  it.each([
    ['the API message', [403, { error: { message: "This token's role (viewer) may only read; POST needs an admin token.", type: 'permission_error', param: null, code: 'permission_denied' } }], "error: This token's role (viewer) may only read; POST needs an admin token.\n"],
    ['a body that is not JSON', [502, '<html>Bad gateway</html>'], 'error: POST /tenants: HTTP 502 with a body that is not JSON; is http://cp:8090/admin/v1 the right URL?\n'],
    ['an error without a message', [500, { oops: true }], 'error: POST /tenants: HTTP 500 without an error message; is http://cp:8090/admin/v1 the right URL?\n'],
  ])('exits 1 printing %s', async (_what, response, message) => {
    const server = fakeServer({ 'POST /admin/v1/tenants': response as [number, unknown] });
    expect(await weir(['tenants', 'create', 'x', '--name', 'X'], server)).toEqual({ status: 1, out: '', err: message });
  });

  it('exits 1 when the control plane cannot be reached', async () => {
    const r = await weir(['tenants', 'list'], fakeServer({}, { down: true }));
    expect(r).toEqual({ status: 1, out: '', err: 'error: cannot reach http://cp:8090/admin/v1 (ECONNREFUSED); check --url/--api-url and that the service is running\n' });
  });
});
