/**
 * The budget invariant over HTTP on the all-in-one (one process, real tiny model), with its
 * database on a private Postgres database so the test samples `budget_periods` while the burst
 * runs.
 */
import { removeDir, startAllInOne } from './support/all-in-one-process';
import { DEMO_KEY } from './support/fixtures';
import { BUDGET_E2E_CONFIG, describeBudgetSuite } from './budget-suite';

jest.setTimeout(180_000);

describeBudgetSuite('all-in-one', async (databaseUrl) => {
  const weir = await startAllInOne({ configYaml: BUDGET_E2E_CONFIG, env: { WEIR_DEMO_API_KEY: DEMO_KEY, DATABASE_URL: databaseUrl } });
  return {
    urls: [weir.url],
    output: weir.output,
    async stop() {
      const code = await weir.stop();
      removeDir(weir.dataDir);
      return code === 0;
    },
  };
});
