/**
 * The eval routes as the control plane mounts them: golden prompts and eval runs under
 * `/admin/v1` (docs/evals.md), replaying on engines built from the current configuration and
 * auditing through the control plane's change path.
 */
import path from 'node:path';
import type { Router } from 'express';
import { parseConfig, resolveModelFile } from '@weir/config';
import { actorOf, type AdminRequest, composeConfig, type ControlPlane, createEngineEvalGenerator, createEvalRouter, type EvalRoutesOptions } from '@weir/control-plane';
import { type RevisionSpec, WeirError } from '@weir/core';
import type { WeirLogger } from '@weir/telemetry';

/** Settings of {@link evalRoutes}. */
export interface EvalRoutesSettings {
  /**
   * Where llama.cpp model files are looked up by their `model_sha256` (`<dir>/<sha256>.gguf`)
   * when a revision's `model_path` does not exist here (`WEIR_MODEL_CACHE_DIR`). Nothing is
   * downloaded: a control plane without the file cannot replay that revision.
   */
  modelCacheDir: string;
  /** Limits of the eval router (prompts per eval, concurrency, per-call timeout). Default its own. */
  options?: EvalRoutesOptions;
}

/**
 * Resolves revision ids to camelCase {@link RevisionSpec}s from the configuration as it is now
 * in Postgres (composed and parsed once per eval run, on first use). A llama.cpp revision gets
 * its model file resolved on this host (its `model_path`, else the cache by sha256; no
 * download), once per revision per run.
 * @returns the resolver; it resolves undefined for an unknown revision and rejects with
 *   WeirError `engine_unavailable` when a llama.cpp model file is not on this host (the eval
 *   reports it per prompt).
 */
export function createRevisionResolver(cp: ControlPlane, settings: { modelCacheDir: string; logger?: WeirLogger }): (revisionId: string) => Promise<RevisionSpec | undefined> {
  let revisions: Promise<Map<string, RevisionSpec>> | undefined;
  const resolved = new Map<string, Promise<RevisionSpec | undefined>>();
  const load = () =>
    (revisions ??= composeConfig(cp.db).then((config) => new Map(parseConfig(JSON.stringify(config), 'control plane', { format: 'json' }).revisions.map((r) => [r.id, r]))));
  const resolve = async (revisionId: string): Promise<RevisionSpec | undefined> => {
    const spec = (await load()).get(revisionId);
    if (!spec || spec.engine.kind !== 'llamacpp') return spec;
    const file = await resolveModelFile(spec.engine, { cacheDir: path.resolve(settings.modelCacheDir), allowDownload: false, logger: settings.logger });
    if (!file.ok) throw new WeirError('engine_unavailable', `revision ${revisionId} cannot be replayed on the control plane: ${file.reason}`);
    return { ...spec, engine: { ...spec.engine, modelPath: file.path } };
  };
  return (revisionId) => {
    let spec = resolved.get(revisionId);
    if (!spec) {
      spec = resolve(revisionId);
      resolved.set(revisionId, spec);
    }
    return spec;
  };
}

/**
 * The eval routes' registration for the admin router's `extraRoutes`: `createEvalRouter` with
 * a fresh engine generator per run (engines closed after the run) and an audit writer that
 * records each entry as a change of the control plane without a snapshot (actor = the
 * request's admin token), like admin-token changes.
 */
export function evalRoutes(cp: ControlPlane, settings: EvalRoutesSettings, logger?: WeirLogger): (router: Router) => void {
  const router = createEvalRouter(settings.options ?? {}, {
    db: cp.db,
    openGenerator: () => createEngineEvalGenerator({ resolveRevision: createRevisionResolver(cp, { modelCacheDir: settings.modelCacheDir, logger }), engineDeps: logger ? { logger } : {} }),
    audit: async (req, entry) => {
      await cp.change(
        { actor: actorOf(req as AdminRequest), action: entry.action, entityType: entry.entityType, entityId: entry.entityId },
        async () => ({ before: entry.before, after: entry.after, result: undefined }),
        { snapshot: false },
      );
    },
  });
  return (r) => void r.use(router);
}
