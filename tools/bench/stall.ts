/**
 * The event-loop stall benchmark (issue 14 parts 1 and 2): the worst time the gateway's event
 * loop is held (`perf_hooks.monitorEventLoopDelay`, 1 ms resolution) while tenants send the
 * most expensive requests they can, and the slowest `/healthz` answer meanwhile (polled every
 * 10 ms). The gateway is the real one (edge, pipeline, router, slot scheduler, relay, in-memory
 * admission, the schema worker, js-tiktoken) in this process, over two revisions: `echo@1`, an
 * engine that answers with a chosen adversarial JSON document, and `tik@1`, a hosted
 * OpenAI-compatible revision counted with js-tiktoken (`cl100k_base`) whose upstream is never
 * reached (the inputs sent are longer than its window).
 *
 * Scenarios: a baseline; outputs checked against patterns that backtrack exponentially
 * (`^(a+)+$` on 16 KiB) and against a ~600-instruction RE2 program that defeats RE2's DFA on
 * 16 KiB × 40 strings (runs into the check's time limit); 20 distinct 60 KiB schemas of
 * patterned properties (each ≈ 0.6 s of ajv compilation); 1 MiB prompts (one word, prose,
 * random 40-letter words); a tenant over its requests-per-minute limit sending 512 KiB bodies
 * with a schema the compiler would refuse.
 *
 * The gateway runs in a child process that measures its own event loop (the requests are built
 * and serialised by the parent before each window, so the client's work is not counted).
 *
 * `node --import tsx tools/bench/stall.ts [--out tools/bench/results/<date>-stall.md]`
 */
import { fork } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { createInMemoryAdmission } from '@weir/admission';
import { DEFAULT_ADMISSION, type EngineAdapter, type EngineEvent, hashApiKey, type PlatformConfig, type RevisionSpec, type SettlementJournal } from '@weir/core';
import { createOpenAICompatibleEngine, tiktokenTokenizer } from '@weir/engines';
import { createGatewayApp, createGenerationPipeline, createLiveConfig } from '@weir/gateway';
import { createStaticRouter } from '@weir/routing';
import { createSlotScheduler } from '@weir/scheduling';
import { createRelay } from '@weir/streaming';

/** A pseudo-random string of `a` and `b`. */
function randomAb(length: number, seed = 1): string {
  let out = '';
  for (let i = 0; i < length; i++) {
    seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
    out += seed % 1_024 < 512 ? 'a' : 'b';
  }
  return out;
}

/** What the echo engine answers, by the last message's text. */
const OUTPUTS: Record<string, string> = {
  'evil-value': JSON.stringify({ s: 'a'.repeat(16_384) + '!' }),
  'ab-array': JSON.stringify(Array.from({ length: 40 }, (_, i) => randomAb(16_384, i + 1))),
};

function echoEngine(): EngineAdapter {
  return {
    kind: 'echo',
    capacity: { slots: 16, contextTokens: 8_192 },
    async countInputTokens() {
      return 3;
    },
    async *generate(request): AsyncIterable<EngineEvent> {
      const last = request.input.kind === 'text' ? request.input.text : request.input.kind === 'chat' ? (request.input.messages.at(-1)?.content ?? '') : '';
      yield { type: 'delta', text: OUTPUTS[last] ?? '{"ok":true}', tokens: 1 };
      yield { type: 'end', reason: 'stop', usage: { inputTokens: 3, outputTokens: 1 }, usageSource: 'reported' };
    },
    async close() {},
  };
}

const tikSpec = { kind: 'openai-compatible' as const, baseUrl: 'http://127.0.0.1:1/v1', upstreamModel: 'x', api: 'chat' as const, firstTokenTimeoutMs: 1_000, idleTimeoutMs: 1_000, maxConcurrency: 4, tokenizer: 'cl100k_base' as const };
const revision = (id: string, engine: RevisionSpec['engine']): RevisionSpec => ({
  id,
  model: id.split('@')[0],
  engine,
  contextWindow: 8_192,
  maxOutputTokens: 1_024,
  defaultOutputTokens: 16,
  pricing: { inputPerMTok: 1, outputPerMTok: 1, cachedInputPerMTok: 1 },
  capabilities: { streaming: true, tools: false, jsonOutput: true },
});

/** The gateway's keys: tenant `attacker` (no rate limit) and `limited` (1 request per minute). */
const KEYS = { attacker: 'wk_attacker_' + 'A'.repeat(43), limited: 'wk_limited1_' + 'L'.repeat(43) };

