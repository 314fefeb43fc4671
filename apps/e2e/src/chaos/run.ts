/**
 * One chaos run (issue 13, item 8): the chaos upstream, a topology on the plan's configuration,
 * the planned clients and faults at once, budget samples throughout, then a settle period,
 * `npm run reconcile -- --fix`, the database read, and the invariants checked.
 */
import { CHAT_MESSAGE_OVERHEAD_TOKENS, CHAT_REPLY_PRIMING_TOKENS, tiktokenTokenizer } from '@weir/engines';
import { type ChaosSchedule, type ChaosUpstream, chaosPromptTokens, createChaosRecorder, startChaosUpstream } from '@weir/testing';
import { checkChaos, type ChaosEvidence, type ChaosVerdict, type KillEvent } from './checks';
import { runRequest, type RequestRecord } from './client';
import { CHAOS_TENANT, type ChaosPlan, chaosConfigYaml, type ChaosRunOptions, COUNTED_ALIAS, COUNTED_REVISION, planChaos, REPORTED_ALIAS, REPORTED_REVISION } from './plan';
import { type BudgetSample, readFinalState, sampleBudget } from './state';
import { CHAOS_ADMIN_TOKEN, CHAOS_API_KEY, type ChaosTopology, type ReconcileResult, startChaosTopology } from './topology';

