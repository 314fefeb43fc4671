import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { inspect } from 'node:util';
import { nkeys } from '@nats-io/transport-node';
import { isWeirError } from '@weir/core';
import { NO_NATS_AUTH, natsAuthFromEnv, pickNatsAuthEnv } from './nats-auth';

const PEM = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
const KEY_PEM = '-----BEGIN PRIVATE KEY-----\nSECRETKEYMATERIAL\n-----END PRIVATE KEY-----\n';

describe('natsAuthFromEnv', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'weir-nats-auth-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const file = (name: string, content: string, mode = 0o600): string => {
    const p = path.join(dir, name);
    writeFileSync(p, content);
    chmodSync(p, mode);
    return p;
  };
  const refusal = (env: Record<string, string>): string => {
    try {
      natsAuthFromEnv(env);
    } catch (error) {
      expect(isWeirError(error) && error.code === 'invalid_request').toBe(true);
      return (error as Error).message;
    }
    throw new Error('expected a refusal');
  };

  it('returns no credentials and no TLS when nothing (or only empty values) is set', () => {
    expect(natsAuthFromEnv({})).toBe(NO_NATS_AUTH);
    expect(natsAuthFromEnv({ NATS_USER: '', NATS_TOKEN: '' })).toBe(NO_NATS_AUTH);
    expect(NO_NATS_AUTH.authenticator).toBeUndefined();
  });

  it('user + password: the authenticator answers with them', () => {
    const auth = natsAuthFromEnv({ NATS_USER: 'gateway', NATS_PASSWORD: 's3cret-pw' });
    expect(auth.method).toBe('user');
    expect(auth.variables).toEqual(['NATS_USER', 'NATS_PASSWORD']);
    expect(auth.authenticator?.()).toEqual({ user: 'gateway', pass: 's3cret-pw' });
  });

  it('user + password file: trims the trailing newline', () => {
    const pw = file('pw', 's3cret-from-file\n');
    const auth = natsAuthFromEnv({ NATS_USER: 'ledger', NATS_PASSWORD_FILE: pw });
    expect(auth.authenticator?.()).toEqual({ user: 'ledger', pass: 's3cret-from-file' });
  });

  it('token and token file', () => {
    expect(natsAuthFromEnv({ NATS_TOKEN: 'tok-1' }).authenticator?.()).toEqual({ auth_token: 'tok-1' });
    const t = file('token', 'tok-2\n');
    expect(natsAuthFromEnv({ NATS_TOKEN_FILE: t }).authenticator?.()).toEqual({ auth_token: 'tok-2' });
  });

  it('nkey seed file: signs the server nonce with the seed', () => {
    const kp = nkeys.createUser();
    const seedFile = file('seed.nk', `${new TextDecoder().decode(kp.getSeed())}\n`);
    const auth = natsAuthFromEnv({ NATS_NKEY_SEED_FILE: seedFile });
    const answer = auth.authenticator?.('nonce-1') as { nkey: string; sig: string };
    expect(answer.nkey).toBe(kp.getPublicKey());
    expect(kp.verify(new TextEncoder().encode('nonce-1'), Buffer.from(answer.sig, 'base64url'))).toBe(true);
  });

  it('creds file: presents the JWT and signs with the seed', () => {
    const kp = nkeys.createUser();
    const jwt = 'eyJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.c2ln';
    const creds = file(
      'user.creds',
      `-----BEGIN NATS USER JWT-----\n${jwt}\n------END NATS USER JWT------\n\n` +
        `************************* IMPORTANT *************************\n\n` +
        `-----BEGIN USER NKEY SEED-----\n${new TextDecoder().decode(kp.getSeed())}\n------END USER NKEY SEED------\n`,
    );
    const answer = natsAuthFromEnv({ NATS_CREDS: creds }).authenticator?.('n') as { jwt: string; nkey: string };
    expect(answer.jwt).toBe(jwt);
    expect(answer.nkey).toBe(kp.getPublicKey());
  });

  it('refuses a creds or seed file that does not hold one, without quoting it', () => {
    const bad = file('bad.creds', 'hunter2-not-creds');
    expect(refusal({ NATS_CREDS: bad })).toMatch(/^NATS_CREDS: .* is not a NATS \.creds file/);
    expect(refusal({ NATS_CREDS: bad })).not.toContain('hunter2');
    const badSeed = file('bad.nk', 'hunter2-not-a-seed');
    expect(refusal({ NATS_NKEY_SEED_FILE: badSeed })).toMatch(/^NATS_NKEY_SEED_FILE: .* does not hold an nkey seed/);
    expect(refusal({ NATS_NKEY_SEED_FILE: badSeed })).not.toContain('hunter2');
  });

  it.each([
    ['NATS_CREDS', 'loose.creds', 0o644],
    ['NATS_NKEY_SEED_FILE', 'loose.nk', 0o640],
    ['NATS_PASSWORD_FILE', 'loose.pw', 0o604],
    ['NATS_TOKEN_FILE', 'loose.token', 0o660],
  ])('refuses %s when group or others may read it (chmod 600)', (variable, name, mode) => {
    const p = file(name, 'hunter2', mode);
    const env: Record<string, string> = { [variable]: p, ...(variable === 'NATS_PASSWORD_FILE' ? { NATS_USER: 'u' } : {}) };
    const message = refusal(env);
    expect(message).toContain(`${variable}: ${p} can be read or written by other users (mode 0${mode.toString(8)})`);
    expect(message).toContain(`chmod 600 ${p}`);
    expect(message).not.toContain('hunter2');
  });

  it('refuses a loose TLS key file', () => {
    const ca = file('ca.pem', PEM, 0o644);
    const cert = file('cert.pem', PEM, 0o644);
    const key = file('key-loose.pem', KEY_PEM, 0o644);
    expect(refusal({ NATS_TLS_CA: ca, NATS_TLS_CERT: cert, NATS_TLS_KEY: key })).toContain(`NATS_TLS_KEY: ${key} can be read or written by other users (mode 0644); make it private to the service user: chmod 600 ${key}`);
  });

  it.each([
    [{ NATS_USER: 'u', NATS_PASSWORD: 'p', NATS_TOKEN: 't' }, 'NATS credentials: set one method, not 2: NATS_USER + NATS_PASSWORD and NATS_TOKEN are all set'],
    [{ NATS_CREDS: '/x.creds', NATS_NKEY_SEED_FILE: '/x.nk' }, 'NATS credentials: set one method, not 2: NATS_CREDS and NATS_NKEY_SEED_FILE are all set'],
    [{ NATS_CREDS: '/x.creds', NATS_PASSWORD_FILE: '/p', NATS_TOKEN_FILE: '/t' }, 'NATS credentials: set one method, not 3: NATS_CREDS and NATS_PASSWORD_FILE and NATS_TOKEN_FILE are all set'],
    [{ NATS_USER: 'u', NATS_PASSWORD: 'p', NATS_PASSWORD_FILE: '/p' }, 'NATS credentials: set NATS_PASSWORD or NATS_PASSWORD_FILE, not both'],
    [{ NATS_TOKEN: 't', NATS_TOKEN_FILE: '/t' }, 'NATS credentials: set NATS_TOKEN or NATS_TOKEN_FILE, not both'],
    [{ NATS_USER: 'u' }, 'NATS credentials: NATS_USER set without NATS_PASSWORD or NATS_PASSWORD_FILE'],
    [{ NATS_PASSWORD: 'p' }, 'NATS credentials: NATS_PASSWORD set without NATS_USER'],
    [{ NATS_TLS_CERT: '/c.pem' }, 'NATS TLS: set NATS_TLS_CERT and NATS_TLS_KEY together (mutual TLS), or neither'],
  ])('refuses conflicting or incomplete settings %j', (env, message) => {
    expect(refusal(env)).toBe(message);
  });

  it('names the variable and path of a file it cannot read', () => {
    expect(refusal({ NATS_CREDS: path.join(dir, 'missing.creds') })).toBe(`NATS_CREDS: cannot read ${path.join(dir, 'missing.creds')} (ENOENT)`);
    const notPem = file('ca.txt', 'not a certificate', 0o644);
    expect(refusal({ NATS_TLS_CA: notPem })).toBe(`NATS_TLS_CA: ${notPem} is not PEM (no -----BEGIN line)`);
  });

  it('reads TLS material once; serializing the settings shows no secret', () => {
    const ca = file('ca2.pem', PEM, 0o644);
    const cert = file('cert2.pem', PEM, 0o644);
    const key = file('key2.pem', KEY_PEM);
    const auth = natsAuthFromEnv({ NATS_USER: 'relay', NATS_PASSWORD: 'pw-hunter2', NATS_TLS_CA: ca, NATS_TLS_CERT: cert, NATS_TLS_KEY: key });
    expect(auth.tls).toEqual({ ca: PEM, cert: PEM, key: KEY_PEM });
    expect(auth.variables).toEqual(['NATS_USER', 'NATS_PASSWORD', 'NATS_TLS_CA', 'NATS_TLS_CERT', 'NATS_TLS_KEY']);
    for (const shown of [JSON.stringify(auth), inspect(auth, { depth: 5 }), JSON.stringify({ ...auth })]) {
      expect(shown).not.toContain('SECRETKEYMATERIAL');
      expect(shown).not.toContain('pw-hunter2');
    }
    // TLS alone (server verification, no client credentials).
    expect(natsAuthFromEnv({ NATS_TLS_CA: ca })).toMatchObject({ method: 'none', variables: ['NATS_TLS_CA'], tls: { ca: PEM } });
  });
});

describe('pickNatsAuthEnv', () => {
  it('keeps only the non-empty NATS_* authentication variables', () => {
    expect(pickNatsAuthEnv({ NATS_USER: 'u', NATS_PASSWORD_FILE: '/p', NATS_TOKEN: '', NATS_URL: 'nats://x', PATH: '/bin', NATS_TLS_CA: '/ca' })).toEqual({
      NATS_USER: 'u',
      NATS_PASSWORD_FILE: '/p',
      NATS_TLS_CA: '/ca',
    });
  });
});
