/**
 * Importing a configuration file into the store as one change (the all-in-one's watched
 * WEIR_CONFIG), and minting the first admin token, against a throw-away Postgres database with
 * an in-memory snapshot sink. Tests build on each other's state in order.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { isWeirError, mintApiKey, newId } from '@weir/core';
import { createTestDatabase, type TestDatabase } from '@weir/store-pg';
import { InvalidChangeError } from './admin-error';
import { createControlPlane, type ControlPlane } from './control-plane';
import { mintFirstAdminToken } from './first-admin-token';
import { CONFIG_FILE_ACTOR, importConfig, importConfigFile, readConfigFileObject } from './import-config';
import { seedFromConfigFile } from './seed';
import { createInMemorySnapshotSink, type InMemorySnapshotSink } from './snapshot-sink';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- parsed JSON in assertions
type Json = any;

const revision = (id: string, extra = '') => `  - id: ${id}
    model: tiny
    engine: { kind: simulated${extra} }
    context_window: 512
    max_output_tokens: 256
    default_output_tokens: 64
    pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 }`;

function configYaml(o: { weights: [number, number]; tenants?: string; extraRevision?: string; defaults?: string }): string {
  return `revisions:
${revision('tiny@1')}
${revision('tiny@2')}
${o.extraRevision ?? ''}
aliases:
  - name: tiny
    targets: [{ revision: tiny@1, weight: ${o.weights[0]} }, { revision: tiny@2, weight: ${o.weights[1]} }]
tenants:
${
  o.tenants ??
  `  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }, { id: old-app, name: Old app }]
    limits: { max_concurrent: 8 }
  - id: gone
    name: Gone soon
    apps: [{ id: gone-app, name: Gone app }]`
}
defaults:
  ${o.defaults ?? 'cancel_grace_ms: 250'}
`;
}

let database: TestDatabase;
let sink: InMemorySnapshotSink;
let cp: ControlPlane;
let dir: string;
let file: string;

const write = (text: string) => writeFileSync(file, text);
const latestVersion = async () => Number((await database.db.selectFrom('config_snapshots').select(sql<string>`coalesce(max(version), 0)`.as('v')).executeTakeFirstOrThrow()).v);
const auditCount = async () => Number((await database.db.selectFrom('audit_log').select((eb) => eb.fn.countAll<string>().as('n')).executeTakeFirstOrThrow()).n);
const insertKey = async (tenantId: string, appId: string) => {
  const k = mintApiKey();
  const id = newId('key');
  await database.db.insertInto('api_keys').values({ id, prefix: k.prefix, sha256: k.sha256, tenant_id: tenantId, app_id: appId, label: 'test' }).execute();
  return { id, sha256: k.sha256 };
};

beforeAll(async () => {
  database = await createTestDatabase();
  dir = mkdtempSync(path.join(tmpdir(), 'weir-import-'));
  file = path.join(dir, 'weir.yaml');
  sink = createInMemorySnapshotSink();
  cp = createControlPlane({ publishWaitMs: 2_000 }, { db: database.db, sink });
  write(configYaml({ weights: [100, 0] }));
  expect(await seedFromConfigFile(database.db, file)).toMatchObject({ seeded: true, version: 1 });
});

afterAll(async () => {
  await cp.close();
  await database.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('importConfig', () => {
  it('writes nothing for a file that equals the store', async () => {
    const audits = await auditCount();
    expect(await importConfigFile(cp, file)).toEqual({ imported: false, reason: 'unchanged' });
    expect(await latestVersion()).toBe(1);
    expect(await auditCount()).toBe(audits);
  });

  it('replaces the configuration as one audited, published change by the config-file actor', async () => {
    const demoOldKey = await insertKey('demo', 'old-app');
    await insertKey('gone', 'gone-app');
    write(
      configYaml({
        weights: [0, 100],
        extraRevision: revision('tiny@3'),
        tenants: `  - id: demo
    name: Demo renamed
    apps: [{ id: demo-app, name: Demo app, limits: { max_concurrent: 2 } }]
    limits: { max_concurrent: 16 }
    kill_switch: true
  - id: new
    name: New tenant
    apps: [{ id: new-app, name: New app }]`,
        defaults: 'cancel_grace_ms: 500',
      }),
    );
    const audits = await auditCount();
    const result = await importConfigFile(cp, file);
    expect(result).toEqual({ imported: true, version: 2 });
    expect(await auditCount()).toBe(audits + 1);

    const entry = await database.db.selectFrom('audit_log').selectAll().orderBy('id', 'desc').limit(1).executeTakeFirstOrThrow();
    expect(entry).toMatchObject({ actor_id: CONFIG_FILE_ACTOR.id, action: 'config.import', entity_type: 'config', entity_id: 'weir.yaml', snapshot_version: '2' });
    expect((entry.before as Json).aliases[0].targets[1].weight).toBe(0);
    expect((entry.after as Json).aliases[0].targets[1].weight).toBe(100);

    const published = sink.snapshots.at(-1)?.config as Json;
    expect(sink.snapshots.at(-1)?.version).toBe(2);
    expect(published.revisions.map((r: Json) => r.id)).toEqual(['tiny@1', 'tiny@2', 'tiny@3']);
    expect(published.tenants.map((t: Json) => t.id)).toEqual(['demo', 'new']);
    expect(published.tenants[0]).toEqual({
      id: 'demo',
      uid: expect.stringMatching(/^demo~[0-9a-f]{16}$/),
      name: 'Demo renamed',
      apps: [{ id: 'demo-app', uid: expect.stringMatching(/^demo-app~[0-9a-f]{16}$/), name: 'Demo app', limits: { max_concurrent: 2 } }],
      limits: { max_concurrent: 16 },
      kill_switch: true,
    });
    expect(published.defaults).toEqual({ cancel_grace_ms: 500 });

    // The fast path: the removed tenant and its active key (a cached key must not outlive it:
    // issue 14 §4), the removed app's key and the kill switch.
    const kinds = sink.revocations.map((r) => ({ kind: r.kind, tenant: r.tenant_id, key: r.api_key_id, enabled: r.enabled }));
    expect(kinds).toEqual(
      expect.arrayContaining([
        { kind: 'tenant', tenant: 'gone', key: undefined, enabled: undefined },
        { kind: 'api_key', tenant: 'gone', key: expect.any(String), enabled: undefined },
        { kind: 'api_key', tenant: 'demo', key: demoOldKey.id, enabled: undefined },
        { kind: 'kill_switch', tenant: 'demo', key: undefined, enabled: true },
      ]),
    );
    expect(sink.revocations).toHaveLength(4);
    expect(await database.db.selectFrom('tenants').select('id').where('id', '=', 'gone').executeTakeFirst()).toBeUndefined();
  });

  it('refuses a changed revision spec (revisions are immutable) and commits nothing', async () => {
    const text = configYaml({ weights: [50, 50], extraRevision: revision('tiny@3', ', max_sequences: 8') });
    write(text);
    const before = await latestVersion();
    const err = await importConfigFile(cp, file).catch((e: unknown) => e);
    expect(isWeirError(err) && err.code === 'conflict').toBe(true);
    expect(String((err as Error).message)).toContain('tiny@3');
    expect(await latestVersion()).toBe(before);
    const alias = await database.db.selectFrom('model_aliases').select('spec').where('id', '=', 'tiny').executeTakeFirstOrThrow();
    expect((alias.spec as Json).targets[1].weight).toBe(100);
  });

  it('takes a change limited to a revision\'s replicas (placement, not identity) as one audited change with a new snapshot', async () => {
    const placed = (port: number) => configYaml({ weights: [0, 100], extraRevision: revision('tiny@3') }).replace(
      '  - id: tiny@2\n',
      `  - id: tiny@2\n    replicas: [{ id: tiny@2/0, base_url: "http://127.0.0.1:${port}/v1", slots: 2 }]\n`,
    );
    write(placed(41001));
    const first = await importConfigFile(cp, file);
    expect(first).toMatchObject({ imported: true });
    // The engines restarted on another port: only the replicas differ from the stored revision.
    write(placed(41002));
    const audits = await auditCount();
    const before = await latestVersion();
    const result = await importConfigFile(cp, file);
    expect(result).toEqual({ imported: true, version: before + 1 });
    expect(await auditCount()).toBe(audits + 1);
    const entry = await database.db.selectFrom('audit_log').selectAll().orderBy('id', 'desc').limit(1).executeTakeFirstOrThrow();
    expect(entry).toMatchObject({ actor_id: CONFIG_FILE_ACTOR.id, action: 'config.import', snapshot_version: String(before + 1) });
    const replicasIn = (config: Json) => config.revisions.find((r: Json) => r.id === 'tiny@2').replicas;
    expect(replicasIn(entry.before)).toEqual([{ id: 'tiny@2/0', base_url: 'http://127.0.0.1:41001/v1', slots: 2 }]);
    expect(replicasIn(entry.after)).toEqual([{ id: 'tiny@2/0', base_url: 'http://127.0.0.1:41002/v1', slots: 2 }]);
    expect(sink.snapshots.at(-1)?.version).toBe(before + 1);
    expect(replicasIn(sink.snapshots.at(-1)?.config)).toEqual([{ id: 'tiny@2/0', base_url: 'http://127.0.0.1:41002/v1', slots: 2 }]);

    // Placement plus another field of the same revision is still a changed revision: refused.
    write(placed(41003).replace('  - id: tiny@2\n    replicas', '  - id: tiny@2\n    kv_tokens: 4096\n    replicas'));
    const err = await importConfigFile(cp, file).catch((e: unknown) => e);
    expect(isWeirError(err) && err.code === 'conflict').toBe(true);
    expect(String((err as Error).message)).toContain('tiny@2');
    expect(await latestVersion()).toBe(before + 1);
  });

  it('with scope placement takes only the replicas of revisions the store has, leaving everything else as stored', async () => {
    const storedTenants = await database.db.selectFrom('tenants').select('id').orderBy('id').execute();
    const config = readConfigFileObject(file) as Json;
    const tiny1 = config.revisions.find((r: Json) => r.id === 'tiny@1');
    tiny1.replicas = [{ id: 'tiny@1/0', base_url: 'http://127.0.0.1:41004/v1', slots: 1 }];
    // Differences a placement import must ignore: a changed spec, a new revision, tenants, defaults.
    tiny1.max_output_tokens = 128;
    config.revisions.push({ ...tiny1, id: 'tiny@9', replicas: [{ id: 'tiny@9/0', base_url: 'http://127.0.0.1:41005/v1', slots: 1 }] });
    delete config.revisions.find((r: Json) => r.id === 'tiny@2').replicas;
    config.tenants = [{ id: 'other', name: 'Other' }];
    config.defaults = { cancel_grace_ms: 999 };
    const before = await latestVersion();
    const result = await importConfig(cp, config, CONFIG_FILE_ACTOR, { source: 'derived.yaml', scope: 'placement' });
    expect(result).toEqual({ imported: true, version: before + 1 });
    const entry = await database.db.selectFrom('audit_log').selectAll().orderBy('id', 'desc').limit(1).executeTakeFirstOrThrow();
    expect(entry).toMatchObject({ action: 'config.placement', entity_id: 'derived.yaml' });
    const published = sink.snapshots.at(-1)?.config as Json;
    expect(published.revisions.map((r: Json) => r.id)).toEqual(['tiny@1', 'tiny@2', 'tiny@3']);
    expect(published.revisions[0].replicas).toEqual([{ id: 'tiny@1/0', base_url: 'http://127.0.0.1:41004/v1', slots: 1 }]);
    expect(published.revisions[0].max_output_tokens).toBe(256);
    expect(published.revisions[1].replicas).toBeUndefined();
    expect(published.defaults).toEqual({ cancel_grace_ms: 250 });
    expect(await database.db.selectFrom('tenants').select('id').orderBy('id').execute()).toEqual(storedTenants);
    // The same placement again changes nothing.
    expect(await importConfig(cp, config, CONFIG_FILE_ACTOR, { scope: 'placement' })).toEqual({ imported: false, reason: 'unchanged' });
  });

  it('refuses a configuration that does not validate, listing the problem', async () => {
    const config = readConfigFileObject(file) as Json;
    config.aliases[0].targets[0].revision = 'nope@1';
    const err = await importConfig(cp, config, CONFIG_FILE_ACTOR).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidChangeError);
    expect((err as InvalidChangeError).problems.map((p) => p.message).join(' ')).toContain('nope@1');
  });

  it('deletes a revision the file no longer lists, and updates a deprecation', async () => {
    write(
      configYaml({ weights: [100, 0], tenants: `  - id: demo\n    name: Demo\n    apps: [{ id: demo-app, name: Demo app }]` }).replace(
        '    pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 }\n  - id: tiny@2',
        '    pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 }\n    deprecation: { retires_on: "2030-01-31", replacement: tiny@2 }\n  - id: tiny@2',
      ),
    );
    expect(await importConfigFile(cp, file)).toMatchObject({ imported: true });
    const rows = await database.db.selectFrom('model_revisions').select(['id', 'deprecation']).orderBy('id').execute();
    expect(rows.map((r) => r.id)).toEqual(['tiny@1', 'tiny@2']);
    expect(rows[0].deprecation).toMatchObject({ retires_on: '2030-01-31', replacement: 'tiny@2' });
  });

  it('imports redaction profiles with the tenants naming them, publishes them, and deletes the ones the file drops', async () => {
    const tenants = `  - id: demo\n    name: Demo\n    apps: [{ id: demo-app, name: Demo app }]\n    content_logging: true\n    redaction_profile: hr`;
    const profiles = `redaction_profiles:\n  hr:\n    recognizers: [email]\n    custom_patterns: [{ name: emp, pattern: "EMP-[0-9]{6}" }]\n`;
    write(profiles + configYaml({ weights: [100, 0], tenants }));
    expect(await importConfigFile(cp, file)).toMatchObject({ imported: true });
    expect(await database.db.selectFrom('redaction_profiles').select(['id', 'spec']).execute()).toEqual([
      { id: 'hr', spec: { recognizers: ['email'], custom_patterns: [{ name: 'emp', pattern: 'EMP-[0-9]{6}' }] } },
    ]);
    const published = sink.snapshots.at(-1)?.config as Json;
    expect(published.redaction_profiles.hr.recognizers).toEqual(['email']);
    expect(published.tenants.find((t: Json) => t.id === 'demo')).toMatchObject({ content_logging: true, redaction_profile: 'hr' });
    // Unchanged file: nothing written.
    expect(await importConfigFile(cp, file)).toEqual({ imported: false, reason: 'unchanged' });
    // A bad pattern is refused with its field, and nothing is committed.
    write(profiles.replace('EMP-[0-9]{6}', '(a)\\\\1') + configYaml({ weights: [100, 0], tenants }));
    const err = (await importConfigFile(cp, file).catch((e: unknown) => e)) as Error;
    expect(err.message).toContain('redaction_profiles.hr.custom_patterns[0].pattern');
    write(configYaml({ weights: [100, 0], tenants: tenants.replace('redaction_profile: hr', 'redaction_profile: strict') }));
    expect(await importConfigFile(cp, file)).toMatchObject({ imported: true });
    expect(await database.db.selectFrom('redaction_profiles').select('id').execute()).toEqual([]);
  });
});

describe('mintFirstAdminToken', () => {
  it('mints one admin token on an empty store, stored only as its hash, and none afterwards', async () => {
    const token = await mintFirstAdminToken(database.db);
    expect(token).toMatch(/^wa_[a-z0-9]{8}_[A-Za-z0-9_-]{43}$/);
    const rows = await database.db.selectFrom('admin_tokens').selectAll().execute();
    expect(rows).toHaveLength(1);
    expect(rows[0].role).toBe('admin');
    expect(JSON.stringify(rows)).not.toContain(String(token).slice(12));
    expect(await mintFirstAdminToken(database.db)).toBeUndefined();
  });
});
