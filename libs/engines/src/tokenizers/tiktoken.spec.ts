/**
 * The tiktoken tokenizers (js-tiktoken, offline) and how the hosted-upstream adapters count with
 * them: loaded on first use and shared, the prompt reserved with the byte bound until loaded and
 * with the tokenizer after, and a cut stream billed the tokens received (`counted`).
 */
import type { EngineEvent, OpenAICompatibleEngineSpec, RevisionSpec } from '@weir/core';
import { collectEngineEvents, countingModelScript, countingModelText, type ScriptedUpstream, startScriptedUpstream } from '@weir/testing';
import { createOpenAICompatibleEngine } from '../openai-compatible/openai-compatible-engine';
import { CHAT_MESSAGE_OVERHEAD_TOKENS, CHAT_REPLY_PRIMING_TOKENS, utf8TokenUpperBound } from '../openai-compatible/token-bound';
import { adapterTokenCounter } from '../remote-replicas';
import { COUNT_SLICE_CHARS, declaredTokenizer, MAX_EXACT_RUN, tiktokenTokenizer } from './tiktoken';
import { countInputWith } from '../openai-compatible/token-bound';

describe('tiktoken tokenizers', () => {
  it('counts OpenAI tokens (cl100k_base and o200k_base), shared per encoding', async () => {
    for (const name of ['cl100k_base', 'o200k_base'] as const) {
      const tokenizer = tiktokenTokenizer(name);
      expect(tiktokenTokenizer(name)).toBe(tokenizer);
      // Known counts: "hello world" is 2 tokens in both encodings; the one-token words stay one each.
      expect(await tokenizer.count('hello world')).toBe(2);
      expect(tokenizer.ready()).toBe(true);
      expect(tokenizer.count(countingModelText(61))).toBe(61);
      expect(tokenizer.count('')).toBe(0);
    }
  });

  it('counts special-token text as ordinary text (never throws on it) and stays under the byte bound', async () => {
    const tokenizer = tiktokenTokenizer('cl100k_base');
    await tokenizer.load();
    const text = 'say <|endoftext|> and 日本語 🙂';
    const n = tokenizer.count(text) as number;
    expect(n).toBeGreaterThan(1);
    expect(n).toBeLessThanOrEqual(utf8TokenUpperBound(text));
  });

  it('counts a long run of one character class as its bytes (byte-pair merge is super-linear in a piece), an upper bound', async () => {
    const tokenizer = tiktokenTokenizer('cl100k_base');
    await tokenizer.load();
    // 64 KiB of one "word": about 4 minutes of js-tiktoken merging before issue 14, now its bytes.
    for (const run of ['a'.repeat(65_536), '!'.repeat(65_536), ' '.repeat(65_536) + 'x', '\n '.repeat(32_768), '\u3000 '.repeat(32_768)]) {
      const n = await tokenizer.count(run);
      expect(n).toBeGreaterThan(0);
      expect(n).toBeLessThanOrEqual(utf8TokenUpperBound(run));
    }
    expect(tokenizer.count('a'.repeat(MAX_EXACT_RUN + 1))).toBe(MAX_EXACT_RUN + 1);
    // Runs up to the limit, and ordinary prose around a long run, are counted exactly.
    expect(tokenizer.count('hello world ' + 'b'.repeat(MAX_EXACT_RUN + 8) + ' hello world')).toBe(2 + MAX_EXACT_RUN + 8 + 3);
  });

  it('counts long text slice by slice, letting the event loop turn, exactly for prose, and stops past the limit', async () => {
    const tokenizer = tiktokenTokenizer('cl100k_base');
    await tokenizer.load();
    const words = countingModelText(20_000);
    expect(words.length).toBeGreaterThan(4 * COUNT_SLICE_CHARS);
    let turns = 0;
    const ticker = setInterval(() => turns++, 0);
    const n = await tokenizer.count(words);
    clearInterval(ticker);
    // The same count as in one piece (slices end at word boundaries), with the loop turning between slices.
    expect(n).toBe(20_000);
    expect(turns).toBeGreaterThan(0);
    // With a limit, counting stops soon after it (within a slice): a megabyte costs no more than the window.
    const limited = await tokenizer.count(words, 1_000);
    expect(limited).toBeGreaterThan(1_000);
    expect(limited).toBeLessThan(20_000);
    const chat = { kind: 'chat' as const, messages: Array.from({ length: 50 }, () => ({ role: 'user' as const, content: words })) };
    expect(await countInputWith(chat, tokenizer.count, 5_000)).toBeLessThan(2 * 20_000);
  });

  it('declares nothing for none or an absent tokenizer', () => {
    expect(declaredTokenizer({})).toBeUndefined();
    expect(declaredTokenizer({ tokenizer: 'none' })).toBeUndefined();
    expect(declaredTokenizer({ tokenizer: 'cl100k_base' })?.name).toBe('cl100k_base');
  });
});

