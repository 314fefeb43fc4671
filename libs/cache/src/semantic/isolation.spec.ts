/**
 * Proof of isolation (issue 15 §3): a seeded, randomized run of 12,000 trials of near-duplicate
 * prompts across tenants, revisions, templates and parameter sets. Every hit must come from an
 * entry stored in the query's own partition (zero hits across any boundary), and lookups of a
 * prompt stored in the same partition must hit (so the test is not vacuous).
 */
import type { CachePartition, CacheQuery } from '../cache-tier';
import { createInMemorySemanticStore } from './in-memory-semantic-store';
import { createSemanticTier } from './semantic-tier';
import { answerOf, fakeEmbedder, seededRandom } from './test-support';

const TRIALS = 12_000;
const SEED = 0x5eed_0015;

const TENANTS = ['acme~00000000000000a1', 'beta~00000000000000b2', 'gamma~0000000000000c3', 'acme~00000000000000a4'];
const REVISIONS = ['stories@1', 'stories@2', 'llama-8b@3'];
const TEMPLATES = ['', 'faq@1', 'faq@2'];
const PARAMS = ['p-temp0', 'p-temp0-max64', 'p-json'];
const BASES = [
  'how do i reset my password on the portal',
  'summarise the attached meeting notes in three bullet points',
  'what is the refund policy for annual plans',
  'write a haiku about autumn leaves falling',
  'explain the difference between a process and a thread',
  'translate good morning into italian',
  'what are the opening hours of the support desk',
  'give me a short recipe for pancakes',
];
/** Variants a real client sends for one question: same words, other case, spacing, punctuation. */
const VARIANTS: Array<(s: string) => string> = [(s) => s, (s) => `${s}?`, (s) => `${s[0].toUpperCase()}${s.slice(1)}.`, (s) => s.replace(/ /g, '  '), (s) => `  ${s} !`];

type Dim = 'tenant' | 'revision' | 'template' | 'params' | 'none';

describe('semantic tier isolation (seeded, 12,000 trials)', () => {
  it('never answers across a tenant, revision, template or params boundary, and does answer inside one', async () => {
    const random = seededRandom(SEED);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)];
    const other = <T>(xs: readonly T[], x: T): T => {
      const rest = xs.filter((y) => y !== x);
      return pick(rest);
    };
    const store = createInMemorySemanticStore({ maxEntriesPerPartition: 100_000, maxEntriesPerTenant: 1_000_000 });
    const tier = createSemanticTier({
      store,
      embedderFor: () => fakeEmbedder('e@1'),
      policyFor: () => ({ enabled: true, threshold: 0.97, embeddingRevision: 'e@1' }),
      clock: () => 0,
    });
    const key = (p: CachePartition) => JSON.stringify([p.tenantKey, p.revisionId, p.template, p.paramsKey]);
    /** Ground truth: which base prompts each partition holds. */
    const held = new Map<string, Set<number>>();
    const counts = { crossHits: 0, crossLookups: 0, sameLookups: 0, sameHits: 0, expectedHits: 0, missedExpected: 0 };
    const byDim: Record<Dim, number> = { tenant: 0, revision: 0, template: 0, params: 0, none: 0 };

    for (let trial = 0; trial < TRIALS; trial++) {
      const base = Math.floor(random() * BASES.length);
      const storedIn: CachePartition = { tenantKey: pick(TENANTS), revisionId: pick(REVISIONS), template: pick(TEMPLATES), paramsKey: pick(PARAMS) };
      const text = pick(VARIANTS)(BASES[base]);
      // Store only sometimes, so partitions also see lookups of prompts they do not hold.
      if (random() < 0.5) {
        const q: CacheQuery = { partition: storedIn, exactKey: `${trial}`, promptText: text };
        await tier.store(q, answerOf(JSON.stringify([key(storedIn), base])), 3_600_000);
        let set = held.get(key(storedIn));
        if (!set) held.set(key(storedIn), (set = new Set()));
        set.add(base);
      }
      // Ask a near-duplicate of that prompt, across one boundary (80 %) or in the same partition.
      const dim: Dim = random() < 0.2 ? 'none' : pick(['tenant', 'revision', 'template', 'params'] as const);
      byDim[dim]++;
      const asked: CachePartition =
        dim === 'tenant'
          ? { ...storedIn, tenantKey: other(TENANTS, storedIn.tenantKey) }
          : dim === 'revision'
            ? { ...storedIn, revisionId: other(REVISIONS, storedIn.revisionId) }
            : dim === 'template'
              ? { ...storedIn, template: other(TEMPLATES, storedIn.template) }
              : dim === 'params'
                ? { ...storedIn, paramsKey: other(PARAMS, storedIn.paramsKey) }
                : storedIn;
      const hit = await tier.lookup({ partition: asked, exactKey: `q${trial}`, promptText: pick(VARIANTS)(BASES[base]) });
      const expected = held.get(key(asked))?.has(base) ?? false;
      if (expected) counts.expectedHits++;
      if (dim === 'none') counts.sameLookups++;
      else counts.crossLookups++;
      if (hit) {
        const [from, fromBase] = JSON.parse(hit.answer.deltas[0]) as [string, number];
        if (from !== key(asked)) counts.crossHits++;
        expect(fromBase).toBe(base);
        if (dim === 'none') counts.sameHits++;
      } else if (expected) counts.missedExpected++;
    }

    // Not vacuous: every boundary was crossed thousands of times and the same partition hit often.
    for (const d of ['tenant', 'revision', 'template', 'params'] as const) expect(byDim[d]).toBeGreaterThan(2_000);
    expect(counts.sameHits).toBeGreaterThan(1_000);
    expect(counts.expectedHits).toBeGreaterThan(2_000);
    // The proof: no hit ever came from another partition, and no expected hit was missed.
    expect(counts.crossHits).toBe(0);
    expect(counts.missedExpected).toBe(0);
    expect(counts.crossLookups + counts.sameLookups).toBe(TRIALS);
  });
});
