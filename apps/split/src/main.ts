/**
 * `npm run split`: the split topology on this machine — router, admission, scheduler,
 * streaming relay, ledger and two gateways as separate processes, two llama.cpp engine
 * replicas per llama.cpp revision — against the machine's Postgres and NATS JetStream.
 * Prints where each listens; Ctrl-C stops them all (gateways first, engines last).
 *
 * Environment: WEIR_CONFIG (default config/weir.example.yaml), WEIR_MODEL_PATH, DATABASE_URL
 * (default postgres://postgres@127.0.0.1:5432/weir, created if missing), NATS_URL (default
 * nats://127.0.0.1:4222), WEIR_NATS_NAMESPACE (default weir; two topologies on one NATS server
 * need different ones), WEIR_DEMO_API_KEY (default: a new key, printed), SPLIT_GATEWAYS
 * (default 2), SPLIT_ADMISSION_INSTANCES (default 2), SPLIT_ENGINES_PER_REVISION (default 2),
 * WEIR_DATA_DIR (default .data), LOG_LEVEL, SPLIT_CONTROL_PLANE (default 1: the control plane runs
 * and the data plane takes its configuration from its signed snapshots; 0: every service reads the
 * file), WEIR_ADMIN_TOKEN (the control plane's bootstrap admin token; default: a new one, printed),
 * WEIR_CONFIG_MAX_STALENESS_MS (default 300,000: beyond this snapshot age every data-plane service
 * refuses requests with 503 config_stale), WEIR_CONFIG_HEARTBEAT_MS (default 5,000: the control
 * plane's heartbeat; must be below the staleness bound), WEIR_CONFIG_IMPORT (default placement:
 * on a database that already holds configuration the control plane takes each revision's replicas
 * — this start's engine addresses — from the derived file and keeps everything else; `always`:
 * the whole file replaces the stored configuration; `empty`: the file only seeds an empty store),
 * SPLIT_TLS (default 1: the services authenticate each other with mutual TLS, certificates from a
 * development CA made at every start under `<WEIR_DATA_DIR>/split/tls`, engine replicas on HTTPS;
 * 0: plaintext. docs/security.md §8), and NATS credentials and TLS for a NATS server that requires
 * them (NATS_CREDS, NATS_NKEY_SEED_FILE, NATS_USER + NATS_PASSWORD[_FILE], NATS_TOKEN[_FILE],
 * NATS_TLS_CA, NATS_TLS_CERT + NATS_TLS_KEY: checked at start, passed to every service).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { mintApiKey } from '@weir/core';
import { mintAdminToken } from '@weir/control-plane';
import { REPO_ROOT, startSplitTopology } from '@weir/launcher';
import { EnvError, envInt, envString, readEnv } from '@weir/service-runtime';
import { ensureDatabase } from './ensure-database';

const env = readEnv({
  WEIR_CONFIG: envString(path.join(REPO_ROOT, 'config/weir.example.yaml')),
  WEIR_MODEL_PATH: envString(''),
  DATABASE_URL: envString('postgres://postgres@127.0.0.1:5432/weir'),
  NATS_URL: envString('nats://127.0.0.1:4222'),
  WEIR_NATS_NAMESPACE: envString('weir'),
  WEIR_DEMO_API_KEY: envString(''),
  SPLIT_GATEWAYS: envInt(2, 1, 16),
  SPLIT_ADMISSION_INSTANCES: envInt(2, 1, 16),
  SPLIT_ENGINES_PER_REVISION: envInt(2, 1, 16),
  WEIR_DATA_DIR: envString('.data'),
  LOG_LEVEL: envString('info'),
  SPLIT_CONTROL_PLANE: envInt(1, 0, 1),
  WEIR_ADMIN_TOKEN: envString(''),
  WEIR_CONFIG_MAX_STALENESS_MS: envInt(300_000, 1_000, 86_400_000),
  WEIR_CONFIG_HEARTBEAT_MS: envInt(5_000, 100, 60_000),
  WEIR_CONFIG_IMPORT: envString('placement'),
  SPLIT_TLS: envInt(1, 0, 1),
});
const configImport = (['empty', 'placement', 'always'] as const).find((m) => m === env.WEIR_CONFIG_IMPORT);
if (!configImport) throw new EnvError([`WEIR_CONFIG_IMPORT: expected one of empty, placement, always (got ${JSON.stringify(env.WEIR_CONFIG_IMPORT)})`]);
if (env.WEIR_CONFIG_HEARTBEAT_MS >= env.WEIR_CONFIG_MAX_STALENESS_MS) {
  // Heartbeats are what keep a current snapshot fresh: one per staleness window is too few.
  throw new EnvError([`WEIR_CONFIG_HEARTBEAT_MS: must be below WEIR_CONFIG_MAX_STALENESS_MS (${env.WEIR_CONFIG_MAX_STALENESS_MS}), or data planes go stale between heartbeats`]);
}

async function main(): Promise<void> {
  await ensureDatabase(env.DATABASE_URL);
  const demoKey = env.WEIR_DEMO_API_KEY || mintApiKey().plaintext;
  const adminToken = env.SPLIT_CONTROL_PLANE === 1 ? env.WEIR_ADMIN_TOKEN || mintAdminToken().plaintext : undefined;
  const topology = await startSplitTopology({
    configText: readFileSync(env.WEIR_CONFIG, 'utf8'),
    workDir: path.resolve(env.WEIR_DATA_DIR, 'split'),
    modelPath: env.WEIR_MODEL_PATH ? path.resolve(env.WEIR_MODEL_PATH) : undefined,
    databaseUrl: env.DATABASE_URL,
    natsUrl: env.NATS_URL,
    natsNamespace: env.WEIR_NATS_NAMESPACE,
    gateways: env.SPLIT_GATEWAYS,
    admissionInstances: env.SPLIT_ADMISSION_INSTANCES,
    enginesPerRevision: env.SPLIT_ENGINES_PER_REVISION,
    env: { WEIR_DEMO_API_KEY: demoKey, LOG_LEVEL: env.LOG_LEVEL },
    echo: true,
    tls: env.SPLIT_TLS === 1,
    ...(adminToken
      ? { controlPlane: { adminToken, maxStalenessMs: env.WEIR_CONFIG_MAX_STALENESS_MS, heartbeatMs: env.WEIR_CONFIG_HEARTBEAT_MS, configImport } }
      : {}),
  });
  const lines = [
    '',
    'Weir (split topology) is up:',
    ...topology.gateways.map((g) => `  ${g.name.padEnd(28)} ${g.url}, ops ${topology.opsUrls.get(g.name)}   (pid ${g.process.pid})`),
    ...(['router', 'scheduler', 'relay'] as const).map(
      (s) => `  ${s.padEnd(28)} grpc ${topology.addresses[s]}, ops ${topology.opsUrls.get(s)}   (pid ${topology.processes.get(s)?.pid})`,
    ),
    ...topology.addresses.admissions.map((address, i) => {
      const name = i === 0 ? 'admission' : `admission-${i}`;
      return `  ${name.padEnd(28)} grpc ${address}, ops ${topology.opsUrls.get(name)}   (pid ${topology.processes.get(name)?.pid})`;
    }),
    `  ${'ledger'.padEnd(28)} ops ${topology.opsUrls.get('ledger')}   (pid ${topology.processes.get('ledger')?.pid})`,
    ...topology.engines.map((e) => `  ${e.name.padEnd(28)} ${e.url}   (pid ${e.process.pid})`),
    ...(topology.controlPlaneUrl
      ? [`  ${'control-plane'.padEnd(28)} ${topology.controlPlaneUrl}/admin/v1, ops ${topology.opsUrls.get('control-plane')}   (pid ${topology.processes.get('control-plane')?.pid})`, `  admin token: ${adminToken}`]
      : []),
    `  config: ${topology.configPath}${topology.controlPlaneUrl ? ' (seeded into the control plane)' : ''}`,
    ...(topology.tls ? [`  mutual TLS: a new development CA and a certificate per service in ${topology.tls.dir} (SPLIT_TLS=0: plaintext)`] : ['  mutual TLS: off (SPLIT_TLS=0): anything that reaches the service ports can call them']),
    `  demo API key: ${demoKey}`,
    '',
    `Try: curl -N ${topology.gateways[0].url}/v1/chat/completions -H "Authorization: Bearer ${demoKey}" -H "Content-Type: application/json" \\`,
    `       -d '{"model":"tiny-stories","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":32,"stream":true}'`,
    'Ctrl-C stops everything.',
    '',
  ];
  process.stdout.write(lines.join('\n'));
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    process.stdout.write('\nstopping the split topology…\n');
    topology.stop().then(
      (clean) => process.exit(clean ? 0 : 1),
      () => process.exit(1),
    );
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  // `npm run split` runs this in a process group of its own (tools/scripts/run-app.mjs): if the
  // launcher dies without passing a signal on (SIGKILL), stop everything rather than run on as
  // an orphan nobody can Ctrl-C.
  const parent = process.ppid;
  const orphaned = setInterval(() => {
    if (process.ppid !== parent) {
      clearInterval(orphaned);
      stop();
    }
  }, 1_000);
  orphaned.unref();
}

main().catch((err: unknown) => {
  process.stderr.write(`weir split: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
