/**
 * The capacity controller's NATS subjects (core NATS, JSON, at-most-once: every message is
 * superseded by the next one a few seconds later, so a lost one costs nothing):
 *
 * - `<ns>.capacity.telemetry.<pool>`: {@link PoolTelemetrySample}s, published by the scheduler
 *   every few seconds, consumed by the controller (`<ns>.capacity.telemetry.*` for all pools);
 * - `<ns>.capacity.desired.<pool>`: {@link CapacityDecision}s, published by the controller on
 *   every sample (`<ns>.capacity.desired.*` for all pools).
 *
 * A pool name may hold characters a subject token cannot (`.`, and `*`/`>` are wildcards):
 * the `<pool>` token escapes everything outside `[A-Za-z0-9_-]` as `~XX` per UTF-8 byte, as
 * usage subjects do (`usageSubject`), so `acme.dedicated` is one token, `acme~2ededicated`.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import type { CapacityDecision, PoolTelemetrySample } from '@weir/capacity';
import type { Topic } from '@weir/core';
import { natsNames } from './namespace';
import { createNatsTopic, type NatsTopicOptions } from './nats-topic';
import { jsonCodec, type TopicCodec } from './topic-codecs';
import { usageSubject } from './usage-stream';

/** The capacity subjects of one namespace. */
export interface CapacitySubjects {
  /** `<ns>.capacity.telemetry.<escaped pool>`. */
  telemetry(pool: string): string;
  /** `<ns>.capacity.telemetry.*`: every pool's samples. */
  allTelemetry: string;
  /** `<ns>.capacity.desired.<escaped pool>`. */
  desired(pool: string): string;
  /** `<ns>.capacity.desired.*`: every pool's decisions. */
  allDesired: string;
}

/**
 * The capacity subjects of namespace `ns` (`WEIR_NATS_NAMESPACE`, default `weir`).
 * @throws WeirError `invalid_request` for a malformed namespace (see `natsNames`).
 */
export function capacitySubjects(ns = 'weir'): CapacitySubjects {
  natsNames(ns);
  const telemetry = `${ns}.capacity.telemetry`;
  const desired = `${ns}.capacity.desired`;
  return {
    telemetry: (pool) => usageSubject(telemetry, pool),
    allTelemetry: `${telemetry}.*`,
    desired: (pool) => usageSubject(desired, pool),
    allDesired: `${desired}.*`,
  };
}

const SAMPLE_COUNTS = ['queuedRequests', 'runningRequests', 'replicas', 'healthyReplicas', 'admittedRequestsTotal', 'completedRequestsTotal'] as const;
const SAMPLE_AMOUNTS = ['at', 'queuedOutputTokens', 'outputTokensTotal', 'inputTokensTotal', 'busyReplicaSecondsTotal'] as const;
const DECISION_COUNTS = ['desiredReplicas', 'recommendedReplicas', 'currentReplicas', 'healthyReplicas'] as const;
const DECISION_AMOUNTS = ['demandTokensPerSecond', 'observedTokensPerSecond', 'backlogTokensPerSecond', 'admittedRequestsPerSecond', 'replicaTokensPerSecond'] as const;

/** JSON codec for {@link PoolTelemetrySample}: non-empty `pool` and `source`, non-negative finite numbers, integer counts. */
export const poolTelemetrySampleCodec: TopicCodec<PoolTelemetrySample> = jsonCodec<PoolTelemetrySample>((v) => {
  if (!isObject(v)) return 'not an object';
  if (!nonEmpty(v.pool)) return 'pool must be a non-empty string';
  if (!nonEmpty(v.source)) return 'source must be a non-empty string';
  for (const f of SAMPLE_COUNTS) if (!count(v[f])) return `${f} must be an integer ≥ 0`;
  for (const f of SAMPLE_AMOUNTS) if (!amount(v[f])) return `${f} must be a number ≥ 0`;
  return undefined;
});

/**
 * JSON codec for {@link CapacityDecision}: non-empty `pool`, integer replica counts ≥ 0,
 * rates ≥ 0, `basis` `measured` or `hint`, `lines` strings, `at` and `telemetryAt` ISO-8601.
 */
