/**
 * The all-in-one serving a revision that lists `replicas` through those replicas, as the split
 * topology does: two engine-sim processes (real HTTP, started and stopped by pid) behind one
 * `simulated` revision, the platform started in-process on its own PGlite. Proves that both
 * replicas serve requests (their own token counters), that prompt tokens are counted by the
 * replicas' tokenizer (`/tokenize`), that a killed replica is ejected at once (the relay could
 * not reach it) while the survivor keeps serving — the request that found it dead retried there
 * before its first token — (`weir_replica_up` says so), and that it
 * comes back in rotation when its `/healthz` answers again.
 */
import { countInputWith, utf8TokenUpperBound } from '@weir/engines';
import { freePort, type ManagedProcess, type OutputLog, spawnApp, waitReady } from '@weir/launcher';
import type { Platform } from './platform';
import { startTestPlatform, type TestPlatform } from './test-platform';

jest.setTimeout(300_000);

const REVISION = 'sim@1';
const ALIAS = 'sim';
const DEMO_KEY = 'wk_replica1_' + 'R'.repeat(43);
const SLOTS = 2;
const REVISION_KV_TOKENS = 8192;
const REPLICA1_KV_TOKENS = 6000;

interface Replica {
  id: string;
  port: number;
  url: string;
  process: ManagedProcess;
}

const log: OutputLog = { lines: [], echo: false };
const started: ManagedProcess[] = [];

/** Starts engine-sim replica `i` on `port` (fast profile) and waits until it is ready. */
async function startReplica(i: number, port: number): Promise<Replica> {
  const id = `${REVISION}/${i}`;
  const proc = spawnApp(`engine-sim:${i}`, 'engine-sim', {
    PORT: String(port),
    HOST: '127.0.0.1',
    WEIR_MODEL_NAME: REVISION,
    WEIR_REPLICA_ID: id,
    WEIR_REVISION_ID: REVISION,
    SIM_PREFILL_TPS: '1000000',
    SIM_DECODE_MS: '1:5,4:8',
    SIM_KV_TOKENS: '65536',
    SIM_MAX_SEQUENCES: String(SLOTS),
    LOG_LEVEL: 'warn',
  }, log);
  started.push(proc);
  const url = `http://127.0.0.1:${port}`;
  await waitReady(proc, `${url}/readyz`, 120_000, log);
  return { id, port, url, process: proc };
}

function configYaml(replicas: Replica[]): string {
  return `revisions:
  - id: ${REVISION}
    model: sim
    engine:
      kind: simulated
      prefill_tokens_per_second: 1000000
      decode_step_ms: [[1, 5], [4, 8]]
      kv_tokens: 65536
      max_sequences: ${SLOTS}
    context_window: 4096
    max_output_tokens: 256
    default_output_tokens: 16
    pricing: { input_per_mtok: 0.5, output_per_mtok: 1.5 }
    kv_tokens: ${REVISION_KV_TOKENS}
    replicas:
      - { id: ${replicas[0].id}, base_url: ${replicas[0].url}/v1, slots: ${SLOTS} }
      - { id: ${replicas[1].id}, base_url: ${replicas[1].url}/v1, slots: ${SLOTS}, kv_tokens: ${REPLICA1_KV_TOKENS} }
aliases:
  - name: ${ALIAS}
    revision: ${REVISION}
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
    limits: { max_concurrent: 64 }
`;
}

/** `name{labels} value` samples of a Prometheus text whose name is `metric`. */
function samples(text: string, metric: string): Array<{ labels: Record<string, string>; value: number }> {
  const out: Array<{ labels: Record<string, string>; value: number }> = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${metric}{`) && !line.startsWith(`${metric} `)) continue;
    const labels: Record<string, string> = {};
    const m = /\{(.*)\}/.exec(line);
    if (m) for (const kv of m[1].matchAll(/(\w+)="([^"]*)"/g)) labels[kv[1]] = kv[2];
    out.push({ labels, value: Number(line.split(' ').at(-1)) });
  }
  return out;
}

async function metric(url: string, name: string, replica: string): Promise<number | undefined> {
  const text = await (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
  return samples(text, name).find((s) => s.labels.replica === replica)?.value;
}

/** Output tokens a replica generated so far (its own `weir_engine_output_tokens_total`). */
const replicaOutputTokens = (r: Replica) => metric(r.url, 'weir_engine_output_tokens_total', r.id).then((v) => v ?? 0);

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > end) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

interface Completion {
  status: number;
  completionTokens: number;
  errorCode?: string;
  errorMessage?: string;
  /** `x-weir-fallback-reason`: set when the first choice failed before the first token and another attempt answered. */
  fallbackReason?: string;
}

async function complete(platform: Platform, content: string, maxTokens = 20): Promise<Completion> {
  const res = await fetch(`${platform.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: ALIAS, messages: [{ role: 'user', content }], max_tokens: maxTokens }),
    signal: AbortSignal.timeout(60_000),
  });
  const body = (await res.json()) as { usage?: { completion_tokens: number }; error?: { code: string; message: string } };
  return {
    status: res.status,
    completionTokens: body.usage?.completion_tokens ?? 0,
    errorCode: body.error?.code,
    errorMessage: body.error?.message,
    fallbackReason: res.headers.get('x-weir-fallback-reason') ?? undefined,
  };
}

