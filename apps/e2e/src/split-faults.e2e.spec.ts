/**
 * Faults on the split topology (issue 3, on ADR 0002's money path): a relay killed mid-stream,
 * a ledger restarted while traffic flows, NATS away for a few seconds (answers wait for their
 * settlement to be journaled), and an engine replica that stops answering
 * (killed, and hung with SIGSTOP). The topology runs on a private nats-server started on a
 * free port for this suite (so stopping it never touches the machine's shared NATS) and a
 * private Postgres database; every process is stopped by pid.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type SplitTopology, startSplitTopology } from '@weir/launcher';
import { createTemporaryPostgresDatabase, openDatabase, type TemporaryPostgresDatabase, type WeirDatabase } from '@weir/store-pg';
import { type PrivateNats, startPrivateNats, tinyModelPath } from '@weir/testing';
import { DEMO_KEY, E2E_CONFIG } from './support/fixtures';
import { readSse } from './support/sse';
import { sumEngineOutputTokens } from './support/e2e-suite';

jest.setTimeout(180_000);

let nats: PrivateNats;
let pg: TemporaryPostgresDatabase;
let ledger: WeirDatabase;
let topology: SplitTopology;
let workDir: string;

beforeAll(async () => {
  nats = await startPrivateNats();
  pg = await createTemporaryPostgresDatabase();
  workDir = mkdtempSync(path.join(os.tmpdir(), 'weir-split-faults-'));
  topology = await startSplitTopology({
    configText: E2E_CONFIG,
    workDir,
    modelPath: tinyModelPath(),
    databaseUrl: pg.url,
    natsUrl: nats.url,
    env: { WEIR_DEMO_API_KEY: DEMO_KEY },
  });
  ledger = await openDatabase({ databaseUrl: pg.url, migrate: false, maxConnections: 2 });
});

afterAll(async () => {
  try {
    await topology?.stop();
  } finally {
    await ledger?.close();
    await pg?.drop();
    await nats?.dispose();
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  }
});

const headers = { Authorization: `Bearer ${DEMO_KEY}`, 'Content-Type': 'application/json' };
const gateway = () => topology.gateways[0].url;

async function generate(alias = 'tiny-stories', maxOutputTokens = 12): Promise<{ status: number; body: { generation_id?: string; finish_reason?: string; usage?: { output_tokens: number } } }> {
  const res = await fetch(`${gateway()}/v1/generations`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ model_alias: alias, input: 'Once upon a time', max_output_tokens: maxOutputTokens, temperature: 0 }),
  });
  return { status: res.status, body: (await res.json()) as never };
}

async function ledgerRows(ids: readonly string[], timeoutMs = 20_000) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const rows = await ledger.db.selectFrom('usage_ledger').selectAll().where('generation_id', 'in', ids).execute();
    if (rows.length >= ids.length || Date.now() > until) return rows;
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function replicaTokens(replicaId: string): Promise<number> {
  const engine = topology.engines.find((e) => e.replicaId === replicaId);
  if (!engine) throw new Error(`no engine ${replicaId}`);
  return sumEngineOutputTokens(await (await topology.serviceFetch(`${engine.url}/metrics`)).text(), engine.revisionId);
}

/** Waits until the scheduler reports each replica up (`weir_replica_up` = 1): it has answered probes. */
async function waitForReplicasUp(replicaIds: readonly string[], timeoutMs = 60_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const text = await (await fetch(`${topology.opsUrls.get('scheduler')}/metrics`)).text();
    const up = (id: string) => text.split('\n').some((l) => l.startsWith('weir_replica_up{') && l.includes(`replica="${id}"`) && l.endsWith(' 1'));
    if (replicaIds.every(up)) return;
    if (Date.now() > until) throw new Error(`replicas ${replicaIds.join(', ')} never all reported up by the scheduler`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Waits for a log line matching `pattern` among the lines printed after line `since`. */
async function waitForLog(pattern: RegExp, since: number, timeoutMs = 20_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!pattern.test(topology.output().split('\n').slice(since).join('\n'))) {
    if (Date.now() > until) {
      const recent = topology
        .output()
        .split('\n')
        .filter((l) => l.startsWith('[scheduler]') || l.startsWith('[relay]'))
        .slice(-20);
      throw new Error(`no log line matching ${pattern}; recent scheduler and relay lines:\n${recent.join('\n')}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('an engine replica that stops answering', () => {
  it.each([
    ['killed (SIGKILL)', 'SIGKILL' as const],
    ['hung (SIGSTOP)', 'SIGSTOP' as const],
  ])('is taken out of rotation when %s, and requests go to the other', async (_name, signal) => {
    const victim = 'stories260k@1/0';
    const survivor = 'stories260k@1/1';
    // The scheduler must have seen both replicas answer before the fault is injected.
    await waitForReplicasUp([victim, survivor]);
    const outLines = topology.output().split('\n').length;
    topology.processes.get(`engine:${victim}`)?.signal(signal);
    await waitForLog(new RegExp(`"replica":"${victim.replace('/', '\\/')}"[^\\n]*out of rotation`), outLines);
    const before = await replicaTokens(survivor);
    const results = await Promise.all(Array.from({ length: 8 }, () => generate('tiny-stories', 10)));
    expect(results.map((r) => [r.status, r.status === 200 ? "" : JSON.stringify(r.body)])).toEqual(Array(8).fill([200, ""]));
    expect(results.every((r) => r.body.finish_reason === 'length')).toBe(true);
    expect((await replicaTokens(survivor)) - before).toBe(80);

    // Bring it back: it rejoins the rotation.
    if (signal === 'SIGSTOP') topology.processes.get(`engine:${victim}`)?.signal('SIGCONT');
    else await topology.restart(`engine:${victim}`);
    await waitForLog(new RegExp(`"replica":"${victim.replace('/', '\\/')}"[^\\n]*back in rotation`), outLines);
  });
});

describe('NATS unavailable for a few seconds', () => {
  it('holds each answer until its settlement is journaled, and records each exactly once after reconnect', async () => {
    // ADR 0002 §2: the relay's append resolves on the JetStream PubAck (retried for up to 10 s)
    // before the terminal event, so answers made during a short outage wait for NATS rather
    // than go out unrecorded.
    await nats.stop();
    const pending = Promise.all(Array.from({ length: 6 }, () => generate()));
    await new Promise((r) => setTimeout(r, 2_000));
    await nats.restart();
    const results = await pending;
    expect(results.map((r) => [r.status, r.body.finish_reason])).toEqual(Array(6).fill([200, 'length']));
    const ids = results.map((r) => r.body.generation_id as string);
    const rows = await ledgerRows(ids);
    expect(rows.map((r) => r.generation_id).sort()).toEqual([...ids].sort());
    expect(rows.every((r) => r.output_tokens === 12 && r.status === 'completed')).toBe(true);
    for (const [name, p] of topology.processes) expect([name, p.alive()]).toEqual([name, true]);
  });
});

describe('the ledger restarted while traffic flows', () => {
  it('loses and duplicates no usage record', async () => {
    const { count: before } = await ledger.db.selectFrom('usage_ledger').select((eb) => eb.fn.countAll<string>().as('count')).executeTakeFirstOrThrow();
    const ids: string[] = [];
    const traffic = (async () => {
      for (let i = 0; i < 24; i++) {
        const batch = await Promise.all([generate(), generate()]);
        for (const r of batch) {
          expect(r.status).toBe(200);
          ids.push(r.body.generation_id as string);
        }
      }
    })();
    await new Promise((r) => setTimeout(r, 400));
    topology.processes.get('ledger')?.signal('SIGKILL'); // harsher than a restart: nothing is acked on the way out
    await new Promise((r) => setTimeout(r, 300));
    await topology.restart('ledger');
    await traffic;
    const rows = await ledgerRows(ids);
    expect(rows).toHaveLength(48);
    expect(new Set(rows.map((r) => r.generation_id)).size).toBe(48);
    const { count: after } = await ledger.db.selectFrom('usage_ledger').select((eb) => eb.fn.countAll<string>().as('count')).executeTakeFirstOrThrow();
    expect(Number(after) - Number(before)).toBe(48);
  });
});

describe('the streaming relay killed mid-stream', () => {
  it('ends the client’s stream promptly with an explicit error, and bills the tokens relayed exactly once (marked uncertain)', async () => {
    const abort = new AbortController();
    const res = await fetch(`${gateway()}/v1/generations`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ model_alias: 'tiny-stories-slow', input: 'Once upon a time', max_output_tokens: 200, stream: true }),
      signal: abort.signal,
    });
    let killedAt = 0;
    const { events } = await readSse(res, {
      stopAfter: (_e, all) => {
        if (!killedAt && all.filter((x) => x.event === 'delta').length === 4) {
          killedAt = performance.now();
          topology.processes.get('relay')?.signal('SIGKILL');
        }
        return false;
      },
    });
    const end = events.at(-1);
    expect(end?.event).toBe('end');
    expect(events.filter((e) => e.event === 'end')).toHaveLength(1);
    expect((end?.at ?? Infinity) - killedAt).toBeLessThan(3_000);
    const data = JSON.parse(end?.data as string) as { finish_reason: string; usage: { output_tokens: number }; error?: { code: string } };
    expect(data.finish_reason).toBe('error');
    expect(data.error?.code).toBe('upstream_error');
    const relayed = events.filter((e) => e.event === 'delta').length;
    expect(data.usage.output_tokens).toBeGreaterThanOrEqual(relayed);
    const generationId = (JSON.parse(events[0].data) as { generation_id: string }).generation_id;
    const rows = await ledgerRows([generationId]);
    expect(rows).toHaveLength(1);
    // Recorded by the gateway (ADR 0002 §3): estimated, with the reservation it settles.
    expect(rows[0]).toMatchObject({ status: 'failed', uncertain: true, usage_source: 'estimated', output_tokens: data.usage.output_tokens, reservation_id: expect.stringMatching(/^rsv_/) });

    // A new relay takes over; traffic flows again through the same gateways.
    await topology.restart('relay');
    // Gateways reconnect on their own; until they have, requests get a retryable 503.
    let after = await generate();
    for (let i = 0; i < 10 && after.status === 503; i++) {
      await new Promise((r) => setTimeout(r, 300));
      after = await generate();
    }
    expect(after.status).toBe(200);
    await new Promise((r) => setTimeout(r, 500));
    expect(await ledgerRows([generationId])).toHaveLength(1); // still exactly once
  });
});
