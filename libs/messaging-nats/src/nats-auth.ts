/**
 * How a Weir service proves itself to NATS (issue 14 part 8): credentials and TLS read once at
 * start from `NATS_*` variables, handed to {@link connectNats} as a {@link NatsAuth}. NATS
 * carries cancels (`<ns>.cancel`), replica health, the usage stream (bills) and the config KV
 * bucket, so the server should refuse a client without credentials (docs/security.md §8).
 */
import { closeSync, fstatSync, openSync, readFileSync } from 'node:fs';
import {
  type Authenticator,
  credsAuthenticator,
  nkeyAuthenticator,
  type TlsOptions,
  tokenAuthenticator,
  usernamePasswordAuthenticator,
} from '@nats-io/transport-node';
import { WeirError } from '@weir/core';

/** The environment variables {@link natsAuthFromEnv} reads (all optional). */
export const NATS_AUTH_ENV = {
  /** Path of a `.creds` file (user JWT + nkey seed; decentralized auth with `nsc`). Secret: mode 0600. */
  creds: 'NATS_CREDS',
  /** Path of a file holding a user nkey seed (`SU…`). Secret: mode 0600. */
  nkeySeedFile: 'NATS_NKEY_SEED_FILE',
  /** User name; needs `NATS_PASSWORD` or `NATS_PASSWORD_FILE`. */
  user: 'NATS_USER',
  /** Password (prefer `NATS_PASSWORD_FILE`: variables show up in `ps e` and crash dumps). */
  password: 'NATS_PASSWORD',
  /** Path of a file holding the password (surrounding whitespace ignored). Secret: mode 0600. */
  passwordFile: 'NATS_PASSWORD_FILE',
  /** Token (server `authorization { token }`). */
  token: 'NATS_TOKEN',
  /** Path of a file holding the token. Secret: mode 0600. */
  tokenFile: 'NATS_TOKEN_FILE',
  /** PEM CA bundle that signed the NATS server's certificate; turns TLS on. */
  tlsCa: 'NATS_TLS_CA',
  /** PEM client certificate for mutual TLS (with `NATS_TLS_KEY`); turns TLS on. */
  tlsCert: 'NATS_TLS_CERT',
  /** PEM private key of `NATS_TLS_CERT`. Secret: mode 0600. */
  tlsKey: 'NATS_TLS_KEY',
} as const;

/** Every `NATS_*` authentication variable, e.g. for a launcher that passes them on. */
export const NATS_AUTH_ENV_NAMES: readonly string[] = Object.values(NATS_AUTH_ENV);

/** How the client authenticates: nothing, a `.creds` file, an nkey, user + password, or a token. */
export type NatsAuthMethod = 'none' | 'creds' | 'nkey' | 'user' | 'token';

/**
 * Credentials and TLS for {@link connectNats}, from {@link natsAuthFromEnv}. Secrets live in
 * the authenticator's closure and `tls`; serializing the object (a log line, `JSON.stringify`,
 * `util.inspect`) shows only the method, the variables and whether TLS is on.
 */
export interface NatsAuth {
  readonly method: NatsAuthMethod;
  /** The variables the settings came from (names only), for messages: e.g. `['NATS_USER', 'NATS_PASSWORD_FILE']`. */
  readonly variables: readonly string[];
  /** Undefined for `none`. */
  readonly authenticator?: Authenticator;
  /** PEM contents (read at start); undefined: plaintext unless the server's URL says `tls://`. */
  readonly tls?: TlsOptions;
}

type Env = Readonly<Record<string, string | undefined>>;

/** No credentials and no TLS (what {@link natsAuthFromEnv} returns when no variable is set). */
export const NO_NATS_AUTH: NatsAuth = makeAuth('none', [], undefined, undefined);

