/**
 * `weir` end to end against a running control plane: the admin app in-process on a throw-away
 * Postgres database (as libs/control-plane's admin-api.int.spec.ts starts it), with an
 * in-memory snapshot sink, the eval routes over a fake generation port (both revisions answer
 * the same, so an exact-match eval passes) and the capacity routes over a fixed decision; the
 * CLI's `run(argv, io)` talks to it over HTTP with the global fetch. Tests build on each
 * other's state in order.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { CapacityDecision } from '@weir/capacity';
import {
  type ControlPlane,
  createCapacityRouter,
  createControlPlane,
  createControlPlaneHttpApp,
  createEvalRouter,
  createInMemorySnapshotSink,
  type EvalAuditEntry,
  type InMemorySnapshotSink,
  mintAdminToken,
  registerBootstrapAdminToken,
  seedFromConfigFile,
} from '@weir/control-plane';
import { hashApiKey } from '@weir/core';
import { createTestDatabase, type TestDatabase } from '@weir/store-pg';
import { run } from '../run';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed JSON output in assertions
type Json = any;

const REVISION = (id: string) => `id: ${id}
model: tiny
engine: { kind: simulated }
context_window: 512
max_output_tokens: 256
default_output_tokens: 64
pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 }
`;
const listed = (id: string) => `  - ${REVISION(id).trimEnd().replace(/\n/g, '\n    ')}\n`;
const CONFIG = `revisions:\n${listed('tiny@0')}${listed('tiny@1')}aliases:\n  - name: tiny\n    revision: tiny@1\n    fallbacks: [tiny@0]\n`;

let database: TestDatabase;
let sink: InMemorySnapshotSink;
let cp: ControlPlane;
let server: Server;
let dir: string;
let env: Record<string, string>;
const adminToken = mintAdminToken().plaintext;
const evalAudits: EvalAuditEntry[] = [];

const DECISION: CapacityDecision = {
  pool: 'gpu/a100',
  desiredReplicas: 5,
  recommendedReplicas: 6,
  currentReplicas: 4,
  healthyReplicas: 4,
  demandTokensPerSecond: 12_000,
  observedTokensPerSecond: 10_000,
  backlogTokensPerSecond: 2_000,
  admittedRequestsPerSecond: 40,
  replicaTokensPerSecond: 2_500,
  basis: 'measured',
  lines: ['demand = 10,000 observed + 2,000 backlog = 12,000 tokens/s', 'ceil(12,000 / 2,500) = 5 replicas'],
  at: new Date().toISOString(),
  telemetryAt: new Date().toISOString(),
};

/** Runs `weir …` in-process and returns its exit status and output. */
async function weir(argv: string[], extraEnv: Record<string, string> = {}): Promise<{ status: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const status = await run(argv, { out: (t) => out.push(t), err: (t) => err.push(t), env: { ...env, ...extraEnv } });
  return { status, out: out.join(''), err: err.join('') };
}

/** Runs a command that must succeed and returns its stdout. */
async function ok(...argv: string[]): Promise<string> {
  const r = await weir(argv);
  if (r.status !== 0) throw new Error(`weir ${argv.join(' ')} exited ${r.status}: ${r.err}`);
  return r.out;
}

const json = async (...argv: string[]): Promise<Json> => JSON.parse(await ok(...argv, '--json'));

beforeAll(async () => {
  database = await createTestDatabase();
  dir = mkdtempSync(path.join(tmpdir(), 'weir-cli-'));
  writeFileSync(path.join(dir, 'weir.yaml'), CONFIG);
  writeFileSync(path.join(dir, 'tiny-2.yaml'), REVISION('tiny@2'));
  sink = createInMemorySnapshotSink();
  cp = createControlPlane({ publishWaitMs: 2_000 }, { db: database.db, sink });
  expect(await registerBootstrapAdminToken(database.db, adminToken)).toBe('registered');
  expect(await seedFromConfigFile(database.db, path.join(dir, 'weir.yaml'))).toMatchObject({ seeded: true });
  const app = createControlPlaneHttpApp({
    controlPlane: cp,
    extraRoutes: [
      (router) =>
        router.use(
          createEvalRouter(
            {},
            {
              db: database.db,
              // Both revisions answer with the prompt's last message: an exact-match eval passes.
              openGenerator: () => ({ generate: async (_revision, request) => ({ text: request.messages[request.messages.length - 1].content, ttftMs: 5, totalMs: 9 }), close: async () => undefined }),
              audit: async (_req, entry) => void evalAudits.push(entry),
            },
          ),
        ),
      (router) => router.use(createCapacityRouter({ capacity: { decisions: () => [DECISION], decision: (pool) => (pool === DECISION.pool ? DECISION : undefined) } })),
    ],
  });
  server = await new Promise<Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  env = { WEIR_ADMIN_URL: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, WEIR_ADMIN_TOKEN: adminToken };
});

