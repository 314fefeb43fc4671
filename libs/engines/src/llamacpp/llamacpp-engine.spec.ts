import type { EngineEvent, GenerationInput } from '@weir/core';
import { isWeirError } from '@weir/core';
import { collectEngineEvents, describeEngineContract, engineRequest, tinyModelPath } from '@weir/testing';
import { createLlamaCppEngine, type LlamaCppEngine, type LlamaCppEngineOptions } from './llamacpp-engine';

const spec = (overrides: Partial<LlamaCppEngineOptions> = {}): LlamaCppEngineOptions => ({
  kind: 'llamacpp',
  modelPath: tinyModelPath(),
  threads: 1,
  sequences: 2,
  contextSize: 256,
  testTokenDelayMs: 0,
  ...overrides,
});

const story = { kind: 'text', text: 'Once upon a time' } as const;
const textOf = (events: EngineEvent[]): string => events.map((e) => (e.type === 'delta' ? e.text : '')).join('');
const endOf = (events: EngineEvent[]): Extract<EngineEvent, { type: 'end' }> => {
  const end = events[events.length - 1];
  if (end?.type !== 'end') throw new Error('stream did not end with an end event');
  return end;
};

describe('createLlamaCppEngine (real stories260K model)', () => {
  let engine: LlamaCppEngine;
  beforeAll(async () => {
    engine = await createLlamaCppEngine(spec());
  });
  afterAll(() => engine.close());

  it('declares its capacity', () => {
    expect(engine.kind).toBe('llamacpp');
    expect(engine.capacity).toEqual({ slots: 2, contextTokens: 256 });
  });

  it('is greedy and deterministic at temperature 0', async () => {
    const a = await collectEngineEvents(engine, engineRequest(story, { maxOutputTokens: 24 }));
    const b = await collectEngineEvents(engine, engineRequest(story, { maxOutputTokens: 24 }));
    expect(textOf(a.events)).toBe(textOf(b.events));
    expect(textOf(a.events).startsWith(', there was a little girl named Lily.')).toBe(true);
  });

  it('counts tokens with the model tokenizer (BOS + prompt; output = deltas = length cap)', async () => {
    const { events } = await collectEngineEvents(engine, engineRequest(story, { maxOutputTokens: 20 }));
    const end = endOf(events);
    // "Once upon a time" is 4 tokens ([403, 407, 261, 378], models/README.md) plus BOS.
    expect(engine.tokenize('Once upon a time')).toBe(4);
    expect(end.usage.inputTokens).toBe(5);
    expect(await engine.countInputTokens(story)).toBe(5);
    expect(end.reason).toBe('length');
    expect(end.usage.outputTokens).toBe(20);
    expect(events.reduce((n, e) => n + (e.type === 'delta' ? e.tokens : 0), 0)).toBe(20);
    expect(end.usageSource).toBe('reported');
  });

  it('counts a long prompt in slices, letting the event loop turn, and no further than just past the limit (issue 14)', async () => {
    const sentence = 'Once upon a time there was a little girl named Lily who loved to play outside. ';
    const long = { kind: 'text' as const, text: sentence.repeat(200) };
    const exact = engine.tokenize(long.text) + 1;
    let turns = 0;
    const ticker = setInterval(() => turns++, 0);
    const sliced = await engine.countInputTokens(long);
    clearInterval(ticker);
    // Within a token per slice boundary of counting it whole, and the loop turned between slices.
    expect(Math.abs(sliced - exact)).toBeLessThanOrEqual(Math.ceil(long.text.length / 2_048));
    expect(turns).toBeGreaterThan(0);
    // A megabyte against a 256-token window stops after the first slice.
    const huge = { kind: 'text' as const, text: sentence.repeat(13_000) };
    const limited = await engine.countInputTokens(huge, 256);
    expect(limited).toBeGreaterThan(256);
    expect(limited).toBeLessThan(5_000);
  });

  it('keeps the leading space of the first output token', async () => {
    const { events } = await collectEngineEvents(engine, engineRequest({ kind: 'text', text: 'Lily and Tom' }, { maxOutputTokens: 3 }));
    expect(textOf(events)).toBe(' were play');
  });

  it('renders chat input as plain text, system first', async () => {
    const chat = await collectEngineEvents(
      engine,
      engineRequest({
        kind: 'chat',
        messages: [
          { role: 'user', content: 'upon a time' },
          { role: 'system', content: 'Once' },
        ],
      }),
    );
    const text = await collectEngineEvents(engine, engineRequest({ kind: 'text', text: 'Once\nupon a time' }));
    expect(textOf(chat.events)).toBe(textOf(text.events));
    expect(endOf(chat.events).usage.inputTokens).toBe(endOf(text.events).usage.inputTokens);
  });

  it('stops at a stop sequence without returning it', async () => {
    const { events } = await collectEngineEvents(
      engine,
      engineRequest(story, { maxOutputTokens: 64, sampling: { temperature: 0, stop: ['Lily'] } }),
    );
    const end = endOf(events);
    expect(end.reason).toBe('stop');
    // " Lily" is one token: a token that straddles the stop text is dropped whole.
    expect(textOf(events)).toBe(', there was a little girl named');
  });

  it('throws context_length_exceeded for a prompt longer than the context', async () => {
    const { error } = await collectEngineEvents(engine, engineRequest({ kind: 'text', text: 'Once upon a time '.repeat(80) }));
    expect(isWeirError(error) && error.code).toBe('context_length_exceeded');
    expect(isWeirError(error) && error.param).toBe('input');
  });

  it('waits briefly for a sequence being returned, then throws engine_unavailable (retryable); sequences are freed after use', async () => {
    const slow = await createLlamaCppEngine(spec({ sequences: 1, testTokenDelayMs: 20 }), { sequenceWaitMs: 2_000 });
    try {
      // A second generate while the only sequence is busy waits for it…
      const first = collectEngineEvents(slow, engineRequest(story, { maxOutputTokens: 10 }));
      const waiting = collectEngineEvents(slow, engineRequest(story, { maxOutputTokens: 3 }));
      expect((await first).error).toBeUndefined();
      const second = await waiting;
      expect(second.error).toBeUndefined();
      expect(second.events.at(-1)).toMatchObject({ type: 'end', usage: { outputTokens: 3 } });

      // …but not forever: a sequence held past the wait (2 s) is engine_unavailable.
      const controller = new AbortController();
      const long = slow.generate(engineRequest(story, { maxOutputTokens: 200, signal: controller.signal }))[Symbol.asyncIterator]();
      await long.next();
      const { error } = await collectEngineEvents(slow, engineRequest(story));
      expect(isWeirError(error) && error.code).toBe('engine_unavailable');
      expect(isWeirError(error) && error.retryable).toBe(true);
      controller.abort();
      while (!(await long.next()).done) {
        /* drain */
      }
      const again = await collectEngineEvents(slow, engineRequest(story, { maxOutputTokens: 4 }));
      expect(again.error).toBeUndefined();
      expect(slow.stats().activeSequences).toBe(0);
    } finally {
      await slow.close();
    }
  });

  it('stops producing tokens shortly after an abort (the counter stops)', async () => {
    const slow = await createLlamaCppEngine(spec({ sequences: 1, testTokenDelayMs: 10 }));
    try {
      const controller = new AbortController();
      const before = slow.stats().generatedTokens;
      const done = collectEngineEvents(slow, engineRequest(story, { maxOutputTokens: 400, signal: controller.signal }));
      await new Promise((r) => setTimeout(r, 120));
      controller.abort();
      const { events } = await done;
      const atEnd = slow.stats().generatedTokens;
      await new Promise((r) => setTimeout(r, 150));
      const later = slow.stats().generatedTokens;
      const end = endOf(events);
      expect(end.reason).toBe('aborted');
      expect(later).toBe(atEnd);
      expect(atEnd - before).toBe(end.usage.outputTokens);
      // ~10 ms per token for ~120 ms: far fewer than the 400 allowed.
      expect(end.usage.outputTokens).toBeGreaterThan(0);
      expect(end.usage.outputTokens).toBeLessThan(40);
      expect(slow.stats().activeSequences).toBe(0);
    } finally {
      await slow.close();
    }
  });

  it('decodes two generations at the same time on one context (token timestamps interleave)', async () => {
    const stamps: Array<{ who: 'a' | 'b'; at: number }> = [];
    const run = (who: 'a' | 'b', text: string) =>
      collectEngineEvents(engine, engineRequest({ kind: 'text', text }, { maxOutputTokens: 60 }), (e) => {
        if (e.type === 'delta') stamps.push({ who, at: performance.now() });
      });
    const [a, b] = await Promise.all([run('a', 'Once upon a time'), run('b', 'Lily and Tom')]);
    expect(endOf(a.events).usage.outputTokens).toBe(60);
    expect(endOf(b.events).usage.outputTokens).toBe(60);
    // Sequential decoding would switch once; batched decoding alternates token by token.
    let switches = 0;
    for (let i = 1; i < stamps.length; i += 1) if (stamps[i].who !== stamps[i - 1].who) switches += 1;
    expect(switches).toBeGreaterThan(20);
    const span = (who: 'a' | 'b') => stamps.filter((s) => s.who === who).map((s) => s.at);
    expect(Math.min(...span('b'))).toBeLessThan(Math.max(...span('a')));
    expect(Math.min(...span('a'))).toBeLessThan(Math.max(...span('b')));
  });

  describe('outputSchema (JSON-schema grammar)', () => {
    const person = { type: 'object', properties: { name: { type: 'string', maxLength: 20 } }, required: ['name'], additionalProperties: false };
    const ask: GenerationInput = { kind: 'chat', messages: [{ role: 'user', content: 'Tell me the name of the girl.' }] };

    it('constrains the output to a JSON document of the schema (the tiny model writes none without it)', async () => {
      const free = await collectEngineEvents(engine, engineRequest(ask, { maxOutputTokens: 40 }));
      expect(() => JSON.parse(textOf(free.events))).toThrow();
      for (const temperature of [0, 0.8]) {
        const { events, error } = await collectEngineEvents(engine, engineRequest(ask, { maxOutputTokens: 60, outputSchema: person, sampling: { temperature } }));
        expect(error).toBeUndefined();
        expect(endOf(events).reason).toBe('stop');
        const parsed = JSON.parse(textOf(events)) as { name: unknown };
        expect(Object.keys(parsed)).toEqual(['name']);
        expect(typeof parsed.name).toBe('string');
        expect((parsed.name as string).length).toBeLessThanOrEqual(20);
        // Usage is still the tokens produced, deltas included.
        expect(events.reduce((n, e) => n + (e.type === 'delta' ? e.tokens : 0), 0)).toBe(endOf(events).usage.outputTokens);
      }
    });

    it('follows anyOf, enum, integer and array bounds', async () => {
      const schema = {
        type: 'object',
        properties: {
          n: { type: 'integer' },
          tags: { type: 'array', items: { enum: ['a', 'b'] }, maxItems: 3 },
          ok: { anyOf: [{ type: 'boolean' }, { type: 'null' }] },
        },
      };
      const { events } = await collectEngineEvents(engine, engineRequest(story, { maxOutputTokens: 80, outputSchema: schema }));
      const parsed = JSON.parse(textOf(events)) as { n: number; tags: string[]; ok: boolean | null };
      expect(Number.isInteger(parsed.n)).toBe(true);
      expect(parsed.tags.length).toBeLessThanOrEqual(3);
      expect(parsed.tags.every((t) => t === 'a' || t === 'b')).toBe(true);
      expect(parsed.ok === null || typeof parsed.ok === 'boolean').toBe(true);
    });

    it('refuses a schema the grammar cannot express (invalid_request, param output_schema) before producing anything', async () => {
      const before = engine.stats();
      const { events, error } = await collectEngineEvents(engine, engineRequest(story, { outputSchema: { allOf: [{ type: 'string' }] } }));
      expect(events).toEqual([]);
      expect(isWeirError(error) && [error.code, error.param]).toEqual(['invalid_request', 'output_schema']);
      expect(isWeirError(error) && error.message).toMatch(/allOf/);
      expect(engine.stats().generatedTokens).toBe(before.generatedTokens);
    });

    it('refuses a repetition above 1000 (llama.cpp refuses above 2000, printing the grammar to stderr) with the keyword, before any grammar is built (issue 14)', async () => {
      const schema = { type: 'object', properties: { SNTL: { type: 'string', minLength: 3000 } }, required: ['SNTL'] };
      const { events, error } = await collectEngineEvents(engine, engineRequest(story, { outputSchema: schema }));
      expect(events).toEqual([]);
      expect(isWeirError(error) && [error.code, error.param]).toEqual(['invalid_request', 'output_schema']);
      // The specific message comes from the schema check; the grammar generator's failure would be the generic one.
      expect(isWeirError(error) && error.message).toMatch(/`minLength` 3000 is above 1000/);
    });

    it('builds a grammar at the repetition bound (1000) without error', async () => {
      const schema = { type: 'object', properties: { s: { type: 'string', minLength: 1000 } } };
      const { events, error } = await collectEngineEvents(engine, engineRequest(story, { outputSchema: schema, maxOutputTokens: 2 }));
      expect(error).toBeUndefined();
      expect(endOf(events).type).toBe('end');
    });
  });

  it('keeps the engine counters monotonic and consistent with usage', async () => {
    const before = engine.stats();
    const { events } = await collectEngineEvents(engine, engineRequest(story, { maxOutputTokens: 10 }));
    const after = engine.stats();
    expect(after.generatedTokens - before.generatedTokens).toBe(endOf(events).usage.outputTokens);
    expect(after.promptTokens - before.promptTokens).toBe(endOf(events).usage.inputTokens);
    expect(after.completed).toBe(before.completed + 1);
  });
});

describeEngineContract('llamacpp (real stories260K model)', async () => ({
  adapter: await createLlamaCppEngine(spec()),
  slowAdapter: await createLlamaCppEngine(spec({ sequences: 1, testTokenDelayMs: 5 })),
  oversizedInput: { kind: 'text', text: 'Once upon a time '.repeat(80) },
  oversizedCodes: ['context_length_exceeded'],
}));
