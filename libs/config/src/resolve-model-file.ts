import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, open, rename, stat, unlink } from 'node:fs/promises';
import { type IncomingMessage, request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import path from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { LlamaCppEngineSpec } from '@weir/core';
import { createGuardedLookup, type EgressPolicy, type LookupFunction, modelDownloadHostProblem, processEgressPolicy } from './egress-policy';

/**
 * The logging calls `resolveModelFile` makes; a pino logger fits. Fields are metadata
 * (paths, URLs, sizes, timings), never secrets.
 */
export interface ModelFileLogger {
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
}

/** Options of {@link resolveModelFile}. */
export interface ResolveModelFileOptions {
  /** `WEIR_MODEL_PATH`: when set, this file is used as is (no sha256 check). */
  modelPathOverride?: string;
  /** Where downloaded models live (e.g. `<WEIR_DATA_DIR>/models`); created when needed. */
  cacheDir: string;
  /** `WEIR_ALLOW_MODEL_DOWNLOAD`: whether `modelUrl` may be fetched. */
  allowDownload: boolean;
  /**
   * Where the download may go and how large it may be (`modelDownloadHosts`, checked for the URL
   * and every redirect; `modelDownloadMaxBytes`, checked against `content-length` and while
   * streaming). Default: the process environment's policy.
   */
  egress?: EgressPolicy;
  /** The DNS lookup under the connect-time guard (tests); default `dns.lookup`. */
  lookup?: LookupFunction;
  /** Aborts a download in progress (the partial file is deleted). */
  signal?: AbortSignal;
  logger?: ModelFileLogger;
}

/** Where the model file came from. */
export type ModelFileSource = 'override' | 'path' | 'cache' | 'download';

/**
 * The outcome of {@link resolveModelFile}: an absolute path, or a `reason` that says what failed
 * and how to fix it (for the startup error message).
 */
export type ResolveModelFileResult = { ok: true; path: string; source: ModelFileSource } | { ok: false; reason: string };

/**
 * Finds the GGUF file of a llama.cpp engine, in this order:
 * 1. `modelPathOverride` (`WEIR_MODEL_PATH`), which must exist;
 * 2. the engine's `modelPath`, if it exists.
 * Either must start with the GGUF magic (Weir reads 4 bytes; otherwise the reason is the fixed
 * `<path> is not a GGUF model file`, quoting nothing of the file), then:
 * 3. `<cacheDir>/<modelSha256>.gguf`, if its sha256 matches (a mismatching file is deleted);
 * 4. a download of `modelUrl` (if `allowDownload`) into a temporary file in `cacheDir`, whose
 *    sha256 is checked before it is renamed into place (on a mismatch it is deleted). The URL
 *    and each redirect (at most 5) must be on an allowed download host, no connection goes to
 *    a link-local or metadata address, and a body over the size cap is refused (partial file
 *    deleted); see `options.egress`. The file is written owner-only (0600).
 *
 * Never throws for an expected failure (missing file, download refused or failed, wrong
 * digest): it returns `{ok: false, reason}`. Runs at startup only; hashing reads the whole
 * file (about 2 s per GB).
 */
export async function resolveModelFile(engine: LlamaCppEngineSpec, options: ResolveModelFileOptions): Promise<ResolveModelFileResult> {
  const log = options.logger;

  if (options.modelPathOverride) {
    const override = path.resolve(options.modelPathOverride);
    if (await isFile(override)) return ggufOrRefused(override, 'override');
    return { ok: false, reason: `WEIR_MODEL_PATH names ${override}, which is not a readable file; fix the path or unset WEIR_MODEL_PATH` };
  }

  if (engine.modelPath !== undefined) {
    const configured = path.resolve(engine.modelPath);
    if (await isFile(configured)) return ggufOrRefused(configured, 'path');
    log?.warn({ modelPath: configured }, 'configured model_path does not exist; looking in the model cache');
  }

  const missing = engine.modelPath !== undefined ? `the model file ${path.resolve(engine.modelPath)} does not exist` : 'no model_path is configured';
  const sha256 = engine.modelSha256?.toLowerCase();
  if (sha256 === undefined) {
    return { ok: false, reason: `${missing} and no model_sha256 is set to find or verify a download; set WEIR_MODEL_PATH to a GGUF file` };
  }

  const cacheDir = path.resolve(options.cacheDir);
  const cached = path.join(cacheDir, `${sha256}.gguf`);
  if (await isFile(cached)) {
    const actual = await sha256OfFile(cached);
    if (actual === sha256) return { ok: true, path: cached, source: 'cache' };
    log?.warn({ path: cached, expected: sha256, actual }, 'cached model file has the wrong sha256; deleting it');
    await unlink(cached).catch(() => undefined);
  }

  if (engine.modelUrl === undefined) {
    return { ok: false, reason: `${missing}, it is not in ${cacheDir}, and no model_url is set; set WEIR_MODEL_PATH to a GGUF file` };
  }
  if (!options.allowDownload) {
    return {
      ok: false,
      reason: `${missing} and it is not in ${cacheDir}; downloads are disabled (WEIR_ALLOW_MODEL_DOWNLOAD=false): download ${engine.modelUrl} and set WEIR_MODEL_PATH to it, or allow the download`,
    };
  }
  return download(engine.modelUrl, sha256, cached, options);
}

/** Redirects a model download follows at most (each hop's host is checked). */
const MAX_DOWNLOAD_REDIRECTS = 5;

async function download(url: string, sha256: string, target: string, options: ResolveModelFileOptions): Promise<ResolveModelFileResult> {
  const log = options.logger;
  const egress = options.egress ?? processEgressPolicy();
  const maxBytes = egress.modelDownloadMaxBytes;
  const lookup = createGuardedLookup(egress.modelDownloadHosts, options.lookup);
  const temp = `${target}.${process.pid}.${randomBytes(4).toString('hex')}.part`;
  const started = Date.now();
  const fix = `download ${url} yourself and set WEIR_MODEL_PATH to it`;
  log?.info({ url, target }, 'downloading model');
  try {
    await mkdir(path.dirname(target), { recursive: true, mode: 0o700 });
    let current = url;
    let res: IncomingMessage | undefined;
    for (let hop = 0; ; hop++) {
      const refused = modelDownloadHostProblem(egress, current);
      if (refused) return { ok: false, reason: `model download from ${url} refused: ${hop > 0 ? `it redirects to ${current}; ` : ''}${refused}` };
      res = await get(current, lookup, options.signal);
      const status = res.statusCode ?? 0;
      const location = res.headers.location;
      if (status >= 300 && status < 400 && location !== undefined) {
        res.resume();
        if (hop >= MAX_DOWNLOAD_REDIRECTS) return { ok: false, reason: `model download from ${url} failed: more than ${MAX_DOWNLOAD_REDIRECTS} redirects; ${fix}` };
        current = new URL(location, current).href;
        continue;
      }
      break;
    }
    if ((res.statusCode ?? 0) !== 200) {
      res.resume();
      return { ok: false, reason: `model download from ${url} failed: HTTP ${res.statusCode}; check model_url, or ${fix}` };
    }
    const declared = Number(res.headers['content-length']);
    if (Number.isFinite(declared) && declared > maxBytes) {
      res.destroy();
      return { ok: false, reason: `model download from ${url} refused: it is ${declared} bytes, over the ${maxBytes}-byte cap (WEIR_MODEL_DOWNLOAD_MAX_BYTES); raise the cap, or ${fix}` };
    }
    const hash = createHash('sha256');
    let bytes = 0;
    const tap = new Transform({
      transform(chunk: Buffer, _enc, done) {
        bytes += chunk.length;
        if (bytes > maxBytes) {
          done(new DownloadTooLargeError(maxBytes));
          return;
        }
        hash.update(chunk);
        done(null, chunk);
      },
    });
    await pipeline(res, tap, createWriteStream(temp, { flags: 'wx', mode: 0o600 }), { signal: options.signal });
    const actual = hash.digest('hex');
    if (actual !== sha256) {
      await unlink(temp).catch(() => undefined);
      return {
        ok: false,
        reason: `model downloaded from ${url} has sha256 ${actual}, expected ${sha256} (${bytes} bytes); the file was deleted. Check model_url and model_sha256, or ${fix}`,
      };
    }
    await rename(temp, target);
    log?.info({ url, path: target, bytes, ms: Date.now() - started }, 'model downloaded and verified');
    return { ok: true, path: target, source: 'download' };
  } catch (err) {
    await unlink(temp).catch(() => undefined);
    if (err instanceof DownloadTooLargeError) {
      return { ok: false, reason: `model download from ${url} refused: it is over the ${err.maxBytes}-byte cap (WEIR_MODEL_DOWNLOAD_MAX_BYTES); the partial file was deleted. Raise the cap, or ${fix}` };
    }
    const detail = err instanceof Error ? (err.cause instanceof Error ? `${err.message}: ${err.cause.message}` : err.message) : String(err);
    return { ok: false, reason: `model download from ${url} failed (${detail}); check the network, or ${fix}` };
  }
}

class DownloadTooLargeError extends Error {
  constructor(readonly maxBytes: number) {
    super(`over ${maxBytes} bytes`);
  }
}

/** One GET (no redirects followed here), resolving names through the guarded lookup. */
function get(url: string, lookup: LookupFunction, signal: AbortSignal | undefined): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const send = u.protocol === 'https:' ? httpsRequest : httpRequest;
    const req = send(u, { method: 'GET', lookup: lookup as never, signal }, resolve);
    req.on('error', reject);
    req.end();
  });
}

