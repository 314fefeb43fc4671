import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  type InMemorySettlementApplier,
  buildClaimMark,
  buildProgressMark,
  buildReservationRef,
  buildSettlementEntry,
  createInMemorySettlementApplier,
  waitUntil,
} from '@weir/testing';
import { type FileSettlementJournal, type FileSettlementJournalOptions, openFileSettlementJournal } from './file-settlement-journal';
import { encodeJournalLine, parseJournalSegment } from './journal-line';

describe('file settlement journal', () => {
  let dir: string;
  let applier: InMemorySettlementApplier;
  const opened: FileSettlementJournal[] = [];

  beforeEach(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'weir-journal-'));
    applier = createInMemorySettlementApplier();
  });
  afterEach(async () => {
    applier.gate = undefined;
    await Promise.all(opened.splice(0).map((j) => j.close({ timeoutMs: 0 })));
    rmSync(dir, { recursive: true, force: true });
  });

  async function open(options: Partial<FileSettlementJournalOptions> = {}, now?: () => number): Promise<FileSettlementJournal> {
    const j = await openFileSettlementJournal({ dir, applyIntervalMs: 5, retryBaseMs: 1, retryMaxMs: 5, ...options }, { applier, ...(now ? { now } : {}) });
    opened.push(j);
    return j;
  }
  const segmentFiles = () => readdirSync(dir).filter((f) => f.endsWith('.journal')).sort();
  const records = (file: string) => parseJournalSegment(readFileSync(path.join(dir, file))).lines.map((l) => l.record);
  /** A gate the applier waits on until `open()` is called. */
  function hold(): () => void {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    applier.gate = () => gate;
    return release;
  }

  it('writes the line before append resolves, then applies it with the position just past it', async () => {
    const j = await open();
    const entry = buildSettlementEntry(1);
    await j.append(entry);
    const [file] = segmentFiles();
    expect(records(file)).toEqual([{ kind: 'settle', entry }]);
    await j.flush();
    expect(applier.rows.get(entry.usage.generationId)).toEqual(entry);
    expect(applier.positions.get('local')).toEqual({ segment: 1, offset: readFileSync(path.join(dir, file)).length });
  });

  it('writes the appends of one turn with one write(2) and applies them as one batch', async () => {
    const j = await open();
    await Promise.all(Array.from({ length: 20 }, (_, i) => j.append(buildSettlementEntry(i))));
    expect(j.stats().writes).toBe(1);
    await j.flush();
    expect(applier.batches).toHaveLength(1);
    expect(applier.batches[0].items).toHaveLength(20);
  });

  it('splits one turn’s appends across segments at segmentBytes, one write(2) per segment', async () => {
    const j = await open({ segmentBytes: 2_000, maxBatch: 1_000 });
    const entries = Array.from({ length: 20 }, (_, i) => buildSettlementEntry(i, { modelAlias: 'ünïcode ✓' }));
    await Promise.all(entries.map((e) => j.append(e)));
    const files = segmentFiles();
    expect(files.length).toBeGreaterThan(2);
    expect(j.stats().writes).toBe(files.length);
    expect(files.flatMap(records)).toEqual(entries.map((entry) => ({ kind: 'settle', entry })));
    const line = Buffer.byteLength(encodeJournalLine({ kind: 'settle', entry: entries[0] }));
    for (const f of files) expect(readFileSync(path.join(dir, f)).length).toBeLessThanOrEqual(2_000 + line);
    await j.flush();
    // The last position is the end of the last line of the last segment.
    const last = files[files.length - 1];
    expect(applier.positions.get('local')).toEqual({ segment: Number(last.slice(0, 16)), offset: readFileSync(path.join(dir, last)).length });
    expect(applier.rows.size).toBe(20);
  });

  it('writes a turn larger than its reusable buffer (over 1 MiB) whole', async () => {
    const j = await open();
    const big = Array.from({ length: 1_500 }, (_, i) => buildSettlementEntry(i, { apiKeyId: 'k'.repeat(1_000) }));
    await Promise.all(big.map((e) => j.append(e)));
    expect(j.stats().writes).toBe(1);
    await j.append(buildSettlementEntry(5_000));
    const [file] = segmentFiles();
    expect(records(file)).toEqual([...big, buildSettlementEntry(5_000)].map((entry) => ({ kind: 'settle', entry })));
    expect(parseJournalSegment(readFileSync(path.join(dir, file))).invalid).toBe(0);
  });

  it('applies in batches of at most maxBatch, in order', async () => {
    const j = await open({ maxBatch: 3 });
    const all = Array.from({ length: 8 }, (_, i) => j.append(buildSettlementEntry(i)));
    await Promise.all(all);
    await j.flush();
    expect(applier.batches.map((b) => b.items.length)).toEqual([3, 3, 2]);
    expect(applier.batches.flatMap((b) => b.items.map((it) => (it.kind === 'settle' ? it.entry.usage.generationId : '')))).toEqual(
      Array.from({ length: 8 }, (_, i) => `gen_test_${i}`),
    );
  });

  it('retries a failed transaction until it commits, applying each entry once', async () => {
    const j = await open();
    applier.failNext(3);
    await j.append(buildSettlementEntry(1));
    await j.flush();
    expect([...applier.rows.keys()]).toEqual(['gen_test_1']);
    expect(applier.batches).toHaveLength(1);
  });

  it('is saturated while too many entries wait, and not once they are applied', async () => {
    const release = hold();
    const j = await open({ capacity: 3 });
    await Promise.all([1, 2].map((i) => j.append(buildSettlementEntry(i))));
    expect(j.saturated()).toBe(false);
    await j.append(buildSettlementEntry(3));
    expect([j.saturated(), j.pending()]).toEqual([true, 3]);
    release();
    await j.flush();
    expect([j.saturated(), j.pending()]).toEqual([false, 0]);
  });

  it('replays at open what was written and not applied, exactly once', async () => {
    const release = hold();
    const first = await open();
    await Promise.all([1, 2, 3].map((i) => first.append(buildSettlementEntry(i))));
    // The database never answered: close gives up at once; the entries stay in the journal.
    expect(await first.close({ timeoutMs: 0 })).toEqual({ unapplied: 3 });
    release();
    applier.gate = undefined;
    applier.batches.length = 0;
    applier.rows.clear();

    const second = await open();
    expect(second.recovery).toMatchObject({ replayed: 3, segments: 1, segment: 2, estimated: 0, interrupted: 0 });
    expect([...applier.rows.keys()].sort()).toEqual(['gen_test_1', 'gen_test_2', 'gen_test_3']);
    await second.append(buildSettlementEntry(4));
    await second.close();

    const third = await open();
    expect(third.recovery.replayed).toBe(0);
    expect(applier.rows.size).toBe(4);
  });

  it('skips a torn last line at open and never appends after it', async () => {
    const e1 = buildSettlementEntry(1);
    const e2 = buildSettlementEntry(2);
    const torn = encodeJournalLine({ kind: 'settle', entry: buildSettlementEntry(3) }).slice(0, 50);
    writeFileSync(path.join(dir, '0000000000000001.journal'), encodeJournalLine({ kind: 'settle', entry: e1 }) + encodeJournalLine({ kind: 'settle', entry: e2 }) + torn);
    const j = await open();
    expect(j.recovery).toMatchObject({ replayed: 2, tornBytes: 50, segment: 2 });
    expect([...applier.rows.keys()]).toEqual(['gen_test_1', 'gen_test_2']);
    const e4 = buildSettlementEntry(4);
    await j.append(e4);
    // The new entry went to a new segment; the old one, fully applied, is deleted.
    expect(segmentFiles()).toEqual(['0000000000000002.journal']);
    expect(records('0000000000000002.journal')).toEqual([{ kind: 'settle', entry: e4 }]);
  });

  it('numbers its segment past the stored position, and replays only what lies after it', async () => {
    const lines = [1, 2, 3].map((i) => encodeJournalLine({ kind: 'settle', entry: buildSettlementEntry(i) }));
    writeFileSync(path.join(dir, '0000000000000004.journal'), lines.join(''));
    applier.positions.set('local', { segment: 4, offset: Buffer.byteLength(lines[0]) });
    const j = await open();
    expect(j.recovery).toMatchObject({ replayed: 2, segment: 5 });
    expect([...applier.rows.keys()]).toEqual(['gen_test_2', 'gen_test_3']);

    // A stored position past every segment on disk (a machine crash lost an applied tail).
    applier.positions.set('other', { segment: 9, offset: 100_000 });
    const k = await open({ name: 'other', dir: path.join(dir, 'other') });
    expect(k.recovery.segment).toBe(10);
    await k.append(buildSettlementEntry(7));
    await k.flush();
    expect(applier.rows.has('gen_test_7')).toBe(true);
    expect(applier.positions.get('other')?.segment).toBe(10);
  });

  it('settles at open a generation that died mid-stream from its last progress, and a keyed one that made none as interrupted', async () => {
    const reservation = buildReservationRef('gen_test_1', ['l1'], { worstCaseNano: 6_000 });
    writeFileSync(
      path.join(dir, '0000000000000001.journal'),
      [
        encodeJournalLine({ kind: 'claim', claim: buildClaimMark(1) }),
        encodeJournalLine({ kind: 'progress', mark: buildProgressMark(1, { outputTokens: 3, costNanoUsd: 3_000, reservation }) }),
        encodeJournalLine({ kind: 'progress', mark: buildProgressMark(1, { outputTokens: 9, costNanoUsd: 9_000, reservation }) }),
        encodeJournalLine({ kind: 'claim', claim: buildClaimMark(2) }),
        encodeJournalLine({ kind: 'claim', claim: buildClaimMark(3) }),
        encodeJournalLine({ kind: 'settle', entry: buildSettlementEntry(3) }),
        encodeJournalLine({ kind: 'claim', claim: buildClaimMark(4) }),
        encodeJournalLine({ kind: 'release', generationId: 'gen_test_4' }),
      ].join(''),
    );
    const j = await open();
    expect(j.recovery).toMatchObject({ replayed: 1, estimated: 1, interrupted: 1 });
    expect(applier.rows.get('gen_test_1')?.usage).toMatchObject({ outputTokens: 9, costNanoUsd: 6_000, usageSource: 'estimated', errorCode: 'interrupted', reservation });
    expect(applier.keys.get('t1/key_test_1')?.outcome).toMatchObject({ kind: 'interrupted', generationId: 'gen_test_1' });
    expect(applier.keys.get('t2/key_test_2')?.outcome).toMatchObject({ kind: 'interrupted', generationId: 'gen_test_2' });
    expect(applier.keys.has('t1/key_test_4')).toBe(false);
    expect(j.stats().openGenerations).toBe(0);

    // Recovery wrote its settlements to the new segment: a crash now recovers nothing twice.
    await j.close();
    applier.rows.clear();
    const k = await open();
    expect(k.recovery).toMatchObject({ estimated: 0, interrupted: 0, replayed: 0 });
  });

  it('journals progress at most every progressIntervalMs per generation, the first offer only starting the clock', async () => {
    let t = 1_000;
    const j = await open({ progressIntervalMs: 1_000 }, () => t);
    let built = 0;
    const offer = (out: number) =>
      j.progress('gen_test_1', () => {
        built++;
        return buildProgressMark(1, { outputTokens: out });
      });
    offer(1);
    t += 999;
    offer(2);
    expect(built).toBe(0);
    t += 1;
    offer(3);
    t += 500;
    offer(4);
    t += 500;
    offer(5);
    await j.claim(buildClaimMark(9));
    expect(built).toBe(2);
    const marks = records(segmentFiles()[0]).filter((r) => r.kind === 'progress');
    expect(marks.map((r) => r.kind === 'progress' && r.mark.outputTokens)).toEqual([3, 5]);
    expect(j.stats().openGenerations).toBe(2);
    await j.append(buildSettlementEntry(1));
    j.release('gen_test_9');
    await j.close();
    expect(records(segmentFiles()[segmentFiles().length - 1]).slice(-1)).toEqual([{ kind: 'release', generationId: 'gen_test_9' }]);
    const k = await open();
    expect(k.recovery).toMatchObject({ estimated: 0, interrupted: 0 });
  });

  it('starts a new segment past segmentBytes, repeating what is open, and deletes applied segments', async () => {
    const j = await open({ segmentBytes: 2_000, syncIntervalMs: 1 });
    await j.claim(buildClaimMark(100));
    for (let i = 0; i < 30; i++) await j.append(buildSettlementEntry(i));
    await j.flush();
    await waitUntil(() => segmentFiles().length <= 2, 5_000, 'applied segments deleted');
    expect(j.stats().segmentsDeleted).toBeGreaterThan(3);
    const files = segmentFiles();
    // The open claim is repeated at the head of the newest segment.
    expect(records(files[files.length - 1])[0]).toEqual({ kind: 'claim', claim: buildClaimMark(100) });
    expect(applier.rows.size).toBe(30);

    // The claim survives a "crash" although its first segment is gone.
    await j.close();
    const k = await open();
    expect(k.recovery.interrupted).toBe(1);
    expect(applier.keys.get('t1/key_test_100')?.outcome.kind).toBe('interrupted');
  });

  it('keeps an unapplied segment however many segments follow it', async () => {
    const release = hold();
    const j = await open({ segmentBytes: 1_000, syncIntervalMs: 1 });
    for (let i = 0; i < 12; i++) await j.append(buildSettlementEntry(i));
    await new Promise((r) => setTimeout(r, 30));
    const before = segmentFiles();
    expect(before.length).toBeGreaterThan(3);
    expect(j.stats().segmentsDeleted).toBe(0);
    release();
    await j.flush();
    await waitUntil(() => segmentFiles().length === 1, 5_000, 'applied segments deleted');
  });

  it('deletes applied segments only after the database made their commits durable (syncDatabase)', async () => {
    let syncs = 0;
    let failSync = true;
    let releaseSync: (() => void) | undefined;
    const syncDatabase = () => {
      syncs++;
      if (failSync) return Promise.reject(new Error('disk unhappy'));
      return new Promise<void>((resolve) => (releaseSync = resolve));
    };
    const j = await open({ segmentBytes: 1_000, syncIntervalMs: 1, syncDatabase });
    for (let i = 0; i < 8; i++) await j.append(buildSettlementEntry(i));
    await j.flush();
    await waitUntil(() => syncs > 0, 5_000, 'a database sync');
    const kept = segmentFiles().length;
    expect(kept).toBeGreaterThan(2);
    expect(j.stats().segmentsDeleted).toBe(0);

    failSync = false;
    await j.append(buildSettlementEntry(8));
    await j.flush();
    await waitUntil(() => releaseSync !== undefined, 5_000, 'a second database sync');
    expect(j.stats().segmentsDeleted).toBe(0);
    releaseSync!();
    await waitUntil(() => j.stats().segmentsDeleted > 0, 5_000, 'segments deleted after the sync');
  });

  it('sets a settlement the database refuses aside in rejected.journal and applies the others', async () => {
    const refused: string[] = [];
    const inner = applier;
    const poisoned = {
      position: inner.position,
      apply: async (b: Parameters<typeof inner.apply>[0]) => {
        if (b.items.some((it) => it.kind === 'settle' && it.entry.usage.generationId === 'gen_test_2')) throw Object.assign(new Error('value out of range'), { code: '22003' });
        return inner.apply(b);
      },
    };
    const j = await openFileSettlementJournal({ dir, applyIntervalMs: 5, onRejected: (r) => refused.push(r.item.kind === 'settle' ? r.item.entry.usage.generationId : '') }, { applier: poisoned });
    opened.push(j);
    await Promise.all([1, 2, 3].map((i) => j.append(buildSettlementEntry(i))));
    await j.flush();
    expect([...applier.rows.keys()]).toEqual(['gen_test_1', 'gen_test_3']);
    expect(refused).toEqual(['gen_test_2']);
    expect(j.stats().rejected).toBe(1);
    expect(records('rejected.journal')).toEqual([{ kind: 'settle', entry: buildSettlementEntry(2) }]);
  });

  it('refuses appends after close and malformed entries', async () => {
    const j = await open();
    await expect(j.append(buildSettlementEntry(1, { costNanoUsd: 1.5 }))).rejects.toMatchObject({ code: 'internal' });
    await expect(j.append(buildSettlementEntry(1, { attempts: [{ attempt: 0 } as never] }))).rejects.toMatchObject({ code: 'internal', message: expect.stringContaining('attempt must be a positive integer') });
    await j.close();
    await expect(j.append(buildSettlementEntry(2))).rejects.toMatchObject({ code: 'shutting_down' });
    await expect(j.claim(buildClaimMark(2))).rejects.toMatchObject({ code: 'shutting_down' });
  });
});
