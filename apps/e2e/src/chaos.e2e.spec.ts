/**
 * The chaos proof, bounded (issue 13, item 8): one seed per topology, about a minute of seeded
 * traffic each against the chaos upstream — streaming and non-streaming chat completions and
 * generations, client cancels, short deadlines, upstream deaths mid-stream and 503s before the
 * first token, retries with the same idempotency key, the kill switch — with kill -9 of the
 * all-in-one (restarted on its data directory) or of every split service (gateway, admission,
 * relay, ledger, scheduler, router; each restarted) at random instants. Then a settle period,
 * `npm run reconcile -- --fix`, and every invariant of `chaos/checks.ts` must hold: billed =
 * produced, input ≤ reserved, every answered request has exactly one row, no duplicates, no
 * hold past its expiry, the budget never exceeded, clients told what they are billed, and a
 * clean reconciliation. The full run is `node --import tsx tools/chaos/run.ts` (400 requests
 * over 60 s by default). The report is printed whether the run passes or not.
 */
import { type ChaosTopologyKind, runChaos } from './chaos';

jest.setTimeout(420_000);

const RUNS: Array<{ topology: ChaosTopologyKind; seed: number }> = [
  { topology: 'all-in-one', seed: 1301 },
  { topology: 'split', seed: 1302 },
];

describe.each(RUNS)('the chaos proof on the $topology topology (seed $seed)', ({ topology, seed }) => {
  it('bills every token exactly once through cancels, deadlines, upstream deaths, retries, the kill switch and kill -9', async () => {
    const result = await runChaos({ seed, topology, requests: 150, durationMs: 45_000, concurrency: 6, settleMs: 4_000, log: (line) => process.stderr.write(`${line}\n`) });
    process.stderr.write(`${result.report}\n`);

    // The run did what it is about: every planned kill, and traffic answered around them.
    const plannedKills = result.plan.faults.filter((f) => f.kind === 'kill').map((f) => f.target);
    expect(result.evidence.kills.map((k) => k.target)).toEqual(plannedKills);
    expect(plannedKills.length).toBeGreaterThanOrEqual(topology === 'split' ? 6 : 2);
    expect(result.verdict.stats.answered).toBeGreaterThanOrEqual(30);
    expect(result.verdict.stats.upstreamGenerations).toBeGreaterThanOrEqual(30);
    expect(result.evidence.budgetSamples.length).toBeGreaterThan(0);

    // Every invariant holds; a broken one is listed with its first violations.
    const broken = result.verdict.invariants
      .filter((i) => !i.ok)
      .map((i) => `${i.name}: ${i.violations.length} violations, e.g. ${i.violations.slice(0, 3).map((v) => `${v.subject}: ${v.message}`).join(' / ')}`);
    expect(broken).toEqual([]);
  });
});