/** The child: serves the gateway and measures its own event loop between `start` and `stop` (IPC). */
async function serve() {
  const config: PlatformConfig = {
    revisions: [revision('echo@1', tikSpec), revision('tik@1', tikSpec)],
    aliases: [
      { name: 'echo', targets: [{ revision: 'echo@1', weight: 1 }] },
      { name: 'tik', targets: [{ revision: 'tik@1', weight: 1 }] },
    ],
    tenants: [
      { id: 'attacker', name: 'A', apps: [{ id: 'a', name: 'A', limits: {} }], allowedAliases: ['*'], defaultDeadlineMs: 60_000, limits: { maxConcurrent: 64 } },
      { id: 'limited', name: 'L', apps: [{ id: 'l', name: 'L', limits: {} }], allowedAliases: ['*'], defaultDeadlineMs: 60_000, limits: { maxConcurrent: 64, requestsPerMinute: 1 } },
    ],
    defaults: { cancelGraceMs: 20, maxBodyBytes: 2 * 1024 * 1024, sseHeartbeatMs: 10_000, maxQueuePerReplica: 64, admission: { ...DEFAULT_ADMISSION } },
  };
  const clock = { now: () => performance.now() };
  const engines: Record<string, EngineAdapter> = { 'echo@1': echoEngine(), 'tik@1': createOpenAICompatibleEngine(tikSpec) };
  await tiktokenTokenizer('cl100k_base').load();
  // Settlements are dropped: the benchmark measures the request path, not the ledger.
  const settlements: SettlementJournal = { append: async () => undefined, claim: async () => undefined, progress: () => undefined, release: () => undefined, flush: async () => undefined, saturated: () => false };
  const live = createLiveConfig(config);
  const router = createStaticRouter(config);
  const pipeline = createGenerationPipeline({
    router,
    admission: createInMemoryAdmission({ tenants: config.tenants }),
    scheduler: createSlotScheduler({ replicas: config.revisions.map((r, i) => ({ id: `r${i}`, revisionId: r.id, slots: 16 })), maxQueuePerReplica: 64, clock }),
    relay: createRelay({ engineFor: (id) => engines[config.revisions[Number(id.slice(1))].id], settlements, clock, cancelGraceMs: 20 }),
    countInputTokens: (rev, input, limit) => engines[rev.id].countInputTokens(input, limit),
    settlements,
    tenants: live.tenants,
    revisions: live.revisions,
    clock,
  });
  const identities = new Map([
    [hashApiKey(KEYS.attacker), { keyId: 'ka', prefix: 'attacker', tenantId: 'attacker', appId: 'a' }],
    [hashApiKey(KEYS.limited), { keyId: 'kl', prefix: 'limited1', tenantId: 'limited', appId: 'l' }],
  ]);
  const gateway = createGatewayApp({
    pipeline,
    router,
    apiKeys: { findByHash: async (h) => identities.get(h) },
    defaults: config.defaults,
    clock,
    logger: { info() {}, warn() {}, error() {} },
    catalog: live,
  });
  const server = createServer(gateway.app);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  let delay = monitorEventLoopDelay({ resolution: 1 });
  process.on('message', (m: { cmd: string }) => {
    if (m.cmd === 'start') {
      delay = monitorEventLoopDelay({ resolution: 1 });
      delay.enable();
      process.send?.({ type: 'started' });
    } else if (m.cmd === 'stop') {
      delay.disable();
      process.send?.({ type: 'stall', maxMs: delay.max / 1e6, p99Ms: delay.percentile(99) / 1e6 });
    } else if (m.cmd === 'exit') process.exit(0);
  });
  process.send?.({ type: 'ready', url });
}

/** A request prepared before it is measured: its body already serialised. */
type Prepared = () => Promise<number>;

