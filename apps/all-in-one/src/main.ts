/**
 * `npm start`: the all-in-one Weir (ARCHITECTURE.md §1, "all-in-one"). Reads the
 * environment (PORT, HOST, WEIR_DATA_DIR, WEIR_MODEL_PATH, WEIR_CONFIG, WEIR_DEMO_API_KEY,
 * DATABASE_URL, LOG_LEVEL, WEIR_ALLOW_MODEL_DOWNLOAD, WEIR_SHUTDOWN_GRACE_MS, for the
 * in-process control plane WEIR_ADMIN_TOKEN and WEIR_CONFIG_SIGNING_KEY_FILE, the client limits
 * of `clientLimitsFromEnv` (WEIR_HEADERS_TIMEOUT_MS, WEIR_MAX_CONNECTIONS_PER_ADDRESS,
 * WEIR_TRUSTED_PROXIES, …) and the ops listener's WEIR_OPS_PORT (default 9464, 0 = any free
 * port, off = none), WEIR_OPS_HOST (default 127.0.0.1) and WEIR_OPS_TOKEN; WEIR_TLS_CA,
 * WEIR_TLS_CERT, WEIR_TLS_KEY for engine replicas with mutual TLS: a certificate naming `relay`,
 * and `gateway` for their /tokenize — docs/security.md §8), starts the
 * platform, prints how to call it (and the admin token minted on a first start), and shuts
 * down gracefully on SIGTERM/SIGINT.
 */
import { Session } from 'node:inspector';
import { isConfigError, loadAllInOneEnv } from '@weir/config';
import { checkSuppliedAdminToken } from '@weir/control-plane';
import { clientLimitsFromEnv, EnvError, opsSettingsFromEnv } from '@weir/service-runtime';
import { createServiceTlsAgent, loadServiceTls, ServiceTlsError } from '@weir/service-tls';
import { createLogger } from '@weir/telemetry';
import { type PlatformOptions, startPlatform } from './platform';

