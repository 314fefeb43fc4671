/**
 * The automatic canary rollback end to end on a throw-away Postgres database: usage-ledger rows
 * make a canary regress, the canary guard asks for a rollback, and `rollbackCanaryArm` commits
 * it through the control plane's change path (weight 0, an `alias.auto_rollback` audit entry, a
 * new snapshot published through the in-memory sink). A manual rollback then refuses to undo it.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseConfig } from '@weir/config';
import { createTestDatabase, type TestDatabase } from '@weir/store-pg';
import { registerBootstrapAdminToken } from '../admin-auth';
import { mintAdminToken } from '../admin-token';
import { createControlPlane, type ControlPlane } from '../control-plane';
import { type CanaryRolledBackEvent, createCanaryGuard } from '../eval/canary-guard';
import { createControlPlaneHttpApp } from '../http-app';
import { seedFromConfigFile } from '../seed';
import { createInMemorySnapshotSink, type InMemorySnapshotSink } from '../snapshot-sink';
import { AUTO_ROLLBACK_ACTION, rollbackCanaryArm } from './models';

const REVISION = (id: string) => `
  - id: ${id}
    model: chat
    engine: { kind: simulated }
    context_window: 512
    max_output_tokens: 256
    default_output_tokens: 64
    pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 }`;
const CONFIG = `
revisions:${REVISION('chat@1')}${REVISION('chat@2')}
aliases:
  - name: chat
    targets: [{ revision: chat@1, weight: 90 }, { revision: chat@2, weight: 10 }]
    fallbacks: [chat@1]
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
`;

const T0 = Date.parse('2026-03-01T12:00:00.000Z');
const adminToken = mintAdminToken().plaintext;
let database: TestDatabase;
let sink: InMemorySnapshotSink;
let cp: ControlPlane;
let dir: string;
let server: Server;
let base: string;

beforeAll(async () => {
  database = await createTestDatabase();
  dir = mkdtempSync(path.join(tmpdir(), 'weir-canary-'));
  writeFileSync(path.join(dir, 'weir.yaml'), CONFIG);
  expect(await seedFromConfigFile(database.db, path.join(dir, 'weir.yaml'))).toMatchObject({ seeded: true, version: 1 });
  sink = createInMemorySnapshotSink();
  cp = createControlPlane({ publishWaitMs: 2_000 }, { db: database.db, sink });
  await registerBootstrapAdminToken(database.db, adminToken);
  server = await new Promise<Server>((resolve) => {
    const s = createControlPlaneHttpApp({ controlPlane: cp }).listen(0, '127.0.0.1', () => resolve(s));
  });
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/admin/v1`;
}, 30_000);

afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await cp.close();
  await database.close();
  rmSync(dir, { recursive: true, force: true });
});

let seq = 0;
/** `n` ledger rows of `revision` on alias `chat`, finished a minute before T0, the first `failed` of them failed. */
async function traffic(revision: string, n: number, failed: number): Promise<void> {
  const finished = new Date(T0 - 60_000);
  const rows = Array.from({ length: n }, (_, i) => {
    seq += 1;
    const fails = i < failed;
    return {
      generation_id: `gen_${seq}`,
      request_id: `req_${seq}`,
      tenant_id: 'demo',
      app_id: 'demo-app',
      api_key_id: 'key',
      route: 'chat.completions',
      model_alias: 'chat',
      model_revision: revision,
      input_tokens: 5,
      output_tokens: fails ? 0 : 10,
      cached_input_tokens: 0,
      cost_usd: '0',
      status: fails ? 'failed' : 'completed',
      finish_reason: fails ? 'error' : 'stop',
      error_code: fails ? 'upstream_error' : null,
      queue_ms: 0,
      ttft_ms: fails ? null : 100,
      total_ms: 200,
      started_at: new Date(finished.getTime() - 200),
      finished_at: finished,
    };
  });
  await database.db.insertInto('usage_ledger').values(rows).execute();
}

describe('automatic canary rollback through the control plane', () => {
  it('sets the regressing canary to weight 0 as an audited change with a new snapshot, and a manual rollback will not undo it', async () => {
    await traffic('chat@1', 200, 2); // 1% errors
    await traffic('chat@2', 60, 15); // 25% errors
    const events: CanaryRolledBackEvent[] = [];
    const guard = createCanaryGuard({
      db: database.db,
      clock: { now: () => T0 },
      rollback: async (_alias, request) => {
        await rollbackCanaryArm(cp, request);
      },
      onEvent: (event) => void events.push(event),
    });

    const checks = await guard.check();
    expect(checks).toEqual([expect.objectContaining({ alias: 'chat', revision: 'chat@2', stable_revision: 'chat@1', outcome: 'rolled_back' })]);

    const alias = await database.db.selectFrom('model_aliases').select('spec').where('id', '=', 'chat').executeTakeFirstOrThrow();
    expect(alias.spec).toEqual({ targets: [{ revision: 'chat@1', weight: 90 }, { revision: 'chat@2', weight: 0 }], fallbacks: ['chat@1'] });

    const audit = await database.db.selectFrom('audit_log').selectAll().where('entity_type', '=', 'alias').where('entity_id', '=', 'chat').orderBy('id', 'desc').executeTakeFirstOrThrow();
    expect(audit).toMatchObject({ action: AUTO_ROLLBACK_ACTION, actor_id: 'system:canary-guard', actor_label: 'automatic canary rollback' });
    expect(Number(audit.snapshot_version)).toBe(2);
    expect(audit.before).toMatchObject({ spec: { targets: [{ revision: 'chat@1', weight: 90 }, { revision: 'chat@2', weight: 10 }] } });
    expect(audit.after).toMatchObject({
      spec: { targets: [{ revision: 'chat@1', weight: 90 }, { revision: 'chat@2', weight: 0 }] },
      auto_rollback: {
        revision: 'chat@2',
        stable_revision: 'chat@1',
        trigger: 'error_rate',
        reason: 'error rate 25.0% vs stable 1.0% (+24.0% > +5.0% allowed) over 60 / 200 requests',
        canary: { error_rate: 0.25, n: 60 },
        stable: { error_rate: 0.01, n: 200 },
      },
    });

    // A new snapshot, published like any change, carrying the weight 0 to the data planes.
    const published = sink.snapshots.at(-1);
    expect(published?.version).toBe(2);
    expect(parseConfig(JSON.stringify(published?.config), 'snapshot v2').aliases.find((a) => a.name === 'chat')?.targets).toEqual([
      { revision: 'chat@1', weight: 90 },
      { revision: 'chat@2', weight: 0 },
    ]);
    expect(events).toEqual([expect.objectContaining({ type: 'canary_rolled_back', alias: 'chat', revision: 'chat@2', trigger: 'error_rate' })]);

    // Nothing more to roll back; a direct second rollback of the same arm is a conflict.
    expect((await guard.check()).map((c) => c.outcome)).toEqual([]);
    await expect(rollbackCanaryArm(cp, { ...events[0], actor: { id: 'system:canary-guard', label: 'automatic canary rollback' } })).rejects.toThrow(/no longer a canary arm with a positive weight/);

    // An admin's rollback would restore the regressing canary without the gate: refused.
    const res = await fetch(`${base}/aliases/chat/rollback`, { method: 'POST', headers: { authorization: `Bearer ${adminToken}` } });
    expect(res.status).toBe(409);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/last changed by an automatic canary rollback/);
    await guard.stop();
  });
});
