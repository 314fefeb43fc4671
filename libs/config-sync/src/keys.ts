/**
 * Ed25519 keys for configuration snapshots (node:crypto). Private keys are PKCS#8 PEM, public
 * keys SPKI PEM; a key is named by its `key_id`, the first 16 hex characters of the SHA-256 of
 * the SPKI DER encoding of the public key (the snapshot contract). Nothing here logs or puts key
 * material into an error message.
 */
import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { closeSync, fstatSync, openSync, readFileSync } from 'node:fs';
import { WeirError } from '@weir/core';

/** A freshly generated key pair, both halves as PEM text, and the public key's id. */
export interface SigningKeyPair {
  /** PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`). Secret: keep it on the control plane only. */
  privateKeyPem: string;
  /** SPKI PEM (`-----BEGIN PUBLIC KEY-----`): what data planes get, out of band. */
  publicKeyPem: string;
  /** {@link keyIdOf} the public key: 16 lowercase hex characters. */
  keyId: string;
}

/** A loaded Ed25519 private key, for {@link signPayload}. */
export interface SigningKey {
  readonly kind: 'signing';
  readonly privateKey: KeyObject;
  /** The matching public key, so a publisher can check what it wrote. */
  readonly publicKey: KeyObject;
  /** Id of the matching public key (16 hex). */
  readonly keyId: string;
}

/** A loaded Ed25519 public key, for {@link openEnvelope}. */
export interface VerifyKey {
  readonly kind: 'verify';
  readonly publicKey: KeyObject;
  /** 16 hex. */
  readonly keyId: string;
}

/** Generates a new Ed25519 key pair (PEM) with its key id. */
export function generateSigningKeyPair(): SigningKeyPair {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  return {
    privateKeyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
    keyId: keyIdOf(publicKey),
  };
}

/**
 * The key id of a public key: the first 16 lowercase hex characters of SHA-256 over its SPKI
 * DER encoding. Accepts a `KeyObject` (public, or private: its public half is used) or SPKI PEM.
 * @throws WeirError `invalid_request` when `publicKey` is not a readable Ed25519 key.
 */
export function keyIdOf(publicKey: KeyObject | string): string {
  const key = typeof publicKey === 'string' ? loadVerifyKey(publicKey).publicKey : publicKey.type === 'private' ? createPublicKey(publicKey) : publicKey;
  const der = key.export({ type: 'spki', format: 'der' });
  return createHash('sha256').update(der).digest('hex').slice(0, 16);
}

/**
 * Loads the control plane's signing key from PKCS#8 PEM text.
 * @throws WeirError `invalid_request` when the text is not a PEM private key or the key is not
 *   Ed25519 (the message never contains the text).
 */
export function loadSigningKey(pem: string | Buffer): SigningKey {
  let privateKey: KeyObject;
  try {
    privateKey = createPrivateKey({ key: pem, format: 'pem' });
  } catch (error) {
    throw new WeirError('invalid_request', 'the config signing key is not a PEM (PKCS#8) private key', { cause: safeCause(error) });
  }
  if (privateKey.asymmetricKeyType !== 'ed25519') {
    throw new WeirError('invalid_request', `the config signing key must be Ed25519, got ${privateKey.asymmetricKeyType ?? 'unknown'}`);
  }
  const publicKey = createPublicKey(privateKey);
  return { kind: 'signing', privateKey, publicKey, keyId: keyIdOf(publicKey) };
}

/**
 * Loads a data plane's verification key from SPKI PEM text. A private key is refused: it must
 * never leave the control plane, so meeting one here is a deployment mistake worth stopping for.
 * @throws WeirError `invalid_request` when the text is not a PEM public key, is a private key,
 *   or the key is not Ed25519.
 */
export function loadVerifyKey(pem: string | Buffer): VerifyKey {
  const text = typeof pem === 'string' ? pem : pem.toString('utf8');
  if (text.includes('PRIVATE KEY')) {
    throw new WeirError('invalid_request', 'the config verify key is a private key; give data planes the public key (SPKI PEM) only');
  }
  let publicKey: KeyObject;
  try {
    publicKey = createPublicKey({ key: text, format: 'pem' });
  } catch (error) {
    throw new WeirError('invalid_request', 'the config verify key is not a PEM (SPKI) public key', { cause: safeCause(error) });
  }
  if (publicKey.asymmetricKeyType !== 'ed25519') {
    throw new WeirError('invalid_request', `the config verify key must be Ed25519, got ${publicKey.asymmetricKeyType ?? 'unknown'}`);
  }
  return { kind: 'verify', publicKey, keyId: keyIdOf(publicKey) };
}

