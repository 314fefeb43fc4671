import { CapacityInputError } from './errors';
import { decodeStepMs, EXAMPLE_REPLICA_PROFILE, peakDecodeTokensPerSecond, prefillMs, type ReplicaProfile, validateProfile } from './profile';

describe('decodeStepMs (piecewise linear in the batch)', () => {
  it.each([
    [1, 20],
    [32, 40],
    // 20 + (40 − 20) · (16 − 1) / (32 − 1)
    [16, 20 + (20 * 15) / 31],
    [0, 20],
    [64, 40],
  ])('example profile: batch %d → %d ms', (batch, ms) => {
    expect(decodeStepMs(EXAMPLE_REPLICA_PROFILE, batch)).toBeCloseTo(ms, 10);
  });

  it('interpolates within the right segment of three points', () => {
    const profile = { decodeStepMs: [[1, 10], [5, 20], [9, 60]] as const };
    expect(decodeStepMs(profile, 3)).toBe(15);
    expect(decodeStepMs(profile, 5)).toBe(20);
    expect(decodeStepMs(profile, 7)).toBe(40);
  });

  it('is constant with a single point', () => {
    expect(decodeStepMs({ decodeStepMs: [[8, 30]] }, 1)).toBe(30);
    expect(decodeStepMs({ decodeStepMs: [[8, 30]] }, 100)).toBe(30);
  });
});

describe('prefill and peak decode', () => {
  it('prefill time is tokens / (tokens/s) in ms', () => {
    expect(prefillMs(EXAMPLE_REPLICA_PROFILE, 2000)).toBe(200);
  });
  it('peak decode throughput of the example profile is batch 32 at 40 ms: 800 tokens/s', () => {
    expect(peakDecodeTokensPerSecond(EXAMPLE_REPLICA_PROFILE)).toBeCloseTo(800, 10);
  });
});

describe('validateProfile', () => {
  const ok: ReplicaProfile = { prefillTokensPerSecond: 1000, decodeStepMs: [[1, 20]], kvTokens: 100, maxSequences: 2 };
  it('accepts the example profile', () => {
    expect(() => validateProfile(EXAMPLE_REPLICA_PROFILE)).not.toThrow();
  });
  it.each([
    ['profile.prefillTokensPerSecond', { prefillTokensPerSecond: 0 }],
    ['profile.kvTokens', { kvTokens: 1.5 }],
    ['profile.maxSequences', { maxSequences: -1 }],
    ['profile.decodeStepMs', { decodeStepMs: [] }],
    ['profile.decodeStepMs[1].batch', { decodeStepMs: [[4, 20], [2, 30]] }],
    ['profile.decodeStepMs[0].ms', { decodeStepMs: [[1, 0]] }],
  ])('names %s when it is wrong', (field, patch) => {
    const error = (() => {
      try {
        validateProfile({ ...ok, ...patch } as ReplicaProfile);
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(error).toBeInstanceOf(CapacityInputError);
    expect((error as CapacityInputError).field).toBe(field);
  });
});