async function main(): Promise<void> {
  let settings;
  try {
    settings = loadAllInOneEnv(process.env);
  } catch (err) {
    process.stderr.write(`weir: ${isConfigError(err) ? err.message : String(err)}\n`);
    process.exit(2);
  }
  const options: PlatformOptions = {};
  // Every bad variable of both groups in one message.
  const problems: string[] = [];
  const read = <T>(f: () => T): T | undefined => {
    try {
      return f();
    } catch (err) {
      if (!(err instanceof EnvError)) throw err;
      problems.push(...err.problems);
      return undefined;
    }
  };
  options.clientLimits = read(() => clientLimitsFromEnv(process.env));
  options.ops = read(() => opsSettingsFromEnv(process.env, { port: 'WEIR_OPS_PORT', host: 'WEIR_OPS_HOST', defaultPort: 9464 }));
  if (problems.length > 0) {
    process.stderr.write(`weir: ${new EnvError(problems).message}\n`);
    process.exit(2);
  }
  const adminToken = process.env.WEIR_ADMIN_TOKEN?.trim();
  if (adminToken) {
    const problem = checkSuppliedAdminToken(adminToken);
    if (problem) {
      process.stderr.write(`weir: environment: WEIR_ADMIN_TOKEN: ${problem} (value not shown)\n`);
      process.exit(2);
    }
    options.adminToken = adminToken;
  }
  const signingKeyFile = process.env.WEIR_CONFIG_SIGNING_KEY_FILE?.trim();
  if (signingKeyFile) options.signingKeyFile = signingKeyFile;
  // Engine replicas with mutual TLS (optional: the all-in-one has no service network of its own).
  try {
    const tls = loadServiceTls(process.env, { service: 'relay' });
    if (tls) options.replicaDispatcher = createServiceTlsAgent(tls, { expectedServer: 'engine' });
  } catch (err) {
    process.stderr.write(`weir: environment: ${err instanceof ServiceTlsError ? err.message : String(err)}\n`);
    process.exit(2);
  }
  const logger = createLogger({ name: 'weir', level: settings.logLevel });
  let platform;
  try {
    platform = await startPlatform(settings, logger, options);
  } catch (err) {
    if (isConfigError(err) || (err instanceof Error && err.message.startsWith('the ops port '))) process.stderr.write(`weir: ${err.message}\n`);
    else logger.fatal({ err }, 'weir failed to start');
    process.exit(1);
  }
  process.stdout.write(banner(platform));
  collectStartupGarbage();

  let signals = 0;
  const shutdown = (signal: string) => {
    signals++;
    if (signals > 1) {
      logger.warn({ signal }, 'second signal: exiting now');
      process.exit(130);
    }
    logger.info({ signal, graceMs: settings.shutdownGraceMs }, 'shutting down: draining streams and flushing usage');
    platform.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  // `npm start` runs this in a process group of its own (tools/scripts/run-app.mjs), out of the
  // terminal's reach: if the launcher dies without passing a signal on (SIGKILL), we are
  // re-parented; drain and exit rather than run on as an orphan nobody can Ctrl-C.
  const parent = process.ppid;
  const orphaned = setInterval(() => {
    if (process.ppid !== parent) {
      clearInterval(orphaned);
      shutdown('SIGTERM');
    }
  }, 1_000);
  orphaned.unref();
}

/**
 * A full, memory-reducing garbage collection once the platform has started. Starting leaves
 * garbage an idle process would keep for good, since only allocation triggers V8's full
 * collections: on a new data directory PGlite's closed initdb instance (its WASM memory and
 * buffers, ~350 MB of RSS), otherwise tens of MB of start-up objects and a grown young
 * generation. The inspector's HeapProfiler.collectGarbage, through an in-process session (no
 * port, no flag), collects everything collectable (several rounds, so what weak references and
 * finalizers release goes too) and shrinks the heap: measured 556–671 → 255 MiB of RSS on a
 * new data directory and 190–250 → 167 MiB on a reopened one, with the other cuts of issue 13
 * item 7 (tools/bench/idle-memory.ts). A pause of tens of ms, once, right after start. Skipped
 * where node has no inspector.
 */
function collectStartupGarbage(): void {
  let session: Session;
  try {
    session = new Session();
    session.connect();
  } catch {
    return; // node built without the inspector
  }
  // Disconnecting inside the callback hangs node 20's event loop; a task later it does not.
  session.post('HeapProfiler.collectGarbage', () => setImmediate(() => session.disconnect()));
}

function banner(p: Awaited<ReturnType<typeof startPlatform>>): string {
  const model = p.aliases[0] ?? '<no model is being served>';
  // The key is shown only when this start created or registered it; otherwise its prefix.
  const key = p.demoApiKey ?? '$WEIR_KEY';
  const keyLine = p.demoApiKey
    ? `  demo API key (shown once; stored only as its SHA-256): ${p.demoApiKey}`
    : p.demoKeyPrefix
      ? `  demo API key: wk_${p.demoKeyPrefix}_… (shown only when it was created; set WEIR_KEY to it for the line below)`
      : '  demo API key: none (the demo tenant has no active key)';
  // Like the demo key: the admin token is shown only on the start that minted it.
  const adminLine = p.adminToken
    ? `  admin token (shown once; stored only as its SHA-256): ${p.adminToken}`
    : `  admin API: ${p.url}/admin/v1 (token: WEIR_ADMIN_TOKEN, the one printed on the first start, or one minted with POST /admin/v1/admin-tokens)`;
  const lines = [
    '',
    `Weir is listening on ${p.url}`,
    `  models: ${p.aliases.length > 0 ? p.aliases.join(', ') : 'none (see the warnings below)'}`,
    keyLine,
    adminLine,
    `  metrics (operators only): ${p.opsUrl ? `${p.opsUrl}/metrics` : 'off (WEIR_OPS_PORT=off)'}`,
    '',
    'Try it:',
    `  curl -N ${p.url}/v1/chat/completions \\`,
    `    -H "Authorization: Bearer ${key}" -H "Content-Type: application/json" \\`,
    `    -d '{"model":"${model}","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":48,"stream":true}'`,
    `  curl -H "Authorization: Bearer ${p.adminToken ?? '$ADMIN'}" ${p.url}/admin/v1/tenants`,
    '',
    ...p.warnings.map((w) => `WARNING: ${w}`),
    '',
  ];
  return lines.join('\n');
}

void main();
