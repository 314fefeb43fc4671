/**
 * Serves an engine app over HTTP, or over HTTPS asking for client certificates (mutual TLS,
 * issue 14 part 8) when the process has `WEIR_TLS_*` material.
 */
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { httpsServerOptions, type ServiceTls } from '@weir/service-tls';
import type { Express } from 'express';

/**
 * Listens on `host:port` with `app`: HTTPS with `tls` (client certificates requested and
 * verified against `tls.ca`; the app's `peers` policies decide per request, so a caller without
 * one is told 401 instead of seeing a handshake failure), else plain HTTP. Returns the server at
 * once; `onListening` runs when it is bound. Errors (`EADDRINUSE`) are emitted on the server.
 */
export function listenEngineServer(app: Express, options: { port: number; host: string; tls?: ServiceTls }, onListening?: () => void): Server {
  const server = options.tls ? createHttpsServer(httpsServerOptions(options.tls), app) : createHttpServer(app);
  server.listen(options.port, options.host, onListening);
  return server;
}
