/**
 * What evals and canaries read of the control plane's model configuration (`model_aliases`,
 * `model_revisions` of migration 0008, kept in the configuration file's snake_case shapes).
 */
import type { Kysely } from 'kysely';
import type { AliasTarget } from '@weir/core';
import type { WeirSchema } from '@weir/store-pg';

/** An alias and its weighted arms. */
export interface CatalogAlias {
  name: string;
  targets: AliasTarget[];
}

/** Read access to aliases and revisions. */
export interface ModelCatalog {
  /** The alias's targets (the `revision` shorthand as one target of weight 1); undefined when the alias does not exist. */
  aliasTargets(alias: string): Promise<AliasTarget[] | undefined>;
  /** Every alias with its targets. */
  listAliases(): Promise<CatalogAlias[]>;
  /** When the revision was created; undefined when it does not exist. */
  revisionCreatedAt(revision: string): Promise<Date | undefined>;
}

/**
 * The targets of an alias spec in the configuration file's shape: `targets: [{revision,
 * weight}]`, or `revision: <id>` (one target of weight 1, as `@weir/config` reads it).
 * Malformed entries are skipped.
 */
export function targetsOfAliasSpec(spec: Record<string, unknown>): AliasTarget[] {
  if (typeof spec.revision === 'string') return [{ revision: spec.revision, weight: 1 }];
  if (!Array.isArray(spec.targets)) return [];
  return spec.targets.flatMap((t: unknown) => {
    const target = t as { revision?: unknown; weight?: unknown };
    return typeof target?.revision === 'string' && typeof target.weight === 'number' ? [{ revision: target.revision, weight: target.weight }] : [];
  });
}

/**
 * The stable arm of a set of targets: the revision with the largest weight (the first listed on
 * a tie); undefined when there is no target or every weight is 0. Every other arm is a canary.
 */
export function stableRevisionOf(targets: readonly AliasTarget[]): string | undefined {
  let best: AliasTarget | undefined;
  for (const t of targets) if (t.weight > 0 && (!best || t.weight > best.weight)) best = t;
  return best?.revision;
}

/** The catalog over Postgres (`model_aliases.id` is the alias name). */
export function createPgModelCatalog(db: Kysely<WeirSchema>): ModelCatalog {
  return {
    async aliasTargets(alias) {
      const row = await db.selectFrom('model_aliases').select('spec').where('id', '=', alias).executeTakeFirst();
      return row && targetsOfAliasSpec(row.spec);
    },
    async listAliases() {
      const rows = await db.selectFrom('model_aliases').select(['id', 'spec']).orderBy('id').execute();
      return rows.map((r) => ({ name: r.id, targets: targetsOfAliasSpec(r.spec) }));
    },
    async revisionCreatedAt(revision) {
      const row = await db.selectFrom('model_revisions').select('created_at').where('id', '=', revision).executeTakeFirst();
      return row?.created_at;
    },
  };
}
