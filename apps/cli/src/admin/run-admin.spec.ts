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

  it('policy set --moderation-file: sets the moderation policy from a YAML file; none removes it', async () => {
    const server = fakeServer({
      'PATCH /admin/v1/tenants/acme/policy': [200, { moderation: { input: { engine: 'rules', fail: 'closed', timeout_ms: 2000 }, rules: { lists: [{ category: 'violence', phrases: ['red dragon'] }] } } }],
    });
    const files = { 'mod.yaml': 'input: { engine: rules }\nrules:\n  lists:\n    - category: violence\n      phrases: [red dragon]\n' };
    const r = await weir(['policy', 'set', 'acme', '--moderation-file', 'mod.yaml'], server, undefined, files);
    expect(r).toEqual({ status: 0, out: 'updated the policy of tenant acme: limits -, moderation input (status: active)\n', err: '' });
    expect(server.calls.at(-1)).toMatchObject({ method: 'PATCH', body: { moderation: { input: { engine: 'rules' }, rules: { lists: [{ category: 'violence', phrases: ['red dragon'] }] } } } });
    expect((await weir(['policy', 'set', 'acme', '--moderation-file', 'none'], server)).status).toBe(0);
    expect(server.calls.at(-1)).toMatchObject({ method: 'PATCH', body: { moderation: null } });
  });

  it('tenants cache: shows the policy, merges flags into it, and --off removes it', async () => {
    const server = fakeServer({
      'GET /admin/v1/tenants/acme/policy': [200, { limits: { max_concurrent: 2 }, cache: { exact: { enabled: false, ttl_ms: 60000 }, templates: ['faq'] } }],
      'PATCH /admin/v1/tenants/acme/policy': [200, { cache: { exact: { enabled: true, ttl_ms: 600000 }, templates: ['faq'], hit_price_fraction: 0.2 } }],
    });
    expect(await weir(['tenants', 'cache', 'acme'], server)).toEqual({ status: 0, out: 'tenant acme: cache exact off (ttl 60000 ms), deterministic only, templates faq\n', err: '' });
    const r = await weir(['tenants', 'cache', 'acme', '--exact', 'on', '--ttl', '10m', '--hit-price', '0.2'], server);
    expect(r).toEqual({ status: 0, out: 'tenant acme: cache exact on (ttl 600000 ms), deterministic only, hit price 0.2, templates faq\n', err: '' });
    expect(server.calls.at(-1)).toMatchObject({ method: 'PATCH', url: '/admin/v1/tenants/acme/policy', body: { cache: { exact: { enabled: true, ttl_ms: 600000 }, templates: ['faq'], hit_price_fraction: 0.2 } } });
    await weir(['tenants', 'cache', 'acme', '--templates', 'none', '--personalised-use-cases', 'coach,tutor'], server);
    expect(server.calls.at(-1)?.body).toEqual({ cache: { exact: { enabled: false, ttl_ms: 60000 }, personalised_use_cases: ['coach', 'tutor'] } });
    expect(await weir(['tenants', 'cache', 'acme', '--off'], server)).toMatchObject({ status: 0, out: 'tenant acme: cache off\n' });
    expect(server.calls.at(-1)?.body).toEqual({ cache: null });
    expect(await weir(['tenants', 'cache', 'acme', '--ttl', '10 minutes'], server)).toMatchObject({ status: 2, err: 'weir: --ttl: expected a duration such as 600000, 30s, 10m, 2h or 7d, got "10 minutes"\n' });
    expect(await weir(['tenants', 'cache', 'acme', '--hit-price', '2'], server)).toMatchObject({ status: 2, err: 'weir: --hit-price: expected a number from 0 to 1, got "2"\n' });
    expect(await weir(['tenants', 'cache', 'acme', '--off', '--exact', 'on'], server)).toMatchObject({ status: 2 });
  });

  it('tenants cache: the semantic flags set cache.semantic and the policy line shows it', async () => {
    const server = fakeServer({
      'GET /admin/v1/tenants/acme/policy': [200, { cache: { exact: { enabled: true, ttl_ms: 60000 } } }],
      'PATCH /admin/v1/tenants/acme/policy': [200, { cache: { exact: { enabled: true, ttl_ms: 60000 }, semantic: { enabled: true, threshold: 0.97, embedding_revision: 'stories260k-embed@1', ttl_ms: 3600000 } } }],
    });
    const r = await weir(['tenants', 'cache', 'acme', '--semantic', 'on', '--threshold', '0.97', '--embedding-revision', 'stories260k-embed@1', '--semantic-ttl', '1h'], server);
    expect(server.calls.at(-1)).toMatchObject({ method: 'PATCH', body: { cache: { exact: { enabled: true, ttl_ms: 60000 }, semantic: { enabled: true, threshold: 0.97, embedding_revision: 'stories260k-embed@1', ttl_ms: 3600000 } } } });
    expect(r).toEqual({ status: 0, out: 'tenant acme: cache exact on (ttl 60000 ms), deterministic only, semantic on (threshold 0.97, embedding stories260k-embed@1, ttl 3600000 ms)\n', err: '' });
    expect(await weir(['tenants', 'cache', 'acme', '--threshold', 'high'], server)).toMatchObject({ status: 2, err: 'weir: --threshold: expected a cosine similarity from 0.95 to 1, got "high"\n' });
    expect(await weir(['tenants', 'cache', 'acme', '--semantic', 'maybe'], server)).toMatchObject({ status: 2 });
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

  it('deletes a key after --yes, and names the internal id a deleted tenant leaves its usage under', async () => {
    const server = fakeServer({
      'DELETE /admin/v1/tenants/acme/apps/web/keys/key_1': [200, { id: 'key_1', deleted: true }],
      'DELETE /admin/v1/tenants/acme': [200, { id: 'acme', deleted: true, internal_id: 'acme~0123456789abcdef' }],
    });
    expect(await weir(['keys', 'delete', 'acme', 'web', 'key_1'], server)).toMatchObject({ status: 2, err: 'weir: keys delete revokes and removes API key key_1; add --yes to confirm\n' });
    expect(server.calls).toEqual([]);
    expect(await weir(['keys', 'delete', 'acme', 'web', 'key_1', '--yes'], server)).toEqual({ status: 0, out: 'deleted API key key_1 of app web (revoked on every gateway)\n', err: '' });
    expect((await weir(['tenants', 'delete', 'acme', '--yes'], server)).out).toBe('deleted tenant acme (internal id acme~0123456789abcdef: its usage stays in the ledger under it)\n');
  });

  it("lists a tenant's ledger totals per internal id, deleted ones on request", async () => {
    const row = (internal_id: string, deleted: boolean, requests: number) => ({ tenant_id: 'acme', internal_id, deleted, requests, tokens: { input: 1, output: 2, cached_input: 0 }, cost_usd: 1.5, cost_nano_usd: '1500000000' });
    const server = fakeServer({
      'GET /admin/v1/usage?tenant=acme&include_deleted=true': [
        200,
        { tenant_id: 'acme', window: 'month', period_start: '2030-01-01T00:00:00.000Z', period_end: '2030-02-01T00:00:00.000Z', data: [row('acme~00000000000000aa', true, 3), row('acme~00000000000000bb', false, 1)] },
      ],
    });
    const r = await weir(['tenants', 'usage', 'acme', '--include-deleted'], server);
    expect(r.status).toBe(0);
    expect(r.out.split('\n').slice(1, 4)).toEqual([
      expect.stringMatching(/^INTERNAL ID\s+STATUS\s+REQUESTS/),
      expect.stringMatching(/^acme~00000000000000aa\s+deleted\s+3\s+/),
      expect.stringMatching(/^acme~00000000000000bb\s+current\s+1\s+/),
    ]);
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
    expect(r).toEqual({ status: 1, out: '', err: 'error: cannot reach http://cp:8090/admin/v1 (ECONNREFUSED); check --url or WEIR_ADMIN_URL and that the service is running\n' });
  });
});