/** The four bytes every GGUF file starts with. */
const GGUF_MAGIC = Buffer.from('GGUF', 'latin1');
/** GGUF's fixed header: magic, version (u32), tensor count (u64), metadata key/value count (u64). */
const GGUF_HEADER_BYTES = 24;
/** The fewest bytes one tensor's info takes (name length u64, n_dims u32, a dimension u64, type u32). */
const MIN_TENSOR_INFO_BYTES = 24;
/** The fewest bytes one metadata entry takes (key length u64, value type u32, a 1-byte value). */
const MIN_KV_BYTES = 13;

/**
 * Whether the file at `p` has a plausible GGUF header: the magic, version 2 or 3, and tensor and
 * metadata counts that the file's size can hold (GGUF spec, ggml/docs/gguf.md: each tensor info
 * and each key/value takes at least {@link MIN_TENSOR_INFO_BYTES} and {@link MIN_KV_BYTES}).
 * Weir reads these 24 bytes itself, so that a file that is not a model never reaches llama.cpp,
 * whose error would quote the file's first bytes (e.g. `got "root"` for /etc/shadow), and a
 * truncated or forged header (counts of billions in a tiny file) never sends node-llama-cpp's
 * reader into a loop that holds the start for good. False for an unreadable or shorter file.
 */
