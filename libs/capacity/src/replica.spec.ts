import { CapacityInputError } from './errors';
import type { ReplicaProfile } from './profile';
import { beginStep, endStep, enqueue, IDLE_REPLICA, kvReserved, kvUsed, removeSequence, type ReplicaState } from './replica';

// 10,000 prefill tokens/s (1,000 tokens = 100 ms); 20 ms step at batch 1, 40 ms at batch 32.
const profile: ReplicaProfile = { prefillTokensPerSecond: 10_000, decodeStepMs: [[1, 20], [32, 40]], kvTokens: 65_536, maxSequences: 32 };
const seq = (id: string, inputTokens = 1000, maxOutputTokens = 5, outputTokens?: number) => ({ id, inputTokens, maxOutputTokens, outputTokens });

/** Runs the replica to idle, returning each sequence's token times (ms from 0). */
function run(p: ReplicaProfile, state: ReplicaState): Map<string, number[]> {
  const times = new Map<string, number[]>();
  let now = 0;
  for (let planned = beginStep(p, state); planned; planned = beginStep(p, state)) {
    now += planned.step.durationMs;
    const ended = endStep(planned.state);
    for (const t of ended.emitted) times.set(t.id, [...(times.get(t.id) ?? []), now]);
    state = ended.state;
  }
  return times;
}

describe('one replica, hand-checked', () => {
  it('a request alone: TTFT = prefill + one step at batch 1; TPOT = the step at batch 1', () => {
    const times = run(profile, enqueue(profile, IDLE_REPLICA, seq('a', 1000, 5)));
    // 100 ms prefill + 20 ms step, then one token every 20 ms.
    expect(times.get('a')).toEqual([120, 140, 160, 180, 200]);
  });

  it('two requests together: one prefill of both prompts, then steps at batch 2', () => {
    let state = enqueue(profile, IDLE_REPLICA, seq('a', 1000, 2));
    state = enqueue(profile, state, seq('b', 1000, 3));
    const step2 = 20 + 20 / 31;
    const times = run(profile, state);
    const close = (actual: number[] | undefined, expected: number[]) => {
      expect(actual).toHaveLength(expected.length);
      expected.forEach((e, i) => expect(actual?.[i]).toBeCloseTo(e, 9));
    };
    close(times.get('a'), [200 + step2, 200 + 2 * step2]);
    // b decodes alone (batch 1) after a leaves.
    close(times.get('b'), [200 + step2, 200 + 2 * step2, 200 + 2 * step2 + 20]);
  });

  it('a newcomer’s prefill stalls the running batch (whole-prompt prefill)', () => {
    const planned = beginStep(profile, enqueue(profile, IDLE_REPLICA, seq('a', 1000, 10)));
    if (!planned) throw new Error('no step');
    const afterFirst = endStep(planned.state).state;
    const second = beginStep(profile, enqueue(profile, afterFirst, seq('b', 2000, 10)));
    expect(second?.step).toMatchObject({ admitted: [seq('b', 2000, 10)], batchSize: 2, prefillTokens: 2000, prefillMs: 200 });
    expect(second?.step.durationMs).toBeCloseTo(200 + 20 + 20 / 31, 10);
  });

  it('ends a sequence at its own output length before its limit', () => {
    expect(run(profile, enqueue(profile, IDLE_REPLICA, seq('a', 1000, 10, 2))).get('a')).toEqual([120, 140]);
  });
});

describe('admission: KV memory and batch slots', () => {
  it('admits only when the whole context (input + max output) fits; the rest waits, head of line', () => {
    const small = { ...profile, kvTokens: 3000 };
    let state = enqueue(small, IDLE_REPLICA, seq('a', 1000, 1000, 2));
    state = enqueue(small, state, seq('b', 1000, 1000, 2));
    state = enqueue(small, state, seq('c', 10, 10, 1));
    const first = beginStep(small, state);
    expect(first?.step.admitted.map((s) => s.id)).toEqual(['a']);
    expect(first?.step.blockedBy).toBe('kv_memory');
    // c would fit, but FIFO keeps it behind b.
    expect(first?.state.waiting.map((s) => s.id)).toEqual(['b', 'c']);
    expect(kvReserved(first!.state)).toBe(2000);
    expect(kvUsed(first!.state)).toBe(1000);
    const times = run(small, state);
    // a: 100 + 20, 140. b joins after a leaves: 140 + 100 + 20 = 260 (with c: 101 ms prefill, batch 2).
    expect(times.get('a')).toEqual([120, 140]);
    expect(times.get('b')?.[0]).toBeCloseTo(140 + 101 + 20 + 20 / 31, 10);
  });

  it('caps the batch at maxSequences', () => {
    const two = { ...profile, maxSequences: 2 };
    let state: ReplicaState = IDLE_REPLICA;
    for (const id of ['a', 'b', 'c']) state = enqueue(two, state, seq(id, 10, 3));
    const planned = beginStep(two, state);
    expect(planned?.step).toMatchObject({ batchSize: 2, blockedBy: 'max_sequences' });
    expect(planned?.state.waiting.map((s) => s.id)).toEqual(['c']);
  });

  it('refuses a sequence that can never fit, naming inputTokens', () => {
    expect(() => enqueue(profile, IDLE_REPLICA, seq('big', 65_000, 1000))).toThrow(CapacityInputError);
    try {
      enqueue(profile, IDLE_REPLICA, seq('big', 65_000, 1000));
    } catch (e) {
      expect((e as CapacityInputError).field).toBe('inputTokens');
    }
  });

  it('removes a cancelled sequence, waiting or running, without touching the input state', () => {
    const state = enqueue(profile, enqueue(profile, IDLE_REPLICA, seq('a')), seq('b'));
    const running = beginStep(profile, state)!.state;
    expect(removeSequence(running, 'a').active.map((a) => a.sequence.id)).toEqual(['b']);
    expect(removeSequence(state, 'b').waiting.map((s) => s.id)).toEqual(['a']);
    expect(state.waiting).toHaveLength(2);
    expect(beginStep(profile, IDLE_REPLICA)).toBeUndefined();
  });
});