/**
 * Reads NATS credentials and TLS settings from `env` (see {@link NATS_AUTH_ENV}); call it once
 * at start. Empty values count as unset. At most one method: `NATS_CREDS`, `NATS_NKEY_SEED_FILE`,
 * `NATS_USER` + (`NATS_PASSWORD` | `NATS_PASSWORD_FILE`), or `NATS_TOKEN` | `NATS_TOKEN_FILE`.
 * TLS is on when `NATS_TLS_CA` or `NATS_TLS_CERT` is set (`NATS_TLS_CERT` needs `NATS_TLS_KEY`).
 * Files are read here, not at each reconnect: a rotated file takes effect at restart.
 *
 * @throws WeirError `invalid_request` (never quoting a secret) when two methods are set (the
 *   message names the variables), a pair is incomplete, a file cannot be read or does not hold
 *   what it should, or a secret file (creds, seed, password, token, TLS key) is readable or
 *   writable by group or others: the message names the mode and the fix, `chmod 600 <path>`.
 */
export function natsAuthFromEnv(env: Env): NatsAuth {
  const get = (name: string): string | undefined => (env[name] ? env[name] : undefined);
  const E = NATS_AUTH_ENV;
  const groups: Array<[NatsAuthMethod, string[]]> = [
    ['creds', [E.creds]],
    ['nkey', [E.nkeySeedFile]],
    ['user', [E.user, E.password, E.passwordFile]],
    ['token', [E.token, E.tokenFile]],
  ];
  const chosen = groups.map(([method, names]) => [method, names.filter((n) => get(n) !== undefined)] as const).filter(([, set]) => set.length > 0);
  if (chosen.length > 1) {
    throw invalid(`NATS credentials: set one method, not ${chosen.length}: ${chosen.map(([, set]) => set.join(' + ')).join(' and ')} are all set`);
  }
  const tls = readTls(get);
  const tlsVariables = [E.tlsCa, E.tlsCert, E.tlsKey].filter((n) => get(n) !== undefined);
  if (chosen.length === 0) return tls ? makeAuth('none', tlsVariables, undefined, tls) : NO_NATS_AUTH;

  const [method, set] = chosen[0];
  const variables = [...set, ...tlsVariables];
  switch (method) {
    case 'creds': {
      const file = get(E.creds) as string;
      const creds = readSecretFile(file, E.creds);
      const authenticator = credsAuthenticator(creds);
      // Parses the JWT and signs a nonce with the seed now, so a bad file fails at start.
      check(() => authenticator('weir-start-check'), `${E.creds}: ${file} is not a NATS .creds file (a user JWT block and a user nkey seed block, as \`nsc generate creds\` writes)`);
      return makeAuth(method, variables, authenticator, tls);
    }
    case 'nkey': {
      const file = get(E.nkeySeedFile) as string;
      const seed = new TextEncoder().encode(readSecretFile(file, E.nkeySeedFile).toString('utf8').trim());
      const authenticator = nkeyAuthenticator(seed);
      check(() => authenticator('weir-start-check'), `${E.nkeySeedFile}: ${file} does not hold an nkey seed (one line starting with SU, as \`nsc\` or \`nk -gen user\` writes)`);
      return makeAuth(method, variables, authenticator, tls);
    }
    case 'user': {
      const user = get(E.user);
      const password = get(E.password);
      const passwordFile = get(E.passwordFile);
      if (password !== undefined && passwordFile !== undefined) throw invalid(`NATS credentials: set ${E.password} or ${E.passwordFile}, not both`);
      if (user === undefined) throw invalid(`NATS credentials: ${set.join(' + ')} set without ${E.user}`);
      if (password === undefined && passwordFile === undefined) throw invalid(`NATS credentials: ${E.user} set without ${E.password} or ${E.passwordFile}`);
      const pass = password ?? readSecretText(passwordFile as string, E.passwordFile);
      return makeAuth(method, variables, usernamePasswordAuthenticator(user, pass), tls);
    }
    case 'token': {
      const token = get(E.token);
      const tokenFile = get(E.tokenFile);
      if (token !== undefined && tokenFile !== undefined) throw invalid(`NATS credentials: set ${E.token} or ${E.tokenFile}, not both`);
      return makeAuth(method, variables, tokenAuthenticator(token ?? readSecretText(tokenFile as string, E.tokenFile)), tls);
    }
    default:
      throw invalid(`NATS credentials: unknown method ${method}`);
  }
}

