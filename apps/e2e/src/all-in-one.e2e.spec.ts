/**
 * End-to-end on the all-in-one as `npm start` runs it (one process, real tiny model), with
 * its ledger on a private Postgres database. The suite body is shared with the split topology.
 */
import { removeDir, startAllInOne } from './support/all-in-one-process';
import { describeE2ESuite, sumEngineOutputTokens } from './support/e2e-suite';

jest.setTimeout(120_000);

describeE2ESuite('all-in-one', async ({ configYaml, demoKey, databaseUrl }) => {
  const weir = await startAllInOne({ configYaml, env: { WEIR_DEMO_API_KEY: demoKey, DATABASE_URL: databaseUrl } });
  return {
    url: weir.url,
    output: weir.output,
    engineOutputTokens: async (revisionId) => sumEngineOutputTokens(await (await fetch(`${weir.opsUrl}/metrics`)).text(), revisionId),
    async stop() {
      const code = await weir.stop();
      removeDir(weir.dataDir);
      return code === 0;
    },
  };
});
