import { PrometheusExporter, PrometheusSerializer } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { createMemoryConfigBucket } from './bucket';
import { encodeEnvelope, signPayload } from './envelope';
import { generateSigningKeyPair, loadSigningKey, loadVerifyKey } from './keys';
import { CONFIG_SYNC_PROMETHEUS_SERIES, createConfigSyncMetrics } from './metrics';
import { createSnapshotPublisher } from './publisher';
import { createSnapshotSubscriber } from './subscriber';

describe('createConfigSyncMetrics', () => {
  it('exports version, age and rejections by reason under the documented Prometheus names', async () => {
    const exporter = new PrometheusExporter({ preventServerStart: true });
    const provider = new MeterProvider({ readers: [exporter] });
    const scrape = async () => {
      const { resourceMetrics } = await exporter.collect();
      return new PrometheusSerializer().serialize(resourceMetrics);
    };
    const pair = generateSigningKeyPair();
    const signingKey = loadSigningKey(pair.privateKeyPem);
    const bucket = createMemoryConfigBucket();
    let now = Date.parse('2025-03-01T12:00:00.000Z');
    const sub = createSnapshotSubscriber({
      bucket,
      verifyKey: loadVerifyKey(pair.publicKeyPem),
      clock: () => now,
      initialWaitMs: 20,
      onSnapshot: () => undefined,
      metrics: createConfigSyncMetrics(provider.getMeter('test')),
    });
    // Nothing about the snapshot before there is one.
    expect(await scrape()).not.toContain(`${CONFIG_SYNC_PROMETHEUS_SERIES.snapshotVersion} `);

    const publisher = createSnapshotPublisher({ bucket, signingKey, clock: () => now });
    await publisher.publishSnapshot({ version: 7, config: {} });
    await sub.start();
    now += 2_500;
    const forged = signPayload({ type: 'snapshot', schema_version: 1, version: 8, issued_at: new Date(now).toISOString(), body: { config: {} } }, loadSigningKey(generateSigningKeyPair().privateKeyPem));
    await bucket.put('snapshot', encodeEnvelope(forged));
    await bucket.put('snapshot', new TextEncoder().encode('{}'));
    await bucket.put('snapshot', new TextEncoder().encode('{}'));
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setImmediate(resolve));

    const text = await scrape();
    expect(text).toMatch(new RegExp(`^${CONFIG_SYNC_PROMETHEUS_SERIES.snapshotVersion}(\\{[^}]*\\})? 7$`, 'm'));
    expect(text).toMatch(new RegExp(`^${CONFIG_SYNC_PROMETHEUS_SERIES.snapshotAgeSeconds}(\\{[^}]*\\})? 2.5$`, 'm'));
    expect(text).toMatch(new RegExp(`^${CONFIG_SYNC_PROMETHEUS_SERIES.snapshotRejections}\\{[^}]*reason="unknown_key"[^}]*\\} 1$`, 'm'));
    expect(text).toMatch(new RegExp(`^${CONFIG_SYNC_PROMETHEUS_SERIES.snapshotRejections}\\{[^}]*reason="unsigned"[^}]*\\} 2$`, 'm'));
    await sub.stop();
    await provider.shutdown();
  });
});
