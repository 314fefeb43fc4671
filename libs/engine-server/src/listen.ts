/**
 * Serves an engine app over HTTP, or over HTTPS asking for client certificates (mutual TLS,
 * issue 14 part 8) when the process has `WEIR_TLS_*` material, with the limits on slow and
 * greedy clients of docs/security.md §7.
 */
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { type ClientLimits, createClientGuard, DEFAULT_CLIENT_LIMITS } from '@weir/service-runtime';
import { httpsServerOptions, type ServiceTls } from '@weir/service-tls';
import type { Express } from 'express';

/**
 * The client limits of an engine replica's listener: {@link DEFAULT_CLIENT_LIMITS} (15 s for the
 * request head, 60 s for the whole request — not its answer, which streams as long as the
 * generation runs — 4,096 connections), except that one address may hold as many connections as
 * the global cap: the replica's callers are a few relays and routers, each pooling many
 * connections to it, and a connection refused at accept would look to them like a failed
 * replica. The failed-authentication throttle is unused (a replica has no API keys).
 */
export const DEFAULT_ENGINE_CLIENT_LIMITS: Readonly<ClientLimits> = Object.freeze({
  ...DEFAULT_CLIENT_LIMITS,
  trustedProxies: [],
  maxConnectionsPerAddress: DEFAULT_CLIENT_LIMITS.maxConnections,
  authFailureLimit: 0,
});

/** Options of {@link listenEngineServer}. */
export interface EngineListenOptions {
  port: number;
  host: string;
  /** Serve HTTPS with client certificates (see {@link listenEngineServer}). Default plain HTTP. */
  tls?: ServiceTls;
  /**
   * Header and request timeouts, keep-alive timeout and connection caps (`clientLimitsFromEnv(env,
   * DEFAULT_ENGINE_CLIENT_LIMITS)` reads them from `WEIR_HEADERS_TIMEOUT_MS`, … as the gateway
   * does). Default {@link DEFAULT_ENGINE_CLIENT_LIMITS}.
   */
  limits?: ClientLimits;
}

/**
 * Listens on `host:port` with `app`: HTTPS with `tls` (client certificates requested and
 * verified against `tls.ca`; the app's `peers` policies decide per request, so a caller without
 * one is told 401 instead of seeing a handshake failure), else plain HTTP. A request whose head
 * or body trickles past `limits`' timeouts gets 408 and its connection is closed; connections
 * beyond the caps are closed at once. Returns the server at once; `onListening` runs when it is
 * bound. Errors (`EADDRINUSE`) are emitted on the server.
 */
export function listenEngineServer(app: Express, options: EngineListenOptions, onListening?: () => void): Server {
  const guard = createClientGuard(options.limits ?? DEFAULT_ENGINE_CLIENT_LIMITS);
  const server = options.tls ? createHttpsServer({ ...httpsServerOptions(options.tls), ...guard.serverOptions }, app) : createHttpServer(guard.serverOptions, app);
  guard.attach(server);
  server.once('close', () => guard.close());
  server.listen(options.port, options.host, onListening);
  return server;
}