/**
 * The `NATS_*` authentication variables set in `env` (names from {@link NATS_AUTH_ENV_NAMES},
 * empty values dropped), e.g. for a launcher to hand to every service it starts.
 */
export function pickNatsAuthEnv(env: Env): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of NATS_AUTH_ENV_NAMES) {
    const value = env[name];
    if (value) out[name] = value;
  }
  return out;
}

function readTls(get: (name: string) => string | undefined): TlsOptions | undefined {
  const E = NATS_AUTH_ENV;
  const ca = get(E.tlsCa);
  const cert = get(E.tlsCert);
  const key = get(E.tlsKey);
  if ((cert === undefined) !== (key === undefined)) throw invalid(`NATS TLS: set ${E.tlsCert} and ${E.tlsKey} together (mutual TLS), or neither`);
  if (ca === undefined && cert === undefined) return undefined;
  const tls: { ca?: string; cert?: string; key?: string } = {};
  if (ca !== undefined) tls.ca = readPem(readPublicFile(ca, E.tlsCa), ca, E.tlsCa);
  if (cert !== undefined && key !== undefined) {
    tls.cert = readPem(readPublicFile(cert, E.tlsCert), cert, E.tlsCert);
    tls.key = readPem(readSecretFile(key, E.tlsKey), key, E.tlsKey);
  }
  return tls;
}

function readPem(data: Buffer, file: string, variable: string): string {
  const text = data.toString('utf8');
  if (!text.includes('-----BEGIN ')) throw invalid(`${variable}: ${file} is not PEM (no -----BEGIN line)`);
  return text;
}

function readPublicFile(file: string, variable: string): Buffer {
  try {
    return readFileSync(file);
  } catch (error) {
    throw invalid(`${variable}: cannot read ${file} (${errorCode(error)})`);
  }
}

function readSecretText(file: string, variable: string): string {
  const text = readSecretFile(file, variable).toString('utf8').trim();
  if (text === '') throw invalid(`${variable}: ${file} is empty`);
  return text;
}

/**
 * Reads a file holding a secret, refusing it when group or others may read or write it (mode
 * bits 077), checked on the opened file (no window between check and read). Same rule as the
 * config signing key and the service TLS key.
 */
function readSecretFile(file: string, variable: string): Buffer {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (error) {
    throw invalid(`${variable}: cannot read ${file} (${errorCode(error)})`);
  }
  try {
    const mode = fstatSync(fd).mode & 0o777;
    if ((mode & 0o077) !== 0) {
      throw invalid(
        `${variable}: ${file} can be read or written by other users (mode ${mode.toString(8).padStart(4, '0')}); make it private to the service user: chmod 600 ${file}`,
      );
    }
    return readFileSync(fd);
  } finally {
    closeSync(fd);
  }
}

function check(fn: () => unknown, message: string): void {
  try {
    fn();
  } catch {
    // The library's error could quote the file; the message names the variable and path only.
    throw invalid(message);
  }
}

function errorCode(error: unknown): string {
  return (error as NodeJS.ErrnoException | undefined)?.code ?? 'error';
}

function invalid(message: string): WeirError {
  return new WeirError('invalid_request', message);
}

function makeAuth(method: NatsAuthMethod, variables: readonly string[], authenticator: Authenticator | undefined, tls: TlsOptions | undefined): NatsAuth {
  const summary = { method, variables, tls: tls !== undefined };
  const auth = { method, variables, authenticator, tls, toJSON: () => summary };
  // util.inspect (console.log, some loggers) would otherwise print the TLS key.
  Object.defineProperty(auth, Symbol.for('nodejs.util.inspect.custom'), { value: () => summary, enumerable: false });
  Object.defineProperty(auth, 'tls', { value: tls, enumerable: false });
  return Object.freeze(auth);
}
