/**
 * Test support (used by the specs only; not exported): everything a test starts is stopped
 * after it, even when it fails, because an open server or channel keeps jest alive.
 */
import { type RunningGrpcServer, type StartGrpcServerOptions, startGrpcServer } from './grpc-server';

const cleanups: Array<() => unknown> = [];

/** Registers the afterEach hook of the calling spec file. */
export function stopEverythingAfterEach(): void {
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
}

/** Starts a server on 127.0.0.1 that is closed after the test. */
export async function serve(services: StartGrpcServerOptions['services'], port?: number): Promise<RunningGrpcServer> {
  const server = await startGrpcServer({ services, port });
  cleanups.push(() => server.close());
  return server;
}

/** Closes `client` after the test. */
export function track<T extends { close(): void }>(client: T): T {
  cleanups.push(() => client.close());
  return client;
}

/** Polls `check` every 5 ms until it is true or `timeoutMs` passes; returns its last value. */
export async function eventually(check: () => boolean, timeoutMs = 3_000): Promise<boolean> {
  const until = performance.now() + timeoutMs;
  while (!check() && performance.now() < until) await new Promise((r) => setTimeout(r, 5));
  return check();
}
