import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import {
  createModerationMetrics,
  createTelemetry,
  DURATION_BUCKETS_S,
  PROMETHEUS_SERIES,
  QUEUE_BUCKETS_S,
  TOKEN_BUCKETS,
  TPOT_BUCKETS_S,
  TTFT_BUCKETS_S,
  type RequestMetrics,
  type Telemetry,
} from './index';
import { CIRCUIT_BREAKER_STATE_VALUES } from './metric-names';

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Parses the Prometheus text exposition into samples (enough for the exporter's output). */
function parseExposition(text: string): { samples: Sample[]; types: Map<string, string> } {
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) types.set(type[1], type[2]);
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const [, k, v] of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[k] = v;
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return { samples, types };
}

/** Samples named `name` whose labels match; a label given as '' must be absent. */
function find(samples: Sample[], name: string, labels: Record<string, string> = {}): Sample[] {
  return samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => (v === '' ? s.labels[k] === undefined : s.labels[k] === v)));
}

function bucketBounds(samples: Sample[], name: string, labels: Record<string, string>): string[] {
  return find(samples, `${name}_bucket`, labels).map((s) => s.labels.le);
}

const asLe = (bounds: readonly number[]) => [...bounds.map(String), '+Inf'];

const completed: RequestMetrics = {
  tenant: 'demo',
  operation: 'chat',
  requestModel: 'tiny-stories',
  responseModel: 'stories260k@1',
  provider: 'llamacpp',
  status: 'completed',
  durationS: 0.5,
  ttftS: 0.05,
  inputTokens: 10,
  outputTokens: 21,
};

