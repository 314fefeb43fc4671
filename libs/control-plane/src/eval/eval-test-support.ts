/**
 * Shared set-up of the eval route specs: a standalone express app over the eval router, with
 * a fake admin (a header picks the role), a recording audit writer and the admin API's error
 * shape. Test-only.
 */
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import express, { type ErrorRequestHandler, type RequestHandler } from 'express';
import { WeirError, toWeirError } from '@weir/core';
import { HTTP_ERRORS } from '@weir/streaming';
import { createEvalRouter, type EvalAuditEntry, type EvalRoutesDeps, type EvalRoutesOptions } from './eval-routes';

/** An audit entry as the fake writer recorded it, with the caller. */
export type RecordedAudit = EvalAuditEntry & { actor: string };

/** A running test server. */
export interface EvalTestServer {
  url: string;
  audits: RecordedAudit[];
  /** `fetch` with JSON in and out; `role` picks the fake caller's role (default admin). */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- test bodies are read field by field
  call(method: string, path: string, body?: unknown, role?: 'admin' | 'viewer'): Promise<{ status: number; body: any }>;
  close(): Promise<void>;
}

/** Starts the eval router under `/admin/v1` on a free port. */
export async function startEvalServer(options: EvalRoutesOptions, deps: Omit<EvalRoutesDeps, 'audit' | 'auth' | 'errorHandler'>): Promise<EvalTestServer> {
  const audits: RecordedAudit[] = [];
  const auth: RequestHandler = (req, _res, next) => {
    const role = req.header('x-test-role') ?? 'admin';
    if (role !== 'admin' && req.method !== 'GET') next(new WeirError('permission_denied', `role ${role} may only read`));
    else next();
  };
  const errorHandler: ErrorRequestHandler = (err, _req, res, _next) => {
    const e = toWeirError(err);
    const mapping = HTTP_ERRORS[e.code];
    res.status(mapping.status).json({ error: { message: e.message, type: mapping.type, param: e.param ?? null, code: e.code } });
  };
  const app = express();
  app.use(
    '/admin/v1',
    createEvalRouter(options, {
      ...deps,
      auth,
      errorHandler,
      audit: async (req, entry) => {
        audits.push({ ...entry, actor: req.header('x-test-role') ?? 'admin' });
      },
    }),
  );
  const server: Server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    audits,
    async call(method, path, body, role = 'admin') {
      const res = await fetch(`${url}/admin/v1${path}`, {
        method,
        headers: { 'content-type': 'application/json', 'x-test-role': role },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      return { status: res.status, body: await res.json() };
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
