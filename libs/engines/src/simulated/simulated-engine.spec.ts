import type { EngineEvent, SimulatedEngineSpec } from '@weir/core';
import { collectEngineEvents, describeEngineContract, engineRequest } from '@weir/testing';
import { createSimulatedEngine, fillerToken, type SimulatedEngineClock, simulatedTokenCount } from './simulated-engine';

const spec = (overrides: Partial<SimulatedEngineSpec> = {}): SimulatedEngineSpec => ({
  kind: 'simulated',
  prefillTokensPerSecond: 10_000,
  decodeStepMs: [
    [1, 20],
    [32, 40],
  ],
  kvTokens: 65_536,
  maxSequences: 32,
  seed: 1,
  ...overrides,
});

describeEngineContract('simulated replica (real time)', async () => ({
  adapter: createSimulatedEngine(spec({ prefillTokensPerSecond: 1_000_000, decodeStepMs: [[1, 1]], kvTokens: 4096 })),
  slowAdapter: createSimulatedEngine(spec({ decodeStepMs: [[1, 3]], kvTokens: 4096 })),
  oversizedInput: { kind: 'text', text: 'word '.repeat(5000) },
  oversizedCodes: ['context_length_exceeded'],
}));

/** A manual clock: timers run only when the test advances time. */
function fakeClock(): SimulatedEngineClock & { advance(ms: number): Promise<void> } {
  let now = 0;
  let timers: Array<{ at: number; fn: () => void; id: number }> = [];
  let nextId = 0;
  const settle = () => new Promise((r) => setImmediate(r));
  return {
    now: () => now,
    setTimeout: (fn, ms) => {
      const t = { at: now + ms, fn, id: nextId++ };
      timers.push(t);
      return t.id;
    },
    clearTimeout: (id) => {
      timers = timers.filter((t) => t.id !== id);
    },
    async advance(ms) {
      const until = now + ms;
      await settle();
      for (;;) {
        timers.sort((a, b) => a.at - b.at || a.id - b.id);
        const t = timers[0];
        if (!t || t.at > until) break;
        timers.shift();
        now = t.at;
        t.fn();
        await settle();
      }
      now = until;
      await settle();
    },
  };
}

/** Starts a generation and records each event with the clock time it arrived. */
function track(engine: ReturnType<typeof createSimulatedEngine>, clock: SimulatedEngineClock, request: ReturnType<typeof engineRequest>) {
  const events: Array<{ at: number; event: EngineEvent }> = [];
  const done = (async () => {
    for await (const event of engine.generate(request)) events.push({ at: clock.now(), event });
  })();
  return { events, done };
}

const words = (n: number) => ({ kind: 'text' as const, text: Array.from({ length: n }, (_, i) => `w${i}`).join(' ') });

