/**
 * The split topology on one machine (`npm run split`, and the e2e and fault suites): each
 * data-plane service its own process — router, K admission instances (default 2, sharing one
 * Postgres, gateways assigned round-robin), scheduler, streaming relay, ledger, N gateways —
 * plus M llama.cpp engine replicas per llama.cpp revision, talking
 * gRPC and NATS JetStream, with state in Postgres. The configuration file is the all-in-one's;
 * the launcher adds each revision's `replicas` (the engine processes it starts) and hands the
 * derived file to every service.
 *
 * With `controlPlane`, the control plane runs too (seeded from the derived file, signing with the
 * work directory's key pair, made on the first start and reused after) and every data-plane service takes its configuration from
 * the signed snapshots instead of the file (the verify key reaches them as a file, out of band).
 * On a store that is not empty (a second start on the same database, or the retry after a port
 * collision) the derived file's placement — the replicas on this start's ports — is imported
 * (`WEIR_CONFIG_IMPORT=placement`, see {@link ControlPlaneOptions.configImport}).
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { Kvm } from '@nats-io/kv';
import { configBucketName, generateSigningKeyPair, loadSigningKey, loadVerifyKey } from '@weir/config-sync';
import path from 'node:path';
import { parseConfig, resolveModelFile } from '@weir/config';
import { connectNats, deleteStream, type NatsAuth, natsAuthFromEnv, natsNames, pickNatsAuthEnv } from '@weir/messaging-nats';
import { createServiceTlsAgent, issueDevPki, loadServiceTls, type ServiceTls } from '@weir/service-tls';
import { fetch as undiciFetch, type Agent } from 'undici';
import { parse, stringify } from 'yaml';
import { ensureAppBundles, freePort, type ManagedProcess, type OutputLog, spawnApp, waitReady } from './processes';

/** The key files {@link ensureSigningKeyFiles} leaves in a work directory, and whether it made a new pair. */
export interface SigningKeyFiles {
  /** `<workDir>/config-signing-key.pem`: the control plane's Ed25519 private key, PKCS#8 PEM (mode 0600). */
  signingKeyFile: string;
  /** `<workDir>/config-public-key.pem`: its public key, SPKI PEM, which the data-plane services verify with. */
  publicKeyFile: string;
  /** `reused`: both files were kept; `public_rewritten`: the private key was kept and its public key written again; `generated`: a new pair. */
  outcome: 'reused' | 'public_rewritten' | 'generated';
}

function readKey<T>(file: string, load: (pem: Buffer) => T): T | undefined {
  if (!existsSync(file)) return undefined;
  try {
    return load(readFileSync(file));
  } catch {
    return undefined; // unreadable or not an Ed25519 key of that kind: replaced below
  }
}

/**
 * The split topology's config-signing key pair, kept in `workDir` across starts: a restart signs
 * with the same key, so each service's last-good snapshot file (signed by it) still verifies
 * and helps on a cold start, instead of every service logging "not a configured verify key".
 * An existing private key that `@weir/config-sync`'s `loadSigningKey` accepts is kept; the
 * public key file is kept when `loadVerifyKey` accepts it and its key id matches, else written
 * again from the private key. A missing or invalid private key is replaced by a new pair.
 * No key material is logged.
 *
 * @returns the two file paths and what was done.
 * @throws when the files cannot be read or written (a filesystem error).
 */
export function ensureSigningKeyFiles(workDir: string): SigningKeyFiles {
  const signingKeyFile = path.join(workDir, 'config-signing-key.pem');
  const publicKeyFile = path.join(workDir, 'config-public-key.pem');
  const signing = readKey(signingKeyFile, loadSigningKey);
  if (signing) {
    // The control plane refuses a signing key others can read; the launcher's own file is fixed.
    chmodSync(signingKeyFile, 0o600);
    if (readKey(publicKeyFile, loadVerifyKey)?.keyId === signing.keyId) return { signingKeyFile, publicKeyFile, outcome: 'reused' };
    writeFileSync(publicKeyFile, signing.publicKey.export({ type: 'spki', format: 'pem' }).toString());
    return { signingKeyFile, publicKeyFile, outcome: 'public_rewritten' };
  }
  const keys = generateSigningKeyPair();
  writeFileSync(signingKeyFile, keys.privateKeyPem, { mode: 0o600 });
  chmodSync(signingKeyFile, 0o600); // `mode` applies only to a new file (a replaced invalid one keeps its mode)
  writeFileSync(publicKeyFile, keys.publicKeyPem);
  return { signingKeyFile, publicKeyFile, outcome: 'generated' };
}