export async function isGgufFile(p: string): Promise<boolean> {
  let handle;
  try {
    handle = await open(p, 'r');
    const head = Buffer.alloc(GGUF_HEADER_BYTES);
    const { bytesRead } = await handle.read(head, 0, GGUF_HEADER_BYTES, 0);
    if (bytesRead !== GGUF_HEADER_BYTES || !head.subarray(0, 4).equals(GGUF_MAGIC)) return false;
    const version = head.readUInt32LE(4);
    if (version !== 2 && version !== 3) return false;
    const size = BigInt((await handle.stat()).size);
    const needed = BigInt(GGUF_HEADER_BYTES) + head.readBigUInt64LE(8) * BigInt(MIN_TENSOR_INFO_BYTES) + head.readBigUInt64LE(16) * BigInt(MIN_KV_BYTES);
    return needed <= size;
  } catch {
    return false;
  } finally {
    await handle?.close().catch(() => undefined);
  }
}

/** `{ok: true}` for a GGUF file, else a fixed reason that names the path and quotes none of its bytes. */
async function ggufOrRefused(p: string, source: ModelFileSource): Promise<ResolveModelFileResult> {
  if (await isGgufFile(p)) return { ok: true, path: p, source };
  return { ok: false, reason: `${p} is not a GGUF model file` };
}

async function isFile(p: string): Promise<boolean> {
  try {
    return (await stat(p)).isFile();
  } catch {
    return false;
  }
}

/** sha256 (lowercase hex) of a file, streamed. */
export async function sha256OfFile(p: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(p)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}
