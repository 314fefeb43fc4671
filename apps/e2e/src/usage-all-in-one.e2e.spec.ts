/**
 * The usage API and burn-rate alert on the all-in-one as `npm start` runs it: embedded
 * PGlite, the batched ledger sink (flushed every 50 ms), the in-process alert topic (observed
 * through `weir_burn_rate_alerts_total` on /metrics).
 */
import { removeDir, startAllInOne } from './support/all-in-one-process';
import { DEMO_KEY } from './support/fixtures';
import { describeUsageSuite, E2E_BURN_RATE_INTERVAL_MS, sumTenantCounter, USAGE_E2E_CONFIG } from './support/usage-suite';

jest.setTimeout(120_000);

describeUsageSuite('all-in-one (PGlite)', async () => {
  const weir = await startAllInOne({
    configYaml: USAGE_E2E_CONFIG,
    env: { WEIR_DEMO_API_KEY: DEMO_KEY, WEIR_BURN_RATE_INTERVAL_MS: String(E2E_BURN_RATE_INTERVAL_MS) },
  });
  const counted = async (tenant: string) => sumTenantCounter(await (await fetch(`${weir.opsUrl}/metrics`)).text(), 'weir_burn_rate_alerts_total', tenant);
  return {
    urls: [weir.url],
    output: weir.output,
    burnRateAlertsCounted: counted,
    async burnRateAlert(tenant, timeoutMs) {
      const until = Date.now() + timeoutMs;
      while ((await counted(tenant)) === 0) {
        if (Date.now() > until) throw new Error(`no burn-rate alert for ${tenant} within ${timeoutMs} ms`);
        await new Promise((r) => setTimeout(r, 100));
      }
      return { tenant_id: tenant };
    },
    async stop() {
      const code = await weir.stop();
      removeDir(weir.dataDir);
      return code === 0;
    },
  };
});
