import { createGenerationUsageLog } from './generation-usage-log';

describe('generation usage log', () => {
  it('counts a running generation, then keeps the engine’s final usage', () => {
    const log = createGenerationUsageLog({ now: () => 1_000 });
    log.start('gen_a');
    log.addOutput('gen_a', 2);
    log.addOutput('gen_a', 1);
    expect(log.get('gen_a')).toMatchObject({ promptTokens: null, completionTokens: 3, finished: false, finishReason: null });
    log.finish('gen_a', 'aborted', { inputTokens: 5, outputTokens: 4 });
    expect(log.get('gen_a')).toEqual({ generationId: 'gen_a', promptTokens: 5, completionTokens: 4, finished: true, finishReason: 'aborted', finishedAtMs: 1_000 });
    // Finished counts never change again.
    log.addOutput('gen_a', 10);
    log.finish('gen_a', 'stop', { inputTokens: 9, outputTokens: 9 });
    expect(log.get('gen_a')).toMatchObject({ promptTokens: 5, completionTokens: 4, finishReason: 'aborted' });
  });

  it('keeps what was counted when a generation fails without usage', () => {
    const log = createGenerationUsageLog();
    log.start('gen_b');
    log.addOutput('gen_b', 7);
    log.finish('gen_b', 'error');
    expect(log.get('gen_b')).toMatchObject({ promptTokens: null, completionTokens: 7, finished: true, finishReason: 'error' });
  });

  it('forgets finished generations after the retention time (fake clock)', () => {
    let now = 0;
    const log = createGenerationUsageLog({ retentionMs: 1_000, now: () => now });
    log.start('old');
    log.finish('old', 'stop', { inputTokens: 1, outputTokens: 1 });
    log.start('running');
    now = 1_000;
    expect(log.get('old')).toBeDefined();
    now = 1_001;
    expect(log.get('old')).toBeUndefined();
    log.start('new'); // writes prune
    expect(log.size()).toBe(2);
    expect(log.get('running')).toMatchObject({ finished: false });
  });

  it('holds at most maxEntries generations, dropping the oldest', () => {
    const log = createGenerationUsageLog({ maxEntries: 3 });
    for (const id of ['a', 'b', 'c', 'd', 'e']) {
      log.start(id);
      log.finish(id, 'stop', { inputTokens: 1, outputTokens: 2 });
    }
    expect(log.size()).toBe(3);
    expect(['a', 'b', 'c', 'd', 'e'].map((id) => log.get(id) !== undefined)).toEqual([false, false, true, true, true]);
  });

  it('does not know a generation it never saw', () => {
    expect(createGenerationUsageLog().get('gen_x')).toBeUndefined();
  });
});
