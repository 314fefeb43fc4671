// Helpers shared by this library's specs (not exported from index.ts).
import type { ConfigSyncLogger } from './logger';
import type { ConfigSyncMetrics } from './metrics';
import type { ConfigRejectionReason } from './subscriber';

/** One recorded log call. */
export interface LogLine {
  level: 'debug' | 'info' | 'warn' | 'error';
  fields: object;
  message: string;
}

/** A logger that keeps every line, plus the lines as one JSON text to search for leaks. */
export function recordingLogger(): ConfigSyncLogger & { lines: LogLine[]; text(): string; errors(): LogLine[] } {
  const lines: LogLine[] = [];
  const at =
    (level: LogLine['level']) =>
    (fields: object, message = ''): void => {
      lines.push({ level, fields, message });
    };
  return {
    lines,
    debug: at('debug'),
    info: at('info'),
    warn: at('warn'),
    error: at('error'),
    text: () => JSON.stringify(lines),
    errors: () => lines.filter((l) => l.level === 'error'),
  };
}

/** A hand-written {@link ConfigSyncMetrics} that records calls. */
export function recordingMetrics(): ConfigSyncMetrics & { appliedVersions: number[]; rejections: ConfigRejectionReason[] } {
  const appliedVersions: number[] = [];
  const rejections: ConfigRejectionReason[] = [];
  return {
    appliedVersions,
    rejections,
    applied: (version) => void appliedVersions.push(version),
    rejected: (reason) => void rejections.push(reason),
  };
}
