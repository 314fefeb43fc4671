/**
 * Golden prompts and eval runs (docs/evals.md) on the all-in-one's admin API: the admin API's
 * canary gate asks for a passing eval before a canary's share grows, so the all-in-one serves
 * the routes that produce one. Replays run on fresh engines of the revisions this process
 * serves (their model files already resolved at start), closed after each run.
 */
import type { Request, Router } from 'express';
import { type ControlPlane, createEngineEvalGenerator, createEvalRouter } from '@weir/control-plane';
import type { RevisionSpec } from '@weir/core';
import type { WeirLogger } from '@weir/telemetry';

/** The caller the admin router's authentication attached to the request. */
type Authenticated = Request & { admin?: { id: string; label: string } };

/**
 * The eval routes as an `extraRoutes` registration of the admin router. Each audit entry is a
 * change of the control plane without a snapshot, by the request's admin token.
 * @param revisions the served revisions by id (engine specs as started: model paths resolved).
 */
export function evalRoutes(controlPlane: ControlPlane, revisions: ReadonlyMap<string, RevisionSpec>, logger: WeirLogger): (router: Router) => void {
  const router = createEvalRouter(
    {},
    {
      db: controlPlane.db,
      openGenerator: () => createEngineEvalGenerator({ resolveRevision: (id) => revisions.get(id), engineDeps: { logger } }),
      audit: async (req, entry) => {
        const admin = (req as Authenticated).admin;
        const actor = admin ? { id: admin.id, label: admin.label } : { id: 'unknown', label: 'unknown' };
        await controlPlane.change({ actor, action: entry.action, entityType: entry.entityType, entityId: entry.entityId }, async () => ({ before: entry.before, after: entry.after, result: undefined }), {
          snapshot: false,
        });
      },
    },
  );
  return (r) => void r.use(router);
}
