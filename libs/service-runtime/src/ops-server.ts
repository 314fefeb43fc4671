/**
 * The operations endpoints every Weir service exposes (CONVENTIONS.md §7): `GET /healthz`
 * (liveness: the event loop answers; never tied to downstreams), `GET /readyz` (readiness:
 * 200 only while the service can do its work; 503 with a reason while starting, draining or
 * when a required dependency is down) and `GET /metrics` (Prometheus). gRPC services serve
 * these on a separate HTTP port; so do the HTTP services (the gateway, the all-in-one, the
 * control plane): their public listeners never serve `/metrics` (docs/security.md §9).
 *
 * With a `token`, every path but `/healthz` needs `Authorization: Bearer <token>` (401 without
 * it, compared in constant time), so a port that must listen beyond loopback (a Prometheus
 * scrape over the pod network) still shows nothing to whoever else reaches it.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A readiness answer. */
export interface Readiness {
  ready: boolean;
  /** Why not, e.g. `draining`, `nats_disconnected`. */
  reason?: string;
}

/** Options of {@link startOpsServer}. */
export interface OpsServerOptions {
  host: string;
  /** 0 = any free port. */
  port: number;
  readiness(): Readiness;
  metricsHandler?: (req: IncomingMessage, res: ServerResponse) => void;
  /** Answers a request before the built-in routes (e.g. a richer `/readyz`); returns true when it did. */
  handle?: (req: IncomingMessage, res: ServerResponse) => boolean;
  /** The ops token (`WEIR_OPS_TOKEN`): required as a Bearer token on every path but `/healthz`. Default none. Secret. */
  token?: string;
}

/** A running ops server. */
export interface OpsServer {
  port: number;
  close(): Promise<void>;
}

/** Answers `/healthz` and `/readyz` on a Node HTTP response; false when the path is neither. */
export function handleProbe(req: IncomingMessage, res: ServerResponse, readiness: () => Readiness): boolean {
  const path = (req.url ?? '').split('?')[0];
  if (req.method !== 'GET' || (path !== '/healthz' && path !== '/readyz')) return false;
  const r = path === '/healthz' ? { ready: true } : readiness();
  res.writeHead(r.ready ? 200 : 503, { 'content-type': 'application/json' });
  res.end(JSON.stringify(path === '/healthz' ? { status: 'ok' } : { status: r.ready ? 'ready' : 'not_ready', ...(r.reason ? { reason: r.reason } : {}) }));
  return true;
}

const sha256 = (text: string) => createHash('sha256').update(text, 'utf8').digest();

/** Whether `req` carries `Authorization: Bearer <token>` (the digests compared in constant time). */
function hasToken(req: IncomingMessage, tokenDigest: Buffer): boolean {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? '');
  return m !== null && timingSafeEqual(sha256(m[1]), tokenDigest);
}

/** Starts the ops server. */
export async function startOpsServer(options: OpsServerOptions): Promise<OpsServer> {
  const tokenDigest = options.token ? sha256(options.token) : undefined;
  const server: Server = createServer((req, res) => {
    if (tokenDigest && (req.url ?? '').split('?')[0] !== '/healthz' && !hasToken(req, tokenDigest)) {
      res.writeHead(401, { 'content-type': 'application/json', 'www-authenticate': 'Bearer' });
      res.end('{"error":{"message":"The ops endpoints need the ops token: send Authorization: Bearer <WEIR_OPS_TOKEN>.","type":"authentication_error","param":null,"code":"authentication_failed"}}');
      return;
    }
    if (options.handle?.(req, res)) return;
    if (handleProbe(req, res, options.readiness)) return;
    if (req.method === 'GET' && (req.url ?? '').split('?')[0] === '/metrics' && options.metricsHandler) {
      options.metricsHandler(req, res);
      return;
    }
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end('{"error":{"message":"not found","type":"not_found_error","param":null,"code":"not_found"}}');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => resolve());
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
