/**
 * A process for the journal's crash tests (`file-settlement-journal.int.spec.ts`), run with
 * node + tsx and killed with SIGKILL at a random instant. Not part of the library.
 *
 * It opens the database (`CRASH_DATABASE_URL`, else PGlite in `CRASH_PGLITE_DIR`) and the
 * journal in `CRASH_JOURNAL_DIR`, prints `ready`, then appends settlements of tenant
 * `t_<CRASH_TAG>` (generation `gen_<CRASH_TAG>_<i>`, cost 1,000 + i nano-USD, reservation on lease
 * `CRASH_LEASE`, every fifth with an idempotency result) a few at a time, forever (pausing while
 * the journal is saturated, at 2,000 unapplied, as the gateway would), printing
 * `acked <generationId>` for each after its `append` resolved. Before each applier transaction
 * it prints `applying <first generation id> <last generation id> <items>`.
 */
import type { SettlementApplier, SettlementEntry } from '@weir/core';
import { openDatabase } from '../database';
import { createPgSettlementApplier } from '../settlement-applier';
import { openFileSettlementJournal } from './file-settlement-journal';
import { fsyncDirectoryTree } from './fsync-tree';

const env = process.env;
const T0 = Date.UTC(2026, 0, 1, 12);

/** The i-th settlement the child appends for `tag` on `lease` (the test rebuilds them to check costs). */
export function crashEntry(tag: string, lease: string, i: number): SettlementEntry {
  const generationId = `gen_${tag}_${i}`;
  const entry: SettlementEntry = {
    usage: {
      generationId,
      requestId: generationId,
      tenantId: `t_${tag}`,
      appId: 'web',
      apiKeyId: 'key_1',
      route: 'generations',
      modelAlias: 'tiny',
      modelRevision: 'tiny@1',
      inputTokens: 10,
      outputTokens: i % 50,
      cachedInputTokens: 0,
      costNanoUsd: 1_000 + i,
      status: 'completed',
      finishReason: 'stop',
      errorCode: null,
      queueMs: 0,
      ttftMs: 3,
      totalMs: 9,
      startedAt: new Date(T0),
      finishedAt: new Date(T0 + 9),
      usageSource: 'reported',
      reservation: { reservationId: `res_${i}`, worstCaseNano: 1_000_000, monthStartsOn: '2026-01-01', dayStartsOn: '2026-01-01', leaseIds: [lease] },
    },
  };
  if (i % 5 === 0) {
    entry.idempotency = {
      tenantId: `t_${tag}`,
      key: `key_${i}`,
      outcome: { kind: 'result', result: { generationId, requestId: `key_${i}`, route: 'generations', modelRevision: 'tiny@1', createdS: 1, deltas: ['hello'], outcome: { finishReason: 'stop' } as never } },
      retainUntilMs: T0 + 86_400_000,
      bodySha256: 'a'.repeat(64),
      route: 'generations',
    };
  }
  return entry;
}

async function main(): Promise<void> {
  const tag = env.CRASH_TAG ?? 'x';
  const lease = env.CRASH_LEASE ?? 'lease_x';
  const database = await openDatabase(env.CRASH_DATABASE_URL ? { databaseUrl: env.CRASH_DATABASE_URL, maxConnections: 2 } : { dataDir: env.CRASH_PGLITE_DIR });
  const real = createPgSettlementApplier(database.db);
  const applier: SettlementApplier = {
    position: (journal) => real.position(journal),
    apply(batch) {
      const ids = batch.items.map((it) => (it.kind === 'settle' ? it.entry.usage.generationId : '-'));
      process.stdout.write(`applying ${ids[0]} ${ids[ids.length - 1]} ${ids.length}\n`);
      return real.apply(batch);
    },
  };
  const journal = await openFileSettlementJournal(
    {
      dir: env.CRASH_JOURNAL_DIR ?? 'journal',
      segmentBytes: Number(env.CRASH_SEGMENT_BYTES ?? 8_388_608),
      syncIntervalMs: 5,
      applyIntervalMs: 10,
      capacity: 2_000,
      ...(env.CRASH_PGLITE_DIR ? { syncDatabase: () => fsyncDirectoryTree(env.CRASH_PGLITE_DIR!) } : {}),
    },
    { applier },
  );
  process.stdout.write('ready\n');
  for (let i = 0; ; ) {
    // As the gateway does: no new work while the backlog is full.
    while (journal.saturated()) await new Promise((resolve) => setTimeout(resolve, 5));
    const n = 1 + (i % 7);
    const batch = Array.from({ length: n }, (_, k) => i + k);
    i += n;
    await Promise.all(
      batch.map(async (k) => {
        await journal.append(crashEntry(tag, lease, k));
        process.stdout.write(`acked gen_${tag}_${k}\n`);
      }),
    );
    // Let the applier and the syncs run between rounds, as a server's event loop would.
    await new Promise((resolve) => setImmediate(resolve));
  }
}

if (require.main === module) {
  main().catch((err) => {
    process.stderr.write(`crash child failed: ${String(err?.stack ?? err)}\n`);
    process.exit(1);
  });
}