/** The parent: prepares each scenario's requests, then sends them while the child measures. */
async function drive() {
  const outFile = process.argv.includes('--out') ? process.argv[process.argv.indexOf('--out') + 1] : undefined;
  const child = fork(__filename, ['--serve'], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const next = (type: string) => new Promise<Record<string, unknown>>((resolve) => {
    const on = (m: Record<string, unknown>) => {
      if (m.type !== type) return;
      child.off('message', on);
      resolve(m);
    };
    child.on('message', on);
  });
  const { url } = (await next('ready')) as { url: string };
  const prepare = (path: string, body: unknown, key: string): Prepared => {
    const text = JSON.stringify(body);
    return () =>
      fetch(`${url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: text }).then(async (r) => {
        const answer = await r.text();
        if (process.env.STALL_DEBUG) process.stderr.write(`${r.status} ${answer.slice(0, 300)}\n`);
        return r.status;
      });
  };
  const responses = (content: string, schema: object, key = KEYS.attacker) => prepare('/v1/responses', { model: 'echo', use_case: 'bench', max_tokens: 16, output_schema: schema, messages: [{ role: 'user', content }] }, key);
  const chat = (content: string, key = KEYS.attacker, model = 'tik', extra: object = {}) => prepare('/v1/chat/completions', { model, max_tokens: 16, messages: [{ role: 'user', content }], ...extra }, key);

  const patterned = (salt: number) => ({ type: 'object', properties: Object.fromEntries(Array.from({ length: 1_100 }, (_, i) => [`p${salt}_${i}`, { type: 'string', pattern: `^[a-z]{1,${(i % 50) + 1}}$` }])) });
  const uncompilable = { type: 'object', properties: { s: { type: 'string', pattern: '^(a)\\1$' } } };
  const bigText = 'word '.repeat(100_000);
  const randomWords = (k: number) => Array.from({ length: 25_000 }, (_, i) => String.fromCharCode(...Array.from({ length: 40 }, (_, j) => 97 + ((i * 31 + j * 17 + k + ((i * j) % 7)) % 26)))).join(' ');
  const times = <T>(n: number, f: (i: number) => T) => Array.from({ length: n }, (_, i) => f(i));
  const scenarios: { name: string; before?: Prepared[]; requests: Prepared[] }[] = [
    { name: 'baseline: 20 small requests', requests: times(20, () => responses('hi', { type: 'object' })) },
    { name: 'pattern ^(a+)+$ against 16 KiB, 20 requests', requests: times(20, () => responses('evil-value', { type: 'object', properties: { s: { type: 'string', pattern: '^(a+)+$' } } })) },
    { name: 'RE2-hostile (a|b)*a(a|b){200}$ against 40 × 16 KiB, 4 requests (check time limit)', requests: times(4, () => responses('ab-array', { type: 'array', items: { type: 'string', pattern: '(a|b)*a(a|b){200}$' } })) },
    { name: '20 distinct 60 KiB schemas of patterned properties', requests: times(20, (i) => responses('hi', patterned(i))) },
    { name: '1 MiB prompt, one word (js-tiktoken), 5 requests', requests: times(5, () => chat('a'.repeat(1 << 20))) },
    { name: '1 MiB prompt, prose (js-tiktoken), 5 requests', requests: times(5, () => chat('the quick brown fox jumps over the lazy dog '.repeat(24_000))) },
    { name: '1 MiB prompt, random 40-letter words (js-tiktoken), 5 requests', requests: times(5, (k) => chat(randomWords(k))) },
    {
      name: 'refused tenant (1 req/min, window spent): 50 × 512 KiB bodies with an uncompilable schema',
      before: [chat('hi', KEYS.limited, 'echo'), chat('hi', KEYS.limited, 'echo')],
      requests: times(50, () => chat(bigText, KEYS.limited, 'echo', { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: uncompilable } } })),
    },
  ];

  // Warm-up (not reported): JIT, the schema worker's thread, the first compilations.
  await Promise.all([...times(20, () => responses('hi', { type: 'object' })), chat('hello'), responses('hi', { type: 'string', pattern: '^a+$' })].map((f) => f()));
  const rows: string[] = [];
  for (const s of scenarios) {
    for (const f of s.before ?? []) await f();
    let done = false;
    let healthzMax = 0;
    let healthzCount = 0;
    child.send({ cmd: 'start' });
    await next('started');
    const poll = (async () => {
      while (!done) {
        const started = performance.now();
        await fetch(`${url}/healthz`).then((r) => r.arrayBuffer());
        healthzMax = Math.max(healthzMax, performance.now() - started);
        healthzCount++;
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    const started = performance.now();
    const statuses = await Promise.all(s.requests.map((f) => f()));
    const wallMs = performance.now() - started;
    done = true;
    await poll;
    child.send({ cmd: 'stop' });
    const { maxMs, p99Ms } = (await next('stall')) as { maxMs: number; p99Ms: number };
    const byStatus = [...statuses.reduce((m, st) => m.set(st, (m.get(st) ?? 0) + 1), new Map<number, number>())].map(([st, n]) => `${n}×${st}`).join(', ');
    const row = `| ${s.name} | ${byStatus} | ${Math.round(wallMs)} | ${maxMs.toFixed(1)} | ${p99Ms.toFixed(1)} | ${healthzMax.toFixed(1)} (${healthzCount}) |`;
    rows.push(row);
    process.stdout.write(`${row}\n`);
  }
  const table = [
    `Event-loop stall of the gateway process under adversarial requests (issue 14), ${new Date().toISOString().slice(0, 10)}, Node ${process.version}`,
    '',
    '| scenario | answers | wall ms | worst stall ms | p99 stall ms | /healthz worst ms (polls) |',
    '|---|---|---|---|---|---|',
    ...rows,
    '',
  ].join('\n');
  if (outFile) writeFileSync(outFile, table);
  child.send({ cmd: 'exit' });
}

if (process.argv.includes('--serve')) void serve();
else void drive();
