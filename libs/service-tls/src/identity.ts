/**
 * Service identities: who a certificate says a peer is, and whom a server lets in.
 *
 * A Weir service certificate names its service in a URI subject alternative name
 * `spiffe://<trust domain>/…/<service>` (the launcher's dev certificates use
 * `spiffe://weir/<service>`; SPIFFE/SPIRE or cert-manager certificates with a longer path work
 * the same: the last path segment is the service). A certificate may name several services
 * (an all-in-one calling engine replicas is the gateway, the scheduler and the relay at once).
 * Which CA is trusted decides the trust domain; the name decides what the peer may call.
 */
import { checkServerIdentity, type PeerCertificate } from 'node:tls';
import type { X509Certificate } from 'node:crypto';

/** The services of the split topology, as their certificates name them. */
export const SERVICE_NAMES = ['gateway', 'admission', 'scheduler', 'router', 'relay', 'engine', 'reconcile', 'operator'] as const;

/** One of {@link SERVICE_NAMES}, or another name an operator puts in a certificate. */
export type ServiceName = (typeof SERVICE_NAMES)[number] | (string & {});

/** The trust domain of the launcher's dev certificates (`spiffe://weir/<service>`). */
export const DEV_TRUST_DOMAIN = 'weir';

/** `spiffe://<trustDomain>/<service>`: the URI SAN naming `service`. */
export function serviceUri(service: string, trustDomain = DEV_TRUST_DOMAIN): string {
  return `spiffe://${trustDomain}/${service}`;
}

/**
 * Whom a server accepts: `any` (every certificate the CA signed) or the set of service names
 * of which the caller's certificate must name at least one.
 */
export type PeerPolicy = 'any' | ReadonlySet<string>;

/** A {@link PeerPolicy} from names; an empty list or one containing `*` is `any`. */
export function peerPolicy(names: readonly string[]): PeerPolicy {
  return names.length === 0 || names.includes('*') ? 'any' : new Set(names);
}

/** True when a peer with `identities` passes `policy` (`any`: every verified peer). */
export function allows(policy: PeerPolicy, identities: readonly string[]): boolean {
  if (policy === 'any') return true;
  for (const id of identities) if (policy.has(id)) return true;
  return false;
}

/** The policy as text for error messages and logs (`any service` or `gateway, admission`). */
export function describePolicy(policy: PeerPolicy): string {
  return policy === 'any' ? 'any service' : [...policy].join(', ');
}

const SPIFFE = /^spiffe:\/\/[^/]+\/(?:[^/]+\/)*([^/]+)$/;

/**
 * The service names a certificate carries: the last path segment of each `spiffe://` URI SAN,
 * in order, without duplicates. Other SANs (DNS, IP) are not identities. `subjectaltname` is
 * Node's rendering (`DNS:localhost, IP Address:127.0.0.1, URI:spiffe://weir/gateway`), as
 * `tls.PeerCertificate` and `crypto.X509Certificate` both give it.
 */
export function certificateIdentities(cert: Pick<PeerCertificate, 'subjectaltname'> | Pick<X509Certificate, 'subjectAltName'> | undefined): string[] {
  const san = cert === undefined ? undefined : 'subjectaltname' in cert ? cert.subjectaltname : (cert as Pick<X509Certificate, 'subjectAltName'>).subjectAltName;
  if (!san) return [];
  const out: string[] = [];
  for (const raw of san.split(', ')) {
    if (!raw.startsWith('URI:')) continue;
    // Node quotes a value holding a comma or quote (`URI:"…"`); service URIs hold neither.
    const m = SPIFFE.exec(raw.slice(4));
    if (m && !out.includes(m[1])) out.push(m[1]);
  }
  return out;
}

/**
 * A `checkServerIdentity` for TLS clients (grpc-js `verifyOptions`, undici `connect`): the
 * usual host name check (the address's DNS name or IP in the server's SANs), then that the
 * server's certificate names `expected` (`undefined` skips that part).
 *
 * @returns undefined when both pass, else an Error saying what did not match.
 */
export function serverIdentityCheck(expected: string | undefined): (host: string, cert: PeerCertificate) => Error | undefined {
  return (host, cert) => {
    const hostError = checkServerIdentity(host, cert);
    if (hostError) return hostError;
    if (expected === undefined) return undefined;
    const ids = certificateIdentities(cert);
    if (ids.includes(expected)) return undefined;
    return new Error(`the server at ${host} is not the ${expected} (its certificate names ${ids.length > 0 ? ids.join(', ') : 'no service'})`);
  };
}