/** Options of {@link startSplitTopology}. */
export interface SplitTopologyOptions {
  /** The configuration (YAML or JSON text), as for the all-in-one's WEIR_CONFIG. */
  configText: string;
  /** Where derived files go (the split config, the model cache). Created if missing. */
  workDir: string;
  /** A GGUF file standing in for llama.cpp revisions that name no `model_path` (WEIR_MODEL_PATH). */
  modelPath?: string;
  /** Postgres for keys and the ledger. */
  databaseUrl: string;
  /** NATS with JetStream. Default `nats://127.0.0.1:4222`. */
  natsUrl?: string;
  /**
   * This deployment's NATS namespace (`WEIR_NATS_NAMESPACE`): streams, subjects and the
   * ledger's consumer are named after it, so topologies sharing a NATS server never take each
   * other's usage records or health events. Default `weir`.
   */
  natsNamespace?: string;
  /** Delete the namespace's usage stream after `stop()` (throwaway test topologies). Default false. */
  deleteNatsStreamOnStop?: boolean;
  /** Gateway replicas. Default 2. */
  gateways?: number;
  /**
   * Admission instances, all on `databaseUrl`, each deciding in memory on its budget leases
   * (ADR 0002); gateway i prefers instance i mod N and fails over to the others. Default 2.
   */
  admissionInstances?: number;
  /** Engine replicas per llama.cpp revision. Default 2. */
  enginesPerRevision?: number;
  /**
   * Extra environment for every process (e.g. WEIR_DEMO_API_KEY, LOG_LEVEL). NATS credentials
   * and TLS (`NATS_CREDS`, `NATS_USER` + `NATS_PASSWORD_FILE`, `NATS_TLS_CA`, …: docs/security.md
   * §8), here or in the launcher's own environment, go to every service that connects to NATS
   * and to the launcher's own connection; they are checked before anything starts.
   */
  env?: Record<string, string | undefined>;
  /** Echo every process's output to this process's stdout, prefixed. Default false. */
  echo?: boolean;
  /** How long every process may take to become ready (ms). Default 120,000. */
  readyTimeoutMs?: number;
  /** Run the control plane and configure the data plane from its signed snapshots. Default: off (the file). */
  controlPlane?: ControlPlaneOptions;
  /**
   * Mutual TLS between the services (issue 14 part 8): a new development CA and one certificate
   * per service under `<workDir>/tls` (files 0600), handed to each process as `WEIR_TLS_*`;
   * gRPC over TLS, engine replicas on HTTPS. Default true; false: plaintext (as before).
   */
  tls?: boolean;
}

/** The development PKI of a running split topology (see {@link SplitTopologyOptions.tls}). */
export interface SplitTopologyTls {
  /** `<workDir>/tls`: the CA certificate and every service's certificate and key. */
  dir: string;
  /** The CA certificate every service trusts. */
  caFile: string;
  /** The `WEIR_TLS_*` environment of a process with certificate `name` (`gateway`, …, `reconcile`, `operator`). */
  env(name: string): Record<string, string>;
  /** The loaded material of certificate `name`. */
  material(name: string): ServiceTls;
  /**
   * `fetch` (undici's) with the `operator` certificate, for reading engines' `/metrics` and
   * `/stats` in tests and tools (the operator may read, not generate).
   */
  fetch: typeof undiciFetch;
}


/** The control plane of a split topology (see {@link SplitTopologyOptions.controlPlane}). */
export interface ControlPlaneOptions {
  /** The bootstrap admin token (`wa_<prefix>_<secret>`), registered hashed. */
  adminToken: string;
  /** Data planes refuse requests (503 `config_stale`) beyond this snapshot age (ms). Default 300,000. */
  maxStalenessMs?: number;
  /** Heartbeat and publication-retry interval of the control plane (ms). Default 5,000. */
  heartbeatMs?: number;
  /**
   * The control plane's `WEIR_CONFIG_IMPORT`: what the derived file does to a store that already
   * holds configuration. `placement` (default): each revision's replicas are taken from it (the
   * engines this start runs; anything else changed through the admin API stays); `always`: the
   * whole file replaces the stored configuration when it differs; `empty`: nothing (the store
   * keeps the previous start's engine addresses — only for a database used once).
   */
  configImport?: 'empty' | 'placement' | 'always';
}

