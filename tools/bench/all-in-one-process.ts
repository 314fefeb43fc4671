/**
 * The all-in-one under test for the memory tools (`idle-memory.ts`, `soak.ts`): started the way
 * `npm start` starts it — plain node on the compiled bundle dist/apps/all-in-one/main.cjs — or,
 * to compare, under the tsx loader on apps/all-in-one/src/main.ts (`runner: 'tsx'`, how
 * `npm start` ran it before issue 13), with the speed probe's configuration: one
 * OpenAI-compatible revision on a mock upstream (no local engine), a tenant with a monthly
 * budget and a tokens-per-minute limit, an API key. Stopped by pid.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { appRuntimeEnv, ensureAppBundles, freePort, REPO_ROOT } from '@weir/launcher';
import { findInspectorUrl } from './inspector';
import { tasksetPath } from './proc';

/** `bundle`: node on the compiled bundle (npm start today); `tsx`: node --import tsx on the TypeScript sources (before). */
export type Runner = 'bundle' | 'tsx';

/** The API key the configuration's tenant gets (WEIR_DEMO_API_KEY). */
export const PROBE_KEY = 'wk_probe001_abcdefghijklmnopqrstuvwxyz0123';
/** The alias requests name. */
export const PROBE_MODEL = 'mock';

/**
 * The speed probe's configuration (../shared/tools/speed-probe.mjs): one `openai-compatible`
 * revision on `mockUrl`, a tenant with max_concurrent 1,024 and a tokens-per-minute limit and a
 * monthly budget that are never reached (checked on every request all the same).
 */
export function probeConfig(mockUrl: string): string {
  return `revisions:
  - id: mock@1
    model: mock
    engine: { kind: openai-compatible, base_url: "${mockUrl}/v1", upstream_model: mock }
    context_window: 8192
    max_output_tokens: 1024
    default_output_tokens: 64
    pricing: { input_per_mtok: 1.0, output_per_mtok: 4.0 }
aliases:
  - { name: mock, revision: mock@1 }
tenants:
  - id: probe
    name: Probe
    apps: [{ id: probe-app, name: Probe app }]
    allowed_aliases: ["*"]
    limits: { max_concurrent: 1024, tokens_per_minute: 100000000000, monthly_budget_usd: 1000000000 }
`;
}

/** Options of {@link startAllInOneProcess}. */
export interface AllInOneProcessOptions {
  runner: Runner;
  /** WEIR_DATA_DIR (the PGlite database lives in `<dataDir>/pg`). */
  dataDir: string;
  /** The mock upstream's origin, for the configuration. */
  mockUrl: string;
  /** Extra node options before the script (e.g. `--expose-gc`). */
  nodeArgs?: string[];
  /** Start with `--inspect=127.0.0.1:0` (for heap figures and GCs). Default false. */
  inspect?: boolean;
  /** Pin to this CPU (taskset), when taskset exists. */
  cpu?: number;
  env?: Record<string, string>;
  /** Default 120,000 ms. */
  readyTimeoutMs?: number;
  /** The configuration file's text. Default {@link probeConfig} of `mockUrl`. */
  configText?: string;
}

/** A running all-in-one. */
export interface AllInOneProcess {
  pid: number;
  url: string;
  /** ms from spawn to the first `/readyz` 200. */
  startupMs: number;
  /** Its output lines (stdout and stderr). */
  lines: string[];
  /** The inspector's WebSocket URL (with `inspect`). */
  inspectorUrl?: string;
  /** SIGTERM (SIGKILL after `timeoutMs`, default 30 s); resolves with the exit code. */
  stop(timeoutMs?: number): Promise<number | null>;
}

/** Starts the all-in-one and waits for `/readyz`; stops it again if it does not get ready. */
export async function startAllInOneProcess(options: AllInOneProcessOptions): Promise<AllInOneProcess> {
  const configPath = path.join(options.dataDir, 'weir.probe.yaml');
  writeFileSync(configPath, options.configText ?? probeConfig(options.mockUrl));
  // Built before the clock starts: npm start builds only when a source changed.
  const script = options.runner === 'bundle' ? ensureAppBundles(['all-in-one'])['all-in-one'] : path.join(REPO_ROOT, 'apps/all-in-one/src/main.ts');
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const nodeArgs = [...(options.inspect ? ['--inspect=127.0.0.1:0'] : []), ...(options.nodeArgs ?? []), ...(options.runner === 'tsx' ? ['--import', 'tsx'] : []), script];
  const taskset = options.cpu !== undefined ? tasksetPath() : undefined;
  const [cmd, args] = taskset ? [taskset, ['-c', String(options.cpu), process.execPath, ...nodeArgs]] : [process.execPath, nodeArgs];
  const t0 = performance.now();
  const child: ChildProcess = spawn(cmd, args, {
    cwd: REPO_ROOT,
    env: {
      // As npm start runs it (the tsx runner stands for how it ran before: without).
      ...(options.runner === 'bundle' ? appRuntimeEnv() : {}),
      ...process.env,
      NODE_OPTIONS: '',
      TSX_TSCONFIG_PATH: path.join(REPO_ROOT, 'tsconfig.json'),
      PORT: String(port),
      HOST: '127.0.0.1',
      WEIR_OPS_PORT: '0',
      WEIR_DATA_DIR: options.dataDir,
      WEIR_CONFIG: configPath,
      WEIR_DEMO_API_KEY: PROBE_KEY,
      WEIR_ALLOW_MODEL_DOWNLOAD: 'false',
      NODE_LLAMA_CPP_SKIP_DOWNLOAD: 'true',
      NODE_LLAMA_CPP_GPU: 'false',
      LOG_LEVEL: 'warn',
      ...options.env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const take = (b: Buffer) => {
    for (const l of b.toString('utf8').split('\n')) if (l) lines.push(l);
    if (lines.length > 2000) lines.splice(0, lines.length - 1000);
  };
  child.stdout?.on('data', take);
  child.stderr?.on('data', take);
  let exitCode: number | null | undefined;
  const exited = new Promise<number | null>((resolve) =>
    child.on('exit', (code) => {
      exitCode = code;
      resolve(code);
    }),
  );
  const stop = async (timeoutMs = 30_000) => {
    if (exitCode !== undefined) return exitCode;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    const code = await exited;
    clearTimeout(timer);
    return code;
  };
  const until = Date.now() + (options.readyTimeoutMs ?? 120_000);
  for (;;) {
    if (exitCode !== undefined) throw new Error(`all-in-one exited (${exitCode}) before it was ready:\n${lines.slice(-30).join('\n')}`);
    try {
      const res = await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(1_000) });
      await res.arrayBuffer();
      if (res.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > until) {
      await stop();
      throw new Error(`all-in-one not ready within the timeout:\n${lines.slice(-30).join('\n')}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const startupMs = performance.now() - t0;
  return { pid: child.pid as number, url, startupMs, lines, inspectorUrl: options.inspect ? findInspectorUrl(lines) : undefined, stop };
}
