/**
 * The usage API and burn-rate alert on the split topology: a request on one gateway, its usage
 * record through JetStream to the ledger service and Postgres, read at `/v1/usage` on the
 * other gateway; the ledger's burn-rate check publishing on `<namespace>.alerts.burn_rate`
 * (read here by a plain NATS subscriber on the shared server).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { BurnRateAlert } from '@weir/core';
import { startSplitTopology } from '@weir/launcher';
import { burnRateAlertCodec, connectNats, natsNames } from '@weir/messaging-nats';
import { createTemporaryPostgresDatabase } from '@weir/store-pg';
import { tinyModelPath } from '@weir/testing';
import { DEMO_KEY } from './support/fixtures';
import { describeUsageSuite, E2E_BURN_RATE_INTERVAL_MS, sumTenantCounter, USAGE_E2E_CONFIG } from './support/usage-suite';

jest.setTimeout(180_000);

describeUsageSuite('split topology (two gateways, Postgres, JetStream)', async () => {
  const pg = await createTemporaryPostgresDatabase();
  const workDir = mkdtempSync(path.join(os.tmpdir(), 'weir-usage-split-'));
  const namespace = `e2e-${randomBytes(4).toString('hex')}`;
  // Subscribed before the ledger starts, so no alert can be missed.
  const nc = await connectNats({ servers: process.env.WEIR_NATS_URL || 'nats://127.0.0.1:4222', name: `weir-e2e-usage-${namespace}` });
  const alerts: BurnRateAlert[] = [];
  nc.subscribe(natsNames(namespace).burnRateAlertSubject, { callback: (err, msg) => void (err ? undefined : alerts.push(burnRateAlertCodec.decode(msg.data))) });
  await nc.flush();
  const topology = await startSplitTopology({
    configText: USAGE_E2E_CONFIG,
    workDir,
    modelPath: tinyModelPath(),
    databaseUrl: pg.url,
    natsNamespace: namespace,
    deleteNatsStreamOnStop: true,
    env: { WEIR_DEMO_API_KEY: DEMO_KEY, WEIR_BURN_RATE_INTERVAL_MS: String(E2E_BURN_RATE_INTERVAL_MS) },
  });
  const ledgerMetrics = `${topology.opsUrls.get('ledger')}/metrics`;
  return {
    urls: topology.gateways.map((g) => g.url),
    output: topology.output,
    burnRateAlertsCounted: async (tenant) => sumTenantCounter(await (await fetch(ledgerMetrics)).text(), 'weir_burn_rate_alerts_total', tenant),
    async burnRateAlert(tenant, timeoutMs) {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const alert = alerts.find((a) => a.tenant_id === tenant);
        if (alert) {
          expect(alert).toMatchObject({ type: 'burn_rate', baseline_hourly_usd: 0, factor: 3, ratio: null });
          expect(alert.hourly_spend_usd).toBeGreaterThan(0);
          return alert;
        }
        if (Date.now() > until) throw new Error(`no burn-rate alert for ${tenant} on NATS within ${timeoutMs} ms`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    async stop() {
      try {
        const clean = await topology.stop();
        // The debounce held across the whole run: one alert on the subject, none repeated.
        expect(alerts.filter((a) => a.tenant_id === 'demo')).toHaveLength(1);
        return clean;
      } finally {
        await nc.close();
        rmSync(workDir, { recursive: true, force: true });
        await pg.drop();
      }
    },
  };
});