/** A running split topology. */
export interface SplitTopology {
  gateways: { name: string; url: string; process: ManagedProcess }[];
  engines: { name: string; replicaId: string; revisionId: string; url: string; process: ManagedProcess }[];
  /**
   * Every process by name: `router`, `admission` (and `admission-1`, … for more instances),
   * `scheduler`, `relay`, `ledger`, `gateway-0`, `engine:<replica id>`.
   */
  processes: Map<string, ManagedProcess>;
  /** gRPC addresses of the services (`host:port`); `admission` is the first admission instance, `admissions` all of them. */
  addresses: { router: string; admission: string; admissions: string[]; scheduler: string; relay: string };
  /** Ops (healthz/readyz/metrics) base URLs by process name; a gateway's and the control plane's are their ops listeners, not their public ports. */
  opsUrls: Map<string, string>;
  /** The derived configuration file every service reads (with `controlPlane`: the control plane's seed). */
  configPath: string;
  /** The control plane's base URL (admin API under `/admin/v1`), when it runs. */
  controlPlaneUrl?: string;
  /** The development PKI, when the services use mutual TLS (default). */
  tls?: SplitTopologyTls;
  /**
   * `fetch` for the services' own ports (engine replicas' `/metrics`, `/stats`): with mutual TLS
   * the `operator` certificate's ({@link SplitTopologyTls.fetch}), else the global fetch.
   */
  serviceFetch(url: string): Promise<{ ok: boolean; status: number; text(): Promise<string>; json(): Promise<unknown> }>;
  /** Every process's output so far, `[name] line` per line. */
  output(): string;
  /** Restarts a stopped or killed process with its original environment and waits until it is ready. */
  restart(name: string): Promise<ManagedProcess>;
  /** Stops everything (SIGTERM; gateways first, engines last); true when every process exited 0. */
  stop(): Promise<boolean>;
}

interface ProcessSpec {
  name: string;
  app: string;
  env: Record<string, string | undefined>;
  readyUrl: string;
  /** Its readiness URL needs the PKI's CA (an HTTPS engine replica). */
  tlsReady?: boolean;
}

/** Every certificate the launcher issues: one per service, `operator` for the launcher and tests. */
const DEV_CERTIFICATES = ['gateway', 'admission', 'scheduler', 'router', 'relay', 'engine', 'reconcile', 'operator'] as const;

async function startDevPki(workDir: string): Promise<{ tls: SplitTopologyTls; agent: Agent }> {
  const dir = path.join(workDir, 'tls');
  const pki = await issueDevPki({ dir, certificates: DEV_CERTIFICATES.map((name) => ({ name })) });
  const materials = new Map(DEV_CERTIFICATES.map((name) => [name as string, loadServiceTls(pki.env(name), { service: name }) as ServiceTls]));
  const material = (name: string): ServiceTls => {
    const m = materials.get(name);
    if (!m) throw new Error(`no development certificate named ${name}`);
    return m;
  };
  const agent = createServiceTlsAgent(material('operator'));
  const fetchWithCertificate = ((input, init) => undiciFetch(input, { ...init, dispatcher: agent })) as typeof undiciFetch;
  return { agent, tls: { dir, caFile: pki.caFile, env: (name) => pki.env(name), material, fetch: fetchWithCertificate } };
}

/**
 * Starts the split topology and waits until every process is ready. Ports are picked free
 * just before use, so another program can take one in between: a start that fails is stopped
 * and retried once on fresh ports.
 */
export async function startSplitTopology(options: SplitTopologyOptions): Promise<SplitTopology> {
  try {
    return await startOnce(options);
  } catch (first) {
    try {
      return await startOnce(options);
    } catch {
      throw first;
    }
  }
}

