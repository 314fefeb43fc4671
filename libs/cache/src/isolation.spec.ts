/**
 * Proof of isolation for the exact tier (issue 15 item 3): 10,000 random trials of near-duplicate
 * prompts, each stored under a random tenant, revision, template and route, then looked up under
 * a partition that differs in exactly one boundary (tenant, revision, template, an
 * output-changing parameter, or the route). Every stored answer carries the identity of what it
 * was stored for, so a hit that returns another partition's (or another prompt's) answer is a
 * crossing: there must be none, while every same-partition repeat hits. Keys are made exactly as
 * the gateway makes them.
 */
import { cacheQueryOf, type CacheRoute, keyMaterialOf } from './cache-key';
import { createMemoryExactTier } from './memory-exact-tier';

/** A seeded PRNG (mulberry32), so a failure replays. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const TENANTS = ['acme~00000000000000a1', 'acme~00000000000000a2', 'globex~0000000000000001', 'acme'];
const REVISIONS = ['tiny@1', 'tiny@2', 'big@1'];
const TEMPLATES = ['', 'faq@1', 'faq@2', 'summary@1'];
const ROUTES: CacheRoute[] = ['/v1/chat/completions', '/v1/completions', '/v1/generations', '/v1/responses'];
const WORDS = ['the', 'cat', 'sat', 'on', 'mat', 'not', 'a', '3', '4', '"yes"', 'Paris', 'paris'];

interface Side {
  tenant: string;
  revision: string;
  template: string;
  temperature: number;
  route: CacheRoute;
}

const bodyOf = (route: CacheRoute, text: string, temperature: number) =>
  route === '/v1/chat/completions' ? { messages: [{ role: 'user', content: text }], temperature } : route === '/v1/completions' ? { prompt: text, temperature } : { input: text, temperature };
const queryOf = (s: Side, text: string) => cacheQueryOf(keyMaterialOf(s.route, bodyOf(s.route, text, s.temperature), s.template), s.tenant, s.revision, { kind: 'text', text });
const identity = (s: Side, text: string) => JSON.stringify([s.tenant, s.revision, s.template, s.temperature, s.route, text]);

it('10,000 random trials: no hit across a tenant, revision, template, parameter or route; every same-partition repeat hits', async () => {
  const random = rng(15);
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(random() * xs.length)];
  const tier = createMemoryExactTier({ maxBytes: 1 << 30, maxBytesPerTenant: 1 << 30 });
  const TRIALS = 10_000;
  let crossings = 0;
  let sameHits = 0;
  let crossLookups = 0;
  for (let i = 0; i < TRIALS; i++) {
    const text = Array.from({ length: 3 + Math.floor(random() * 4) }, () => pick(WORDS)).join(' ');
    const s: Side = { tenant: pick(TENANTS), revision: pick(REVISIONS), template: pick(TEMPLATES), temperature: 0, route: pick(ROUTES) };
    await tier.store(queryOf(s, text), { modelRevision: s.revision, deltas: [identity(s, text)], finishReason: 'stop', usage: { inputTokens: 1, outputTokens: 1, cachedInputTokens: 0 }, storedAtMs: i }, 60_000);
    const boundary = i % 5;
    const o: Side = { ...s };
    while (identity(o, text) === identity(s, text)) {
      if (boundary === 0) o.tenant = pick(TENANTS);
      else if (boundary === 1) o.revision = pick(REVISIONS);
      else if (boundary === 2) o.template = pick(TEMPLATES);
      else if (boundary === 3) o.temperature = 0.5;
      else o.route = pick(ROUTES);
    }
    // The keys differ (not only the tier's partition check keeps them apart).
    if (queryOf(o, text).exactKey === queryOf(s, text).exactKey) crossings++;
    const hit = await tier.lookup(queryOf(o, text));
    crossLookups++;
    // A hit may only be an answer stored for exactly that partition and prompt (an earlier trial's).
    if (hit && hit.answer.deltas[0] !== identity(o, text)) crossings++;
    const same = await tier.lookup(queryOf(s, text));
    if (same?.answer.deltas[0] === identity(s, text)) sameHits++;
  }
  expect(crossLookups).toBe(TRIALS);
  expect(crossings).toBe(0);
  expect(sameHits).toBe(TRIALS);
});
