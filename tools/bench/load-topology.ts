/**
 * The Weir under test of the load benchmark (tools/bench/load-run.ts), in either topology,
 * behind one interface so the driver's runs, scrapes, CPU accounting and log counting are
 * the same code for both:
 *
 * - `split`: `startSplitTopology` (one gateway, one admission instance, router, scheduler,
 *   streaming relay, ledger; gRPC between them; usage over the machine's NATS under a per-run
 *   namespace whose stream is deleted at the end);
 * - `all-in-one`: the single `apps/all-in-one` process (`npm start`'s), on the same Postgres
 *   database (DATABASE_URL) and the same configuration file; it uses no NATS (its usage
 *   records go in-process to the ledger writer) and serves `/metrics` (the scheduler's queue,
 *   brownout and rejection metrics included) on its ops port (`WEIR_OPS_PORT`), not the API's.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { freePort, type ManagedProcess, type OutputLog, spawnApp, startSplitTopology, waitReady } from '@weir/launcher';

export const TOPOLOGIES = ['split', 'all-in-one'] as const;
export type TopologyName = (typeof TOPOLOGIES)[number];

/** What {@link startWeir} needs; the same for both topologies. */
export interface WeirOptions {
  /** The configuration (YAML), as for the all-in-one's WEIR_CONFIG. */
  configText: string;
  /** Where derived files go (config file, the all-in-one's data directory). */
  workDir: string;
  /** Postgres for keys, admission and the ledger. */
  databaseUrl: string;
  /** NATS namespace of the split topology (its usage stream is deleted on stop). The all-in-one uses no NATS. */
  natsNamespace: string;
  /** Extra environment for every Weir process (LOG_LEVEL …). */
  env: Record<string, string>;
  readyTimeoutMs?: number;
}

/** A running Weir, whichever the topology. */
export interface WeirUnderTest {
  topology: TopologyName;
  /** The composition in words, for the results. */
  description: string;
  /** Base URLs clients call (`/v1/chat/completions`). */
  gatewayUrls: string[];
  /** Prometheus `/metrics` URL of every Weir process, by process name. */
  metricsUrls: Map<string, string>;
  /** The `/metrics` that carries the scheduler's queue, brownout and rejection metrics. */
  schedulerMetricsUrl: string;
  /** Every Weir process by name (for CPU accounting). */
  processes: Map<string, ManagedProcess>;
  /** Every process's output so far, `[name] line` per line. */
  output(): string;
  /** Stops everything; true when every process exited 0. */
  stop(): Promise<boolean>;
}

/** Starts Weir in `topology` and waits until it is ready. */
export function startWeir(topology: TopologyName, options: WeirOptions): Promise<WeirUnderTest> {
  return topology === 'split' ? startSplit(options) : startAllInOne(options);
}

async function startSplit(options: WeirOptions): Promise<WeirUnderTest> {
  const split = await startSplitTopology({
    configText: options.configText,
    workDir: options.workDir,
    databaseUrl: options.databaseUrl,
    natsNamespace: options.natsNamespace,
    deleteNatsStreamOnStop: true,
    gateways: 1,
    admissionInstances: 1,
    env: { ...LOAD_CLIENT_LIMITS, ...options.env },
    readyTimeoutMs: options.readyTimeoutMs,
  });
  const scheduler = split.opsUrls.get('scheduler');
  if (!scheduler) throw new Error('the split topology has no scheduler ops URL');
  return {
    topology: 'split',
    description:
      "split: 1 gateway, 1 admission, router, scheduler, relay, ledger as separate processes (gRPC); a throwaway Postgres database; the machine's NATS (own namespace); engine-sim replicas as processes, reached by the relay over HTTP",
    gatewayUrls: split.gateways.map((g) => g.url),
    metricsUrls: new Map([...split.opsUrls].map(([name, url]) => [name, `${url}/metrics`])),
    schedulerMetricsUrl: `${scheduler}/metrics`,
    processes: split.processes,
    output: () => split.output(),
    stop: () => split.stop(),
  };
}

const ALL_IN_ONE = 'all-in-one';

/**
 * The open-loop generator sends every request from one address, and past saturation holds
 * hundreds of streams at once: lift the per-address connection cap (default 256) to the global one.
 */
const LOAD_CLIENT_LIMITS = { WEIR_MAX_CONNECTIONS_PER_ADDRESS: '4096' };

async function startAllInOne(options: WeirOptions): Promise<WeirUnderTest> {
  const configPath = path.join(options.workDir, 'weir.bench.yaml');
  const dataDir = path.join(options.workDir, 'all-in-one-data');
  mkdirSync(dataDir, { recursive: true });
  writeFileSync(configPath, options.configText);
  const log: OutputLog = { lines: [], echo: false };
  // A port picked free just before use can be taken in between: retry once on a fresh one.
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const opsPort = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const opsUrl = `http://127.0.0.1:${opsPort}`;
    const proc = spawnApp(
      ALL_IN_ONE,
      'all-in-one',
      {
        ...LOAD_CLIENT_LIMITS,
        ...options.env,
        PORT: String(port),
        WEIR_OPS_PORT: String(opsPort),
        HOST: '127.0.0.1',
        WEIR_CONFIG: configPath,
        WEIR_DATA_DIR: dataDir,
        DATABASE_URL: options.databaseUrl,
        WEIR_ALLOW_MODEL_DOWNLOAD: 'false',
      },
      log,
    );
    try {
      await waitReady(proc, `${url}/readyz`, options.readyTimeoutMs ?? 120_000, log);
    } catch (err) {
      await proc.stop(10_000);
      if (attempt >= 2) throw err;
      continue;
    }
    return {
      topology: 'all-in-one',
      description:
        "all-in-one: one process (gateway, admission, scheduler, router, relay, ledger writer; in-process ports, no NATS); a throwaway Postgres database (DATABASE_URL); the same configuration file, whose revision lists the engine-sim replicas (processes) as its `replicas`",
      gatewayUrls: [url],
      metricsUrls: new Map([[ALL_IN_ONE, `${opsUrl}/metrics`]]),
      schedulerMetricsUrl: `${opsUrl}/metrics`,
      processes: new Map([[ALL_IN_ONE, proc]]),
      output: () => log.lines.join('\n'),
      async stop() {
        return (await proc.stop()) === 0;
      },
    };
  }
}
