/**
 * The per-request CPU of the request-body checks of issue 14 part 3 (docs/security.md §3) on a
 * typical chat body, measured alone (the hot-path harness cannot resolve a microsecond on a
 * shared machine): `JSON.parse` alone, the edge's `parseJsonText` (depth and duplicate-key scan
 * + the one parse), the unknown-field refusal, and zod's chat completions schema.
 *
 *   node --import tsx tools/bench/body-checks.ts [--bytes 1500] [--iterations 20000] [--rounds 30]
 *
 * Prints µs per call for each step: the least of `--rounds` rounds, the steps interleaved
 * round by round, after a warm-up.
 */
import { CHAT_COMPLETIONS_FIELDS, CHAT_UNSUPPORTED_HINTS, chatCompletionsBody, parseBody, parseJsonText, refuseUnknownFields } from '@weir/gateway';

const argv = process.argv.slice(2);
const value = (name: string) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
const BYTES = Number(value('--bytes') ?? 1500);
const ITERATIONS = Number(value('--iterations') ?? 20_000);
const ROUNDS = Number(value('--rounds') ?? 30);

/** A chat body of about `bytes` bytes: a system prompt of prose, a user question, a few options (as `load.ts --body-bytes` builds it). */
function chatBody(bytes: number): string {
  const of = (system: string) =>
    JSON.stringify({
      model: 'tiny-stories',
      messages: [
        { role: 'system', content: system },
        { role: 'user', content: 'Benchmark prompt: reply with a few words.' },
      ],
      max_tokens: 64,
      temperature: 0.7,
      user: 'user-1234',
      stream: true,
      stream_options: { include_usage: true },
    });
  const prose = 'You are a careful assistant for the support team; answer briefly, cite the policy you rely on, and ask when unsure. ';
  const room = Math.max(1, bytes - of('x').length + 1);
  return of(prose.repeat(Math.ceil(room / prose.length)).slice(0, room));
}

const text = chatBody(BYTES);
const parsed = JSON.parse(text) as unknown;
let sink = 0;
const steps: [string, () => void][] = [
  ['JSON.parse alone', () => void (sink += (JSON.parse(text) as { max_tokens: number }).max_tokens)],
  ['parseJsonText (scan + parse)', () => void (sink += (parseJsonText(text) as { max_tokens: number }).max_tokens)],
  ['refuseUnknownFields', () => refuseUnknownFields(parsed, CHAT_COMPLETIONS_FIELDS, CHAT_UNSUPPORTED_HINTS, 'POST /v1/chat/completions')],
  ['parseBody(chatCompletionsBody)', () => void (sink += parseBody(chatCompletionsBody, parsed).max_tokens ?? 0)],
];

console.log(`chat body: ${Buffer.byteLength(text)} bytes; ${ITERATIONS} calls per round, least of ${ROUNDS} rounds (steps interleaved round by round)`);
for (const [, step] of steps) for (let i = 0; i < 20_000; i++) step();
const best = steps.map(() => Number.POSITIVE_INFINITY);
// Interleaved, so that a burst of other load on a shared machine hits every step alike; the least round is the step's cost.
for (let r = 0; r < ROUNDS; r++) {
  steps.forEach(([, step], k) => {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < ITERATIONS; i++) step();
    best[k] = Math.min(best[k], Number(process.hrtime.bigint() - t0) / 1000 / ITERATIONS);
  });
}
steps.forEach(([name], k) => console.log(`${name.padEnd(32)} ${best[k].toFixed(2)} µs`));
if (sink === 0.5) console.log(sink);