describe('golden prompts and evals', () => {
  const prompt = { id: 'gp_1', tenant_id: 'acme', use_case: 'support', messages: [{ role: 'user', content: 'hi' }], max_tokens: 256, output_schema: null, expected: null, created_at: '2030-01-01T00:00:00.000Z' };
  const side = (revision: string, output: string, ttft: number) => ({ revision, output, error: null, ttft_ms: ttft, total_ms: 20 });
  const run = {
    id: 'ev_1',
    tenant_id: 'acme',
    use_case: 'support',
    alias: 'chat',
    candidate_revision: 'r2',
    stable_revision: 'r1',
    scorer: { kind: 'similarity', threshold: 0.8, metric: 'token_jaccard' },
    status: 'finished',
    pass: false,
    report: {
      scorer: { kind: 'similarity', threshold: 0.8, metric: 'token_jaccard' },
      allowed_errors: 0,
      prompts: [
        { prompt_id: 'gp_1', stable: side('r1', 'hello there', 4), candidate: side('r2', 'hello there', 6), reference: 'stable', score: 1, detail: null, pass: true },
        { prompt_id: 'gp_2', stable: side('r1', 'a b', 4), candidate: side('r2', 'c\nd', 7), reference: 'stable', score: 0, detail: 'no shared tokens', pass: false },
      ],
      totals: {
        prompts: 2,
        passed: 1,
        failed: 1,
        unscored: 0,
        candidate_errors: 0,
        stable_errors: 0,
        mean_score: 0.5,
        candidate: { ttft_p50_ms: 6, ttft_p95_ms: 7, total_p50_ms: 20, total_p95_ms: 20 },
        stable: { ttft_p50_ms: 4, ttft_p95_ms: 4, total_p50_ms: 20, total_p95_ms: 20 },
      },
      pass: false,
      reasons: ['1 of 2 prompts scored below 0.8'],
    },
    created_at: '2030-01-01T00:00:00.000Z',
    finished_at: '2030-01-01T00:00:05.000Z',
  };
  const REPORT = [
    'eval ev_1: r2 (candidate) vs r1 (stable) on alias chat, tenant acme, use case support',
    'scorer similarity/token_jaccard ≥ 0.8; 2030-01-01 00:00:00Z → 2030-01-01 00:00:05Z',
    'verdict: FAIL',
    '  - 1 of 2 prompts scored below 0.8',
    'prompts 2: 1 passed, 1 failed, 0 unscored; mean score 0.500; errors: candidate 0 (allowed 0), stable 0',
    'candidate TTFT p50 6ms p95 7ms, total p50 20ms p95 20ms',
    'stable    TTFT p50 4ms p95 4ms, total p50 20ms p95 20ms',
    '',
    'PROMPT  SCORE  PASS  REFERENCE  CANDIDATE TTFT  STABLE TTFT  DETAIL',
    'gp_1    1.000  yes   stable     6ms             4ms          -',
    'gp_2    0.000  no    stable     7ms             4ms          no shared tokens',
    '',
  ].join('\n');

  it('adds a prompt from --prompt with a system message, or from a file', async () => {
    const server = fakeServer({ 'POST /admin/v1/tenants/acme/golden-prompts': [201, prompt], 'GET /admin/v1/tenants/acme/golden-prompts?use_case=support': [200, { object: 'list', data: [prompt] }] });
    const r = await weir(['prompts', 'add', 'acme', '--use-case', 'support', '--system', 'be brief', '--prompt', 'hi', '--max-tokens', '32', '--expected', 'hello'], server);
    expect(r).toEqual({ status: 0, out: 'added golden prompt gp_1 to use case support of tenant acme\n', err: '' });
    expect(server.calls[0].body).toEqual({ messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hi' }], max_tokens: 32, use_case: 'support', expected: 'hello' });
    const files = { 'p.yaml': 'use_case: support\nmessages:\n  - { role: user, content: "Name a cat" }\nmax_tokens: 16\n', 's.json': '{"type": "object"}' };
    expect((await weir(['prompts', 'add', 'acme', '--file', 'p.yaml', '--output-schema', 's.json'], server, undefined, files)).status).toBe(0);
    expect(server.calls[1].body).toEqual({ use_case: 'support', messages: [{ role: 'user', content: 'Name a cat' }], max_tokens: 16, output_schema: { type: 'object' } });
    expect((await weir(['prompts', 'list', 'acme', '--use-case', 'support'], server)).out).toBe(
      'ID    USE CASE  MESSAGES  MAX TOKENS  SCHEMA  EXPECTED  CREATED\ngp_1  support   1         256         -       -         2030-01-01 00:00:00Z\n',
    );
  });

  it.each([
    [['prompts', 'add', 'acme', '--use-case', 'support'], 'weir: prompts add: give exactly one of --file and --prompt\n'],
    [['prompts', 'add', 'acme', '--prompt', 'hi'], 'weir: prompts add: give --use-case (or use_case in the file)\n'],
    [['prompts', 'add', 'acme', '--use-case', 'u', '--prompt', 'hi', '--max-tokens', '5000'], 'weir: --max-tokens: expected an integer ≥ 1 and ≤ 4,096, got "5000"\n'],
    [['evals', 'run', 'acme', '--use-case', 'u', '--alias', 'a', '--candidate', 'r2', '--scorer', 'exact', '--threshold', '2'], 'weir: --threshold: expected a number ≥ 0 and ≤ 1, got "2"\n'],
  ])('refuses %j before calling the API', async (argv, message) => {
    const server = fakeServer({});
    expect(await weir(argv, server)).toEqual({ status: 2, out: '', err: message });
    expect(server.calls).toEqual([]);
  });

  it('runs an eval and prints its report; shows it again, with outputs on request', async () => {
    const server = fakeServer({ 'POST /admin/v1/evals': [201, run], 'GET /admin/v1/evals/ev_1': [200, run], 'GET /admin/v1/tenants/acme/evals': [200, { object: 'list', data: [{ ...run, report: undefined }] }] });
    const r = await weir(['evals', 'run', 'acme', '--use-case', 'support', '--alias', 'chat', '--candidate', 'r2', '--scorer', 'similarity', '--threshold', '0.8'], server);
    expect(r).toEqual({ status: 0, out: REPORT, err: '' });
    expect(server.calls[0].body).toEqual({ tenant: 'acme', use_case: 'support', alias: 'chat', candidate_revision: 'r2', scorer: { kind: 'similarity', threshold: 0.8 } });
    const shown = await weir(['evals', 'show', 'ev_1', '--outputs'], server);
    expect(shown.out).toBe(`${REPORT}\ngp_1:\n  candidate r2:\n      hello there\n  stable r1:\n      hello there\n\ngp_2:\n  candidate r2:\n      c\n      d\n  stable r1:\n      a b\n`);
    expect((await weir(['evals', 'list', 'acme'], server)).out).toBe(
      'ID    USE CASE  ALIAS  CANDIDATE  STABLE  SCORER                          VERDICT  CREATED\nev_1  support   chat   r2         r1      similarity/token_jaccard ≥ 0.8  fail     2030-01-01 00:00:00Z\n',
    );
  });

  it('shows a failed run with its error', async () => {
    const failed = { ...run, status: 'failed', pass: null, report: { error: { code: 'internal', message: 'the eval failed' } } };
    const server = fakeServer({ 'GET /admin/v1/evals/ev_1': [200, failed] });
    expect((await weir(['evals', 'show', 'ev_1'], server)).out).toBe(
      'eval ev_1: r2 (candidate) vs r1 (stable) on alias chat, tenant acme, use case support\nscorer similarity/token_jaccard ≥ 0.8; 2030-01-01 00:00:00Z → 2030-01-01 00:00:05Z\nverdict: FAILED\nerror: the eval failed (internal)\n',
    );
  });
});

describe('weir redaction-profiles', () => {
  const hr = { name: 'hr', builtin: false, spec: { recognizers: ['email', 'ssn'], custom_patterns: [{ name: 'emp', pattern: 'EMP-[0-9]{6}' }], replacement: 'hash' } };

  it('lists profiles as a table and sets one from flags or a file', async () => {
    const server = fakeServer({
      'GET /admin/v1/redaction-profiles': [200, { data: [{ name: 'default', builtin: true, spec: { recognizers: ['email', 'card'], replacement: 'tag' } }, hr] }],
      'PUT /admin/v1/redaction-profiles/hr': [200, hr],
    });
    const list = await weir(['redaction-profiles', 'list'], server);
    expect(list.status).toBe(0);
    expect(list.out.split('\n')[0]).toMatch(/^NAME\s+BUILTIN\s+RECOGNIZERS\s+PATTERNS\s+REPLACEMENT$/);
    expect(list.out).toMatch(/hr\s+no\s+email,ssn\s+emp\s+hash/);

    const set = await weir(['redaction-profiles', 'set', 'hr', '--recognizers', 'email,ssn', '--replacement', 'hash'], server);
    expect(set).toEqual({ status: 0, out: 'saved redaction profile hr: email, ssn + 1 pattern(s) (hash)\n', err: '' });
    expect(server.calls.at(-1)).toMatchObject({ method: 'PUT', url: '/admin/v1/redaction-profiles/hr', body: { recognizers: ['email', 'ssn'], replacement: 'hash' } });

    const files = { 'hr.yaml': 'recognizers: [email]\ncustom_patterns:\n  - { name: emp, pattern: "EMP-[0-9]{6}" }\n' };
    expect((await weir(['redaction-profiles', 'set', 'hr', '--file', 'hr.yaml'], server, undefined, files)).status).toBe(0);
    expect(server.calls.at(-1)?.body).toEqual({ recognizers: ['email'], custom_patterns: [{ name: 'emp', pattern: 'EMP-[0-9]{6}' }] });
  });

  it('refuses a bad replacement, a missing profile and a delete without --yes before any call', async () => {
    const server = fakeServer({});
    expect(await weir(['redaction-profiles', 'set', 'hr', '--recognizers', 'email', '--replacement', 'mask'], server)).toMatchObject({ status: 2, err: 'weir: --replacement must be tag or hash, got "mask"\n' });
    expect(await weir(['redaction-profiles', 'set', 'hr'], server)).toMatchObject({ status: 2, err: 'weir: redaction-profiles set: give --file FILE or --recognizers A,B\n' });
    expect(await weir(['redaction-profiles', 'delete', 'hr'], server)).toMatchObject({ status: 2 });
    expect(server.calls).toEqual([]);
  });

  it('policy set takes --redact-upstream', async () => {
    const server = fakeServer({ 'PATCH /admin/v1/tenants/acme/policy': [200, { redaction_profile: 'strict', redact_upstream: true }] });
    expect((await weir(['policy', 'set', 'acme', '--redaction-profile', 'strict', '--redact-upstream', 'on'], server)).status).toBe(0);
    expect(server.calls.at(-1)).toMatchObject({ method: 'PATCH', body: { redaction_profile: 'strict', redact_upstream: true } });
  });
});
