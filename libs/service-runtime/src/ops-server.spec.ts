import { EnvError, envInt, envRequired, envString, readEnv } from './env';
import { startOpsServer } from './ops-server';

describe('startOpsServer', () => {
  it('answers liveness always, readiness as told, metrics when given, 404 otherwise', async () => {
    let ready = { ready: false, reason: 'starting' };
    const ops = await startOpsServer({
      host: '127.0.0.1',
      port: 0,
      readiness: () => ready,
      metricsHandler: (_req, res) => res.end('weir_up 1\n'),
    });
    try {
      const base = `http://127.0.0.1:${ops.port}`;
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
      const notReady = await fetch(`${base}/readyz`);
      expect(notReady.status).toBe(503);
      expect(await notReady.json()).toEqual({ status: 'not_ready', reason: 'starting' });
      ready = { ready: true, reason: '' };
      expect((await fetch(`${base}/readyz`)).status).toBe(200);
      expect(await (await fetch(`${base}/metrics`)).text()).toBe('weir_up 1\n');
      expect((await fetch(`${base}/other`)).status).toBe(404);
    } finally {
      await ops.close();
    }
  });
});

describe('readEnv', () => {
  it('applies defaults and reports every bad variable by name', () => {
    expect(readEnv({ PORT: envInt(8080, 0, 65535), HOST: envString('127.0.0.1') }, {})).toEqual({ PORT: 8080, HOST: '127.0.0.1' });
    try {
      readEnv({ PORT: envInt(8080, 0, 65535), NATS_URL: envRequired('the NATS server, e.g. nats://127.0.0.1:4222') }, { PORT: '99999' });
      throw new Error('expected an EnvError');
    } catch (err) {
      expect(err).toBeInstanceOf(EnvError);
      expect((err as EnvError).problems).toEqual(['PORT: expected an integer from 0 to 65535', 'NATS_URL: required: the NATS server, e.g. nats://127.0.0.1:4222']);
    }
  });
});