/** What a run returns. */
export interface ChaosRunResult {
  plan: ChaosPlan;
  verdict: ChaosVerdict;
  evidence: ChaosEvidence;
  reconcile: ReconcileResult;
  /** Restart durations of the killed processes (ms). */
  restarts: { target: string; atMs: number; downMs: number }[];
  /** Wall time of the whole run (ms). */
  wallMs: number;
  /** The human-readable report. */
  report: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

/** Runs the chaos proof once. Throws only when the harness itself cannot proceed (a topology that never starts). */
export async function runChaos(options: ChaosRunOptions): Promise<ChaosRunResult> {
  const wallStart = Date.now();
  const log = options.log ?? (() => undefined);
  const plan = planChaos(options);
  const schedules = new Map<string, ChaosSchedule>(plan.requests.map((r) => [r.planId, r.schedule]));
  const recorder = createChaosRecorder();
  const servers: ChaosUpstream[] = [];
  let topology: ChaosTopology | undefined;
  try {
    for (let i = 0; i < 2; i++) servers.push(await startChaosUpstream({ flavour: 'weir-engine', replicaId: `${REPORTED_REVISION}/${i}`, recorder, plan: (id) => schedules.get(id), modelName: REPORTED_REVISION }));
    servers.push(await startChaosUpstream({ flavour: 'no-usage', replicaId: `${COUNTED_REVISION}/0`, recorder, plan: (id) => schedules.get(id) }));
    const configYaml = chaosConfigYaml(plan, { engineReplicas: servers.slice(0, 2).map((s) => ({ id: s.replicaId, url: s.url })), plainUrl: servers[2].url });
    log(`chaos: seed ${plan.seed}, ${plan.topology}${plan.topology === 'all-in-one' ? ` (${options.database ?? 'pglite'})` : ''}, ${plan.requests.length} requests over ${plan.durationMs / 1000} s, budget $${(plan.budgetNano / 1e9).toFixed(6)}, ${plan.tokensPerMinute} tokens/min`);
    topology = await startChaosTopology({ kind: plan.topology, configYaml, database: options.database, log });
    const t = topology;
    log(`chaos: topology ready after ${Math.round((Date.now() - wallStart) / 1000)} s`);
    await probe(t);

    const cl100k = tiktokenTokenizer('cl100k_base');
    await cl100k.load();
    const reservedInput = (planId: string, revisionId: string): number | undefined => {
      const p = plan.requests.find((r) => r.planId === planId);
      if (!p) return undefined;
      if (revisionId === REPORTED_REVISION) return chaosPromptTokens([{ role: 'user', content: p.prompt }]);
      if (revisionId === COUNTED_REVISION) return (cl100k.count(p.prompt) as number) + CHAT_MESSAGE_OVERHEAD_TOKENS + CHAT_REPLY_PRIMING_TOKENS;
      return undefined;
    };

    const t0 = Date.now();
    const kills: KillEvent[] = [];
    const restarts: ChaosRunResult['restarts'] = [];
    const samples: BudgetSample[] = [];
    let running = true;

    const sampler = (async () => {
      while (running) {
        const db = t.liveDatabase();
        if (db) {
          const s = await sampleBudget(db, CHAOS_TENANT).catch(() => undefined);
          if (s) samples.push(s);
        }
        const u = await usageApiSample(t.gateways()[0]).catch(() => undefined);
        if (u) samples.push(u);
        await sleep(500);
      }
    })();

    const killLoop = (async () => {
      for (const f of plan.faults) {
        if (f.kind !== 'kill') continue;
        await sleep(t0 + f.atMs - Date.now());
        const atMs = Date.now();
        t.kill(f.target);
        kills.push({ target: f.target, atMs });
        log(`chaos: +${((atMs - t0) / 1000).toFixed(1)} s kill -9 ${f.target}`);
        // The embedded database can be read only while its process is down.
        const db = await t.openWhileDown().catch((err: unknown) => (log(`chaos: cannot read the database while ${f.target} is down: ${String(err)}`), undefined));
        if (db) {
          try {
            const s = await sampleBudget(db, CHAOS_TENANT);
            if (s) samples.push(s);
          } finally {
            await db.close();
          }
        }
        await sleep(atMs + f.downMs - Date.now());
        await restartWithRetry(t, f.target, log);
        restarts.push({ target: f.target, atMs, downMs: Date.now() - atMs });
        log(`chaos: ${f.target} back after ${((Date.now() - atMs) / 1000).toFixed(1)} s`);
      }
    })();

    const killSwitchLoop = (async () => {
      for (const f of plan.faults) {
        if (f.kind !== 'kill-switch') continue;
        await sleep(t0 + f.atMs - Date.now());
        log(`chaos: +${((Date.now() - t0) / 1000).toFixed(1)} s kill switch on for ${f.onMs} ms`);
        await killSwitch(t, true, 10_000);
        await sleep(f.onMs);
        await killSwitch(t, false, 60_000);
      }
    })();

    const records: RequestRecord[] = [];
    let inFlight = 0;
    const waiters: Array<() => void> = [];
    const clients = plan.requests.map(async (r) => {
      await sleep(t0 + r.atMs - Date.now());
      while (inFlight >= plan.concurrency) await new Promise<void>((resolve) => waiters.push(resolve));
      inFlight += 1;
      try {
        records.push(await runRequest(r, { gateways: () => t.gateways(), apiKey: CHAOS_API_KEY }, plan.seed));
      } finally {
        inFlight -= 1;
        waiters.shift()?.();
      }
    });
    await Promise.all(clients);
    log(`chaos: clients done at +${((Date.now() - t0) / 1000).toFixed(1)} s`);
    await killLoop;
    await killSwitchLoop;
    await killSwitch(t, false, 60_000);

    // Settle: the upstream idle, then time for journals, appliers and reservations to land.
    if (!(await recorder.idle(60_000))) log('chaos: the upstream still had running generations after 60 s');
    await sleep(options.settleMs ?? 5_000);
    running = false;
    await sampler;

    await t.stop();
    const reconcile = await t.reconcile();
    log(`chaos: reconcile exited ${reconcile.exitCode}`);
    const db = await t.openStopped();
    let final;
    try {
      final = await readFinalState(db, CHAOS_TENANT);
    } finally {
      await db.close();
    }
    const evidence: ChaosEvidence = {
      budgetNano: plan.budgetNano,
      requests: records.sort((a, b) => a.plan.index - b.plan.index),
      generations: [...recorder.generations.values()],
      kills,
      countingProcesses: t.countingProcesses,
      budgetSamples: samples,
      final,
      reconcile: { exitCode: reconcile.exitCode, ...(reconcile.report?.differences ? { differences: reconcile.report.differences } : {}), stderr: reconcile.stderr },
      holdGraceMs: options.holdGraceMs ?? 15_000,
      reservedInput,
    };
    const verdict = checkChaos(evidence);
    const result = { plan, verdict, evidence, reconcile, restarts, wallMs: Date.now() - wallStart };
    return { ...result, report: formatChaosReport(result, options) };
  } finally {
    await topology?.dispose().catch(() => undefined);
    for (const s of servers) await s.close();
  }
}

/** Sends one small request per alias until both answer (replicas up, tokenizer loaded). */
async function probe(t: ChaosTopology): Promise<void> {
  const until = Date.now() + 90_000;
  for (const alias of [REPORTED_ALIAS, COUNTED_ALIAS]) {
    for (;;) {
      const res = await fetch(`${t.gateways()[0]}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${CHAOS_API_KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: alias, messages: [{ role: 'user', content: 'probe' }], max_tokens: 3 }),
      }).catch(() => undefined);
      const ok = res?.status === 200;
      await res?.text().catch(() => undefined);
      if (ok) break;
      if (Date.now() > until) throw new Error(`the ${alias} revision never answered a probe (last status ${res?.status ?? 'no answer'})`);
      await sleep(500);
    }
  }
}

async function usageApiSample(gateway: string): Promise<BudgetSample | undefined> {
  const res = await fetch(`${gateway}/v1/usage?window=month`, { headers: { authorization: `Bearer ${CHAOS_API_KEY}` }, signal: AbortSignal.timeout(2_000) });
  if (res.status !== 200) return undefined;
  const body = (await res.json()) as { cost_nano_usd?: string };
  if (body.cost_nano_usd === undefined) return undefined;
  return { atMs: Date.now(), source: 'usage-api', settledNano: Number(body.cost_nano_usd), reservedNano: 0, leasedNano: 0 };
}

/** Flips the tenant's kill switch through the admin API, retrying while the API is down (a process killed). */
async function killSwitch(t: ChaosTopology, enabled: boolean, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const res = await fetch(`${t.adminUrl()}/tenants/${CHAOS_TENANT}/kill-switch`, {
      method: 'POST',
      headers: { authorization: `Bearer ${CHAOS_ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ enabled }),
      signal: AbortSignal.timeout(5_000),
    }).catch(() => undefined);
    await res?.text().catch(() => undefined);
    if (res?.ok) return;
    if (Date.now() > until) throw new Error(`the kill switch could not be turned ${enabled ? 'on' : 'off'} (last status ${res?.status ?? 'no answer'})`);
    await sleep(300);
  }
}

