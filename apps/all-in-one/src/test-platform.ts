/**
 * Test support: the all-in-one started in-process on a configuration text, in a temporary
 * folder (its own PGlite), silent, on a free port, with a known demo API key. Shared by the
 * integration specs so that each says only what it tests.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadAllInOneEnv } from '@weir/config';
import { createLogger, type WeirLogger } from '@weir/telemetry';
import { type Platform, type PlatformOptions, startPlatform } from './platform';

/** A running test platform: the platform, its configuration file, and `stop()` (which also removes the folder unless kept). */
export interface TestPlatform {
  platform: Platform;
  /** The configuration file it watches (rewrite it to change routing live). */
  configPath: string;
  /** The temporary folder (configuration file and data directory `data`). */
  dir: string;
  stop(): Promise<void>;
}

/** Options of {@link startTestPlatform}. */
export interface TestPlatformOptions {
  /** Start in this folder (a restart on the same data directory) instead of a new one. */
  dir?: string;
  /** Keep the folder on `stop()` (to restart on it). Default false. */
  keepDir?: boolean;
  /** Passed to `startPlatform` (admin token, signing key, staleness). */
  platform?: PlatformOptions;
  /** The platform's logger (a test capturing log lines); default a silent one. */
  logger?: WeirLogger;
}

/**
 * Starts the all-in-one on `configText` with `demoKey` as the first tenant's API key
 * (`wk_<8-char prefix>_<43 chars>`), model downloads off, logs silent. `configText` is written
 * to `<dir>/weir.yaml` (over the old one on a restart).
 * @param name a short tag for the temporary folder's name.
 */
export async function startTestPlatform(name: string, configText: string, demoKey: string, options: TestPlatformOptions = {}): Promise<TestPlatform> {
  const dir = options.dir ?? mkdtempSync(path.join(os.tmpdir(), `weir-aio-${name}-`));
  const remove = () => {
    if (!options.keepDir) rmSync(dir, { recursive: true, force: true });
  };
  const configPath = path.join(dir, 'weir.yaml');
  writeFileSync(configPath, configText);
  try {
    const settings = loadAllInOneEnv({
      PORT: '0',
      HOST: '127.0.0.1',
      WEIR_DATA_DIR: path.join(dir, 'data'),
      WEIR_CONFIG: configPath,
      WEIR_DEMO_API_KEY: demoKey,
      WEIR_ALLOW_MODEL_DOWNLOAD: 'false',
      LOG_LEVEL: 'silent',
    });
    // The ops listener on a free port (its default 9464 would collide between test files).
    const platform = await startPlatform(settings, options.logger ?? createLogger({ name: 'weir', level: 'silent' }), { ops: { host: '127.0.0.1', port: 0 }, ...options.platform });
    return {
      platform,
      configPath,
      dir,
      async stop() {
        await platform.stop(5_000);
        remove();
      },
    };
  } catch (err) {
    remove();
    throw err;
  }
}
