/**
 * The deprecation event: the pure choice of what is due, and the announcer against a
 * throw-away Postgres database (once per revision and retirement day, audited, across two
 * announcers as two control-plane instances would run them).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createTestDatabase, type TestDatabase } from '@weir/store-pg';
import type { ConfigFileObject } from './config-shapes';
import { createDeprecationAnnouncer, DEPRECATION_ANNOUNCED_ACTION, dueAnnouncements, type DeprecationAnnouncement } from './deprecation-announcer';
import { seedFromConfigFile } from './seed';

const rev = (id: string, deprecation?: object) => ({ id, ...(deprecation ? { deprecation } : {}) });

describe('dueAnnouncements', () => {
  const config: ConfigFileObject = {
    revisions: [rev('m@1', { retires_on: '2026-12-31', replacement: 'm@2', announced_on: '2026-12-01' }), rev('m@2'), rev('m@0', { retires_on: '2026-12-10', replacement: 'm@2' })],
    aliases: [{ name: 'm', targets: [{ revision: 'm@1', weight: 90 }, { revision: 'm@2', weight: 10 }] }, { name: 'other', revision: 'm@2' }],
    tenants: [
      { id: 'pinned', routes: [{ alias: 'm', pin: 'm@1' }] },
      { id: 'follower', allowed_aliases: ['m'] },
      { id: 'elsewhere', allowed_aliases: ['other'] },
    ],
  } as unknown as ConfigFileObject;

  it('announces nothing before the announcement day', () => {
    expect(dueAnnouncements(config, '2026-11-30', new Set()).map((a) => a.revision)).toEqual(['m@0']);
  });

  it('on the day: the revision, retirement, replacement, days left, and the tenants that reach it (pins first)', () => {
    const due = dueAnnouncements(config, '2026-12-01', new Set(['m@0|2026-12-10']));
    expect(due).toEqual([
      {
        type: 'revision_deprecation_announced',
        revision: 'm@1',
        retires_on: '2026-12-31',
        replacement: 'm@2',
        announced_on: '2026-12-01',
        days_left: 30,
        tenants: [
          { id: 'pinned', via: 'pin' },
          { id: 'follower', via: 'alias' },
        ],
      },
    ]);
  });

  it('a use case pinned to the revision (or falling back to it) reaches its tenant as a pin does', () => {
    const withUseCase = {
      ...config,
      tenants: [{ id: 'elsewhere', allowed_aliases: ['other'], use_cases: [{ name: 'drafts', model: 'other', fallbacks: ['m@1'] }] }],
    } as unknown as ConfigFileObject;
    expect(dueAnnouncements(withUseCase, '2026-12-01', new Set(['m@0|2026-12-10']))[0].tenants).toEqual([{ id: 'elsewhere', via: 'pin' }]);
  });

  it('a deprecation without announced_on is announced from the day it was set; nothing after retirement or twice', () => {
    expect(dueAnnouncements(config, '2026-12-05', new Set(), new Map([['m@0', '2026-12-04']]))).toEqual(
      expect.arrayContaining([expect.objectContaining({ revision: 'm@0', announced_on: '2026-12-04', days_left: 6 })]),
    );
    expect(dueAnnouncements(config, '2026-12-10', new Set(['m@1|2026-12-31']))).toEqual([]);
  });
});

describe('createDeprecationAnnouncer (Postgres)', () => {
  let database: TestDatabase;
  let dir: string;

  beforeAll(async () => {
    database = await createTestDatabase();
    dir = mkdtempSync(path.join(tmpdir(), 'weir-announcer-'));
    const file = path.join(dir, 'weir.yaml');
    writeFileSync(
      file,
      `
revisions:
  - { id: a@1, model: a, engine: { kind: simulated }, context_window: 512, max_output_tokens: 64, default_output_tokens: 16, pricing: { input_per_mtok: 1, output_per_mtok: 1 }, deprecation: { retires_on: '2027-01-15', replacement: a@2, announced_on: '2026-11-30' } }
  - { id: a@2, model: a, engine: { kind: simulated }, context_window: 512, max_output_tokens: 64, default_output_tokens: 16, pricing: { input_per_mtok: 1, output_per_mtok: 1 } }
aliases:
  - { name: a, revision: a@2 }
tenants:
  - { id: t, name: T, apps: [{ id: app, name: App }], routes: [{ alias: a, pin: a@1 }] }
`,
    );
    await seedFromConfigFile(database.db, file);
  });
  afterAll(async () => {
    await database?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('announces once per revision and retirement day, audits it, and two instances never both announce', async () => {
    const events: DeprecationAnnouncement[] = [];
    const now = () => Date.UTC(2026, 10, 30, 9);
    const one = createDeprecationAnnouncer({ db: database.db, clock: now, publish: (e) => void events.push(e) });
    const two = createDeprecationAnnouncer({ db: database.db, clock: now, publish: (e) => void events.push(e) });
    const [a, b] = await Promise.all([one.check(), two.check()]);
    expect(a.length + b.length).toBe(1);
    expect(events).toEqual([expect.objectContaining({ revision: 'a@1', retires_on: '2027-01-15', replacement: 'a@2', days_left: 46, tenants: [{ id: 't', via: 'pin' }] })]);
    expect(await one.check()).toEqual([]);
    const audit = await database.db.selectFrom('audit_log').select(['entity_id', 'actor_id']).where('action', '=', DEPRECATION_ANNOUNCED_ACTION).execute();
    expect(audit).toEqual([{ entity_id: 'a@1', actor_id: 'system:deprecation-announcer' }]);
  });

  it('a publish failure is logged and the event stays in the audit log (never lost, never repeated)', async () => {
    const warnings: string[] = [];
    await database.db.updateTable('model_revisions').set({ deprecation: JSON.stringify({ retires_on: '2027-02-01', replacement: 'a@2', announced_on: '2026-11-30' }) }).where('id', '=', 'a@1').execute();
    const announcer = createDeprecationAnnouncer({
      db: database.db,
      clock: () => Date.UTC(2026, 11, 1),
      publish: () => {
        throw new Error('nats down');
      },
      logger: { info: () => undefined, warn: (_o, m) => void warnings.push(String(m)) },
    });
    expect((await announcer.check()).map((a) => a.retires_on)).toEqual(['2027-02-01']);
    expect(warnings).toEqual(['deprecation event not published (it stays in the audit log)']);
    expect(await announcer.check()).toEqual([]);
  });
});