export const capacityDecisionCodec: TopicCodec<CapacityDecision> = jsonCodec<CapacityDecision>((v) => {
  if (!isObject(v)) return 'not an object';
  if (!nonEmpty(v.pool)) return 'pool must be a non-empty string';
  for (const f of DECISION_COUNTS) if (!count(v[f])) return `${f} must be an integer ≥ 0`;
  for (const f of DECISION_AMOUNTS) if (!amount(v[f])) return `${f} must be a number ≥ 0`;
  if (v.basis !== 'measured' && v.basis !== 'hint') return 'basis must be measured or hint';
  if (!Array.isArray(v.lines) || !v.lines.every((l) => typeof l === 'string')) return 'lines must be an array of strings';
  for (const f of ['at', 'telemetryAt'] as const) if (typeof v[f] !== 'string' || Number.isNaN(Date.parse(v[f]))) return `${f} must be an ISO-8601 time`;
  return undefined;
});

/** Publishes values of one kind on per-pool subjects. Never throws (faults go to the topic's logger). */
export interface CapacityPublisher<T extends { pool: string }> {
  publish(message: T): void;
}

function perPoolPublisher<T extends { pool: string }>(nc: NatsConnection, subjectOf: (pool: string) => string, codec: TopicCodec<T>, options: NatsTopicOptions): CapacityPublisher<T> {
  // One topic per pool: pools come from configuration, so the map stays small.
  const topics = new Map<string, Topic<T>>();
  return {
    publish(message) {
      let topic = topics.get(message.pool);
      if (!topic) {
        topic = createNatsTopic(nc, subjectOf(message.pool), codec, options);
        topics.set(message.pool, topic);
      }
      topic.publish(message);
    },
  };
}

/** The scheduler's side: publishes each pool's sample on `<ns>.capacity.telemetry.<pool>`. */
export function createCapacityTelemetryPublisher(nc: NatsConnection, ns = 'weir', options: NatsTopicOptions = {}): CapacityPublisher<PoolTelemetrySample> {
  return perPoolPublisher(nc, capacitySubjects(ns).telemetry, poolTelemetrySampleCodec, options);
}

/** The controller's side: publishes each decision on `<ns>.capacity.desired.<pool>`. */
export function createCapacityDecisionPublisher(nc: NatsConnection, ns = 'weir', options: NatsTopicOptions = {}): CapacityPublisher<CapacityDecision> {
  return perPoolPublisher(nc, capacitySubjects(ns).desired, capacityDecisionCodec, options);
}

/**
 * Calls `handler` with every pool's samples (`<ns>.capacity.telemetry.*`); malformed messages
 * are logged and skipped. Returns the unsubscribe function. `await nc.flush()` before relying
 * on the subscription being in place.
 */
export function subscribeCapacityTelemetry(nc: NatsConnection, ns: string, handler: (sample: PoolTelemetrySample) => void, options: NatsTopicOptions = {}): () => void {
  return createNatsTopic(nc, capacitySubjects(ns).allTelemetry, poolTelemetrySampleCodec, options).subscribe(handler);
}

/**
 * Calls `handler` with every decision (`<ns>.capacity.desired.*`), or only `pool`'s when given;
 * malformed messages are logged and skipped. Returns the unsubscribe function.
 */
export function subscribeCapacityDecisions(nc: NatsConnection, ns: string, handler: (decision: CapacityDecision) => void, options: NatsTopicOptions & { pool?: string } = {}): () => void {
  const subjects = capacitySubjects(ns);
  const subject = options.pool !== undefined ? subjects.desired(options.pool) : subjects.allDesired;
  return createNatsTopic(nc, subject, capacityDecisionCodec, options).subscribe(handler);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function nonEmpty(v: unknown): boolean {
  return typeof v === 'string' && v.length > 0;
}

function count(v: unknown): boolean {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

function amount(v: unknown): boolean {
  return typeof v === 'number' && Number.isFinite(v) && v >= 0;
}
