import { chmodSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Agent, request } from 'undici';
import { certificateIdentities, issueDevPki, loadServiceTls, peerPolicy, type ServiceTls, ServiceTlsError, serviceTlsFromEnv } from './index';
import { authorizePeer, createServiceTlsAgent, httpsServerOptions } from './peer';

let dir: string;
let pki: Awaited<ReturnType<typeof issueDevPki>>;
let other: Awaited<ReturnType<typeof issueDevPki>>;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'weir-tls-'));
  pki = await issueDevPki({
    dir: path.join(dir, 'pki'),
    certificates: [{ name: 'gateway' }, { name: 'engine' }, { name: 'relay' }, { name: 'all-in-one', identities: ['gateway', 'relay', 'scheduler'] }],
  });
  other = await issueDevPki({ dir: path.join(dir, 'other'), certificates: [{ name: 'relay' }] });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const load = (name: string, extra: NodeJS.ProcessEnv = {}, pkiSet = pki) => loadServiceTls({ ...pkiSet.env(name), ...extra }) as ServiceTls;

describe('issueDevPki', () => {
  it('writes every file 0600 in a 0700 directory, one identity per service in the URI SAN', () => {
    expect(statSync(path.join(dir, 'pki')).mode & 0o777).toBe(0o700);
    for (const f of [pki.caFile, ...[...pki.files.values()].flatMap((x) => [x.cert, x.key])]) expect(statSync(f).mode & 0o777).toBe(0o600);
    expect(load('gateway').identities).toEqual(['gateway']);
    expect(load('all-in-one').identities).toEqual(['gateway', 'relay', 'scheduler']);
  });
});

describe('loadServiceTls', () => {
  it('is off (undefined) when no variable is set', () => {
    expect(loadServiceTls({})).toBeUndefined();
  });

  it.each([
    ['a partial set', () => loadServiceTls({ WEIR_TLS_CA: pki.caFile }), /WEIR_TLS_CERT, WEIR_TLS_KEY: set WEIR_TLS_CA, WEIR_TLS_CERT and WEIR_TLS_KEY together/],
    ['a certificate from another CA', () => loadServiceTls({ ...other.env('relay'), WEIR_TLS_CA: pki.caFile }), /is not signed by the CA/],
    ['a key of another certificate', () => loadServiceTls({ ...pki.env('gateway'), WEIR_TLS_KEY: pki.files.get('engine')?.key }), /does not belong to the certificate/],
    ['a certificate naming another service', () => loadServiceTls(pki.env('engine'), { service: 'gateway' }), /must name this service .*spiffe:\/\/<trust domain>\/gateway.*names engine/],
    ['a missing file', () => loadServiceTls({ ...pki.env('gateway'), WEIR_TLS_CA: path.join(dir, 'nope.pem') }), /WEIR_TLS_CA: cannot read .*ENOENT/],
    ['an expired certificate', () => loadServiceTls(pki.env('gateway'), { now: Date.now() + 40 * 86_400_000 }), /is valid from .* not now/],
  ])('refuses %s, saying what to fix', (_name, run, message) => {
    expect(run).toThrow(ServiceTlsError);
    expect(run).toThrow(message);
  });

  it('refuses a key file that group or others can read, saying how to fix it', async () => {
    const loose = await issueDevPki({ dir: path.join(dir, 'loose'), certificates: [{ name: 'gateway' }] });
    chmodSync(loose.files.get('gateway')?.key as string, 0o640);
    expect(() => loadServiceTls(loose.env('gateway'))).toThrow(/readable by group or others \(mode 640\); run chmod 600/);
  });

  it('takes the accepted callers from WEIR_TLS_ALLOWED_PEERS over the default', () => {
    expect(loadServiceTls(pki.env('engine'), { defaultPeers: ['relay'] })?.allowedPeers).toEqual(new Set(['relay']));
    expect(loadServiceTls({ ...pki.env('engine'), WEIR_TLS_ALLOWED_PEERS: 'relay, gateway' }, { defaultPeers: ['relay'] })?.allowedPeers).toEqual(new Set(['relay', 'gateway']));
    expect(loadServiceTls({ ...pki.env('engine'), WEIR_TLS_ALLOWED_PEERS: '*' }, { defaultPeers: ['relay'] })?.allowedPeers).toBe('any');
  });
});

