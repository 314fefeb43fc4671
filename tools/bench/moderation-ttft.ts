/**
 * What moderation costs on the request path (issue 15 items 6–7): time to first token (TTFT) at
 * the client of a streamed chat completion through the real gateway, pipeline and relay, with a
 * scripted upstream whose first token comes after `--upstream-ttft-ms` and the next ones every
 * `--token-ms`, and an input moderation engine that answers after a set latency.
 *
 *   node --import tsx tools/bench/moderation-ttft.ts [--requests 60] [--upstream-ttft-ms 80] [--token-ms 5] [--tokens 40]
 *
 * Cases: moderation off (no policy); input moderation with the engine at 0, 20, 60, 120 and 250 ms
 * latency (the check runs while the request is routed, admitted and dispatched: TTFT should stay
 * at the upstream's until the check is slower than it, then follow the check); output moderation
 * with the rules engine (400-character windows, overlap 64: the price is the hold-back, so TTFT
 * grows to the time the upstream takes to write one window) and both stages together. Prints
 * median and p95 TTFT and total time per case (ms), requests one at a time after a warm-up.
 */
import { createInMemoryAdmission } from '@weir/admission';
import type { EngineAdapter, EngineEvent, EngineRequest, PlatformConfig, TenantModeration } from '@weir/core';
import { compileModerationPolicies, type ModerationEngine, type ModerationPolicies } from '@weir/moderation';
import { startTestGateway, twoTenantConfig } from '../../libs/gateway/src/test-support';

const argv = process.argv.slice(2);
const value = (name: string, dflt: number) => {
  const i = argv.indexOf(name);
  return i >= 0 ? Number(argv[i + 1]) : dflt;
};
const REQUESTS = value('--requests', 60);
const UPSTREAM_TTFT_MS = value('--upstream-ttft-ms', 80);
const TOKEN_MS = value('--token-ms', 5);
const TOKENS = value('--tokens', 40);

/** The scripted upstream: first token after UPSTREAM_TTFT_MS, then one every TOKEN_MS (each ~12 characters). */
const engine: EngineAdapter = {
  kind: 'scripted',
  capacity: { slots: 8, contextTokens: 4_096 },
  async countInputTokens() {
    return 16;
  },
  async *generate(request: EngineRequest): AsyncIterable<EngineEvent> {
    let n = 0;
    for (; n < TOKENS; n++) {
      await new Promise((r) => setTimeout(r, n === 0 ? UPSTREAM_TTFT_MS : TOKEN_MS));
      if (request.signal.aborted) break;
      yield { type: 'delta', text: ` word${String(n).padStart(6, '0')}`, tokens: 1 };
    }
    yield { type: 'end', reason: request.signal.aborted ? 'aborted' : 'stop', usage: { inputTokens: 16, outputTokens: n, cachedInputTokens: 0 }, usageSource: 'reported' };
  },
  async close() {},
};

function delayed(inner: ModerationEngine, ms: number): ModerationEngine {
  return { name: `delay-${ms}`, kind: 'bench', check: async (texts, signal) => (await new Promise((r) => setTimeout(r, ms)), inner.check(texts, signal)) };
}

const RULES = { lists: [{ category: 'violence', phrases: ['red dragon', 'blood feud'] }], patterns: [{ category: 'custom', pattern: '(?i)project\\s+nightjar' }] };

interface Case {
  name: string;
  moderation?: TenantModeration;
  inputLatencyMs?: number;
}

const cases: Case[] = [
  { name: 'off (no policy)' },
  ...[0, 20, 60, 120, 250].map((ms) => ({ name: `input, engine ${ms} ms`, moderation: { input: { engine: 'rules', fail: 'closed' as const, timeoutMs: 5_000 }, rules: RULES }, inputLatencyMs: ms })),
  { name: 'output, rules, window 400/64', moderation: { output: { engine: 'rules', windowChars: 400, overlapChars: 64, fail: 'closed', timeoutMs: 5_000 }, rules: RULES } },
  { name: 'output, rules, window 100/32', moderation: { output: { engine: 'rules', windowChars: 100, overlapChars: 32, fail: 'closed', timeoutMs: 5_000 }, rules: RULES } },
  {
    name: 'input 60 ms + output 400/64',
    moderation: { input: { engine: 'rules', fail: 'closed', timeoutMs: 5_000 }, output: { engine: 'rules', windowChars: 400, overlapChars: 64, fail: 'closed', timeoutMs: 5_000 }, rules: RULES },
    inputLatencyMs: 60,
  },
];

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];

async function run(c: Case) {
  const base = twoTenantConfig({ ...twoTenantConfig().revisions[0], contextWindow: 4_096, maxOutputTokens: 256, defaultOutputTokens: 200 });
  const config: PlatformConfig = { ...base, tenants: base.tenants.map((t) => (t.id === 't' && c.moderation ? { ...t, moderation: c.moderation } : t)) };
  const compiled = compileModerationPolicies(config);
  const policies: ModerationPolicies =
    c.inputLatencyMs === undefined
      ? compiled
      : { ...compiled, of: (k) => { const p = compiled.of(k); return p?.input ? { ...p, input: { ...p.input, engine: delayed(p.input.engine, c.inputLatencyMs as number) } } : p; } };
  const gw = await startTestGateway({ config, engine, admission: createInMemoryAdmission({ tenants: config.tenants }), slots: 8, ...(c.moderation ? { moderation: policies } : {}) });
  const ttft: number[] = [];
  const total: number[] = [];
  try {
    for (let i = 0; i < REQUESTS + 5; i++) {
      const t0 = performance.now();
      const res = await gw.post('/v1/chat/completions', { model: 'fake', stream: true, messages: [{ role: 'user', content: 'Tell me a calm story about a garden.' }] });
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      const dec = new TextDecoder();
      let first: number | undefined;
      let buf = '';
      for (;;) {
        const { done, value: chunk } = await reader.read();
        if (done) break;
        buf += dec.decode(chunk, { stream: true });
        if (first === undefined && buf.includes('"content":" word')) first = performance.now() - t0;
      }
      if (i >= 5) {
        ttft.push(first ?? NaN);
        total.push(performance.now() - t0);
      }
    }
  } finally {
    await gw.close();
  }
  return { ttftP50: pct(ttft, 50), ttftP95: pct(ttft, 95), totalP50: pct(total, 50) };
}

async function main() {
  console.log(`upstream: first token ${UPSTREAM_TTFT_MS} ms, then ${TOKENS - 1} tokens every ${TOKEN_MS} ms (~12 chars each); ${REQUESTS} requests per case, one at a time\n`);
  console.log('| case | TTFT p50 (ms) | TTFT p95 (ms) | total p50 (ms) |');
  console.log('|---|---:|---:|---:|');
  for (const c of cases) {
    const r = await run(c);
    console.log(`| ${c.name} | ${r.ttftP50.toFixed(1)} | ${r.ttftP95.toFixed(1)} | ${r.totalP50.toFixed(1)} |`);
  }
}

void main();
