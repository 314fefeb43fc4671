/**
 * End-to-end on the split topology: router, admission, scheduler, streaming relay, ledger
 * and two gateways as separate processes over gRPC and NATS JetStream (the machine's
 * 127.0.0.1:4222), two llama.cpp engine replicas per revision, the ledger on a private
 * Postgres database. The suite body is the all-in-one's, unchanged.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startSplitTopology } from '@weir/launcher';
import { tinyModelPath } from '@weir/testing';
import { describeE2ESuite, sumEngineOutputTokens } from './support/e2e-suite';

jest.setTimeout(180_000);

describeE2ESuite('split topology', async ({ configYaml, demoKey, databaseUrl }) => {
  const workDir = mkdtempSync(path.join(os.tmpdir(), 'weir-split-e2e-'));
  const topology = await startSplitTopology({
    configText: configYaml,
    workDir,
    modelPath: tinyModelPath(),
    databaseUrl,
    // Its own NATS names: never mixes with another topology on the shared server.
    natsNamespace: `e2e-${randomBytes(4).toString('hex')}`,
    deleteNatsStreamOnStop: true,
    env: { WEIR_DEMO_API_KEY: demoKey },
  });
  return {
    url: topology.gateways[0].url,
    urls: topology.gateways.map((g) => g.url),
    output: topology.output,
    async engineOutputTokens(revisionId) {
      let total = 0;
      for (const e of topology.engines.filter((x) => x.revisionId === revisionId)) {
        total += sumEngineOutputTokens(await (await fetch(`${e.url}/metrics`)).text(), revisionId);
      }
      return total;
    },
    async stop() {
      const clean = await topology.stop();
      rmSync(workDir, { recursive: true, force: true });
      return clean;
    },
  };
});
