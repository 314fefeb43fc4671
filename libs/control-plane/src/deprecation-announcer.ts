/**
 * The deprecation event (issue 7 item 5): on the day a revision's deprecation is announced
 * (`deprecation.announced_on`, or the day it was set when it names none), the control plane
 * emits one `revision_deprecation_announced` event naming the revision, its retirement day, its
 * replacement and the tenants that reach it — pinned ones first — and records it in the audit
 * log, which also makes it happen once per (revision, retirement day) across restarts and
 * control-plane instances. Gateways carry the countdown on every response meanwhile
 * (`Deprecation`/`Sunset`/`x-weir-retires-in-days`, docs/api.md).
 */
import { sql, type Kysely } from 'kysely';
import type { WeirSchema } from '@weir/store-pg';
import { composeConfig } from './compose-config';
import type { ConfigFileObject } from './config-shapes';

/** How a tenant reaches a deprecated revision. */
export type DeprecationReach = 'pin' | 'alias';

/** The event, as published and audited. */
export interface DeprecationAnnouncement {
  type: 'revision_deprecation_announced';
  revision: string;
  /** UTC day `YYYY-MM-DD` from which requests for it fail with `model_retired`. */
  retires_on: string;
  replacement: string;
  /** UTC day it was announced. */
  announced_on: string;
  /** Whole days from `announced_on` to `retires_on`. */
  days_left: number;
  /** Tenants that reach it: by a pin of theirs, or through an alias they may use whose arms or fallbacks include it. */
  tenants: { id: string; via: DeprecationReach }[];
}

/** The audit action of an announcement. */
export const DEPRECATION_ANNOUNCED_ACTION = 'revision.deprecation_announced';

/** The actor recorded for announcements. */
export const DEPRECATION_ANNOUNCER_ACTOR = { id: 'system:deprecation-announcer', label: 'deprecation announcer' } as const;

const DAY_MS = 86_400_000;

/** UTC day of epoch ms `ms`, `YYYY-MM-DD`. */
function utcDay(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

interface RevisionRow {
  id?: unknown;
  deprecation?: { retires_on?: unknown; replacement?: unknown; announced_on?: unknown } | null;
}
interface AliasRow {
  name?: unknown;
  revision?: unknown;
  targets?: { revision?: unknown; weight?: unknown }[];
  fallbacks?: unknown[];
}
interface TenantRow {
  id?: unknown;
  allowed_aliases?: unknown[];
  routes?: { alias?: unknown; pin?: unknown; fallbacks?: unknown[] }[];
  /** A use case's pin and fallbacks reach a revision as a route's do. */
  use_cases?: { pin?: unknown; fallbacks?: unknown[] }[];
}

/**
 * The announcements due on `today` (pure): every deprecated revision whose announcement day
 * (`announced_on`, else `setOn.get(revision)`, else today) is on or before `today` and before its
 * retirement, and whose `revision|retires_on` is not in `done`.
 * @param config the composed configuration-file object.
 * @param setOn the UTC day each revision's deprecation was last set (from the audit log).
 */
export function dueAnnouncements(config: ConfigFileObject, today: string, done: ReadonlySet<string>, setOn: ReadonlyMap<string, string> = new Map()): DeprecationAnnouncement[] {
  const revisions = (config.revisions ?? []) as RevisionRow[];
  const aliases = (config.aliases ?? []) as AliasRow[];
  const tenants = (config.tenants ?? []) as TenantRow[];
  const out: DeprecationAnnouncement[] = [];
  for (const r of revisions) {
    const d = r.deprecation;
    if (typeof r.id !== 'string' || !d || typeof d.retires_on !== 'string' || typeof d.replacement !== 'string') continue;
    const announced = typeof d.announced_on === 'string' ? d.announced_on : (setOn.get(r.id) ?? today);
    if (announced > today || today >= d.retires_on || done.has(`${r.id}|${d.retires_on}`)) continue;
    const id = r.id;
    const reachingAliases = new Set(
      aliases
        .filter((a) => a.revision === id || (a.targets ?? []).some((t) => t.revision === id && Number(t.weight) > 0) || (a.fallbacks ?? []).includes(id))
        .map((a) => String(a.name)),
    );
    const reached: { id: string; via: DeprecationReach }[] = [];
    for (const t of tenants) {
      if (typeof t.id !== 'string') continue;
      const routes = [...(t.routes ?? []), ...(Array.isArray(t.use_cases) ? t.use_cases : [])];
      if (routes.some((route) => route.pin === id || (route.fallbacks ?? []).includes(id))) {
        reached.push({ id: t.id, via: 'pin' });
        continue;
      }
      const allowed = (t.allowed_aliases ?? ['*']).map(String);
      if ([...reachingAliases].some((a) => allowed.includes('*') || allowed.includes(a))) reached.push({ id: t.id, via: 'alias' });
    }
    reached.sort((a, b) => (a.via === b.via ? a.id.localeCompare(b.id) : a.via === 'pin' ? -1 : 1));
    out.push({
      type: 'revision_deprecation_announced',
      revision: id,
      retires_on: d.retires_on,
      replacement: d.replacement,
      announced_on: announced,
      days_left: Math.round((Date.parse(`${d.retires_on}T00:00:00Z`) - Date.parse(`${announced}T00:00:00Z`)) / DAY_MS),
      tenants: reached,
    });
  }
  return out;
}

/** A minimal logger. Never given prompt or output text (there is none here). */
export interface AnnouncerLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
}

