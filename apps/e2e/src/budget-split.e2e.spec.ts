/**
 * The budget invariant over HTTP on the split topology with two gateways and two admission
 * instances on one Postgres (ADR 0001), each gateway talking to its own admission instance:
 * both instances take traffic (checked on their own `weir_admission_decisions_total`), and the
 * budget still holds for the tenant as a whole.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startSplitTopology } from '@weir/launcher';
import { tinyModelPath } from '@weir/testing';
import { DEMO_KEY } from './support/fixtures';
import { BUDGET_E2E_CONFIG, describeBudgetSuite } from './budget-suite';

jest.setTimeout(240_000);

/** Σ of `weir_admission_decisions_total` samples in a Prometheus scrape. */
function decisions(metricsText: string): number {
  let total = 0;
  for (const line of metricsText.split('\n')) if (line.startsWith('weir_admission_decisions_total{')) total += Number(line.split(' ').at(-1));
  return total;
}

describeBudgetSuite('split topology (2 gateways, 2 admission instances)', async (databaseUrl) => {
  const workDir = mkdtempSync(path.join(os.tmpdir(), 'weir-budget-split-'));
  const topology = await startSplitTopology({
    configText: BUDGET_E2E_CONFIG,
    workDir,
    modelPath: tinyModelPath(),
    databaseUrl,
    gateways: 2,
    admissionInstances: 2,
    natsNamespace: `e2e-${randomBytes(4).toString('hex')}`,
    deleteNatsStreamOnStop: true,
    env: { WEIR_DEMO_API_KEY: DEMO_KEY },
  });
  return {
    urls: topology.gateways.map((g) => g.url),
    output: topology.output,
    async afterBurst() {
      expect(topology.addresses.admissions).toHaveLength(2);
      for (const name of ['admission', 'admission-1']) {
        const text = await (await fetch(`${topology.opsUrls.get(name)}/metrics`)).text();
        expect({ name, served: decisions(text) > 0 }).toEqual({ name, served: true });
      }
    },
    async stop() {
      const clean = await topology.stop();
      rmSync(workDir, { recursive: true, force: true });
      return clean;
    },
  };
});
