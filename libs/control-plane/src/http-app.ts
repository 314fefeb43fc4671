import express, { type Express } from 'express';
import { type Readiness } from '@weir/service-runtime';
import { type AdminRouterDeps, createAdminRouter } from './admin-router';
import type { ControlPlane, ControlPlaneLogger } from './control-plane';

/** Dependencies of {@link createControlPlaneHttpApp}. */
export interface ControlPlaneHttpDeps {
  controlPlane: ControlPlane;
  logger?: ControlPlaneLogger;
  /** More admin routes, see {@link AdminRouterDeps.extraRoutes}. */
  extraRoutes?: AdminRouterDeps['extraRoutes'];
  /** The throttle of failed admin authentication, see {@link AdminRouterDeps.authFailures}. */
  authFailures?: AdminRouterDeps['authFailures'];
  /** `/readyz`'s answer. Default: always ready. */
  readiness?: () => Readiness;
}

/**
 * The control plane's HTTP app: `GET /healthz` (liveness), `GET /readyz` (readiness) and the
 * admin API under `/admin/v1`. Anything else is a 404 in the OpenAI error shape.
 */
export function createControlPlaneHttpApp(deps: ControlPlaneHttpDeps): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.get('/healthz', (_req, res) => void res.json({ status: 'ok' }));
  app.get('/readyz', (_req, res) => {
    const r = deps.readiness?.() ?? { ready: true };
    res.status(r.ready ? 200 : 503).json({ status: r.ready ? 'ready' : 'not_ready', ...(r.reason ? { reason: r.reason } : {}) });
  });
  app.use('/admin/v1', createAdminRouter({}, { controlPlane: deps.controlPlane, logger: deps.logger, extraRoutes: deps.extraRoutes, ...(deps.authFailures ? { authFailures: deps.authFailures } : {}) }));
  app.use((req, res) => {
    res.status(404).json({ error: { message: `No route ${req.method} ${req.path}; the admin API is under /admin/v1.`, type: 'not_found_error', param: null, code: 'not_found' } });
  });
  return app;
}
