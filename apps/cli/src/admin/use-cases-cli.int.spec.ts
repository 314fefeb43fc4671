/**
 * `weir use-cases …` end to end against a running control plane (issue 16 item 7): the admin
 * app in-process on a throw-away Postgres database with an in-memory snapshot sink, as
 * cli.int.spec.ts starts it. A use case set with flags is merged into the stored one, checked
 * with `parseConfig` on the composed configuration, gated like a route's pin, published in the
 * snapshot, listed, shown and deleted. Tests build on each other's state in order.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseConfig } from '@weir/config';
import { type ControlPlane, createControlPlane, createControlPlaneHttpApp, createInMemorySnapshotSink, type InMemorySnapshotSink, mintAdminToken, registerBootstrapAdminToken, seedFromConfigFile } from '@weir/control-plane';
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

async function weir(argv: string[]): Promise<{ status: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const status = await run(argv, { out: (t) => out.push(t), err: (t) => err.push(t), env });
  return { status, out: out.join(''), err: err.join('') };
}
async function ok(...argv: string[]): Promise<string> {
  const r = await weir(argv);
  if (r.status !== 0) throw new Error(`weir ${argv.join(' ')} exited ${r.status}: ${r.err}`);
  return r.out;
}
const json = async (...argv: string[]): Promise<Json> => JSON.parse(await ok(...argv, '--json'));
/** The last published snapshot's tenant `id`, as the data plane parses it. */
const published = (id: string) => parseConfig(JSON.stringify(sink.snapshots.at(-1)?.config), 'snapshot.json', { format: 'json' }).tenants.find((t) => t.id === id);

beforeAll(async () => {
  database = await createTestDatabase();
  dir = mkdtempSync(path.join(tmpdir(), 'weir-use-cases-'));
  writeFileSync(path.join(dir, 'weir.yaml'), CONFIG);
  sink = createInMemorySnapshotSink();
  cp = createControlPlane({ publishWaitMs: 2_000 }, { db: database.db, sink });
  expect(await registerBootstrapAdminToken(database.db, adminToken)).toBe('registered');
  expect(await seedFromConfigFile(database.db, path.join(dir, 'weir.yaml'))).toMatchObject({ seeded: true });
  const app = createControlPlaneHttpApp({ controlPlane: cp });
  server = await new Promise<Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  env = { WEIR_ADMIN_URL: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, WEIR_ADMIN_TOKEN: adminToken };
  await ok('tenants', 'create', 'acme', '--name', 'Acme');
});

