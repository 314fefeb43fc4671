/**
 * A service's mutual-TLS material (issue 14 part 8): the CA that signs every Weir service, this
 * service's certificate and key, and whom its servers let in — read once at start from files
 * named by environment variables, checked, and handed to the gRPC and HTTP adapters.
 */
import { readFileSync, statSync } from 'node:fs';
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { certificateIdentities, type PeerPolicy, peerPolicy } from './identity';

/** What a TLS-enabled service holds. Buffers are PEM. */
export interface ServiceTls {
  /** The CA certificate(s) trusted for peers (PEM, one or more: during a CA rotation both). */
  ca: Buffer;
  /** This service's certificate chain (PEM, leaf first). */
  cert: Buffer;
  /** This service's private key (PEM, PKCS#8 or SEC1/PKCS#1). */
  key: Buffer;
  /** The service names its own certificate carries (`certificateIdentities`). */
  identities: readonly string[];
  /** Callers this service's servers accept (default per service; `WEIR_TLS_ALLOWED_PEERS` overrides). */
  allowedPeers: PeerPolicy;
  /** When the leaf certificate stops being valid (ms since the epoch), for a warning before it lapses. */
  notAfterMs: number;
}

/** The environment variables {@link loadServiceTls} reads. */
export const TLS_ENV = {
  /** CA bundle file (PEM) that signs the peers' certificates. */
  ca: 'WEIR_TLS_CA',
  /** This service's certificate chain file (PEM). */
  cert: 'WEIR_TLS_CERT',
  /** This service's private key file (PEM, mode 0600 or stricter). */
  key: 'WEIR_TLS_KEY',
  /** Comma-separated service names its servers accept (`*`: any certificate the CA signed). */
  allowedPeers: 'WEIR_TLS_ALLOWED_PEERS',
} as const;

/** Thrown by {@link loadServiceTls}: the variable and what to fix, never key material. */
export class ServiceTlsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ServiceTlsError';
  }
}

/** Options of {@link loadServiceTls}. */
export interface LoadServiceTlsOptions {
  /** Callers this service's servers accept unless `WEIR_TLS_ALLOWED_PEERS` says otherwise. Default: any verified peer. */
  defaultPeers?: readonly string[];
  /** The service this process is, which its certificate must name (e.g. `gateway`). Default: not checked. */
  service?: string;
  /** Now (ms), for the validity check. Default `Date.now()`. */
  now?: number;
}

function readFile(variable: string, file: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new ServiceTlsError(`${variable}: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
}

/**
 * Reads this service's TLS material from the files `WEIR_TLS_CA`, `WEIR_TLS_CERT` and
 * `WEIR_TLS_KEY` name, and its accepted callers from `WEIR_TLS_ALLOWED_PEERS`.
 *
 * Checks, each failing with a {@link ServiceTlsError} that names the variable: all three set or
 * none; each file readable and PEM; the key file not readable by group or others (`chmod 600`,
 * or `defaultMode: 0400` on a Kubernetes secret volume); the key belongs to the certificate;
 * the certificate signed by (one of) the CA certificate(s), valid now, and naming `service`
 * when given.
 *
 * @returns the material, or undefined when none of the three variables is set (plaintext: the
 *   caller logs that service-to-service authentication is off).
 * @throws ServiceTlsError on any of the checks above.
 */
export function loadServiceTls(env: NodeJS.ProcessEnv, options: LoadServiceTlsOptions = {}): ServiceTls | undefined {
  const files = { ca: env[TLS_ENV.ca]?.trim() ?? '', cert: env[TLS_ENV.cert]?.trim() ?? '', key: env[TLS_ENV.key]?.trim() ?? '' };
  const set = Object.values(files).filter(Boolean).length;
  if (set === 0) return undefined;
  if (set < 3) {
    const missing = (Object.keys(files) as (keyof typeof files)[]).filter((k) => !files[k]).map((k) => TLS_ENV[k]);
    throw new ServiceTlsError(`${missing.join(', ')}: set ${TLS_ENV.ca}, ${TLS_ENV.cert} and ${TLS_ENV.key} together (or none of them for plaintext)`);
  }
  const mode = statMode(files.key);
  if ((mode & 0o077) !== 0) {
    throw new ServiceTlsError(`${TLS_ENV.key}: ${files.key} is readable by group or others (mode ${(mode & 0o777).toString(8)}); run chmod 600 on it (a Kubernetes secret volume: defaultMode 0400)`);
  }
  const ca = readFile(TLS_ENV.ca, files.ca);
  const cert = readFile(TLS_ENV.cert, files.cert);
  const key = readFile(TLS_ENV.key, files.key);
  const caCerts = parseCertificates(TLS_ENV.ca, ca);
  const chain = parseCertificates(TLS_ENV.cert, cert);
  const leaf = chain[0];
  let privateKey;
  try {
    privateKey = createPrivateKey(key);
  } catch {
    throw new ServiceTlsError(`${TLS_ENV.key}: ${files.key} is not a PEM private key`);
  }
  if (!leaf.checkPrivateKey(privateKey)) throw new ServiceTlsError(`${TLS_ENV.key}: the key in ${files.key} does not belong to the certificate in ${files.cert}`);
  // The leaf, or the last intermediate sent with it, must be issued by a trusted CA certificate.
  const top = chain[chain.length - 1];
  if (!caCerts.some((c) => top.checkIssued(c) && top.verify(c.publicKey))) {
    throw new ServiceTlsError(`${TLS_ENV.cert}: ${files.cert} is not signed by the CA in ${files.ca}`);
  }
  const now = options.now ?? Date.now();
  const notBefore = Date.parse(leaf.validFrom);
  const notAfter = Date.parse(leaf.validTo);
  if (now < notBefore || now > notAfter) throw new ServiceTlsError(`${TLS_ENV.cert}: ${files.cert} is valid from ${leaf.validFrom} to ${leaf.validTo}, not now`);
  const identities = certificateIdentities(leaf);
  if (options.service !== undefined && !identities.includes(options.service)) {
    throw new ServiceTlsError(
      `${TLS_ENV.cert}: ${files.cert} must name this service (a URI SAN spiffe://<trust domain>/${options.service}); it names ${identities.length > 0 ? identities.join(', ') : 'no service'}`,
    );
  }
  const peersRaw = env[TLS_ENV.allowedPeers]?.trim();
  const peers = peersRaw ? peersRaw.split(',').map((p) => p.trim()).filter(Boolean) : options.defaultPeers ?? [];
  return { ca, cert, key, identities, allowedPeers: peerPolicy(peers), notAfterMs: notAfter };
}