/**
 * The NATS credentials and TLS settings of a split topology: the `NATS_*` authentication
 * variables of `base` (the launcher's environment) overlaid by `env` (`SplitTopologyOptions.env`),
 * as `env` for every service that connects to NATS, and read as `auth` for the launcher's own
 * connection. Checked here, before anything starts: a loose key file or two methods at once
 * stop the launcher, not each of its processes.
 * @throws WeirError `invalid_request` as {@link natsAuthFromEnv} does.
 */
export function splitNatsAuth(
  env: Record<string, string | undefined> | undefined,
  base: Record<string, string | undefined> = process.env,
): { env: Record<string, string>; auth: NatsAuth } {
  const picked = pickNatsAuthEnv({ ...base, ...env });
  return { env: picked, auth: natsAuthFromEnv(picked) };
}

async function startOnce(options: SplitTopologyOptions): Promise<SplitTopology> {
  const host = '127.0.0.1';
  const natsUrl = options.natsUrl ?? 'nats://127.0.0.1:4222';
  const gatewayCount = options.gateways ?? 2;
  const admissionCount = Math.max(1, options.admissionInstances ?? 2);
  const perRevision = options.enginesPerRevision ?? 2;
  mkdirSync(options.workDir, { recursive: true });
  const log: OutputLog = { lines: [], echo: options.echo ?? false };
  const { env: natsAuthEnv, auth: natsAuth } = splitNatsAuth(options.env);
  // A new CA and certificates at every start (a restart is a rotation); none with `tls: false`.
  const pki = options.tls === false ? undefined : await startDevPki(options.workDir);
  const tlsEnv = (name: string): Record<string, string> => (pki ? pki.tls.env(name) : {});
  const scheme = pki ? 'https' : 'http';
  const config = parseConfig(options.configText, 'config');
  const doc = parse(options.configText) as { revisions: Array<Record<string, unknown>> };

  const specs: ProcessSpec[] = [];
  const engines: { name: string; replicaId: string; revisionId: string; url: string }[] = [];
  for (const revision of config.revisions) {
    if (revision.engine.kind !== 'llamacpp') continue;
    const spec = revision.engine;
    const file = await resolveModelFile(spec, {
      modelPathOverride: spec.modelPath ? undefined : options.modelPath,
      cacheDir: path.join(options.workDir, 'models'),
      allowDownload: true,
    });
    if (!file.ok) throw new Error(`revision ${revision.id}: ${file.reason}`);
    const replicas = [];
    for (let i = 0; i < perRevision; i++) {
      const port = await freePort();
      const replicaId = `${revision.id}/${i}`;
      const name = `engine:${replicaId}`;
      const url = `${scheme}://${host}:${port}`;
      specs.push({
        name,
        app: 'engine-llamacpp',
        readyUrl: `${url}/readyz`,
        tlsReady: pki !== undefined,
        env: {
          ...tlsEnv('engine'),
          PORT: String(port),
          HOST: host,
          WEIR_MODEL_PATH: file.path,
          WEIR_MODEL_NAME: revision.id,
          WEIR_REPLICA_ID: replicaId,
          WEIR_REVISION_ID: revision.id,
          ENGINE_SEQUENCES: String(spec.sequences),
          ENGINE_THREADS: String(spec.threads),
          ENGINE_CONTEXT_SIZE: String(spec.contextSize),
          ENGINE_TEST_TOKEN_DELAY_MS: String(spec.testTokenDelayMs),
          ENGINE_EMBEDDING: revision.kind === 'embedding' ? 'true' : 'false',
        },
      });
      engines.push({ name, replicaId, revisionId: revision.id, url });
      replicas.push({ id: replicaId, base_url: `${url}/v1`, slots: spec.sequences });
    }
    const entry = doc.revisions.find((r) => r.id === revision.id);
    if (entry) entry.replicas = replicas;
  }
  const configPath = path.join(options.workDir, 'weir.split.yaml');
  writeFileSync(configPath, stringify(doc));
  parseConfig(stringify(doc), configPath); // the derived file must be valid too

  const ports = {
    router: await freePort(),
    admission: await freePort(),
    scheduler: await freePort(),
    relay: await freePort(),
  };
  const admissionNames = Array.from({ length: admissionCount }, (_, i) => (i === 0 ? 'admission' : `admission-${i}`));
  const admissionPorts = [ports.admission];
  for (let i = 1; i < admissionCount; i++) admissionPorts.push(await freePort());
  const addresses = {
    router: `${host}:${ports.router}`,
    admission: `${host}:${ports.admission}`,
    admissions: admissionPorts.map((p) => `${host}:${p}`),
    scheduler: `${host}:${ports.scheduler}`,
    relay: `${host}:${ports.relay}`,
  };
  const namespace = options.natsNamespace ?? 'weir';
  const opsUrls = new Map<string, string>();
  let snapshotEnv: Record<string, string> = {};
  let controlPlaneUrl: string | undefined;
  if (options.controlPlane) {
    const { signingKeyFile, publicKeyFile } = ensureSigningKeyFiles(options.workDir);
    const port = await freePort();
    const cpOps = await freePort();
    controlPlaneUrl = `http://${host}:${port}`;
    opsUrls.set('control-plane', `http://${host}:${cpOps}`);
    specs.push({
      name: 'control-plane',
      app: 'control-plane',
      readyUrl: `${controlPlaneUrl}/readyz`,
      env: {
        ...options.env,
        ...natsAuthEnv,
        HOST: host,
        WEIR_CONTROL_PLANE_PORT: String(port),
        OPS_PORT: String(cpOps),
        DATABASE_URL: options.databaseUrl,
        NATS_URL: natsUrl,
        WEIR_NATS_NAMESPACE: namespace,
        WEIR_CONFIG: configPath,
        WEIR_CONFIG_IMPORT: options.controlPlane.configImport ?? 'placement',
        WEIR_ADMIN_TOKEN: options.controlPlane.adminToken,
        WEIR_CONFIG_SIGNING_KEY_FILE: signingKeyFile,
        WEIR_CONFIG_HEARTBEAT_MS: String(options.controlPlane.heartbeatMs ?? 5_000),
      },
    });
    snapshotEnv = {
      WEIR_CONFIG_PUBLIC_KEY_FILE: publicKeyFile,
      WEIR_CONFIG_CACHE_DIR: path.join(options.workDir, 'config-cache'),
      WEIR_CONFIG_MAX_STALENESS_MS: String(options.controlPlane.maxStalenessMs ?? 300_000),
    };
  }
  const common = {
    ...options.env,
    ...natsAuthEnv,
    // With a control plane the services read its snapshots; the file stays for the ledger's defaults.
    WEIR_CONFIG: configPath,
    ...snapshotEnv,
    HOST: host,
    NATS_URL: natsUrl,
    WEIR_NATS_NAMESPACE: namespace,
    DATABASE_URL: options.databaseUrl,
  };
  for (const service of ['router', 'admission', 'scheduler', 'relay'] as const) {
    const ops = await freePort();
    opsUrls.set(service, `http://${host}:${ops}`);
    specs.push({
      name: service,
      app: service === 'relay' ? 'streaming-relay' : service,
      readyUrl: `http://${host}:${ops}/readyz`,
      env: { ...common, ...tlsEnv(service), GRPC_PORT: String(ports[service]), OPS_PORT: String(ops), ...(service === 'admission' ? { SCHEDULER_ADDR: addresses.scheduler } : {}) },
    });
  }
  for (let i = 1; i < admissionCount; i++) {
    const ops = await freePort();
    opsUrls.set(admissionNames[i], `http://${host}:${ops}`);
    specs.push({
      name: admissionNames[i],
      app: 'admission',
      readyUrl: `http://${host}:${ops}/readyz`,
      env: { ...common, ...tlsEnv('admission'), GRPC_PORT: String(admissionPorts[i]), OPS_PORT: String(ops), SCHEDULER_ADDR: addresses.scheduler },
    });
  }
  {
    const ops = await freePort();
    opsUrls.set('ledger', `http://${host}:${ops}`);
    specs.push({ name: 'ledger', app: 'ledger', readyUrl: `http://${host}:${ops}/readyz`, env: { ...common, OPS_PORT: String(ops) } });
  }
  const gateways: { name: string; url: string }[] = [];
  for (let i = 0; i < gatewayCount; i++) {
    const port = await freePort();
    const ops = await freePort();
    const url = `http://${host}:${port}`;
    const name = `gateway-${i}`;
    opsUrls.set(name, `http://${host}:${ops}`);
    gateways.push({ name, url });
    specs.push({
      name,
      app: 'gateway',
      readyUrl: `${url}/readyz`,
      env: {
        ...common,
        ...tlsEnv('gateway'),
        PORT: String(port),
        OPS_PORT: String(ops),
        // Its own instance first, the others to fail over to (a reservation stays with the
        // instance that made it; a new request may go to any).
        ADMISSION_ADDR: [...addresses.admissions.slice(i % admissionCount), ...addresses.admissions.slice(0, i % admissionCount)].join(','),
        SCHEDULER_ADDR: addresses.scheduler,
        RELAY_ADDR: addresses.relay,
      },
    });
  }

  const processes = new Map<string, ManagedProcess>();
  const byName = new Map(specs.map((s) => [s.name, s]));
  const readyTimeoutMs = options.readyTimeoutMs ?? 120_000;
  // Every stale bundle in one build, before anything starts (spawnApp would build one at a time).
  ensureAppBundles(specs.map((s) => s.app));
  // The control plane first: the data plane waits for its first snapshot.
  const first = specs.filter((s) => s.name === 'control-plane');
  for (const s of first) processes.set(s.name, spawnApp(s.name, s.app, s.env, log));
  try {
    await Promise.all(first.map((s) => waitReady(processes.get(s.name) as ManagedProcess, s.readyUrl, readyTimeoutMs, log)));
  } catch (err) {
    for (const s of first) await processes.get(s.name)?.stop();
    await pki?.agent.close();
    throw err;
  }
  const ready = (s: ProcessSpec, p: ManagedProcess) => waitReady(p, s.readyUrl, readyTimeoutMs, log, s.tlsReady ? pki?.agent : undefined);
  for (const s of specs) if (!processes.has(s.name)) processes.set(s.name, spawnApp(s.name, s.app, s.env, log));
  const stopAll = async () => {
    // Gateways first (they drain client streams), then the services, engines last.
    const order = [...processes.keys()].sort((a, b) => rank(a) - rank(b));
    const codes: (number | null)[] = [];
    for (const group of [0, 1, 2]) {
      codes.push(...(await Promise.all(order.filter((n) => rank(n) === group).map((n) => (processes.get(n) as ManagedProcess).stop()))));
    }
    if (options.deleteNatsStreamOnStop) await deleteNamespaceStream(natsUrl, natsAuth, namespace, options.controlPlane !== undefined);
    await pki?.agent.close();
    return codes.every((c) => c === 0);
  };
  try {
    await Promise.all(specs.map((s) => ready(s, processes.get(s.name) as ManagedProcess)));
  } catch (err) {
    await stopAll();
    throw err;
  }

  return {
    get gateways() {
      return gateways.map((g) => ({ ...g, process: processes.get(g.name) as ManagedProcess }));
    },
    get engines() {
      return engines.map((e) => ({ ...e, process: processes.get(e.name) as ManagedProcess }));
    },
    processes,
    addresses,
    opsUrls,
    configPath,
    ...(controlPlaneUrl ? { controlPlaneUrl } : {}),
    ...(pki ? { tls: pki.tls } : {}),
    serviceFetch: (url) => (pki ? pki.tls.fetch(url) : fetch(url)),
    output: () => log.lines.join('\n'),
    async restart(name) {
      const s = byName.get(name);
      if (!s) throw new Error(`no process named ${name}`);
      await processes.get(name)?.stop();
      const p = spawnApp(s.name, s.app, s.env, log);
      processes.set(name, p);
      await ready(s, p);
      return p;
    },
    stop: stopAll,
  };
}

function rank(name: string): number {
  if (name.startsWith('gateway-')) return 0;
  if (name.startsWith('engine:')) return 2;
  return 1;
}

async function deleteNamespaceStream(natsUrl: string, auth: NatsAuth, namespace: string, configBucket: boolean): Promise<void> {
  const nc = await connectNats({ servers: natsUrl, name: 'weir-launcher', auth });
  try {
    await deleteStream(nc, natsNames(namespace).usageStream);
    if (configBucket) await (await new Kvm(nc).open(configBucketName(namespace))).destroy().catch(() => undefined);
  } finally {
    await nc.close();
  }
}
