import { EXAMPLE_REPLICA_PROFILE } from '@weir/capacity';
import type { SimulatedEngineSpec } from '@weir/core';

/**
 * Parses `SIM_DECODE_MS`-style text, `batch:ms` pairs separated by commas (`1:20,32:40`).
 * @throws Error naming `name` when malformed or when batches do not increase.
 */
export function parseDecodePoints(raw: string, name = 'SIM_DECODE_MS'): Array<[number, number]> {
  const points = raw.split(',').map((pair): [number, number] => {
    const m = /^\s*(\d+)\s*:\s*(\d+(?:\.\d+)?)\s*$/.exec(pair);
    if (!m || Number(m[1]) < 1 || Number(m[2]) <= 0) throw new Error(`${name} must be batch:ms pairs such as 1:20,32:40, got ${JSON.stringify(raw)}`);
    return [Number(m[1]), Number(m[2])];
  });
  points.forEach((p, i) => {
    if (i > 0 && p[0] <= points[i - 1][0]) throw new Error(`${name}: batch sizes must increase (${p[0]} after ${points[i - 1][0]})`);
  });
  return points;
}

function numberEnv(env: NodeJS.ProcessEnv, name: string, fallback: number, rule: { integer?: boolean; min: number }): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < rule.min || (rule.integer && !Number.isInteger(value))) {
    throw new Error(`${name} must be ${rule.integer ? 'an integer' : 'a number'} ≥ ${rule.min}, got ${JSON.stringify(raw)}`);
  }
  return value;
}

/**
 * The simulated replica's profile from the environment; unset variables take issue 5's example
 * profile: `SIM_PREFILL_TPS` (prompt tokens/s, default 10,000), `SIM_DECODE_MS` (`batch:ms`
 * pairs, default `1:20,32:40`), `SIM_KV_TOKENS` (default 65,536), `SIM_MAX_SEQUENCES`
 * (default 32), `SIM_SEED` (default 1).
 * @throws Error naming the variable when a value is malformed.
 */
export function profileFromEnv(env: NodeJS.ProcessEnv): SimulatedEngineSpec {
  const d = EXAMPLE_REPLICA_PROFILE;
  return {
    kind: 'simulated',
    prefillTokensPerSecond: numberEnv(env, 'SIM_PREFILL_TPS', d.prefillTokensPerSecond, { min: Number.MIN_VALUE }),
    decodeStepMs: env.SIM_DECODE_MS ? parseDecodePoints(env.SIM_DECODE_MS) : d.decodeStepMs.map(([b, ms]): [number, number] => [b, ms]),
    kvTokens: numberEnv(env, 'SIM_KV_TOKENS', d.kvTokens, { integer: true, min: 1 }),
    maxSequences: numberEnv(env, 'SIM_MAX_SEQUENCES', d.maxSequences, { integer: true, min: 1 }),
    seed: numberEnv(env, 'SIM_SEED', 1, { integer: true, min: 0 }),
  };
}
