import type { BurnRateAlert, CancelMessage, ReplicaHealthEvent } from '@weir/core';

/** Turns topic messages into bytes and back. `decode` throws on a malformed message. */
export interface TopicCodec<T> {
  encode(message: T): Uint8Array;
  /** @throws Error naming the fault (never echoing the payload) when `data` is not a valid `T`. */
  decode(data: Uint8Array): T;
}

/** Subject of the cancellation fan-out (`CancelMessage`). */
export const CANCEL_SUBJECT = 'weir.cancel';
/** Subject of replica health events (`ReplicaHealthEvent`). */
export const HEALTH_SUBJECT = 'weir.health';

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

/**
 * A UTF-8 JSON codec. `validate` returns what is wrong with a parsed value (or undefined when
 * it is a valid `T`); without it any JSON value is accepted as `T`.
 */
export function jsonCodec<T>(validate?: (value: unknown) => string | undefined): TopicCodec<T> {
  return {
    encode: (message) => encoder.encode(JSON.stringify(message)),
    decode(data) {
      let value: unknown;
      try {
        value = JSON.parse(decoder.decode(data));
      } catch {
        throw new Error('message is not UTF-8 JSON');
      }
      const fault = validate?.(value);
      if (fault) throw new Error(`malformed message: ${fault}`);
      return value as T;
    },
  };
}

const CANCEL_CAUSES: ReadonlySet<string> = new Set<CancelMessage['cause']>(['client_disconnected', 'cancel_requested']);

/** JSON codec for {@link CancelMessage}: non-empty `generationId` and `tenantId`, a known `cause`. */
export const cancelMessageCodec: TopicCodec<CancelMessage> = jsonCodec<CancelMessage>((v) => {
  if (!isObject(v)) return 'not an object';
  if (!nonEmpty(v.generationId)) return 'generationId must be a non-empty string';
  if (!nonEmpty(v.tenantId)) return 'tenantId must be a non-empty string';
  if (!CANCEL_CAUSES.has(v.cause as string)) return 'cause is not a known cause';
  return undefined;
});

/** JSON codec for {@link ReplicaHealthEvent}: non-empty ids, state `healthy`/`unhealthy`, a string reason, finite `at` (ms). */
export const replicaHealthEventCodec: TopicCodec<ReplicaHealthEvent> = jsonCodec<ReplicaHealthEvent>((v) => {
  if (!isObject(v)) return 'not an object';
  if (!nonEmpty(v.replicaId)) return 'replicaId must be a non-empty string';
  if (!nonEmpty(v.revisionId)) return 'revisionId must be a non-empty string';
  if (v.state !== 'healthy' && v.state !== 'unhealthy') return 'state must be healthy or unhealthy';
  if (typeof v.reason !== 'string') return 'reason must be a string';
  if (typeof v.at !== 'number' || !Number.isFinite(v.at)) return 'at must be a number of ms';
  return undefined;
});

/**
 * JSON codec for {@link BurnRateAlert}: `type` `burn_rate`, a non-empty `tenant_id`, finite
 * non-negative `hourly_spend_usd` and `baseline_hourly_usd`, a finite `factor`, `ratio` a
 * finite number or null, and `at` an ISO-8601 string.
 */
export const burnRateAlertCodec: TopicCodec<BurnRateAlert> = jsonCodec<BurnRateAlert>((v) => {
  if (!isObject(v)) return 'not an object';
  if (v.type !== 'burn_rate') return 'type must be burn_rate';
  if (!nonEmpty(v.tenant_id)) return 'tenant_id must be a non-empty string';
  for (const f of ['hourly_spend_usd', 'baseline_hourly_usd'] as const) {
    if (typeof v[f] !== 'number' || !Number.isFinite(v[f]) || v[f] < 0) return `${f} must be a non-negative number of USD`;
  }
  if (typeof v.factor !== 'number' || !Number.isFinite(v.factor)) return 'factor must be a number';
  if (v.ratio !== null && (typeof v.ratio !== 'number' || !Number.isFinite(v.ratio))) return 'ratio must be a number or null';
  if (typeof v.at !== 'string' || Number.isNaN(Date.parse(v.at))) return 'at must be an ISO-8601 time';
  return undefined;
});

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function nonEmpty(v: unknown): boolean {
  return typeof v === 'string' && v.length > 0;
}