afterAll(async () => {
  if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  await cp?.close();
  await database?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('weir against a running control plane', () => {
  let keyId: string;
  let plaintext: string;

  it('creates a tenant and an app', async () => {
    expect(await ok('tenants', 'create', 'acme', '--name', 'Acme Corp')).toBe('created tenant acme (Acme Corp)\n');
    expect(await ok('apps', 'create', 'acme', 'acme-web', '--name', 'Web', '--max-concurrent', '4')).toBe('created app acme-web (Web) of tenant acme\n');
    const list = await ok('tenants', 'list');
    expect(list.split('\n')[0]).toMatch(/^ID +NAME +APPS +STATUS +LIMITS$/);
    expect(list).toMatch(/\nacme +Acme Corp +1 +active +-\n/);
    expect(await ok('apps', 'list', 'acme')).toMatch(/\nacme-web +Web +max_concurrent=4 +\d{4}-\d{2}-\d{2} /);
  });

  it('creates a key, printing its secret once with a warning; lists show only the prefix', async () => {
    const r = await weir(['keys', 'create', 'acme', 'acme-web', '--label', 'ci']);
    expect(r.status).toBe(0);
    const m = /created API key (key_\S+) \((wk_[a-z0-9]+_…)\) for app acme-web of tenant acme:\n\n {2}(wk_\S+)\n/.exec(r.out);
    expect(m).not.toBeNull();
    [, keyId, , plaintext] = m as RegExpExecArray;
    expect(r.err).toContain('only time the secret is shown');
    expect(r.err).not.toContain(plaintext);
    // The store has its hash, so the printed secret is the real key.
    const row = await database.db.selectFrom('api_keys').select(['sha256']).where('id', '=', keyId).executeTakeFirstOrThrow();
    expect(row.sha256).toBe(hashApiKey(plaintext));

    const listed = await ok('keys', 'list', 'acme');
    expect(listed).toContain(keyId);
    expect(listed).toContain((m as RegExpExecArray)[2]);
    expect(listed).not.toContain(plaintext);
    const listedJson = await json('keys', 'list', 'acme', '--app', 'acme-web');
    expect(listedJson).toHaveLength(1);
    expect(JSON.stringify(listedJson)).not.toContain(plaintext);
  });

  it('sets the policy with limit flags (merged into the current limits) and from a file', async () => {
    expect(await ok('policy', 'set', 'acme', '--max-concurrent', '8', '--monthly-budget-usd', '100')).toContain('limits max_concurrent=8 monthly_budget_usd=100');
    expect(await ok('policy', 'set', 'acme', '--requests-per-minute', '600', '--monthly-budget-usd', 'none')).toContain('limits max_concurrent=8 requests_per_minute=600');
    expect(await json('policy', 'get', 'acme')).toEqual({ limits: { max_concurrent: 8, requests_per_minute: 600 } });
    writeFileSync(path.join(dir, 'policy.yaml'), 'limits:\n  max_concurrent: 16\ncontent_logging: false\n');
    expect(await ok('policy', 'set', 'acme', '--file', path.join(dir, 'policy.yaml'))).toBe('replaced the policy of tenant acme (status: active)\n');
    expect(await ok('policy', 'get', 'acme')).toBe('limits:\n  max_concurrent: 16\ncontent_logging: false\n');
    // The published snapshot carries it.
    const tenant = (sink.snapshots.at(-1)?.config as Json).tenants.find((t: Json) => t.id === 'acme');
    expect(tenant.limits).toEqual({ max_concurrent: 16 });
  });

  it('revokes the key', async () => {
    expect(await ok('keys', 'revoke', 'acme', 'acme-web', keyId)).toMatch(new RegExp(`^revoked API key ${keyId} \\(wk_[a-z0-9]+_…\\) at \\d{4}-\\d{2}-\\d{2} \\d{2}:\\d{2}:\\d{2}Z\\n$`));
    const [key] = await json('keys', 'list', 'acme');
    expect(key.revoked_at).not.toBeNull();
    expect(sink.revocations.at(-1)).toMatchObject({ kind: 'api_key', api_key_id: keyId });
  });

  it('disables and enables the tenant and flips its kill switch', async () => {
    expect(await ok('tenants', 'disable', 'acme')).toBe('tenant acme: disabled (status: disabled)\n');
    expect(sink.revocations.at(-1)).toMatchObject({ kind: 'tenant', tenant_id: 'acme' });
    expect(await ok('tenants', 'enable', 'acme')).toBe('tenant acme: enabled (status: active)\n');
    expect(await ok('tenants', 'kill-switch', 'acme', 'on')).toBe('tenant acme: kill switch on (status: kill switch)\n');
    expect(sink.revocations.at(-1)).toMatchObject({ kind: 'kill_switch', tenant_id: 'acme', enabled: true });
    expect(await ok('tenants', 'list')).toMatch(/\nacme +Acme Corp +1 +kill switch /);
    expect(await ok('tenants', 'kill-switch', 'acme', 'off')).toBe('tenant acme: kill switch off (status: active)\n');
  });

  it('creates a revision from a YAML file, needs a passing eval to raise it as a canary, then sets weights and rolls them back', async () => {
    expect(await ok('revisions', 'create', '--file', path.join(dir, 'tiny-2.yaml'))).toBe('created revision tiny@2\n');
    expect(await ok('models', 'list')).toMatch(/\ntiny@2 +tiny +simulated +in 0\.1 \/ out 0\.2 +- /);
    const gated = await weir(['aliases', 'set-weights', 'tiny', '--weights', 'tiny@1=90,tiny@2=10']);
    expect(gated.status).toBe(1);
    expect(gated.err).toMatch(/^error: Raising canary revision tiny@2 on alias tiny .* needs a passing eval/);

    expect(await ok('prompts', 'add', 'acme', '--use-case', 'support', '--prompt', 'hello there', '--max-tokens', '16')).toMatch(/^added golden prompt \S+ to use case support of tenant acme\n$/);
    expect(await ok('prompts', 'list', 'acme')).toMatch(/\n\S+ +support +1 +16 +- +- /);
    const report = await ok('evals', 'run', 'acme', '--use-case', 'support', '--alias', 'tiny', '--candidate', 'tiny@2', '--scorer', 'exact');
    expect(report).toContain('tiny@2 (candidate) vs tiny@1 (stable) on alias tiny, tenant acme, use case support');
    expect(report).toContain('verdict: PASS');
    expect(report).toContain('prompts 1: 1 passed, 0 failed, 0 unscored; mean score 1.000');
    const [run] = await json('evals', 'list', 'acme');
    expect(run).toMatchObject({ candidate_revision: 'tiny@2', status: 'finished', pass: true });
    expect(await ok('evals', 'show', run.id)).toBe(report);
    expect(evalAudits.map((e) => e.action)).toEqual(['golden_prompt.create', 'eval_run.create']);

    expect(await ok('aliases', 'set-weights', 'tiny', '--weights', 'tiny@1=90,tiny@2=10')).toBe('alias tiny: tiny@1=90,tiny@2=10 (was tiny@1)\n');
    const weighted = await json('aliases', 'get', 'tiny');
    // The arms changed; the fallbacks stayed.
    expect(weighted.spec).toEqual({ name: 'tiny', targets: [{ revision: 'tiny@1', weight: 90 }, { revision: 'tiny@2', weight: 10 }], fallbacks: ['tiny@0'] });
    expect(await ok('aliases', 'list')).toMatch(/\ntiny +tiny@1=90,tiny@2=10 +tiny@0 /);
    expect(await ok('aliases', 'rollback', 'tiny')).toBe('alias tiny rolled back: tiny@1 (was tiny@1=90,tiny@2=10)\n');
    expect((await json('aliases', 'get', 'tiny')).spec).toEqual({ name: 'tiny', revision: 'tiny@1', fallbacks: ['tiny@0'] });
  });

  it('deprecates a revision with a retirement day and a replacement', async () => {
    expect(await ok('revisions', 'deprecate', 'tiny@1', '--retires-on', '2031-06-30', '--replacement', 'tiny@2')).toBe('revision tiny@1 deprecated: retires 2031-06-30, replacement tiny@2\n');
    expect(await ok('revisions', 'list')).toMatch(/\ntiny@1 +tiny +simulated +in 0\.1 \/ out 0\.2 +retires 2031-06-30 → tiny@2 /);
  });

  it('lists every change in the audit log, newest first, with filters', async () => {
    const { data } = await json('audit', 'list', '--limit', '200');
    const actions = (data as Json[]).map((e) => `${e.action} ${e.entity_id}`).reverse();
    const expected = [
      'tenant.create acme',
      'app.create acme-web',
      `api_key.create ${keyId}`,
      'policy.update acme',
      'policy.update acme',
      'policy.replace acme',
      `api_key.revoke ${keyId}`,
      'policy.update acme',
      'policy.update acme',
      'policy.kill_switch acme',
      'policy.kill_switch acme',
      'revision.create tiny@2',
      'alias.update tiny',
      'alias.rollback tiny',
      'revision.deprecate tiny@1',
    ];
    expect(actions.slice(-expected.length)).toEqual(expected);
    const aliasLog = await ok('audit', 'list', '--entity-type', 'alias');
    expect(aliasLog.split('\n')[0]).toMatch(/^ID +AT +ACTOR +ACTION +ENTITY +VERSION$/);
    expect(aliasLog).toMatch(/alias\.rollback +alias tiny +\d+\n/);
    expect(aliasLog).not.toContain('tenant.create');
    const page = await weir(['audit', 'list', '--limit', '2']);
    expect(page.out).toMatch(/\nmore: weir audit list --cursor \d+\n$/);
    const latest = await json('snapshots', 'list', '--limit', '1');
    expect(latest.data[0].version).toBe(data[0].snapshot_version);
  });

  it('shows the capacity controller\'s desired replicas', async () => {
    expect(await ok('capacity', 'show')).toMatch(/^POOL +DESIRED +RECOMMENDED +CURRENT +HEALTHY +DEMAND TOK\/S +REPLICA TOK\/S +TELEMETRY AGE\ngpu\/a100 +5 +6 +4 +4 +12,000 +2,500 \(measured\) +\S+\n$/);
    expect(await ok('capacity', 'show', 'gpu/a100')).toContain('  ceil(12,000 / 2,500) = 5 replicas\n');
    expect(await weir(['capacity', 'show', 'cpu'])).toMatchObject({ status: 1, err: expect.stringMatching(/^error: No capacity decision for pool "cpu"/) });
  });

  it('refuses a write with a viewer token: exit 1 and the permission error', async () => {
    const created = await json('admin-tokens', 'create', '--role', 'viewer', '--label', 'dashboards');
    expect(created.token).toMatch(/^wa_/);
    const viewer = { WEIR_ADMIN_TOKEN: created.token as string };
    expect((await weir(['tenants', 'list'], viewer)).status).toBe(0);
    const denied = await weir(['tenants', 'create', 'nope', '--name', 'Nope'], viewer);
    expect(denied).toEqual({ status: 1, out: '', err: "error: This token's role (viewer) may only read; POST needs an admin token.\n" });
    expect((await json('tenants', 'list')).map((t: Json) => t.id)).not.toContain('nope');
  });

  it('exits 1 with the API message for a bad token, and for a refused change', async () => {
    const bad = await weir(['tenants', 'list', '--token', `${adminToken}x`]);
    expect(bad).toEqual({ status: 1, out: '', err: 'error: The admin token is not valid; check it, or ask an admin for a new one (POST /admin/v1/admin-tokens).\n' });
    const missing = await weir(['tenants', 'get', 'ghost']);
    expect(missing.status).toBe(1);
    expect(missing.err).toBe('error: No tenant "ghost"; list tenants with GET /admin/v1/tenants.\n');
    const dup = await weir(['tenants', 'create', 'acme', '--name', 'Again']);
    expect(dup.status).toBe(1);
    expect(dup.err).toMatch(/^error: Tenant "acme" already exists/);
  });
});