async function restartWithRetry(t: ChaosTopology, name: string, log: (line: string) => void): Promise<void> {
  try {
    await t.restart(name);
  } catch (err) {
    log(`chaos: restarting ${name} failed once (${String(err).split('\n')[0]}); trying again`);
    await sleep(1_000);
    await t.restart(name);
  }
}

/** Renders a run's verdict: the plan, the faults, the stats, and each invariant with its first violations. */
export function formatChaosReport(r: Omit<ChaosRunResult, 'report'>, options: Pick<ChaosRunOptions, 'database'> = {}, examplesPerKind = 3): string {
  const { plan, verdict } = r;
  const lines: string[] = [];
  const db = plan.topology === 'all-in-one' ? ` (${options.database ?? 'pglite'})` : '';
  lines.push(`Chaos proof: seed ${plan.seed}, ${plan.topology}${db}, ${plan.requests.length} requests over ${plan.durationMs / 1000} s at concurrency ${plan.concurrency}, wall ${Math.round(r.wallMs / 1000)} s`);
  lines.push(`Budget $${(plan.budgetNano / 1e9).toFixed(6)} a month, ${plan.tokensPerMinute} tokens/min`);
  const faults = plan.faults.map((f) => (f.kind === 'kill' ? `kill -9 ${f.target} at +${(f.atMs / 1000).toFixed(1)} s` : `kill switch at +${(f.atMs / 1000).toFixed(1)} s for ${f.onMs} ms`));
  lines.push(`Faults: ${faults.join('; ')}`);
  if (r.restarts.length > 0) lines.push(`Restarts: ${r.restarts.map((x) => `${x.target} ${(x.downMs / 1000).toFixed(1)} s`).join(', ')}`);
  lines.push(`Stats: ${Object.entries(verdict.stats).map(([k, v]) => `${k} ${v}`).join(', ')}`);
  lines.push('Invariants:');
  for (const inv of verdict.invariants) {
    lines.push(`  ${inv.ok ? 'PASS' : 'FAIL'} ${inv.name} (${inv.checked} checked${inv.ok ? '' : `, ${inv.violations.length} violations`}): ${inv.description}`);
    // Grouped by kind, most frequent first, a few examples each.
    const kinds = new Map<string, typeof inv.violations>();
    for (const v of inv.violations) kinds.set(v.kind, [...(kinds.get(v.kind) ?? []), v]);
    for (const [kind, vs] of [...kinds].sort((a, b) => b[1].length - a[1].length)) {
      lines.push(`    ${kind} × ${vs.length}`);
      for (const v of vs.slice(0, examplesPerKind)) {
        lines.push(`      - ${v.subject}: ${v.message}`);
        if (v.context) lines.push(`        ${v.context}`);
      }
    }
  }
  const broken = verdict.invariants.filter((i) => !i.ok).length;
  lines.push(verdict.ok ? 'Result: PASS (every invariant holds)' : `Result: FAIL (${broken} of ${verdict.invariants.length} invariants broken)`);
  return lines.join('\n');
}
