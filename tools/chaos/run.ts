/**
 * The chaos proof (issue 13, item 8), as a command:
 *
 *   node --import tsx tools/chaos/run.ts --seed 42 --topology all-in-one|split
 *        [--requests 400] [--duration 60] [--concurrency 8] [--kills N] [--kill-switches 2]
 *        [--budget-fraction F] [--database pglite|postgres] [--settle 5] [--out FILE.json]
 *
 * A seeded, randomized run against the chaos upstream (`libs/testing/src/chaos-upstream.ts`):
 * streaming and non-streaming chat completions and generations, client cancels, short deadlines,
 * upstream deaths mid-stream and 503s before the first token, retries with the same idempotency
 * key, the kill switch, and kill -9 of the all-in-one (restarted on the same data directory) or
 * of each split service (restarted by the launcher) at random instants. Then a settle period,
 * `npm run reconcile -- --fix`, and the invariants (apps/e2e/src/chaos/checks.ts). Prints the
 * report; exit status 0 only when every invariant holds, 1 when one is broken, 2 when the run
 * itself could not be made. Needs Postgres on 127.0.0.1:5432 for the split (and for
 * `--database postgres`), and nats-server on the PATH for the split.
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { runChaos } from '../../apps/e2e/src/chaos';

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      seed: { type: 'string', default: '42' },
      topology: { type: 'string', default: 'all-in-one' },
      requests: { type: 'string', default: '400' },
      duration: { type: 'string', default: '60' },
      concurrency: { type: 'string', default: '8' },
      kills: { type: 'string' },
      'kill-switches': { type: 'string', default: '2' },
      'budget-fraction': { type: 'string' },
      database: { type: 'string', default: 'pglite' },
      settle: { type: 'string', default: '5' },
      out: { type: 'string' },
      help: { type: 'boolean', default: false },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write('usage: node --import tsx tools/chaos/run.ts --seed 42 --topology all-in-one|split [--requests 400] [--duration 60] [--concurrency 8] [--kills N] [--kill-switches 2] [--budget-fraction F] [--database pglite|postgres] [--settle 5] [--out FILE.json]\n');
    return 0;
  }
  const int = (name: string, v: string | undefined, min: number): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min) throw new Error(`--${name}: expected an integer >= ${min}, got ${JSON.stringify(v)}`);
    return n;
  };
  if (values.topology !== 'all-in-one' && values.topology !== 'split') throw new Error(`--topology: all-in-one or split, got ${JSON.stringify(values.topology)}`);
  if (values.database !== 'pglite' && values.database !== 'postgres') throw new Error(`--database: pglite or postgres, got ${JSON.stringify(values.database)}`);
  const budgetFraction = values['budget-fraction'] === undefined ? undefined : Number(values['budget-fraction']);
  if (budgetFraction !== undefined && !(budgetFraction > 0)) throw new Error('--budget-fraction: a number > 0');
  const result = await runChaos({
    seed: int('seed', values.seed, 0),
    topology: values.topology,
    requests: int('requests', values.requests, 1),
    durationMs: int('duration', values.duration, 1) * 1000,
    concurrency: int('concurrency', values.concurrency, 1),
    ...(values.kills !== undefined ? { kills: int('kills', values.kills, 0) } : {}),
    killSwitches: int('kill-switches', values['kill-switches'], 0),
    ...(budgetFraction !== undefined ? { budgetFraction } : {}),
    database: values.database,
    settleMs: int('settle', values.settle, 0) * 1000,
    log: (line) => process.stderr.write(`${line}\n`),
  });
  process.stdout.write(`${result.report}\n`);
  if (values.out) {
    const { reservedInput: _omit, ...evidence } = result.evidence;
    writeFileSync(values.out, JSON.stringify({ plan: result.plan, verdict: result.verdict, restarts: result.restarts, reconcile: result.reconcile, evidence: { ...evidence, final: { ...evidence.final, reconciled: [...evidence.final.reconciled] } } }, null, 1));
    process.stderr.write(`evidence written to ${values.out}\n`);
  }
  return result.verdict.ok ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`chaos run failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(2);
  },
);
