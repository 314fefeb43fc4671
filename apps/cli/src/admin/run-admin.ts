/**
 * Runs one admin command: parse, call the API, print. API errors are printed as
 * `error: <the server's message>` and exit 1; usage errors exit 2.
 */
import { readFileSync } from 'node:fs';
import { UsageError } from '../args';
import { ApiError, createJsonClient, type FetchFn } from './http';
import { parseAdminCommandLine } from './parse';

/** Where an admin command writes, and what it may read. */
export interface AdminIo {
  out(text: string): void;
  err(text: string): void;
  /** The environment for WEIR_ADMIN_URL, WEIR_ADMIN_TOKEN, WEIR_API_URL and WEIR_API_KEY. Default `process.env`. */
  env?: Readonly<Record<string, string | undefined>>;
  /** Default the global fetch. */
  fetch?: FetchFn;
  /** Reads a file named by a flag (`-` is standard input). Default node:fs, UTF-8. */
  readFile?: (path: string) => string;
}

const defaultReadFile = (path: string) => readFileSync(path === '-' ? 0 : path, 'utf8');

/**
 * Runs `weir <resource> <verb> …` and returns the exit status: 0 done, 1 the API refused the
 * request or could not be reached, 2 bad usage. Never throws for those; a bug still throws.
 */
export async function runAdminCommand(argv: readonly string[], io: AdminIo): Promise<number> {
  try {
    const inv = parseAdminCommandLine(argv, io.env ?? process.env);
    if (inv.kind === 'help') {
      io.out(inv.text);
      return inv.status;
    }
    const addressHint = inv.spec.target === 'data' ? '--api-url or WEIR_API_URL' : '--url or WEIR_ADMIN_URL';
    const api = createJsonClient({ baseUrl: inv.baseUrl, credential: inv.credential, fetch: io.fetch, addressHint });
    const result = await inv.spec.run({ args: inv.args, flags: inv.flags, api, readFile: io.readFile ?? defaultReadFile });
    if (result.warning) io.err(`${result.warning}\n`);
    io.out(inv.json ? `${JSON.stringify(result.data ?? null, null, 2)}\n` : result.text);
    return 0;
  } catch (error) {
    if (error instanceof UsageError) {
      io.err(`weir: ${error.message}\n`);
      return 2;
    }
    if (error instanceof ApiError) {
      io.err(formatApiError(error));
      return 1;
    }
    throw error;
  }
}

/** `error: <message>` (an invalid configuration change's message already lists every problem). */
export function formatApiError(e: ApiError): string {
  return `error: ${e.message}\n`;
}
