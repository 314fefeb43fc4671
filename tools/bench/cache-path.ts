/**
 * The per-request CPU of the response cache's stages (issue 15, docs/caching.md) on a typical
 * chat body, measured alone (the hot-path harness cannot resolve a microsecond on a shared
 * machine): what every request pays when its tenant's cache is off (reading the cache fields:
 * none sent), the key of a request whose tenant's cache is on (canonical JSON and two SHA-256),
 * the policy decision, and the in-process exact tier's lookup (hit and miss) and store.
 *
 *   node --import tsx tools/bench/cache-path.ts [--bytes 1500] [--iterations 20000] [--rounds 30]
 *
 * Prints µs per call for each step: the least of `--rounds` rounds, the steps interleaved
 * round by round, after a warm-up.
 */
import { cacheDirectivesOf, cacheQueryOf, createMemoryExactTier, decideCache, keyMaterialOf, templateOf } from '@weir/cache';
import type { GenerationInput, TenantCachePolicy } from '@weir/core';

const argv = process.argv.slice(2);
const value = (name: string) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
const BYTES = Number(value('--bytes') ?? 1500);
const ITERATIONS = Number(value('--iterations') ?? 20_000);
const ROUNDS = Number(value('--rounds') ?? 30);

const prose = 'You are a careful assistant for the support team; answer briefly, cite the policy you rely on, and ask when unsure. ';
const system = prose.repeat(Math.ceil(BYTES / prose.length)).slice(0, Math.max(1, BYTES - 250));
const body = {
  model: 'tiny-stories',
  messages: [
    { role: 'system', content: system },
    { role: 'user', content: 'Benchmark prompt: reply with a few words.' },
  ],
  max_tokens: 64,
  temperature: 0,
  stream: true,
  stream_options: { include_usage: true },
};
const input: GenerationInput = { kind: 'chat', messages: body.messages.map((m) => ({ role: m.role as 'system' | 'user', content: m.content })) };
const policy: TenantCachePolicy = { exact: { enabled: true, ttlMs: 600_000 }, deterministicOnly: true, allowOptIn: true, hitPriceFraction: 0.1 };
const tier = createMemoryExactTier();
const stored = cacheQueryOf(keyMaterialOf('/v1/chat/completions', body, ''), 'acme~0123456789abcdef', 'tiny@1', input);
const answer = { modelRevision: 'tiny@1', deltas: Array.from({ length: 50 }, (_, i) => `tok${i} `), finishReason: 'stop', usage: { inputTokens: 300, outputTokens: 50, cachedInputTokens: 0 }, storedAtMs: 0 };
void tier.store(stored, answer, 600_000);
const missing = { ...stored, exactKey: 'f'.repeat(64) };
let sink = 0;
let n = 0;
const steps: [string, () => void][] = [
  ['policy off: read the cache fields', () => void (sink += (cacheDirectivesOf(undefined, undefined).noCache ? 1 : 0) + templateOf(undefined, undefined).length)],
  ['policy on: decide', () => void (sink += decideCache(policy, { temperature: 0, endUser: false, directives: { noCache: false, noStore: false, optIn: false } }).read ? 1 : 0)],
  ['policy on: key (material + query)', () => void (sink += cacheQueryOf(keyMaterialOf('/v1/chat/completions', body, ''), 'acme~0123456789abcdef', 'tiny@1', input).exactKey.length)],
  ['exact tier: lookup (hit)', () => void tier.lookup(stored).then((h) => void (sink += h ? 1 : 0))],
  ['exact tier: lookup (miss)', () => void tier.lookup(missing).then((h) => void (sink += h ? 1 : 0))],
  ['exact tier: store (new key)', () => void tier.store({ ...stored, exactKey: `k${n++ % 50_000}` }, answer, 600_000)],
];

console.log(`chat body: ${Buffer.byteLength(JSON.stringify(body))} bytes; ${ITERATIONS} calls per round, least of ${ROUNDS} rounds (steps interleaved round by round)`);
for (const [, step] of steps) for (let i = 0; i < 20_000; i++) step();
const best = steps.map(() => Number.POSITIVE_INFINITY);
for (let r = 0; r < ROUNDS; r++) {
  steps.forEach(([, step], k) => {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < ITERATIONS; i++) step();
    best[k] = Math.min(best[k], Number(process.hrtime.bigint() - t0) / 1000 / ITERATIONS);
  });
}
steps.forEach(([name], k) => console.log(`${name.padEnd(36)} ${best[k].toFixed(2)} µs`));
if (sink === 0.5) console.log(sink);
