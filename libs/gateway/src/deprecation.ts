/**
 * Revision deprecation at the gateway (issue 7, item 5): the countdown a deprecated revision's
 * responses carry, its `/v1/models` field, the retirement check, and the announcement event.
 * Dates are UTC calendar days compared with a wall clock (epoch ms), so tests inject the day.
 *
 * - Countdown: from `announcedOn` (or at once without it) until the day before `retiresOn`.
 *   Headers: `Deprecation: @<unix s of announcedOn>` (RFC 9745; only with `announcedOn`),
 *   `Sunset: <HTTP-date of retiresOn 00:00 UTC>` (RFC 8594) and `x-weir-retires-in-days: N`.
 * - Retirement: from 00:00 UTC on `retiresOn` the revision serves nothing; a request resolving
 *   to it fails with `model_retired` naming the replacement (never switched to silently).
 */
import type { AliasSpec, RevisionDeprecation, RevisionSpec, TenantSpec } from '@weir/core';

const DAY_MS = 86_400_000;

/** The UTC day of `epochMs` as `YYYY-MM-DD`. */
export function utcDay(epochMs: number): string {
  return new Date(epochMs).toISOString().slice(0, 10);
}

/** Epoch ms of 00:00 UTC on `day` (`YYYY-MM-DD`). */
function dayStartMs(day: string): number {
  return Date.parse(`${day}T00:00:00Z`);
}

/** Whole days from the UTC day of `nowMs` to `retiresOn` (0 on the day itself, negative after). */
export function daysUntil(retiresOn: string, nowMs: number): number {
  return Math.round((dayStartMs(retiresOn) - dayStartMs(utcDay(nowMs))) / DAY_MS);
}

/** True from 00:00 UTC on the deprecation's `retiresOn`. */
export function isRetired(revision: Pick<RevisionSpec, 'deprecation'>, nowMs: number): boolean {
  return revision.deprecation !== undefined && daysUntil(revision.deprecation.retiresOn, nowMs) <= 0;
}

/** A running countdown: the deprecation and the days left (≥ 1). */
export interface Countdown {
  deprecation: RevisionDeprecation;
  daysLeft: number;
}

/** The revision's countdown at `nowMs`: undefined when not deprecated, not yet announced, or already retired. */
export function countdownOf(revision: Pick<RevisionSpec, 'deprecation'>, nowMs: number): Countdown | undefined {
  const d = revision.deprecation;
  if (!d) return undefined;
  if (d.announcedOn !== undefined && utcDay(nowMs) < d.announcedOn) return undefined;
  const daysLeft = daysUntil(d.retiresOn, nowMs);
  return daysLeft > 0 ? { deprecation: d, daysLeft } : undefined;
}

/** The response headers of a countdown (names lower-case). */
export function countdownHeaders(c: Countdown): Record<string, string> {
  const d = c.deprecation;
  return {
    ...(d.announcedOn !== undefined ? { deprecation: `@${Math.floor(dayStartMs(d.announcedOn) / 1000)}` } : {}),
    sunset: new Date(dayStartMs(d.retiresOn)).toUTCString(),
    'x-weir-retires-in-days': String(c.daysLeft),
  };
}

/** The `deprecation` field of a `/v1/models` entry. */
export interface ModelDeprecationField {
  retires_on: string;
  replacement: string;
  days_left: number;
}

/**
 * The `/v1/models` deprecation of `alias` for `tenant`: the revisions the tenant reaches
 * through the alias (its pin for the alias without a use case, else the alias's targets with
 * weight > 0) — when every one of them has a running countdown, the one retiring first.
 * Undefined otherwise (or when a revision is unknown).
 */
export function aliasDeprecation(
  alias: AliasSpec,
  tenant: Pick<TenantSpec, 'routes'> | undefined,
  revisions: ReadonlyMap<string, Pick<RevisionSpec, 'deprecation'>>,
  nowMs: number,
): ModelDeprecationField | undefined {
  const pin = tenant?.routes?.find((r) => r.alias === alias.name && r.useCase === undefined)?.pin;
  const ids = pin !== undefined ? [pin] : alias.targets.filter((t) => t.weight > 0).map((t) => t.revision);
  let first: Countdown | undefined;
  for (const id of ids) {
    const revision = revisions.get(id);
    const c = revision ? countdownOf(revision, nowMs) : undefined;
    if (!c) return undefined;
    if (!first || c.daysLeft < first.daysLeft) first = c;
  }
  return first ? { retires_on: first.deprecation.retiresOn, replacement: first.deprecation.replacement, days_left: first.daysLeft } : undefined;
}

/** The structured log line of {@link createDeprecationAnnouncer}. */
export interface DeprecationAnnouncement {
  event: 'revision_deprecation_announced';
  revision: string;
  retiresOn: string;
  replacement: string;
  announcedOn?: string;
  daysLeft: number;
}

/**
 * Logs one warn line (`event: 'revision_deprecation_announced'`) per revision per UTC day
 * while its countdown runs, the first time a request is served by it that day — so the
 * announcement shows in the logs on the day it is announced, and daily after it.
 */
export function createDeprecationAnnouncer(logger: { warn(obj: object, msg?: string): void }): { note(revision: RevisionSpec, countdown: Countdown, nowMs: number): void } {
  const lastDay = new Map<string, string>();
  return {
    note(revision, countdown, nowMs) {
      const day = utcDay(nowMs);
      if (lastDay.get(revision.id) === day) return;
      lastDay.set(revision.id, day);
      const d = countdown.deprecation;
      const line: DeprecationAnnouncement = {
        event: 'revision_deprecation_announced',
        revision: revision.id,
        retiresOn: d.retiresOn,
        replacement: d.replacement,
        ...(d.announcedOn !== undefined ? { announcedOn: d.announcedOn } : {}),
        daysLeft: countdown.daysLeft,
      };
      logger.warn(line, `revision ${revision.id} is deprecated: it retires on ${d.retiresOn} (in ${countdown.daysLeft} days); replacement ${d.replacement}`);
    },
  };
}
