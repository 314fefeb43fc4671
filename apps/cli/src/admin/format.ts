/**
 * Output formatting for the admin commands: aligned tables for lists, YAML for one entity
 * (readable and complete), and small helpers for the cells. Pure string functions.
 */
import { stringify } from 'yaml';

/** One table column: its heading and how a row's cell is written (`''` for nothing). */
export type Column<T> = readonly [heading: string, cell: (row: T) => string];

/**
 * Formats rows as a table: a heading line, then one line per row, columns left-aligned and
 * separated by two spaces, trailing spaces trimmed. No rows → `empty` (default `(none)`) on its
 * own line. A cell's line breaks and tabs become spaces so a row stays on one line.
 */
export function formatTable<T>(rows: readonly T[], columns: readonly Column<T>[], empty = '(none)'): string {
  if (rows.length === 0) return `${empty}\n`;
  const cells = [columns.map(([h]) => h), ...rows.map((r) => columns.map(([, cell]) => cell(r).replace(/[\r\n\t]+/g, ' ')))];
  const widths = columns.map((_, i) => Math.max(...cells.map((line) => [...line[i]].length)));
  return cells.map((line) => line.map((c, i) => c + ' '.repeat(widths[i] - [...c].length)).join('  ').trimEnd()).join('\n') + '\n';
}

/** One entity as YAML (keys in the API's order), ending with a newline. */
export function formatDetail(value: unknown): string {
  return stringify(value, { lineWidth: 0 });
}

/** `{a: 1, b: 2}` → `a=1 b=2`; empty or absent → `-`. Nested values as compact JSON. */
export function keyValues(obj: unknown): string {
  if (obj === null || typeof obj !== 'object' || Object.keys(obj).length === 0) return '-';
  return Object.entries(obj as Record<string, unknown>)
    .map(([k, v]) => `${k}=${typeof v === 'object' && v !== null ? JSON.stringify(v) : String(v)}`)
    .join(' ');
}

/** A cell for an optional value: `-` for null, undefined or an empty string. */
export function orDash(value: unknown): string {
  return value === null || value === undefined || value === '' ? '-' : String(value);
}

/** An ISO-8601 time as `YYYY-MM-DD HH:MM:SSZ` (UTC, seconds), `-` when absent; anything else as given. */
export function time(iso: unknown): string {
  if (typeof iso !== 'string' || iso === '') return '-';
  const m = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(\.\d+)?Z$/.exec(iso);
  return m ? `${m[1]} ${m[2]}Z` : iso;
}

/** An alias's arms: `rev1=90,rev2=10` for weighted targets, the revision for the shorthand. */
export function arms(spec: { targets?: Array<{ revision: string; weight: number }>; revision?: string }): string {
  if (Array.isArray(spec.targets)) return spec.targets.map((t) => `${t.revision}=${t.weight}`).join(',');
  return orDash(spec.revision);
}

/** Milliseconds as a short age: `850ms`, `12s`, `4m10s`, `3h5m`. */
export function age(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return '-';
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${s % 60}s`;
  return `${Math.floor(s / 3600)}h${Math.floor((s % 3600) / 60)}m`;
}