afterAll(async () => {
  if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  await cp?.close();
  await database?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('weir use-cases against a running control plane', () => {
  it('a new use case needs --model; set creates it and the snapshot carries it to the data plane', async () => {
    const missing = await weir(['use-cases', 'set', 'acme', 'support.summaries', '--tokens-per-minute', '20000']);
    expect(missing.status).toBe(2);
    expect(missing.err).toMatch(/use case support\.summaries is new: give --model ALIAS/);
    expect(await ok('use-cases', 'set', 'acme', 'support.summaries', '--model', 'tiny', '--fallbacks', 'tiny@0', '--tokens-per-minute', '20000', '--monthly-budget-usd', '50')).toBe(
      'saved use case support.summaries of tenant acme: model tiny (following the alias), fallbacks tiny@0, limits tokens_per_minute=20000 monthly_budget_usd=50\n',
    );
    expect(published('acme')?.useCases).toEqual([{ name: 'support.summaries', model: 'tiny', fallbacks: ['tiny@0'], limits: { tokensPerMinute: 20_000, monthlyBudgetUsd: 50 } }]);
  });

  it('flags change only what they name (none removes); the version pin is the stable arm here, so no eval is needed', async () => {
    expect(await ok('use-cases', 'set', 'acme', 'support.summaries', '--pin', 'tiny@1', '--monthly-budget-usd', 'none', '--redaction-profile', 'strict')).toMatch(/model tiny \(pinned to tiny@1\), fallbacks tiny@0, limits tokens_per_minute=20000\n$/);
    expect(await json('use-cases', 'get', 'acme', 'support.summaries')).toEqual({
      name: 'support.summaries',
      model: 'tiny',
      fallbacks: ['tiny@0'],
      limits: { tokens_per_minute: 20_000 },
      pin: 'tiny@1',
      redaction_profile: 'strict',
    });
    expect(published('acme')?.useCases?.[0]).toMatchObject({ pin: 'tiny@1', redactionProfile: 'strict', limits: { tokensPerMinute: 20_000 } });
  });

  it('a second use case from a file; list shows both with their version policy', async () => {
    writeFileSync(path.join(dir, 'drafts.yaml'), 'model: tiny\nlimits:\n  max_concurrent: 2\n');
    await ok('use-cases', 'set', 'acme', 'drafts', '--file', path.join(dir, 'drafts.yaml'));
    const table = await ok('use-cases', 'list', 'acme');
    expect(table.split('\n')[0]).toMatch(/^NAME +MODEL +VERSION +FALLBACKS +LIMITS +REDACTION$/);
    expect(table).toMatch(/\nsupport\.summaries +tiny +pinned tiny@1 +tiny@0 +tokens_per_minute=20000 +strict\n/);
    expect(table).toMatch(/\ndrafts +tiny +auto \(alias\) +- +max_concurrent=2 +-\n/);
    expect((await json('policy', 'get', 'acme')).use_cases.map((u: Json) => u.name)).toEqual(['support.summaries', 'drafts']);
  });

  it('refuses what the configuration check refuses, and a pin to a revision that never was the stable arm without a passing eval', async () => {
    const unknown = await weir(['use-cases', 'set', 'acme', 'drafts', '--model', 'nope']);
    expect(unknown.status).toBe(1);
    expect(unknown.err).toMatch(/use_cases\[1\]\.model: unknown alias "nope"/);
    const gated = await weir(['use-cases', 'set', 'acme', 'drafts', '--pin', 'tiny@0']);
    expect(gated.status).toBe(1);
    expect(gated.err).toMatch(/Pinning alias tiny for use case drafts to revision tiny@0 .* needs a passing eval/);
    const badFallback = await weir(['use-cases', 'set', 'acme', 'drafts', '--fallbacks', 'tiny@9']);
    expect(badFallback.status).toBe(1);
    expect(badFallback.err).toMatch(/unknown revision "tiny@9"/);
    // Nothing changed.
    expect(await json('use-cases', 'get', 'acme', 'drafts')).toEqual({ name: 'drafts', model: 'tiny', limits: { max_concurrent: 2 } });
  });

  it('deletes a use case (--yes), then answers 404 for it', async () => {
    expect((await weir(['use-cases', 'delete', 'acme', 'drafts'])).status).toBe(2);
    expect(await ok('use-cases', 'delete', 'acme', 'drafts', '--yes')).toBe('deleted use case drafts of tenant acme\n');
    const gone = await weir(['use-cases', 'get', 'acme', 'drafts']);
    expect(gone.status).toBe(1);
    expect(gone.err).toBe('error: No use case "drafts"; list the tenant\'s use cases with GET /admin/v1/tenants/acme/use-cases.\n');
    expect(published('acme')?.useCases?.map((u) => u.name)).toEqual(['support.summaries']);
  });

  it('creates an app that allows sessions (its session caps travel in its limits to the snapshot)', async () => {
    expect(await ok('apps', 'create', 'acme', 'agents', '--name', 'Agents', '--session-max-tokens', '200000', '--session-budget-usd', '5')).toBe('created app agents (Agents) of tenant acme\n');
    expect(published('acme')?.apps.find((a) => a.id === 'agents')?.limits).toEqual({ sessionMaxTokens: 200_000, sessionBudgetUsd: 5 });
    const bad = await weir(['apps', 'create', 'acme', 'bots', '--name', 'Bots', '--session-max-tokens', '0']);
    expect(bad.status).toBe(2);
  });
});
