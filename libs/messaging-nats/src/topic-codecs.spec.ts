import { burnRateAlertCodec, cancelMessageCodec, jsonCodec, replicaHealthEventCodec } from './topic-codecs';
import { usageSubject } from './usage-stream';

const enc = (o: unknown) => new TextEncoder().encode(JSON.stringify(o));

describe('topic codecs', () => {
  it('round-trip valid messages', () => {
    const cancel = { generationId: 'gen_1', tenantId: 't1', cause: 'client_disconnected' as const };
    expect(cancelMessageCodec.decode(cancelMessageCodec.encode(cancel))).toEqual(cancel);
    const health = { replicaId: 'r1', revisionId: 'tiny@1', state: 'unhealthy' as const, reason: 'timeout', at: 1 };
    expect(replicaHealthEventCodec.decode(replicaHealthEventCodec.encode(health))).toEqual(health);
  });

  it.each<[string, unknown]>([
    ['missing generationId', { tenantId: 't', cause: 'cancel_requested' }],
    ['unknown cause', { generationId: 'g', tenantId: 't', cause: 'because' }],
    ['null', null],
  ])('cancel codec refuses %s', (_n, v) => {
    expect(() => cancelMessageCodec.decode(enc(v))).toThrow(/malformed/);
  });

  it.each<[string, unknown]>([
    ['unknown state', { replicaId: 'r', revisionId: 'v', state: 'meh', reason: '', at: 1 }],
    ['string at', { replicaId: 'r', revisionId: 'v', state: 'healthy', reason: '', at: '1' }],
    ['array', []],
  ])('health codec refuses %s', (_n, v) => {
    expect(() => replicaHealthEventCodec.decode(enc(v))).toThrow(/malformed/);
  });

  const alert = { type: 'burn_rate' as const, tenant_id: 'acme', hourly_spend_usd: 4.5, baseline_hourly_usd: 1, factor: 3, ratio: 4.5, at: '2026-11-30T12:00:00.000Z' };
  it('round-trips burn-rate alerts, with and without a baseline', () => {
    expect(burnRateAlertCodec.decode(burnRateAlertCodec.encode(alert))).toEqual(alert);
    const noBaseline = { ...alert, baseline_hourly_usd: 0, ratio: null };
    expect(burnRateAlertCodec.decode(burnRateAlertCodec.encode(noBaseline))).toEqual(noBaseline);
  });

  it.each<[string, unknown]>([
    ['another type', { ...alert, type: 'budget' }],
    ['no tenant', { ...alert, tenant_id: '' }],
    ['negative spend', { ...alert, hourly_spend_usd: -1 }],
    ['string ratio', { ...alert, ratio: '4.5' }],
    ['bad time', { ...alert, at: 'now' }],
  ])('burn-rate codec refuses %s', (_n, v) => {
    expect(() => burnRateAlertCodec.decode(enc(v))).toThrow(/malformed/);
  });

  it('jsonCodec refuses non-JSON without echoing it', () => {
    expect(() => jsonCodec().decode(new TextEncoder().encode('secret{'))).toThrow(/^message is not UTF-8 JSON$/);
  });
});

describe('usageSubject', () => {
  it.each([
    ['t1', 'weir.usage.t1'],
    ['tenant_A-2', 'weir.usage.tenant_A-2'],
    ['a.b', 'weir.usage.a~2eb'],
    ['*', 'weir.usage.~2a'],
    ['>', 'weir.usage.~3e'],
    ['x y', 'weir.usage.x~20y'],
    ['é', 'weir.usage.~c3~a9'],
  ])('%s → %s', (tenant, subject) => {
    expect(usageSubject('weir.usage', tenant)).toBe(subject);
  });
});
