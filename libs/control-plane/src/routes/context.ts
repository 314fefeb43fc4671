import type { NextFunction, Request, Response } from 'express';
import type { AdminRole } from '../admin-token';
import type { Actor, ControlPlane, ControlPlaneLogger } from '../control-plane';

/** What every route module gets. */
export interface RouteContext {
  cp: ControlPlane;
  logger?: ControlPlaneLogger;
}

/** The authenticated caller of an admin request. */
export interface AdminCaller extends Actor {
  role: AdminRole;
}

/** An authenticated request. */
export type AdminRequest = Request & { admin: AdminCaller };

/** Wraps an async handler: its result is sent as JSON (status 200, or `status`), a throw goes to the error handler. */
export function handle(fn: (req: AdminRequest, res: Response) => Promise<unknown>, status = 200) {
  return (req: Request, res: Response, next: NextFunction) => {
    fn(req as AdminRequest, res).then(
      (body) => {
        if (!res.headersSent) res.status(status).json(body);
      },
      next,
    );
  };
}

/** The actor recorded in the audit log for `req`. */
export function actorOf(req: AdminRequest): Actor {
  return { id: req.admin.id, label: req.admin.label };
}

/** Sets `x-weir-config-version` when the change produced a snapshot. */
export function withVersion(res: Response, version: number | null): void {
  if (version !== null) res.setHeader('x-weir-config-version', String(version));
}