describe('serviceTlsFromEnv', () => {
  const recorder = () => {
    const lines: { level: string; obj: object; msg: string }[] = [];
    return { lines, logger: { info: (obj: object, msg: string) => lines.push({ level: 'info', obj, msg }), warn: (obj: object, msg: string) => lines.push({ level: 'warn', obj, msg }) } };
  };

  it('warns that authentication is off when nothing is configured', () => {
    const r = recorder();
    expect(serviceTlsFromEnv('admission', { logger: r.logger, env: {} })).toBeUndefined();
    expect(r.lines).toEqual([{ level: 'warn', obj: {}, msg: expect.stringMatching(/^service authentication is off/) }]);
  });

  it('logs identities and accepted callers, never key material, and warns before the certificate lapses', async () => {
    const r = recorder();
    expect(serviceTlsFromEnv('gateway', { logger: r.logger, env: pki.env('gateway'), defaultPeers: ['relay'] })?.identities).toEqual(['gateway']);
    expect(r.lines).toEqual([{ level: 'info', obj: { identities: ['gateway'], allowedPeers: 'relay', notAfter: expect.any(String) }, msg: 'mutual TLS on' }]);
    expect(JSON.stringify(r.lines)).not.toContain('PRIVATE KEY');
    const short = await issueDevPki({ dir: path.join(dir, 'short'), certificates: [{ name: 'relay' }], validityMs: 86_400_000 });
    const s = recorder();
    serviceTlsFromEnv('relay', { logger: s.logger, env: short.env('relay'), serves: false });
    expect(s.lines.map((l) => [l.level, l.msg])).toEqual([
      ['info', 'mutual TLS on'],
      ['warn', expect.stringMatching(/lapses within 7 days: rotate it/)],
    ]);
    expect(s.lines[0].obj).not.toHaveProperty('allowedPeers');
  });

  it('refuses a certificate that does not name the service', () => {
    expect(() => serviceTlsFromEnv('admission', { logger: recorder().logger, env: pki.env('gateway') })).toThrow(ServiceTlsError);
  });
});

describe('certificateIdentities', () => {
  it.each([
    ['URI:spiffe://weir/gateway, DNS:localhost, IP Address:127.0.0.1', ['gateway']],
    ['URI:spiffe://example.org/ns/weir/sa/relay', ['relay']],
    ['URI:https://weir/gateway, DNS:gateway', []],
    [undefined, []],
  ])('%s → %j', (san, ids) => {
    expect(certificateIdentities(san === undefined ? undefined : { subjectaltname: san })).toEqual(ids);
  });
});

describe('an HTTPS server deciding per request with authorizePeer', () => {
  let server: Server;
  let url: string;
  beforeAll(async () => {
    const engine = load('engine');
    server = createServer(httpsServerOptions(engine), (req, res) => {
      const d = authorizePeer(req.socket, peerPolicy(['relay']), 'generation');
      res.statusCode = d.ok ? 200 : d.reason === 'unauthenticated' ? 401 : 403;
      res.end(d.ok ? d.identities.join(',') : d.message);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    url = `https://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  const call = async (agent: Agent) => {
    const res = await request(url, { dispatcher: agent });
    const body = await res.body.text();
    await agent.close();
    return { status: res.statusCode, body };
  };

  it('lets the expected service in', async () => {
    expect(await call(createServiceTlsAgent(load('relay'), { expectedServer: 'engine' }))).toEqual({ status: 200, body: 'relay' });
    expect((await call(createServiceTlsAgent(load('all-in-one')))).status).toBe(200);
  });

  it('answers 401 to a client without a certificate, and to one whose certificate another CA signed', async () => {
    const relay = load('relay');
    expect(await call(new Agent({ connect: { ca: relay.ca } }))).toEqual({ status: 401, body: 'a client certificate signed by the service CA is required' });
    const foreign = load('relay', {}, other);
    expect((await call(createServiceTlsAgent({ ...foreign, ca: relay.ca }))).status).toBe(401);
  });

  it('answers 403 to a verified service the policy does not name', async () => {
    expect(await call(createServiceTlsAgent(load('gateway')))).toEqual({ status: 403, body: 'generation is open to relay, not to gateway' });
  });

  it('the client refuses a server that is not the service it expects', async () => {
    await expect(call(createServiceTlsAgent(load('relay'), { expectedServer: 'admission' }))).rejects.toThrow(/is not the admission \(its certificate names engine\)/);
  });
});