describe('all-in-one with a revision served by remote engine-sim replicas', () => {
  let running: TestPlatform | undefined;
  let replicas: Replica[] = [];
  let platform: Platform | undefined;

  beforeAll(async () => {
    const ports = [await freePort(), await freePort()];
    replicas = await Promise.all(ports.map((port, i) => startReplica(i, port)));
    running = await startTestPlatform('replicas', configYaml(replicas), DEMO_KEY);
    platform = running.platform;
  });

  afterAll(async () => {
    await running?.stop();
    // Every replica process this suite started, by pid (SIGTERM, SIGKILL after 10 s).
    await Promise.all(started.map((p) => p.stop(10_000)));
  });

  it("gives the scheduler each replica with its slots, pool and KV tokens, up once its /healthz answers", async () => {
    const weir = platform as Platform;
    expect(weir.warnings).toEqual([]);
    expect(weir.aliases).toEqual([ALIAS]);
    // The prober's first round runs a second after the start.
    await until('both replicas are up', async () => (await metric(weir.opsUrl as string, 'weir_replica_up', replicas[0].id)) === 1 && (await metric(weir.opsUrl as string, 'weir_replica_up', replicas[1].id)) === 1);
    const text = await (await fetch(`${weir.opsUrl}/metrics`)).text();
    const byReplica = (name: string) => Object.fromEntries(samples(text, name).map((s) => [s.labels.replica, s.value]));
    expect(byReplica('weir_replica_slots')).toEqual({ [replicas[0].id]: SLOTS, [replicas[1].id]: SLOTS });
    expect(byReplica('weir_replica_kv_tokens')).toEqual({ [replicas[0].id]: REVISION_KV_TOKENS, [replicas[1].id]: REPLICA1_KV_TOKENS });
    expect(samples(text, 'weir_replica_up').map((s) => [s.labels.replica, s.labels.pool])).toEqual(
      expect.arrayContaining([[replicas[0].id, 'interactive'], [replicas[1].id, 'interactive']]),
    );
    // No in-process engine replica: only the configured ones.
    expect(Object.keys(byReplica('weir_replica_up')).sort()).toEqual([replicas[0].id, replicas[1].id]);
  });

  it('serves concurrent requests from both replicas, and every output token came from them', async () => {
    const weir = platform as Platform;
    const before = await Promise.all(replicas.map(replicaOutputTokens));
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => complete(weir, `tell me a story number ${i}`, 30)));
    expect(results.map((r) => [r.status, r.errorCode])).toEqual(results.map(() => [200, undefined]));
    const served = (await Promise.all(replicas.map(replicaOutputTokens))).map((n, i) => n - before[i]);
    expect(served[0]).toBeGreaterThan(0);
    expect(served[1]).toBeGreaterThan(0);
    expect(served[0] + served[1]).toBe(results.reduce((n, r) => n + r.completionTokens, 0));
  });

  it("counts prompt tokens with the replicas' tokenizer (/tokenize)", async () => {
    const weir = platform as Platform;
    // 5,000 words: the replicas' tokenizer counts about 5,000 tokens, the UTF-8 upper bound
    // about 10,000; both over the 4,096-token window, so the gateway says what it counted.
    const long = Array.from({ length: 5_000 }, () => 'w').join(' ');
    const res = await fetch(`${replicas[1].url}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ input: [{ role: 'user', content: long }] }) });
    const replicaCount = ((await res.json()) as { input_tokens: number }).input_tokens;
    const upperBound = await countInputWith({ kind: 'chat', messages: [{ role: 'user', content: long }] }, utf8TokenUpperBound);
    expect(replicaCount).toBeLessThan(upperBound);
    const refused = await complete(weir, long);
    expect(refused.status).toBe(400);
    expect(refused.errorCode).toBe('context_length_exceeded');
    expect(refused.errorMessage).toContain(`The input is ${replicaCount} tokens`);
  });

  it('retries on the survivor the request that found a killed replica dead (before its first token), ejects the dead one at once, and keeps serving', async () => {
    const weir = platform as Platform;
    const [victim, survivor] = replicas;
    victim.process.signal('SIGKILL');
    await victim.process.exited;
    const before = await replicaOutputTokens(survivor);
    // One request at a time, each on its prompt's affinity replica while both look idle: the
    // first that lands on the dead one is retried on the survivor before any token reached the
    // client, and says so; the dead one is out of rotation from then on.
    const results: Completion[] = [];
    for (let i = 0; i < 6; i++) results.push(await complete(weir, `after the kill ${i}`));
    expect(results.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200]);
    expect(results.filter((r) => r.fallbackReason !== undefined).map((r) => r.fallbackReason)).toEqual(['upstream_unavailable']);
    expect(await metric(weir.opsUrl as string, 'weir_replica_up', victim.id)).toBe(0);
    expect(await metric(weir.opsUrl as string, 'weir_replica_up', survivor.id)).toBe(1);
    expect((await replicaOutputTokens(survivor)) - before).toBe(results.reduce((n, r) => n + r.completionTokens, 0));
  });

  it('puts the replica back in rotation when its /healthz answers again', async () => {
    const weir = platform as Platform;
    replicas[0] = await startReplica(0, replicas[0].port);
    await until('the restarted replica is back in rotation', async () => (await metric(weir.opsUrl as string, 'weir_replica_up', replicas[0].id)) === 1);
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => complete(weir, `back again ${i}`, 30)));
    expect(results.map((r) => r.status)).toEqual(results.map(() => 200));
    expect(await replicaOutputTokens(replicas[0])).toBeGreaterThan(0);
  });

  it('falls back to the documented upper bound when no replica answers /tokenize', async () => {
    const weir = platform as Platform;
    await Promise.all(replicas.map((r) => r.process.stop(10_000)));
    const long = Array.from({ length: 5_000 }, () => 'w').join(' ');
    const upperBound = await countInputWith({ kind: 'chat', messages: [{ role: 'user', content: long }] }, utf8TokenUpperBound);
    const refused = await complete(weir, long);
    expect(refused.errorCode).toBe('context_length_exceeded');
    expect(refused.errorMessage).toContain(`The input is ${upperBound} tokens`);
  });
});