/** The verify key of a signing key (what a publisher uses to check the bucket's current entry). */
export function verifyKeyOf(key: SigningKey): VerifyKey {
  return { kind: 'verify', publicKey: key.publicKey, keyId: key.keyId };
}

/** Environment variables naming the keys (see docs/config-snapshots.md). */
export const CONFIG_KEY_ENV = {
  /** SPKI PEM text of the verify key (data planes). */
  publicKey: 'WEIR_CONFIG_PUBLIC_KEY',
  /** Path of a file holding the verify key's SPKI PEM (data planes). */
  publicKeyFile: 'WEIR_CONFIG_PUBLIC_KEY_FILE',
  /** Path of a file holding the signing key's PKCS#8 PEM (control plane only). */
  signingKeyFile: 'WEIR_CONFIG_SIGNING_KEY_FILE',
} as const;

/**
 * The verify key from `WEIR_CONFIG_PUBLIC_KEY` (PEM text) or `WEIR_CONFIG_PUBLIC_KEY_FILE` (a
 * path); undefined when neither is set.
 * @throws WeirError `invalid_request` when both are set, the file cannot be read, or the key is
 *   not an Ed25519 SPKI PEM public key.
 */
export function verifyKeyFromEnv(env: Readonly<Record<string, string | undefined>> = process.env): VerifyKey | undefined {
  const text = env[CONFIG_KEY_ENV.publicKey];
  const file = env[CONFIG_KEY_ENV.publicKeyFile];
  if (text && file) {
    throw new WeirError('invalid_request', `set ${CONFIG_KEY_ENV.publicKey} or ${CONFIG_KEY_ENV.publicKeyFile}, not both`);
  }
  if (text) return loadVerifyKey(text);
  if (file) return loadVerifyKey(readKeyFile(file, CONFIG_KEY_ENV.publicKeyFile));
  return undefined;
}

/**
 * The signing key from the file named by `WEIR_CONFIG_SIGNING_KEY_FILE`; undefined when unset.
 * (There is deliberately no variable holding the private key's text: environments leak into
 * process listings and crash reports more easily than a mounted secret file.)
 * @throws WeirError `invalid_request` when the file cannot be read or holds no Ed25519 PKCS#8 key.
 */
export function signingKeyFromEnv(env: Readonly<Record<string, string | undefined>> = process.env): SigningKey | undefined {
  const file = env[CONFIG_KEY_ENV.signingKeyFile];
  return file ? loadSigningKey(readPrivateKeyFile(file, CONFIG_KEY_ENV.signingKeyFile)) : undefined;
}

/**
 * Reads a private key file, refusing one that its group or other users may read or write
 * (any of mode bits 077 set): a signing key others can read lets them sign configuration.
 * The mode is checked on the opened file (no window between check and read).
 *
 * @param label how the message names the file's origin (e.g. `WEIR_CONFIG_SIGNING_KEY_FILE`).
 * @throws WeirError `invalid_request` when the file cannot be read, or when its permissions are
 *   loose: the message names the mode and the fix, `chmod 600 <path>`.
 */
export function readPrivateKeyFile(file: string, label: string): Buffer {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (error) {
    throw new WeirError('invalid_request', `cannot read the key file named by ${label}`, { cause: safeCause(error) });
  }
  try {
    const mode = fstatSync(fd).mode & 0o777;
    if ((mode & 0o077) !== 0) {
      throw new WeirError(
        'invalid_request',
        `the signing key file ${file} (${label}) can be read or written by other users (mode ${mode.toString(8).padStart(4, '0')}); make it private to the service user: chmod 600 ${file}`,
      );
    }
    return readFileSync(fd);
  } finally {
    closeSync(fd);
  }
}

function readKeyFile(file: string, variable: string): Buffer {
  try {
    return readFileSync(file);
  } catch (error) {
    throw new WeirError('invalid_request', `cannot read the key file named by ${variable}`, { cause: safeCause(error) });
  }
}

/** node:crypto errors do not echo the key, but keep only name/code/message to be sure nothing else rides along. */
function safeCause(error: unknown): Error {
  if (error instanceof Error) {
    const e = new Error(error.message);
    e.name = error.name;
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string') (e as Error & { code?: string }).code = code;
    return e;
  }
  return new Error('unknown error');
}
