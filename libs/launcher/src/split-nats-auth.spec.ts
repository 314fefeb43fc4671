/**
 * The split launcher hands the NATS credentials it is given to every service that connects to
 * NATS, and refuses bad ones before starting anything (issue 14 part 8).
 */
import { chmodSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { isWeirError } from '@weir/core';
import { splitNatsAuth, startSplitTopology } from './topology';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'weir-launcher-nats-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('splitNatsAuth', () => {
  it('passes the NATS_* credentials of the launcher, overlaid by the options, and nothing else', () => {
    const pw = path.join(dir, 'pw');
    writeFileSync(pw, 'secret\n', { mode: 0o600 });
    const { env, auth } = splitNatsAuth(
      { NATS_PASSWORD_FILE: pw, NATS_TLS_CA: undefined, LOG_LEVEL: 'debug' },
      { NATS_USER: 'weir', NATS_PASSWORD_FILE: '/elsewhere', NATS_TLS_CA: '', PATH: '/bin', NATS_URL: 'nats://x:4222' },
    );
    expect(env).toEqual({ NATS_USER: 'weir', NATS_PASSWORD_FILE: pw });
    expect(auth.method).toBe('user');
    expect(auth.authenticator?.()).toEqual({ user: 'weir', pass: 'secret' });
  });

  it('no variables: no credentials', () => {
    expect(splitNatsAuth(undefined, { PATH: '/bin' })).toMatchObject({ env: {}, auth: { method: 'none' } });
  });
});

describe('startSplitTopology with bad NATS credentials', () => {
  it.each([
    ['two methods at once', () => ({ NATS_USER: 'weir', NATS_PASSWORD: 'p', NATS_TOKEN: 't' }), /NATS credentials: set one method, not 2: NATS_USER \+ NATS_PASSWORD and NATS_TOKEN/],
    [
      'a password file others can read',
      () => {
        const pw = path.join(dir, 'loose.pw');
        writeFileSync(pw, 'secret');
        chmodSync(pw, 0o644);
        return { NATS_USER: 'weir', NATS_PASSWORD_FILE: pw };
      },
      /NATS_PASSWORD_FILE: .* \(mode 0644\); make it private to the service user: chmod 600 /,
    ],
  ])('refuses %s before starting anything', async (_label, env, message) => {
    const workDir = path.join(dir, 'work');
    const error = await startSplitTopology({ workDir, configText: 'revisions: []\n', databaseUrl: 'postgres://127.0.0.1:1/none', env: env() }).catch((e: unknown) => e);
    expect(isWeirError(error) && error.code === 'invalid_request').toBe(true);
    expect((error as Error).message).toMatch(message);
    expect((error as Error).message).not.toContain('secret');
    // Nothing was made: no PKI, no derived config file.
    expect(readdirSync(workDir)).toEqual([]);
  });
});