describe('simulated replica timing (fake clock)', () => {
  it('a request alone: first token at prefill + one step, then one token per step at batch 1', async () => {
    const clock = fakeClock();
    const engine = createSimulatedEngine(spec(), { clock });
    // 999 words + BOS = 1,000 tokens: 100 ms prefill at 10,000 tokens/s.
    const a = track(engine, clock, engineRequest(words(999), { maxOutputTokens: 3 }));
    await clock.advance(119);
    expect(a.events).toEqual([]);
    await clock.advance(1);
    expect(a.events.map((e) => e.at)).toEqual([120]);
    await clock.advance(40);
    await a.done;
    expect(a.events.map((e) => [e.at, e.event.type === 'delta' ? e.event.text : e.event.reason])).toEqual([
      [120, 'tok1'],
      [140, ' tok2'],
      [160, ' tok3'],
      [160, 'length'],
    ]);
    expect(a.events.at(-1)?.event).toEqual({ type: 'end', reason: 'length', usage: { inputTokens: 1000, outputTokens: 3 }, usageSource: 'reported' });
    expect(engine.stats()).toMatchObject({ generatedTokens: 3, promptTokens: 1000, activeSequences: 0, completed: 1 });
  });

  it('batches concurrent generations: a newcomer joins at the next step, its prefill stalls the batch, then steps at batch 2', async () => {
    const clock = fakeClock();
    const engine = createSimulatedEngine(spec(), { clock });
    const a = track(engine, clock, engineRequest(words(999), { maxOutputTokens: 2 }));
    const b = track(engine, clock, engineRequest(words(999), { maxOutputTokens: 2 }));
    await clock.advance(1000);
    await Promise.all([a.done, b.done]);
    // The first request started a step alone at t = 0 (100 ms prefill + 20 ms); the second joins
    // the next one, whose 100 ms prefill stalls the first, then both decode at batch 2 (20 + 20/31 ms).
    const second = 120 + 100 + 20 + 20 / 31;
    const close = (actual: number[], expected: number[]) => {
      expect(actual).toHaveLength(expected.length);
      expected.forEach((x, i) => expect(actual[i]).toBeCloseTo(x, 9));
    };
    close(a.events.map((e) => e.at), [120, second, second]);
    close(b.events.map((e) => e.at), [second, second + 20, second + 20]);
  });

  it('keeps a sequence waiting until its whole context fits the KV cache', async () => {
    const clock = fakeClock();
    const engine = createSimulatedEngine(spec({ kvTokens: 1500 }), { clock });
    const a = track(engine, clock, engineRequest(words(499), { maxOutputTokens: 500 }));
    const b = track(engine, clock, engineRequest(words(499), { maxOutputTokens: 500 }));
    await clock.advance(1);
    expect(engine.stats()).toMatchObject({ activeSequences: 1, waitingSequences: 1 });
    await clock.advance(60_000);
    await Promise.all([a.done, b.done]);
    const firstOfB = b.events[0].at;
    expect(firstOfB).toBeGreaterThan(a.events.at(-1)!.at);
  });

  it('leaves the batch at once when aborted, billing the tokens yielded', async () => {
    const clock = fakeClock();
    const engine = createSimulatedEngine(spec(), { clock });
    const controller = new AbortController();
    const a = track(engine, clock, engineRequest(words(9), { maxOutputTokens: 100, signal: controller.signal }));
    await clock.advance(61);
    controller.abort();
    await a.done;
    expect(a.events.at(-1)?.event).toMatchObject({ type: 'end', reason: 'aborted', usage: { outputTokens: 3 } });
    expect(engine.stats()).toMatchObject({ activeSequences: 0, generatedTokens: 3 });
  });
});

describe('simulated replica output', () => {
  it('ends with stop before a stop sequence, without emitting or counting that token', async () => {
    const engine = createSimulatedEngine(spec({ decodeStepMs: [[1, 1]] }));
    const { events } = await collectEngineEvents(engine, engineRequest(words(3), { maxOutputTokens: 10, sampling: { stop: ['tok3'] } }));
    expect(events.map((e) => (e.type === 'delta' ? e.text : e.reason))).toEqual(['tok1', ' tok2', 'stop']);
    expect(events.at(-1)).toMatchObject({ usage: { inputTokens: 4, outputTokens: 2 } });
    await engine.close();
  });

  it('counts prompt tokens as BOS + words, chat rendered as plain text', async () => {
    expect(simulatedTokenCount({ kind: 'text', text: '  Once upon  a time ' })).toBe(5);
    expect(simulatedTokenCount({ kind: 'text', text: '' })).toBe(1);
    expect(simulatedTokenCount({ kind: 'chat', messages: [{ role: 'user', content: 'hi there' }, { role: 'system', content: 'be brief' }] })).toBe(5);
    expect(fillerToken(1) + fillerToken(2)).toBe('tok1 tok2');
  });

  it('refuses an invalid profile, naming the field', () => {
    expect(() => createSimulatedEngine(spec({ decodeStepMs: [] }))).toThrow(/decodeStepMs/);
  });
});

describe('simulated replica and tools', () => {
  it('refuses a request with tools with invalid_request (never drops them)', async () => {
    const engine = createSimulatedEngine(spec({ decodeStepMs: [[1, 1]] }));
    const tools = [{ type: 'function' as const, function: { name: 'get_weather' } }];
    const { events, error } = await collectEngineEvents(engine, engineRequest({ kind: 'text', text: 'hi' }, { tools }));
    expect(events).toEqual([]);
    expect(error).toMatchObject({ code: 'invalid_request', param: 'tools' });
    await engine.close();
  });
});
