/**
 * The split launcher's config-signing keys persist in its work directory: a restart reuses
 * them (so the last-good snapshot files, signed by that key, still verify), and only a missing
 * or invalid key is replaced.
 */
import { generateKeyPairSync } from 'node:crypto';
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadSigningKey, loadVerifyKey } from '@weir/config-sync';
import { ensureSigningKeyFiles } from './topology';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'weir-launcher-keys-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const read = (name: string) => readFileSync(path.join(dir, name), 'utf8');
const keyIds = () => ({ signing: loadSigningKey(read('config-signing-key.pem')).keyId, verify: loadVerifyKey(read('config-public-key.pem')).keyId });

describe('ensureSigningKeyFiles', () => {
  it('makes a pair on the first start and reuses it on the next, byte for byte', () => {
    const first = ensureSigningKeyFiles(dir);
    expect(first).toEqual({ signingKeyFile: path.join(dir, 'config-signing-key.pem'), publicKeyFile: path.join(dir, 'config-public-key.pem'), outcome: 'generated' });
    expect(statSync(first.signingKeyFile).mode & 0o777).toBe(0o600);
    const before = { priv: read('config-signing-key.pem'), pub: read('config-public-key.pem') };
    const ids = keyIds();
    expect(ids.signing).toBe(ids.verify);
    expect(ensureSigningKeyFiles(dir).outcome).toBe('reused');
    expect({ priv: read('config-signing-key.pem'), pub: read('config-public-key.pem') }).toEqual(before);
  });

  it('makes a reused or replaced private key owner-only again (the control plane refuses a loose one)', () => {
    const { signingKeyFile } = ensureSigningKeyFiles(dir);
    chmodSync(signingKeyFile, 0o644);
    expect(ensureSigningKeyFiles(dir).outcome).toBe('reused');
    expect(statSync(signingKeyFile).mode & 0o777).toBe(0o600);
    writeFileSync(signingKeyFile, 'garbage');
    chmodSync(signingKeyFile, 0o644);
    expect(ensureSigningKeyFiles(dir).outcome).toBe('generated');
    expect(statSync(signingKeyFile).mode & 0o777).toBe(0o600);
  });

  it('keeps a valid private key and writes its public key again when that file is missing, invalid or of another key', () => {
    ensureSigningKeyFiles(dir);
    const { signing } = keyIds();
    unlinkSync(path.join(dir, 'config-public-key.pem'));
    expect(ensureSigningKeyFiles(dir).outcome).toBe('public_rewritten');
    expect(keyIds()).toEqual({ signing, verify: signing });
    writeFileSync(path.join(dir, 'config-public-key.pem'), 'not a key');
    expect(ensureSigningKeyFiles(dir).outcome).toBe('public_rewritten');
    expect(keyIds().verify).toBe(signing);
    const other = generateKeyPairSync('ed25519').publicKey.export({ type: 'spki', format: 'pem' }).toString();
    writeFileSync(path.join(dir, 'config-public-key.pem'), other);
    expect(ensureSigningKeyFiles(dir).outcome).toBe('public_rewritten');
    expect(keyIds().verify).toBe(signing);
  });

  it.each([
    ['missing', null],
    ['not a PEM', 'garbage'],
    ['not Ed25519', generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString()],
  ])('replaces a %s private key with a new pair', (_what, content) => {
    ensureSigningKeyFiles(dir);
    const old = keyIds().signing;
    if (content === null) unlinkSync(path.join(dir, 'config-signing-key.pem'));
    else writeFileSync(path.join(dir, 'config-signing-key.pem'), content);
    expect(ensureSigningKeyFiles(dir).outcome).toBe('generated');
    const ids = keyIds();
    expect(ids.signing).toBe(ids.verify);
    expect(ids.signing).not.toBe(old);
  });
});
