/**
 * What the semantic cache tier costs per lookup, measured alone: the guard's signature of a
 * prompt, the in-process store's exact-cosine search over one full partition (1,000 entries)
 * at 64 dimensions (the tiny model) and 768 (a typical embedding model), and the tiny model's
 * embedding of a short prompt (a llama.cpp embedding context, 1 thread).
 *
 *   node --import tsx tools/bench/semantic-cache.ts [--entries 1000] [--rounds 20] [--model <gguf>]
 *
 * Prints µs per call for each step: the least of `--rounds` rounds, after a warm-up.
 */
import { createInMemorySemanticStore, guardSignatureOf, normalised, type SemanticPartition } from '@weir/cache';
import { createEngineEmbedder, createLlamaCppEngine } from '@weir/engines';
import path from 'node:path';

const argv = process.argv.slice(2);
const value = (name: string) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
const ENTRIES = Number(value('--entries') ?? 1_000);
const ROUNDS = Number(value('--rounds') ?? 20);
/** The tiny model: `--model`, else WEIR_MODEL_PATH, else the shared copy beside the checkout. */
const MODEL = value('--model') ?? (process.env.WEIR_MODEL_PATH || path.resolve(__dirname, '../../../shared/models/stories260K.gguf'));

const PROMPT = 'Summarise the attached meeting notes from Tuesday in three bullet points, and do not mention "budget".';

/** Least µs per call of `fn` over `rounds` rounds of `iterations` calls. */
async function measure(fn: () => unknown | Promise<unknown>, iterations: number, rounds = ROUNDS): Promise<number> {
  for (let i = 0; i < iterations; i++) await fn();
  let best = Number.POSITIVE_INFINITY;
  for (let r = 0; r < rounds; r++) {
    const t0 = performance.now();
    for (let i = 0; i < iterations; i++) await fn();
    best = Math.min(best, ((performance.now() - t0) * 1000) / iterations);
  }
  return best;
}

function randomUnit(dims: number, seed: number): Float32Array {
  let a = seed >>> 0;
  const v = new Float32Array(dims);
  for (let i = 0; i < dims; i++) {
    a = (a * 1664525 + 1013904223) >>> 0;
    v[i] = a / 2 ** 32 - 0.5;
  }
  return normalised(v);
}

async function main(): Promise<void> {
  const rows: Array<[string, number]> = [];
  rows.push(['guard signature of a 100-char prompt', await measure(() => guardSignatureOf(PROMPT), 2_000)]);
  for (const dims of [64, 768]) {
    const store = createInMemorySemanticStore({ maxEntriesPerPartition: ENTRIES });
    const partition: SemanticPartition = { tenantKey: 'acme~0000000000000001', revisionId: 'r@1', template: '', paramsKey: 'p', embeddingRevision: 'e@1' };
    const guard = guardSignatureOf(PROMPT);
    const answer = { modelRevision: 'r@1', deltas: ['x'], finishReason: 'stop', usage: { inputTokens: 1, outputTokens: 1, cachedInputTokens: 0 }, storedAtMs: 0 };
    for (let i = 0; i < ENTRIES; i++) await store.put(partition, { vector: randomUnit(dims, i + 1), guard, answer, storedAtMs: 0, expiresAtMs: 1e15 }, 0);
    const query = randomUnit(dims, 999_999);
    rows.push([`search: ${ENTRIES} entries × ${dims} dims (exact cosine)`, await measure(() => store.search(partition, query, 0.97, 4, 1), 50)]);
  }
  const engine = await createLlamaCppEngine({ kind: 'llamacpp', modelPath: MODEL, threads: 1, sequences: 1, contextSize: 256, testTokenDelayMs: 0, embeddingOnly: true });
  const embedder = createEngineEmbedder(engine, 'bench-embed');
  rows.push(['embedding of the prompt (tiny model, llama.cpp, 1 thread)', await measure(() => embedder.embed([PROMPT]), 20)]);
  await engine.close();
  for (const [name, us] of rows) console.log(`${us.toFixed(1).padStart(10)} µs  ${name}`);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
