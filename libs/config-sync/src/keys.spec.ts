import { createHash, createPublicKey, generateKeyPairSync } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { WeirError } from '@weir/core';
import { generateSigningKeyPair, keyIdOf, loadSigningKey, loadVerifyKey, readPrivateKeyFile, signingKeyFromEnv, verifyKeyFromEnv } from './keys';

function thrownBy(fn: () => unknown): WeirError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(WeirError);
    return error as WeirError;
  }
  throw new Error('expected a throw');
}

describe('keys', () => {
  const pair = generateSigningKeyPair();

  it('generates PEM halves and a key id that is the first 16 hex of SHA-256(SPKI DER)', () => {
    expect(pair.privateKeyPem).toMatch(/^-----BEGIN PRIVATE KEY-----/);
    expect(pair.publicKeyPem).toMatch(/^-----BEGIN PUBLIC KEY-----/);
    const der = createPublicKey(pair.publicKeyPem).export({ type: 'spki', format: 'der' });
    expect(pair.keyId).toBe(createHash('sha256').update(der).digest('hex').slice(0, 16));
    expect(pair.keyId).toMatch(/^[0-9a-f]{16}$/);
    expect(generateSigningKeyPair().keyId).not.toBe(pair.keyId);
  });

  it('loads both halves with the same key id', () => {
    const signing = loadSigningKey(pair.privateKeyPem);
    const verify = loadVerifyKey(Buffer.from(pair.publicKeyPem));
    expect(signing.keyId).toBe(pair.keyId);
    expect(verify.keyId).toBe(pair.keyId);
    expect(keyIdOf(verify.publicKey)).toBe(pair.keyId);
    expect(keyIdOf(signing.privateKey)).toBe(pair.keyId);
    expect(keyIdOf(pair.publicKeyPem)).toBe(pair.keyId);
  });

  it.each([
    ['garbage text', 'not a key'],
    ['a public key', pair.publicKeyPem],
    ['a truncated PEM', pair.privateKeyPem.slice(0, 60)],
    ['an RSA key', generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString()],
  ])('loadSigningKey refuses %s with invalid_request and no key text in the message', (_name, pem) => {
    const error = thrownBy(() => loadSigningKey(pem));
    expect(error.code).toBe('invalid_request');
    expect(error.message).toMatch(/signing key/);
    expect(error.message).not.toContain('BEGIN');
  });

  it.each([
    ['garbage text', '-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n', /not a PEM/],
    ['a private key', pair.privateKeyPem, /private key/],
    ['an EC key', generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey.export({ type: 'spki', format: 'pem' }).toString(), /Ed25519/],
  ])('loadVerifyKey refuses %s with invalid_request', (_name, pem, message) => {
    const error = thrownBy(() => loadVerifyKey(pem));
    expect(error.code).toBe('invalid_request');
    expect(error.message).toMatch(message);
    expect(error.message).not.toContain('BEGIN');
  });

  describe('from the environment', () => {
    let dir: string;
    beforeAll(() => {
      dir = mkdtempSync(path.join(tmpdir(), 'weir-keys-'));
      writeFileSync(path.join(dir, 'public.pem'), pair.publicKeyPem);
      writeFileSync(path.join(dir, 'private.pem'), pair.privateKeyPem, { mode: 0o600 });
    });
    afterAll(() => rmSync(dir, { recursive: true, force: true }));

    it('reads the verify key from WEIR_CONFIG_PUBLIC_KEY or WEIR_CONFIG_PUBLIC_KEY_FILE', () => {
      expect(verifyKeyFromEnv({ WEIR_CONFIG_PUBLIC_KEY: pair.publicKeyPem })?.keyId).toBe(pair.keyId);
      expect(verifyKeyFromEnv({ WEIR_CONFIG_PUBLIC_KEY_FILE: path.join(dir, 'public.pem') })?.keyId).toBe(pair.keyId);
      expect(verifyKeyFromEnv({})).toBeUndefined();
    });

    it('refuses both variables at once and an unreadable file', () => {
      expect(thrownBy(() => verifyKeyFromEnv({ WEIR_CONFIG_PUBLIC_KEY: pair.publicKeyPem, WEIR_CONFIG_PUBLIC_KEY_FILE: 'x' })).message).toMatch(/not both/);
      expect(thrownBy(() => verifyKeyFromEnv({ WEIR_CONFIG_PUBLIC_KEY_FILE: path.join(dir, 'missing.pem') })).code).toBe('invalid_request');
    });

    it('reads the signing key from WEIR_CONFIG_SIGNING_KEY_FILE only', () => {
      expect(signingKeyFromEnv({ WEIR_CONFIG_SIGNING_KEY_FILE: path.join(dir, 'private.pem') })?.keyId).toBe(pair.keyId);
      expect(signingKeyFromEnv({})).toBeUndefined();
    });

    it.each([['0644', 0o644], ['0640', 0o640], ['0604', 0o604], ['0660', 0o660]])('refuses a signing key file with mode %s, saying chmod 600 <path>', (_octal, mode) => {
      const file = path.join(dir, `loose-${mode.toString(8)}.pem`);
      writeFileSync(file, pair.privateKeyPem);
      chmodSync(file, mode); // whatever the umask
      const error = thrownBy(() => signingKeyFromEnv({ WEIR_CONFIG_SIGNING_KEY_FILE: file }));
      expect(error.code).toBe('invalid_request');
      expect(error.message).toBe(
        `the signing key file ${file} (WEIR_CONFIG_SIGNING_KEY_FILE) can be read or written by other users (mode 0${mode.toString(8)}); make it private to the service user: chmod 600 ${file}`,
      );
      expect(error.message).not.toContain('BEGIN');
      chmodSync(file, 0o600);
      expect(signingKeyFromEnv({ WEIR_CONFIG_SIGNING_KEY_FILE: file })?.keyId).toBe(pair.keyId);
      // 0400 (read-only for the owner) is fine too.
      chmodSync(file, 0o400);
      expect(readPrivateKeyFile(file, 'x').toString()).toBe(pair.privateKeyPem);
    });
  });
});
