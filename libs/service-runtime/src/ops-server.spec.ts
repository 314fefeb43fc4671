import { EnvError, envInt, envRequired, envString, readEnv } from './env';
import { opsSettingsFromEnv } from './ops-env';
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

describe('startOpsServer with an ops token and a handler of its own', () => {
  it('answers /healthz to anyone, everything else only with the token (401 otherwise), its handler first', async () => {
    const token = 'ops-token-0123456789abcdef';
    const ops = await startOpsServer({
      host: '127.0.0.1',
      port: 0,
      token,
      readiness: () => ({ ready: true }),
      metricsHandler: (_req, res) => res.end('weir_up 1\n'),
      handle: (req, res) => {
        if (req.url !== '/readyz') return false;
        res.end('{"status":"ready","detail":"from the handler"}');
        return true;
      },
    });
    try {
      const base = `http://127.0.0.1:${ops.port}`;
      const bearer = (t: string) => ({ headers: { authorization: `Bearer ${t}` } });
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
      for (const path of ['/metrics', '/readyz', '/other']) {
        const res = await fetch(`${base}${path}`);
        expect(res.status).toBe(401);
        expect(res.headers.get('www-authenticate')).toBe('Bearer');
        expect(await res.text()).not.toContain(token);
        expect((await fetch(`${base}${path}`, bearer(`${token}x`))).status).toBe(401);
      }
      expect(await (await fetch(`${base}/metrics`, bearer(token))).text()).toBe('weir_up 1\n');
      expect(await (await fetch(`${base}/readyz`, bearer(token))).json()).toEqual({ status: 'ready', detail: 'from the handler' });
      expect((await fetch(`${base}/other`, bearer(token))).status).toBe(404);
    } finally {
      await ops.close();
    }
  });
});

describe('opsSettingsFromEnv', () => {
  const names = { port: 'WEIR_OPS_PORT', host: 'WEIR_OPS_HOST', defaultPort: 9464 };
  it('defaults to 127.0.0.1 on the default port, reads a port, 0, off, a host and a token', () => {
    expect(opsSettingsFromEnv({}, names)).toEqual({ host: '127.0.0.1', port: 9464 });
    expect(opsSettingsFromEnv({ WEIR_OPS_PORT: '0' }, names).port).toBe(0);
    expect(opsSettingsFromEnv({ WEIR_OPS_PORT: 'OFF' }, names).port).toBe('off');
    expect(opsSettingsFromEnv({ WEIR_OPS_PORT: '9100', WEIR_OPS_HOST: '0.0.0.0', WEIR_OPS_TOKEN: 't'.repeat(16) }, names)).toEqual({ host: '0.0.0.0', port: 9100, token: 't'.repeat(16) });
  });
  it('names a bad port and a short token without echoing it', () => {
    try {
      opsSettingsFromEnv({ WEIR_OPS_PORT: '70000', WEIR_OPS_TOKEN: 'short-secret' }, names);
      throw new Error('expected an EnvError');
    } catch (err) {
      expect(err).toBeInstanceOf(EnvError);
      const problems = (err as EnvError).problems.join('\n');
      expect(problems).toContain('WEIR_OPS_PORT: expected a port from 0 to 65535');
      expect(problems).toContain('WEIR_OPS_TOKEN: expected 16 to 512 visible ASCII characters (value not shown)');
      expect(problems).not.toContain('short-secret');
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