describe('an OpenAI-compatible revision with a declared tokenizer', () => {
  let upstream: ScriptedUpstream;
  beforeAll(async () => {
    upstream = await startScriptedUpstream();
  });
  afterAll(() => upstream.close());

  const spec = (extra: Partial<OpenAICompatibleEngineSpec> = {}): OpenAICompatibleEngineSpec => ({
    kind: 'openai-compatible',
    baseUrl: upstream.url,
    upstreamModel: 'gpt-4o-mini',
    api: 'chat',
    firstTokenTimeoutMs: 5_000,
    idleTimeoutMs: 5_000,
    maxConcurrency: 4,
    tokenizer: 'cl100k_base',
    ...extra,
  });
  const prompt = { kind: 'chat' as const, messages: [{ role: 'user' as const, content: 'the cat sat on a mat' }] };
  const request = (signal = new AbortController().signal) => ({ input: prompt, maxOutputTokens: 100, sampling: {}, signal, generationId: 'gen_tok' });

  it('reserves with the tokenizer plus the per-message overhead (an upper bound of what OpenAI counts)', async () => {
    await tiktokenTokenizer('cl100k_base').load();
    const engine = createOpenAICompatibleEngine(spec());
    // 6 tokens of content + 8 for the message + 4 to prime the reply; OpenAI counts 6 + 3 + 3 = 12.
    expect(await engine.countInputTokens(prompt)).toBe(6 + CHAT_MESSAGE_OVERHEAD_TOKENS + CHAT_REPLY_PRIMING_TOKENS);
    // The split gateway counts the same way without running the adapter.
    const revision = { id: 'gpt@1', engine: spec() } as RevisionSpec;
    expect(await adapterTokenCounter(revision)?.(prompt)).toBe(6 + CHAT_MESSAGE_OVERHEAD_TOKENS + CHAT_REPLY_PRIMING_TOKENS);
    // Without a tokenizer, the same byte bound as the adapter's, chat framing included (both topologies reserve alike).
    const plain = { ...revision, engine: spec({ tokenizer: undefined }) };
    const text = { kind: 'text' as const, text: 'the cat sat on a mat' };
    expect(await adapterTokenCounter(plain)?.(text)).toBe(await createOpenAICompatibleEngine(spec({ tokenizer: undefined })).countInputTokens(text));
    expect(await adapterTokenCounter(plain)?.(text)).toBeGreaterThan(Buffer.byteLength(text.text));
  });

  it.each([3, 5, 8, 61])('bills a stream cut after %i tokens without upstream usage the tokens received (counted)', async (tokens) => {
    upstream.setScript(countingModelScript({ tokens, then: 'hang' }));
    const engine = createOpenAICompatibleEngine(spec());
    const controller = new AbortController();
    let seen = 0;
    const { events } = await collectEngineEvents(engine, request(controller.signal), (e) => {
      if (e.type === 'delta' && ++seen === tokens) controller.abort();
    });
    const end = events.at(-1) as Extract<EngineEvent, { type: 'end' }>;
    const sent = upstream.requests.at(-1)?.tokensSent;
    expect(sent).toBe(tokens);
    expect(end).toMatchObject({ reason: 'aborted', usageSource: 'counted', usage: { outputTokens: tokens, inputTokens: 6 + CHAT_MESSAGE_OVERHEAD_TOKENS + CHAT_REPLY_PRIMING_TOKENS } });
  });

  it('bills a stream cut after 5 tokens with continuous usage the upstream’s own count (reported)', async () => {
    upstream.setScript(countingModelScript({ tokens: 5, then: 'hang', promptTokens: 9 }));
    const engine = createOpenAICompatibleEngine(spec({ continuousUsageStats: true }));
    const controller = new AbortController();
    let seen = 0;
    const { events } = await collectEngineEvents(engine, request(controller.signal), (e) => {
      if (e.type === 'delta' && ++seen === 5) controller.abort();
    });
    expect(events.at(-1)).toMatchObject({ reason: 'aborted', usageSource: 'reported', usage: { inputTokens: 9, outputTokens: 5 } });
  });

  it('attaches what was produced to a failure after output (the upstream died after 8 tokens)', async () => {
    upstream.setScript(countingModelScript({ tokens: 8, then: 'destroy' }));
    const engine = createOpenAICompatibleEngine(spec());
    const { events, error } = await collectEngineEvents(engine, request());
    expect(events.filter((e) => e.type === 'delta')).toHaveLength(8);
    expect(error).toMatchObject({ code: 'upstream_error', produced: { source: 'counted', usage: { outputTokens: 8 } } });
  });
});
