import type { GenerationOutcome } from '@weir/core';
import { createTranscript } from './transcript';

const outcome: GenerationOutcome = {
  finishReason: 'stop',
  usage: { inputTokens: 1, outputTokens: 2 },
  costNanoUsd: 3,
  modelRevision: 'r@1',
  timings: { queueMs: 0, ttftMs: 1, totalMs: 2 },
};

describe('createTranscript', () => {
  it('ended() resolves with the outcome at the end, and at once when already ended; text() joins the deltas', async () => {
    const t = createTranscript();
    let resolved: GenerationOutcome | undefined;
    const waiting = t.ended().then((o) => (resolved = o));
    t.push('a');
    t.push('b', 1);
    await Promise.resolve();
    expect(resolved).toBeUndefined();
    t.end(outcome);
    t.end({ ...outcome, finishReason: 'error' });
    await waiting;
    expect(resolved).toBe(outcome);
    await expect(t.ended()).resolves.toBe(outcome);
    expect(t.text()).toBe('ab');
    // Nothing is appended once ended.
    t.push('c');
    expect(t.text()).toBe('ab');
  });

  it('follows from any position, waiting for live deltas, then the end', async () => {
    const t = createTranscript();
    const seen: string[] = [];
    const reader = (async () => {
      for await (const ev of t.follow(1)) seen.push(ev.type === 'delta' ? `${ev.index}:${ev.text}` : `end:${ev.outcome.finishReason}`);
    })();
    t.push('zero');
    t.push('one');
    await new Promise((r) => setImmediate(r));
    t.push('two');
    t.end(outcome);
    await reader;
    expect(seen).toEqual(['1:one', '2:two', 'end:stop']);
  });

  it('a finished one replays its retained deltas and outcome', async () => {
    const t = createTranscript({ deltas: ['x', 'y'], outcome });
    expect(t.text()).toBe('xy');
    await expect(t.ended()).resolves.toBe(outcome);
  });
});
