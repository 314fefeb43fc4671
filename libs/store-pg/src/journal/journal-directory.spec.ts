import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { buildClaimMark, buildProgressMark, buildSettlementEntry, createInMemorySettlementApplier } from '@weir/testing';
import { openFileSettlementJournal } from './file-settlement-journal';
import { inspectFileSettlementJournal, journalSegmentPath } from './journal-directory';
import { encodeJournalLine } from './journal-line';

describe('inspectFileSettlementJournal', () => {
  let root: string;
  beforeEach(() => {
    root = mkdtempSync(path.join(os.tmpdir(), 'weir-journal-inspect-'));
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('says a journal directory that does not exist is absent, without creating it', async () => {
    const dir = path.join(root, 'journal');
    const inspection = await inspectFileSettlementJournal({ dir }, { applier: createInMemorySettlementApplier() });
    expect(inspection).toMatchObject({ present: false, unapplied: { settlements: 0 }, abandoned: { estimated: 0, interrupted: 0 } });
    expect(readdirSync(root)).toEqual([]);
  });

  it('reports exactly what the next open recovers, and writes nothing', async () => {
    const dir = path.join(root, 'journal');
    const applied = buildSettlementEntry(1, {}, 'insp');
    const unapplied = buildSettlementEntry(2, {}, 'insp');
    // Generation 3: a claim only (its key becomes interrupted); 4: a claim and progress (an
    // estimated row and an interrupted key); 5: progress only (an estimated row); 6: a claim
    // then a release (nothing); 7: progress then its settlement (nothing more).
    const lines = [
      { kind: 'settle' as const, entry: applied },
      { kind: 'claim' as const, claim: buildClaimMark(3, {}, 'insp') },
      { kind: 'claim' as const, claim: buildClaimMark(4, {}, 'insp') },
      { kind: 'progress' as const, mark: buildProgressMark(4, {}, 'insp') },
      { kind: 'progress' as const, mark: buildProgressMark(5, {}, 'insp') },
      { kind: 'claim' as const, claim: buildClaimMark(6, {}, 'insp') },
      { kind: 'release' as const, generationId: 'gen_insp_6' },
      { kind: 'progress' as const, mark: buildProgressMark(7, {}, 'insp') },
      { kind: 'settle' as const, entry: buildSettlementEntry(7, {}, 'insp') },
      { kind: 'settle' as const, entry: unapplied },
    ].map(encodeJournalLine);
    mkdirSync(dir);
    writeFileSync(journalSegmentPath(dir, 1), lines.join(''));
    const applier = createInMemorySettlementApplier();
    // Applied up to the first line.
    applier.positions.set('local', { segment: 1, offset: Buffer.byteLength(lines[0]) });

    const inspection = await inspectFileSettlementJournal({ dir, nowMs: Date.UTC(2026, 0, 1) }, { applier });
    expect(inspection).toEqual({
      present: true,
      position: { segment: 1, offset: Buffer.byteLength(lines[0]) },
      segments: 1,
      records: 10,
      invalidLines: 0,
      tornBytes: 0,
      unapplied: { settlements: 2, interruptions: 0, generationIds: ['gen_insp_7', unapplied.usage.generationId] },
      abandoned: { estimated: 2, interrupted: 1, keys: 2, generationIds: ['gen_insp_3', 'gen_insp_4', 'gen_insp_5'] },
    });
    expect(readdirSync(dir)).toEqual(['0000000000000001.journal']);
    expect(applier.batches).toEqual([]);

    // The journal's own recovery agrees.
    const journal = await openFileSettlementJournal({ dir, applyIntervalMs: 1 }, { applier, now: () => Date.UTC(2026, 0, 1) });
    expect(journal.recovery).toMatchObject({ replayed: 2, estimated: 2, interrupted: 1 });
    await journal.close();
    const after = await inspectFileSettlementJournal({ dir }, { applier });
    expect(after).toMatchObject({ present: true, unapplied: { settlements: 0, interruptions: 0 }, abandoned: { estimated: 0, interrupted: 0 } });
  });
});