function statMode(file: string): number {
  try {
    return statSync(file).mode;
  } catch (err) {
    throw new ServiceTlsError(`${TLS_ENV.key}: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
  }
}

const PEM_CERT = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

function parseCertificates(variable: string, pem: Buffer): X509Certificate[] {
  const blocks = pem.toString('utf8').match(PEM_CERT) ?? [];
  if (blocks.length === 0) throw new ServiceTlsError(`${variable}: no PEM certificate in the file`);
  try {
    return blocks.map((b) => new X509Certificate(b));
  } catch {
    throw new ServiceTlsError(`${variable}: a certificate in the file does not parse`);
  }
}

/** What {@link serviceTlsFromEnv} logs with (pino's shape). */
export interface ServiceTlsLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/** A leaf certificate that lapses within this is warned about at start (ms): 7 days. */
export const CERTIFICATE_EXPIRY_WARNING_MS = 7 * 86_400_000;

/**
 * {@link loadServiceTls} for a service's main: its certificate must name `service`; logs that
 * service authentication is on (identities, accepted callers, expiry) or — warn — off, and
 * warns when the certificate lapses within {@link CERTIFICATE_EXPIRY_WARNING_MS}. No key
 * material is logged.
 *
 * @throws ServiceTlsError as {@link loadServiceTls}.
 */
export function serviceTlsFromEnv(
  service: string,
  options: { defaultPeers?: readonly string[]; logger: ServiceTlsLogger; env?: NodeJS.ProcessEnv; /** False for a pure client (the gateway): no accepted callers are logged. Default true. */ serves?: boolean },
): ServiceTls | undefined {
  const tls = loadServiceTls(options.env ?? process.env, { service, ...(options.defaultPeers ? { defaultPeers: options.defaultPeers } : {}) });
  if (!tls) {
    options.logger.warn({}, `service authentication is off (${TLS_ENV.ca}, ${TLS_ENV.cert}, ${TLS_ENV.key} not set): anything that reaches this service's ports can call it`);
    return undefined;
  }
  const peers = tls.allowedPeers === 'any' ? '*' : [...tls.allowedPeers].join(',');
  options.logger.info({ identities: tls.identities, ...(options.serves === false ? {} : { allowedPeers: peers }), notAfter: new Date(tls.notAfterMs).toISOString() }, 'mutual TLS on');
  if (tls.notAfterMs - Date.now() < CERTIFICATE_EXPIRY_WARNING_MS) {
    options.logger.warn({ notAfter: new Date(tls.notAfterMs).toISOString() }, `the certificate in ${TLS_ENV.cert} lapses within 7 days: rotate it (docs/security.md §8)`);
  }
  return tls;
}