/** Options of {@link createDeprecationAnnouncer}. */
export interface DeprecationAnnouncerOptions {
  db: Kysely<WeirSchema>;
  /** Publishes the event (e.g. on NATS `<ns>.events.deprecation`); a throw is logged and retried on the next check. */
  publish(event: DeprecationAnnouncement): Promise<void> | void;
  /** Epoch ms. Default `Date.now`. */
  clock?: () => number;
  logger?: AnnouncerLogger;
}

/** A running announcer. */
export interface DeprecationAnnouncer {
  /** Announces what is due now; resolves with what it announced. Never rejects (failures are logged). */
  check(): Promise<DeprecationAnnouncement[]>;
  /** Checks now and every `intervalMs` (default 60,000 ms). */
  start(intervalMs?: number): void;
  stop(): void;
}

/**
 * Creates the announcer (see the module comment). An announcement is recorded in `audit_log`
 * (action {@link DEPRECATION_ANNOUNCED_ACTION}) in the same transaction that checks it was not
 * already made (under a transaction-scoped advisory lock, so two control-plane instances never
 * announce twice), and published after the commit.
 */
export function createDeprecationAnnouncer(options: DeprecationAnnouncerOptions): DeprecationAnnouncer {
  const clock = options.clock ?? Date.now;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<DeprecationAnnouncement[]> | undefined;

  const once = async (): Promise<DeprecationAnnouncement[]> => {
    const today = utcDay(clock());
    const due = await options.db.transaction().execute(async (trx) => {
      await sql`select pg_advisory_xact_lock(hashtext('weir.deprecation-announcer'))`.execute(trx);
      const announced = await trx.selectFrom('audit_log').select(['entity_id', 'after']).where('action', '=', DEPRECATION_ANNOUNCED_ACTION).execute();
      const done = new Set(announced.map((a) => `${a.entity_id}|${String((a.after as { retires_on?: unknown } | null)?.retires_on)}`));
      const changes = await trx.selectFrom('audit_log').select(['entity_id', 'at', 'after']).where('entity_type', '=', 'revision').orderBy('at').execute();
      const setOn = new Map<string, string>();
      for (const c of changes) if ((c.after as { deprecation?: unknown } | null)?.deprecation) setOn.set(c.entity_id, utcDay(c.at.getTime()));
      const list = dueAnnouncements(await composeConfig(trx), today, done, setOn);
      for (const a of list) {
        await trx
          .insertInto('audit_log')
          .values({
            at: new Date(clock()),
            actor_id: DEPRECATION_ANNOUNCER_ACTOR.id,
            actor_label: DEPRECATION_ANNOUNCER_ACTOR.label,
            action: DEPRECATION_ANNOUNCED_ACTION,
            entity_type: 'revision',
            entity_id: a.revision,
            before: null,
            after: JSON.stringify(a),
            snapshot_version: null,
          })
          .execute();
      }
      return list;
    });
    for (const a of due) {
      options.logger?.info({ event: a.type, revision: a.revision, retiresOn: a.retires_on, replacement: a.replacement, tenants: a.tenants.length }, 'revision deprecation announced');
      try {
        await options.publish(a);
      } catch (err) {
        options.logger?.warn({ err, revision: a.revision }, 'deprecation event not published (it stays in the audit log)');
      }
    }
    return due;
  };

  const check = (): Promise<DeprecationAnnouncement[]> => {
    running ??= once()
      .catch((err: unknown) => {
        options.logger?.warn({ err }, 'deprecation announcer check failed; retrying at the next interval');
        return [];
      })
      .finally(() => {
        running = undefined;
      });
    return running;
  };

  return {
    check,
    start(intervalMs = 60_000) {
      void check();
      timer = setInterval(() => void check(), intervalMs);
      timer.unref();
    },
    stop() {
      if (timer) clearInterval(timer);
      timer = undefined;
    },
  };
}