async function scrape(server: Server, path = '/metrics'): Promise<{ status: number; contentType: string | null; text: string }> {
  const res = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}${path}`);
  return { status: res.status, contentType: res.headers.get('content-type'), text: await res.text() };
}

function listen(server: Server): Promise<Server> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

describe('createTelemetry', () => {
  let telemetry: Telemetry;
  let server: Server;

  beforeEach(async () => {
    telemetry = createTelemetry({ serviceName: 'weir-test', serviceVersion: '0.1.0' });
    server = await listen(createServer(telemetry.metricsHandler));
  });
  afterEach(async () => {
    await new Promise((resolve) => server.close(resolve));
    await telemetry.shutdown();
  });

  it('exports the GenAI histograms with semconv names, buckets and attributes', async () => {
    const m = telemetry.metrics;
    m.recordRequest(completed);
    m.recordRequest({ ...completed, status: 'failed', errorType: 'upstream_timeout', ttftS: undefined, outputTokens: 0, durationS: 30 });
    m.recordRequest({ ...completed, operation: 'generation', status: 'deadline', durationS: 120, ttftS: 0.2, outputTokens: 5 });

    const { status, contentType, text } = await scrape(server);
    expect(status).toBe(200);
    expect(contentType).toMatch(/^text\/plain/);
    const { samples, types } = parseExposition(text);

    const ok = {
      gen_ai_operation_name: 'chat',
      gen_ai_provider_name: 'llamacpp',
      gen_ai_request_model: 'tiny-stories',
      gen_ai_response_model: 'stories260k@1',
      otel_scope_name: '@weir/telemetry',
      error_type: '',
    };
    // Names as the pinned exporter prints them: dots → underscores, no unit suffix.
    expect(types.get(PROMETHEUS_SERIES.serverRequestDuration)).toBe('histogram');
    expect(text).toContain('# UNIT gen_ai_server_request_duration s');
    expect(text).not.toMatch(/_seconds|gen_ai_server_request_duration_total/);

    const okDuration = find(samples, 'gen_ai_server_request_duration_count', ok);
    expect(okDuration).toHaveLength(1);
    expect(okDuration[0].value).toBe(1);
    expect(bucketBounds(samples, 'gen_ai_server_request_duration', ok)).toEqual(asLe(DURATION_BUCKETS_S));
    expect(find(samples, 'gen_ai_server_request_duration_bucket', { ...ok, le: '0.32' })[0].value).toBe(0);
    expect(find(samples, 'gen_ai_server_request_duration_bucket', { ...ok, le: '0.64' })[0].value).toBe(1);

    expect(bucketBounds(samples, 'gen_ai_server_time_to_first_token', ok)).toEqual(asLe(TTFT_BUCKETS_S));
    expect(bucketBounds(samples, 'gen_ai_server_time_per_output_token', ok)).toEqual(asLe(TPOT_BUCKETS_S));
    // TPOT = (0.5 − 0.05) / (21 − 1) = 0.0225 s, per semconv.
    expect(find(samples, 'gen_ai_server_time_per_output_token_sum', ok)[0].value).toBeCloseTo(0.0225, 10);

    for (const type of ['input', 'output']) {
      expect(bucketBounds(samples, 'gen_ai_client_token_usage', { ...ok, gen_ai_token_type: type })).toEqual(asLe(TOKEN_BUCKETS));
    }
    expect(find(samples, 'gen_ai_client_token_usage_sum', { ...ok, gen_ai_token_type: 'input' })[0].value).toBe(10);
    expect(find(samples, 'gen_ai_client_token_usage_sum', { ...ok, gen_ai_token_type: 'output' })[0].value).toBe(21);

    // error.type: the given code on failure, the status for a deadline.
    expect(find(samples, 'gen_ai_server_request_duration_sum', { ...ok, error_type: 'upstream_timeout' })[0].value).toBe(30);
    expect(find(samples, 'gen_ai_server_request_duration_sum', { ...ok, gen_ai_operation_name: 'generation', error_type: 'deadline' })[0].value).toBe(120);
    expect(find(samples, 'gen_ai_server_time_to_first_token_count', { error_type: 'upstream_timeout' })).toEqual([]);

    expect(target(samples)).toEqual({ service_name: 'weir-test', service_version: '0.1.0' });
  });

  it("exports Weir's own series: requests, rejections apart from errors, tokens, queue time, in flight", async () => {
    telemetry.metrics.recordExpiredLease({ replica: 'stories260k@1/0' });
    const m = telemetry.metrics;
    m.recordRequest(completed);
    m.recordRequest(completed);
    m.recordRequest({ ...completed, status: 'failed', errorType: 'upstream_error', outputTokens: 0 });
    m.recordRejection({ tenant: 'demo', reason: 'queue_full' });
    m.recordRequest({ ...completed, responseModel: undefined, status: 'rejected', durationS: 0.001, ttftS: undefined, inputTokens: 0, outputTokens: 0 });
    m.recordRejection({ tenant: 'other', reason: 'budget_exhausted' });
    m.recordQueueTime({ tenant: 'demo', revision: 'stories260k@1', queueS: 0.02 });
    const release = m.trackInFlight({ tenant: 'demo', revision: 'stories260k@1' });
    m.trackInFlight({ tenant: 'demo', revision: 'stories260k@1' });
    release();
    release(); // idempotent
    m.recordBurnRate({ tenant: 'demo', ratio: 4.5 });
    m.recordBurnRate({ tenant: 'fresh', ratio: Number.POSITIVE_INFINITY });
    m.recordBurnRate({ tenant: 'demo', ratio: Number.NaN }); // skipped: the gauge keeps 4.5
    m.recordBurnRateAlert({ tenant: 'demo' });
    m.recordAdmissionDecision({ outcome: 'admitted' });
    m.recordAdmissionDecision({ outcome: 'rejected', reason: 'budget_exhausted' });
    m.recordReservationsHeld(3);
    m.recordReconciliation({ expiredSettled: 2, expiredReleased: 0, corrected: 1 });
    m.recordAdmissionOverspend({ tenant: 'demo' });
    m.recordSchedulerRejection({ pool: 'interactive', tenant: 'demo', priority: 'interactive', reason: 'deadline_unmeetable' });
    m.recordSchedulerQueueTime({ pool: 'batch', tenant: 'demo', priority: 'batch', outcome: 'shed', queueS: 0.3 });
    m.recordCircuitBreakerTransition({ key: 'provider:openai', from: 'closed', to: 'open' });
    m.recordCircuitBreakerTransition({ key: 'provider:openai', from: 'open', to: 'half_open' });
    m.recordCircuitBreakerTransition({ key: 'provider:openai', from: 'half_open', to: 'open' });
    m.recordCircuitBreakerTransition({ key: 'provider:openai', from: 'open', to: 'half_open' });
    m.recordCircuitBreakerTransition({ key: 'chat@1', scope: 'revision', from: 'closed', to: 'open' });
    m.recordRedactions({ type: 'email', surface: 'content_log', count: 2 });
    m.recordRedactions({ type: 'email', surface: 'content_log', count: 1 });
    m.recordRedactions({ type: 'card', surface: 'upstream', count: 1 });
    m.recordRedactions({ type: 'card', surface: 'upstream', count: 0 });
    m.recordRedactionFailure({ reason: 'timeout', surface: 'content_log' });
    m.recordCacheLookup({ tenant: 'demo', revision: 'chat@1', result: 'miss' });
    m.recordCacheLookup({ tenant: 'demo', revision: 'chat@1', tier: 'exact', result: 'hit', savedUsd: 0.25, savedS: 1.5 });
    m.recordCacheLookup({ tenant: 'demo', revision: 'chat@1', tier: 'exact', result: 'hit', savedUsd: -1, savedS: Number.NaN }); // savings skipped, the lookup counted

    const { text } = await scrape(server);
    const schedulerSamples = parseExposition(text).samples;
    expect(find(schedulerSamples, PROMETHEUS_SERIES.schedulerRejections, { pool: 'interactive', tenant: 'demo', priority: 'interactive', reason: 'deadline_unmeetable' })[0].value).toBe(1);
    expect(bucketBounds(schedulerSamples, PROMETHEUS_SERIES.schedulerQueueDuration, { pool: 'batch', outcome: 'shed' })).toEqual(asLe(QUEUE_BUCKETS_S));
    expect(find(parseExposition(text).samples, PROMETHEUS_SERIES.admissionDecisions, { outcome: 'admitted', reason: 'none' })[0].value).toBe(1);
    expect(find(parseExposition(text).samples, PROMETHEUS_SERIES.admissionDecisions, { outcome: 'rejected', reason: 'budget_exhausted' })[0].value).toBe(1);
    expect(find(parseExposition(text).samples, PROMETHEUS_SERIES.admissionReservationsHeld, {})[0].value).toBe(3);
    expect(find(parseExposition(text).samples, PROMETHEUS_SERIES.admissionReconciled, { action: 'expired_settled' })[0].value).toBe(2);
    expect(find(parseExposition(text).samples, PROMETHEUS_SERIES.admissionReconciled, { action: 'expired_released' })).toEqual([]);
    expect(find(parseExposition(text).samples, PROMETHEUS_SERIES.admissionOverspends, { tenant: 'demo' })[0].value).toBe(1);
    const { samples, types } = parseExposition(text);
    expect(types.get(PROMETHEUS_SERIES.circuitBreakerTransitions)).toBe('counter');
    expect(find(samples, PROMETHEUS_SERIES.circuitBreakerTransitions, { key: 'provider:openai', scope: 'provider', from: 'open', to: 'half_open' })[0].value).toBe(2);
    expect(find(samples, PROMETHEUS_SERIES.circuitBreakerTransitions, { key: 'chat@1', scope: 'revision', from: 'closed', to: 'open' })[0].value).toBe(1);
    expect(find(samples, PROMETHEUS_SERIES.circuitBreakerTransitions, { key: 'provider:openai', from: 'half_open', to: 'open' })[0].value).toBe(1);
    expect(types.get(PROMETHEUS_SERIES.redactions)).toBe('counter');
    expect(find(samples, PROMETHEUS_SERIES.redactions, { type: 'email', surface: 'content_log' })[0].value).toBe(3);
    expect(find(samples, PROMETHEUS_SERIES.redactions, { type: 'card', surface: 'upstream' })[0].value).toBe(1);
    expect(find(samples, PROMETHEUS_SERIES.redactionFailures, { reason: 'timeout', surface: 'content_log' })[0].value).toBe(1);
    expect(types.get(PROMETHEUS_SERIES.cacheLookups)).toBe('counter');
    expect(find(samples, PROMETHEUS_SERIES.cacheLookups, { tenant: 'demo', revision: 'chat@1', tier: 'exact', result: 'hit' })[0].value).toBe(2);
    expect(find(samples, PROMETHEUS_SERIES.cacheLookups, { tier: 'none', result: 'miss' })[0].value).toBe(1);
    expect(find(samples, PROMETHEUS_SERIES.cacheSavedUsd, { tenant: 'demo', tier: 'exact' })[0].value).toBe(0.25);
    expect(find(samples, PROMETHEUS_SERIES.cacheSavedSeconds, { tenant: 'demo', tier: 'exact' })[0].value).toBe(1.5);
    expect(types.get(PROMETHEUS_SERIES.tenantBurnRateRatio)).toBe('gauge');
    expect(find(samples, PROMETHEUS_SERIES.tenantBurnRateRatio, { tenant: 'demo' })[0].value).toBe(4.5);
    // Spend with no baseline: Prometheus's +Inf (this parser reads it as NaN, so check the text).
    expect(text).toMatch(/^weir_tenant_burn_rate_ratio\{tenant="fresh"[^}]*\} \+Inf$/m);
    expect(types.get(PROMETHEUS_SERIES.burnRateAlerts)).toBe('counter');
    expect(find(samples, PROMETHEUS_SERIES.burnRateAlerts, { tenant: 'demo' })[0].value).toBe(1);
    expect(types.get('weir_requests_total')).toBe('counter');
    expect(types.get('weir_admission_rejections_total')).toBe('counter');
    expect(types.get('weir_tokens_total')).toBe('counter');
    expect(types.get('weir_queue_duration')).toBe('histogram');
    expect(types.get('weir_inflight_requests')).toBe('gauge');

    const rev = { tenant: 'demo', revision: 'stories260k@1' };
    expect(find(samples, 'weir_requests_total', { ...rev, status: 'completed' })[0].value).toBe(2);
    expect(find(samples, 'weir_requests_total', { ...rev, status: 'failed' })[0].value).toBe(1);
    expect(find(samples, 'weir_requests_total', { tenant: 'demo', revision: 'none', status: 'rejected' })[0].value).toBe(1);
    expect(find(samples, 'weir_admission_rejections_total')).toEqual([
      { name: 'weir_admission_rejections_total', labels: { tenant: 'demo', reason: 'queue_full', otel_scope_name: '@weir/telemetry' }, value: 1 },
      { name: 'weir_admission_rejections_total', labels: { tenant: 'other', reason: 'budget_exhausted', otel_scope_name: '@weir/telemetry' }, value: 1 },
    ]);
    // A rejection records no latency.
    expect(find(samples, 'gen_ai_server_request_duration_count').reduce((n, s) => n + s.value, 0)).toBe(3);

    expect(find(samples, 'weir_tokens_total', { ...rev, direction: 'input' })[0].value).toBe(30);
    expect(find(samples, 'weir_tokens_total', { ...rev, direction: 'output' })[0].value).toBe(42);
    expect(bucketBounds(samples, 'weir_queue_duration', rev)).toEqual(asLe(QUEUE_BUCKETS_S));
    expect(find(samples, 'weir_queue_duration_bucket', { ...rev, le: '0.025' })[0].value).toBe(1);
    expect(find(samples, 'weir_inflight_requests', rev)[0].value).toBe(1);

    // Every exported Weir series is one of PROMETHEUS_SERIES (plus histogram suffixes).
    const known = new Set(Object.values(PROMETHEUS_SERIES).flatMap((n) => [n, `${n}_bucket`, `${n}_sum`, `${n}_count`]));
    expect(samples.map((s) => s.name).filter((n) => n !== 'target_info' && !known.has(n))).toEqual([]);
    // …and every façade series is exported (the observable ones need observeEngines/observeQueues).
    const observable = new Set<string>([
      PROMETHEUS_SERIES.engineOutputTokens,
      PROMETHEUS_SERIES.engineInputTokens,
      PROMETHEUS_SERIES.engineActiveSequences,
      PROMETHEUS_SERIES.queueDepth,
      PROMETHEUS_SERIES.replicaUp,
      PROMETHEUS_SERIES.replicaSlotsInUse,
      PROMETHEUS_SERIES.replicaSlots,
      PROMETHEUS_SERIES.replicaSlotLimit,
      PROMETHEUS_SERIES.replicaKvTokensInUse,
      PROMETHEUS_SERIES.replicaKvTokens,
      PROMETHEUS_SERIES.replicaDecodeRate,
      PROMETHEUS_SERIES.replicaPrefillRate,
      PROMETHEUS_SERIES.schedulerQueueRequests,
      PROMETHEUS_SERIES.schedulerQueueTokens,
      PROMETHEUS_SERIES.poolCapacityRatio,
      PROMETHEUS_SERIES.poolBrownout,
      PROMETHEUS_SERIES.poolQueueBound,
      PROMETHEUS_SERIES.circuitBreakerState,
      PROMETHEUS_SERIES.poolDesiredReplicas,
      PROMETHEUS_SERIES.configPublishedVersion,
      PROMETHEUS_SERIES.configStoredVersion,
    ]);
    expect(new Set(samples.map((s) => s.name.replace(/_(bucket|sum|count)$/, '')))).toEqual(
      new Set([...Object.values(PROMETHEUS_SERIES).filter((n) => !observable.has(n)), 'target_info']),
    );
  });

  it('keeps labels bounded: text-like values become _OTHER, bad numbers are skipped', async () => {
    telemetry.metrics.recordRequest({
      ...completed,
      requestModel: 'write me a poem about my secret',
      status: 'failed',
      errorType: 'Error: connect ECONNREFUSED 10.0.0.1:443',
      durationS: Number.NaN,
      ttftS: -1,
    });
    const { text } = await scrape(server);
    const { samples } = parseExposition(text);
    expect(text).not.toContain('poem');
    expect(text).not.toContain('ECONNREFUSED');
    expect(find(samples, 'gen_ai_client_token_usage_count', { gen_ai_request_model: '_OTHER', error_type: '_OTHER' })).toHaveLength(2);
    expect(find(samples, 'gen_ai_server_request_duration_count')).toEqual([]);
    expect(find(samples, 'gen_ai_server_time_to_first_token_count')).toEqual([]);
  });

  it("exports the engines' own counters and queue depth, read at each scrape", async () => {
    let produced = 7;
    telemetry.observeEngines(() => [{ replica: 'stories260k@1/0', revision: 'stories260k@1', outputTokens: produced, inputTokens: 5, activeSequences: 2 }]);
    telemetry.observeQueues(() => ({ 'stories260k@1': 3 }));
    telemetry.observeReplicas(() => [{ replica: 'stories260k@1/0', revision: 'stories260k@1', up: true, slotsInUse: 2, slots: 4 }]);
    let { samples, types } = parseExposition((await scrape(server)).text);
    const labels = { replica: 'stories260k@1/0', revision: 'stories260k@1' };
    expect(find(samples, 'weir_engine_output_tokens_total', labels)[0]?.value).toBe(7);
    expect(find(samples, 'weir_engine_input_tokens_total', labels)[0]?.value).toBe(5);
    expect(find(samples, 'weir_engine_active_sequences', labels)[0]?.value).toBe(2);
    expect(find(samples, 'weir_queue_depth', { revision: 'stories260k@1' })[0]?.value).toBe(3);
    expect(find(samples, 'weir_replica_up', labels)[0]?.value).toBe(1);
    expect(find(samples, 'weir_replica_slots_in_use', labels)[0]?.value).toBe(2);
    expect(find(samples, 'weir_replica_slots', labels)[0]?.value).toBe(4);
    expect(types.get('weir_engine_output_tokens_total')).toBe('counter');
    produced = 12;
    ({ samples, types } = parseExposition((await scrape(server)).text));
    expect(find(samples, 'weir_engine_output_tokens_total', labels)[0]?.value).toBe(12);
  });

  it("exports the scheduler's queues, pools and replica capacity, read at each scrape", async () => {
    telemetry.observeReplicas(() => [
      { replica: 'm@1/0', revision: 'm@1', pool: 'batch', up: true, slotsInUse: 1, slots: 4, slotLimit: 3, kvTokensInUse: 300, kvTokens: 2_048, decodeTokensPerS: 48.5, prefillTokensPerS: 9_000 },
      { replica: 'm@1/1', revision: 'm@1', up: false, slotsInUse: 0, slots: 4, kvTokensInUse: 0, kvTokens: Number.POSITIVE_INFINITY },
    ]);
    telemetry.observeScheduler(() => ({
      queues: [{ pool: 'interactive', revision: 'm@1', tenant: 'demo', priority: 'interactive', requests: 3, tokens: 900 }],
      pools: [{ pool: 'interactive', revision: 'm@1', capacityRatio: 0.5, brownout: true, queueBound: 128 }],
    }));
    const { samples } = parseExposition((await scrape(server)).text);
    const batch = { replica: 'm@1/0', revision: 'm@1', pool: 'batch' };
    expect(find(samples, PROMETHEUS_SERIES.replicaSlotLimit, batch)[0]?.value).toBe(3);
    expect(find(samples, PROMETHEUS_SERIES.replicaSlotLimit, { replica: 'm@1/1' })).toEqual([]);
    expect(find(samples, PROMETHEUS_SERIES.replicaKvTokensInUse, batch)[0]?.value).toBe(300);
    expect(find(samples, PROMETHEUS_SERIES.replicaKvTokens, batch)[0]?.value).toBe(2_048);
    expect(find(samples, PROMETHEUS_SERIES.replicaDecodeRate, batch)[0]?.value).toBe(48.5);
    expect(find(samples, PROMETHEUS_SERIES.replicaPrefillRate, batch)[0]?.value).toBe(9_000);
    // An unbounded replica has no KV gauge; an absent pool is `interactive`.
    expect(find(samples, PROMETHEUS_SERIES.replicaKvTokens, { replica: 'm@1/1' })).toEqual([]);
    expect(find(samples, PROMETHEUS_SERIES.replicaUp, { replica: 'm@1/1', pool: 'interactive' })[0]?.value).toBe(0);
    const queue = { pool: 'interactive', revision: 'm@1', tenant: 'demo', priority: 'interactive' };
    expect(find(samples, PROMETHEUS_SERIES.schedulerQueueRequests, queue)[0]?.value).toBe(3);
    expect(find(samples, PROMETHEUS_SERIES.schedulerQueueTokens, queue)[0]?.value).toBe(900);
    const pool = { pool: 'interactive', revision: 'm@1' };
    expect(find(samples, PROMETHEUS_SERIES.poolCapacityRatio, pool)[0]?.value).toBe(0.5);
    expect(find(samples, PROMETHEUS_SERIES.poolBrownout, pool)[0]?.value).toBe(1);
    expect(find(samples, PROMETHEUS_SERIES.poolQueueBound, pool)[0]?.value).toBe(128);
  });

  it('exports moderation check latency in seconds, with second buckets, as weir_moderation_check_duration_seconds', async () => {
    const m = createModerationMetrics(telemetry.meter);
    m.onCheck('input', 'rules', 3, { reason: 'pass' });
    m.onCheck('input', 'rules', 2_000, { reason: 'timeout' });
    const { samples, types } = parseExposition((await scrape(server)).text);
    const name = 'weir_moderation_check_duration_seconds';
    expect(types.get(name)).toBe('histogram');
    expect(bucketBounds(samples, name, { stage: 'input', engine: 'rules' })).toEqual(asLe(QUEUE_BUCKETS_S));
    expect(find(samples, `${name}_sum`, { stage: 'input', engine: 'rules' })[0]?.value).toBeCloseTo(2.003, 6);
    expect(find(samples, `${name}_bucket`, { stage: 'input', engine: 'rules', le: '0.005' })[0]?.value).toBe(1);
    expect(find(samples, `${name}_bucket`, { stage: 'input', engine: 'rules', le: '2.5' })[0]?.value).toBe(2);
  });

  it('exports circuit-breaker states, read at each scrape: 0 closed, 1 half-open, 2 open', async () => {
    let openaiState: 'closed' | 'half_open' | 'open' = 'open';
    telemetry.observeCircuitBreakers(() => [
      { key: 'm@1', scope: 'revision', state: 'closed' },
      { key: 'provider:openai', scope: 'provider', state: openaiState },
      { key: 'provider:anthropic', state: 'half_open' },
    ]);
    let { samples, types } = parseExposition((await scrape(server)).text);
    expect(types.get(PROMETHEUS_SERIES.circuitBreakerState)).toBe('gauge');
    expect(find(samples, PROMETHEUS_SERIES.circuitBreakerState, { key: 'm@1', scope: 'revision' })[0]?.value).toBe(CIRCUIT_BREAKER_STATE_VALUES.closed);
    expect(find(samples, PROMETHEUS_SERIES.circuitBreakerState, { key: 'provider:openai', scope: 'provider' })[0]?.value).toBe(2);
    // No scope given: taken from the key.
    expect(find(samples, PROMETHEUS_SERIES.circuitBreakerState, { key: 'provider:anthropic', scope: 'provider' })[0]?.value).toBe(1);
    openaiState = 'closed';
    ({ samples, types } = parseExposition((await scrape(server)).text));
    expect(find(samples, PROMETHEUS_SERIES.circuitBreakerState, { key: 'provider:openai' })[0]?.value).toBe(0);
  });

  it("exports the capacity controller's desired replicas by pool, read at each scrape", async () => {
    let decisions = [
      { pool: 'interactive', desiredReplicas: 4 },
      { pool: 'acme.dedicated', desiredReplicas: 1 },
    ];
    telemetry.observeCapacity(() => decisions);
    let { samples, types } = parseExposition((await scrape(server)).text);
    expect(PROMETHEUS_SERIES.poolDesiredReplicas).toBe('weir_pool_desired_replicas');
    expect(types.get(PROMETHEUS_SERIES.poolDesiredReplicas)).toBe('gauge');
    expect(find(samples, PROMETHEUS_SERIES.poolDesiredReplicas, { pool: 'interactive' }).map((s) => s.value)).toEqual([4]);
    expect(find(samples, PROMETHEUS_SERIES.poolDesiredReplicas, { pool: 'acme.dedicated' }).map((s) => s.value)).toEqual([1]);
    decisions = [
      { pool: 'interactive', desiredReplicas: 6 },
      { pool: 'acme.dedicated', desiredReplicas: 1 },
    ];
    ({ samples, types } = parseExposition((await scrape(server)).text));
    expect(find(samples, PROMETHEUS_SERIES.poolDesiredReplicas, { pool: 'interactive' }).map((s) => s.value)).toEqual([6]);
  });

  it('exports the published and stored configuration versions, skipping unknown ones', async () => {
    let state: { publishedVersion?: number; storedVersion?: number } = { storedVersion: 3 };
    telemetry.observeConfigPublication(() => state);
    let { samples } = parseExposition((await scrape(server)).text);
    expect(find(samples, PROMETHEUS_SERIES.configStoredVersion).map((s) => s.value)).toEqual([3]);
    expect(find(samples, PROMETHEUS_SERIES.configPublishedVersion)).toEqual([]);
    state = { publishedVersion: 3, storedVersion: 4 };
    ({ samples } = parseExposition((await scrape(server)).text));
    expect(find(samples, PROMETHEUS_SERIES.configPublishedVersion).map((s) => s.value)).toEqual([3]);
    expect(find(samples, PROMETHEUS_SERIES.configStoredVersion).map((s) => s.value)).toEqual([4]);
  });

  it('mounts on express', async () => {
    const app = express();
    app.get('/metrics', telemetry.metricsHandler);
    const expressServer = await listen(createServer(app));
    try {
      telemetry.metrics.recordRejection({ tenant: 'demo', reason: 'rate_limited' });
      const { status, text } = await scrape(expressServer);
      expect(status).toBe(200);
      expect(text).toContain('weir_admission_rejections_total{tenant="demo",reason="rate_limited",otel_scope_name="@weir/telemetry"} 1');
    } finally {
      await new Promise((resolve) => expressServer.close(resolve));
    }
  });

  it('shutdown is idempotent', async () => {
    await expect(Promise.all([telemetry.shutdown(), telemetry.shutdown()])).resolves.toBeDefined();
  });
});

function target(samples: Sample[]): Record<string, string> | undefined {
  return find(samples, 'target_info')[0]?.labels;
}
