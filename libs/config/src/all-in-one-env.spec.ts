import path from 'node:path';
import { ConfigError, loadAllInOneEnv } from './index';

describe('loadAllInOneEnv', () => {
  it('applies the defaults', () => {
    expect(loadAllInOneEnv({})).toEqual({
      port: 8080,
      host: '127.0.0.1',
      dataDir: path.resolve('.data'),
      modelCacheDir: path.resolve('.data', 'models'),
      logLevel: 'info',
      allowModelDownload: true,
      shutdownGraceMs: 10_000,
      burnRateIntervalMs: 60_000,
      journalSyncMs: 20,
      journalProgressMs: 1_000,
    });
  });

  it('reads every variable, treating empty strings as unset', () => {
    const key = `wk_abcd1234_${'A'.repeat(43)}`;
    expect(
      loadAllInOneEnv({
        PORT: '0',
        HOST: '0.0.0.0',
        WEIR_DATA_DIR: '/var/weir',
        WEIR_MODEL_PATH: 'models/m.gguf',
        WEIR_CONFIG: '/etc/weir.yaml',
        WEIR_DEMO_API_KEY: key,
        DATABASE_URL: 'postgres://u:p@db:5432/weir',
        LOG_LEVEL: 'DEBUG',
        WEIR_ALLOW_MODEL_DOWNLOAD: 'false',
        WEIR_SHUTDOWN_GRACE_MS: '30000',
        WEIR_BURN_RATE_INTERVAL_MS: '500',
        WEIR_JOURNAL_SYNC_MS: '5',
        WEIR_JOURNAL_PROGRESS_MS: '250',
      }),
    ).toEqual({
      port: 0,
      host: '0.0.0.0',
      dataDir: '/var/weir',
      modelCacheDir: '/var/weir/models',
      modelPath: path.resolve('models/m.gguf'),
      configPath: '/etc/weir.yaml',
      demoApiKey: key,
      databaseUrl: 'postgres://u:p@db:5432/weir',
      logLevel: 'debug',
      allowModelDownload: false,
      shutdownGraceMs: 30_000,
      burnRateIntervalMs: 500,
      journalSyncMs: 5,
      journalProgressMs: 250,
    });
    expect(loadAllInOneEnv({ PORT: '', WEIR_CONFIG: ' ' })).toMatchObject({ port: 8080 });
    expect(loadAllInOneEnv({ WEIR_CONFIG: '' }).configPath).toBeUndefined();
  });

  it.each([
    ['PORT', 'abc', 'PORT: expected an integer from 0 to 65535, got "abc"'],
    ['PORT', '70000', 'PORT: expected an integer from 0 to 65535, got "70000"'],
    ['LOG_LEVEL', 'loud', 'LOG_LEVEL: expected one of fatal, error, warn, info, debug, trace, silent, got "loud"'],
    ['WEIR_ALLOW_MODEL_DOWNLOAD', 'maybe', 'WEIR_ALLOW_MODEL_DOWNLOAD: expected true or false, got "maybe"'],
    ['WEIR_SHUTDOWN_GRACE_MS', '-5', 'WEIR_SHUTDOWN_GRACE_MS: expected an integer from 0 to 3600000, got "-5"'],
    ['WEIR_BURN_RATE_INTERVAL_MS', '10', 'WEIR_BURN_RATE_INTERVAL_MS: expected an integer from 100 to 86400000, got "10"'],
    ['WEIR_JOURNAL_SYNC_MS', '0', 'WEIR_JOURNAL_SYNC_MS: expected an integer from 1 to 10000, got "0"'],
    ['WEIR_JOURNAL_PROGRESS_MS', '50', 'WEIR_JOURNAL_PROGRESS_MS: expected an integer from 100 to 600000, got "50"'],
    ['WEIR_DEMO_API_KEY', 'sk-secret value', 'WEIR_DEMO_API_KEY: an API key must look like wk_'],
    ['DATABASE_URL', 'mysql://u:secret@db/weir', 'DATABASE_URL: expected a postgres:// or postgresql:// URL (value not shown)'],
  ])('%s=%s is rejected, naming the variable', (name, value, expected) => {
    let error: unknown;
    try {
      loadAllInOneEnv({ [name]: value });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const message = (error as ConfigError).message;
    expect(message).toContain(`environment: ${expected}`);
    if (name === 'WEIR_DEMO_API_KEY' || name === 'DATABASE_URL') expect(message).not.toContain('secret');
  });

  it('lists every bad variable at once', () => {
    try {
      loadAllInOneEnv({ PORT: 'x', LOG_LEVEL: 'y' });
      throw new Error('expected a ConfigError');
    } catch (err) {
      expect((err as ConfigError).problems.map((p) => p.path)).toEqual(['PORT', 'LOG_LEVEL']);
    }
  });
});
