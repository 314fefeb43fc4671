/**
 * A development PKI for the split topology on one machine: a fresh CA and one certificate per
 * service, written to a private directory, made by the launcher at every start (so every start
 * is also a rotation). Not for production: there the operator's PKI issues the certificates
 * (docs/security.md §8).
 */
import { chmodSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { randomBytes, webcrypto } from 'node:crypto';
import path from 'node:path';
import type * as X509 from '@peculiar/x509';
import { DEV_TRUST_DOMAIN, serviceUri } from './identity';

let loaded: Promise<typeof X509> | undefined;

/**
 * @peculiar/x509 on Node's WebCrypto, loaded on first use: only the launcher issues
 * certificates, so the services never load it (nor the Reflect polyfill its dependency
 * injection needs).
 */
function loadX509(): Promise<typeof X509> {
  loaded ??= (async () => {
    await import('reflect-metadata');
    const x509 = await import('@peculiar/x509');
    x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);
    return x509;
  })();
  return loaded;
}

/** One certificate to issue. */
export interface DevCertificateSpec {
  /** File stem (`<dir>/<name>.pem`, `<dir>/<name>-key.pem`). */
  name: string;
  /** Service names the certificate carries as `spiffe://weir/<id>` URI SANs. Default `[name]`. */
  identities?: readonly string[];
}

/** Options of {@link issueDevPki}. */
export interface DevPkiOptions {
  /** Directory for the files; created mode 0700 (its files 0600). */
  dir: string;
  certificates: readonly DevCertificateSpec[];
  /** Validity of every certificate from now (ms). Default 30 days. */
  validityMs?: number;
  /** Host names the certificates are valid for (DNS SANs) besides `localhost`. Default none. */
  dnsNames?: readonly string[];
}

/** The files of one issued certificate: what `WEIR_TLS_CA`, `WEIR_TLS_CERT`, `WEIR_TLS_KEY` name. */
export interface DevCertificateFiles {
  ca: string;
  cert: string;
  key: string;
}

/** An issued dev PKI. */
export interface DevPki {
  /** `<dir>/ca.pem`: the CA certificate every service trusts. */
  caFile: string;
  /** Per certificate name, its files. */
  files: ReadonlyMap<string, DevCertificateFiles>;
  /** The environment a service with certificate `name` needs (`WEIR_TLS_CA`, `_CERT`, `_KEY`). */
  env(name: string): Record<string, string>;
}

const ALGORITHM = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const DAY_MS = 86_400_000;

/**
 * Issues a new CA (ECDSA P-256, its key kept only in memory) and one certificate per spec,
 * signed by it: ECDSA P-256, the spec's identities as `spiffe://weir/<id>` URI SANs, DNS
 * `localhost` (and `dnsNames`), IP 127.0.0.1 and ::1, usable as TLS server and client
 * certificate. Writes `<dir>/ca.pem` and each `<name>.pem` + `<name>-key.pem` (PKCS#8), every
 * file mode 0600 and replaced atomically, the directory 0700. The CA's private key is never
 * written: a new start issues a new CA.
 *
 * @throws on a filesystem error.
 */
export async function issueDevPki(options: DevPkiOptions): Promise<DevPki> {
  const x509 = await loadX509();
  const subtle = webcrypto.subtle;
  mkdirSync(options.dir, { recursive: true, mode: 0o700 });
  chmodSync(options.dir, 0o700); // an existing directory keeps its mode otherwise
  const now = Date.now();
  const notBefore = new Date(now - 60_000); // tolerate a little clock skew between processes
  const notAfter = new Date(now + (options.validityMs ?? 30 * DAY_MS));
  const caKeys = await subtle.generateKey(ALGORITHM, true, ['sign', 'verify']);
  const caName = `CN=Weir development CA ${randomBytes(4).toString('hex')}`;
  const ca = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial(),
    name: caName,
    notBefore,
    notAfter,
    keys: caKeys,
    signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(caKeys.publicKey),
    ],
  });
  const caFile = path.join(options.dir, 'ca.pem');
  writePrivate(caFile, ca.toString('pem'));
  const files = new Map<string, DevCertificateFiles>();
  for (const spec of options.certificates) {
    const keys = await subtle.generateKey(ALGORITHM, true, ['sign', 'verify']);
    const identities = spec.identities ?? [spec.name];
    const cert = await x509.X509CertificateGenerator.create({
      serialNumber: serial(),
      subject: `CN=${identities.join('+')}`,
      issuer: ca.subject,
      notBefore,
      notAfter,
      publicKey: keys.publicKey,
      signingKey: caKeys.privateKey,
      signingAlgorithm: ALGORITHM,
      extensions: [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth]),
        new x509.SubjectAlternativeNameExtension([
          ...identities.map((id) => ({ type: 'url' as const, value: serviceUri(id, DEV_TRUST_DOMAIN) })),
          { type: 'dns', value: 'localhost' },
          ...(options.dnsNames ?? []).map((value) => ({ type: 'dns' as const, value })),
          { type: 'ip', value: '127.0.0.1' },
          { type: 'ip', value: '::1' },
        ]),
        await x509.AuthorityKeyIdentifierExtension.create(caKeys.publicKey),
      ],
    });
    const pkcs8 = await subtle.exportKey('pkcs8', keys.privateKey);
    const certFile = path.join(options.dir, `${spec.name}.pem`);
    const keyFile = path.join(options.dir, `${spec.name}-key.pem`);
    writePrivate(certFile, cert.toString('pem'));
    writePrivate(keyFile, x509.PemConverter.encode(pkcs8, 'PRIVATE KEY'));
    files.set(spec.name, { ca: caFile, cert: certFile, key: keyFile });
  }
  return {
    caFile,
    files,
    env(name) {
      const f = files.get(name);
      if (!f) throw new Error(`no dev certificate named ${name}`);
      return { WEIR_TLS_CA: f.ca, WEIR_TLS_CERT: f.cert, WEIR_TLS_KEY: f.key };
    },
  };
}

/** A positive 16-byte serial number (hex), as RFC 5280 asks (unique, at most 20 octets). */
function serial(): string {
  const b = randomBytes(16);
  b[0] &= 0x7f;
  return b.toString('hex');
}

/** Writes `text` to a new temporary file created 0600, then renames it over `file`. */
function writePrivate(file: string, text: string): void {
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  writeFileSync(tmp, text, { mode: 0o600 });
  renameSync(tmp, file);
}
