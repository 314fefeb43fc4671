/**
 * A minimal, fast, deterministic OpenAI-compatible upstream for benchmarks (node:http, no
 * framework). `POST /v1/chat/completions`:
 *
 * - Output: `min(tokens, max_completion_tokens ?? max_tokens ?? ∞)` tokens, each the 4-byte
 *   text `"tok "` (default `tokens` = {@link DEFAULT_TOKENS} = 16). `finish_reason` is
 *   `length` when the request's limit cut the output, else `stop`. Usage: `prompt_tokens` =
 *   {@link PROMPT_TOKENS} (fixed, whatever the prompt), `completion_tokens` = tokens sent.
 * - `stream: true`: SSE — one chunk per token (the first also carries `role: assistant`), a
 *   finish chunk, the usage chunk (`choices: []`) when `stream_options.include_usage` is true,
 *   then `data: [DONE]`. With `tokenDelayMs` = 0 (the default: zero artificial delay) the
 *   whole stream is one pre-built buffer written with one `end()`; with a delay the first
 *   chunk goes out at once and each next token after `tokenDelayMs`.
 * - `stream` absent/false: one `chat.completion` JSON body with the same text and usage, after
 *   `tokens × tokenDelayMs` (the time the generation would take; at once with no delay).
 * - `POST /v1/embeddings`: one 64-dimension vector per input, a function of the input's
 *   letters only (lower-cased, everything else dropped), so prompts that differ only in case,
 *   spacing or punctuation get the same vector (the stage benchmark's semantic hits);
 *   `usage.prompt_tokens` = {@link PROMPT_TOKENS} per input.
 * - `GET /healthz`: 200. Anything else: 404.
 *
 * Responses for a given (token count, stream, include_usage) are built once and cached, so
 * the mock's own CPU per request is as small as node:http allows.
 *
 * Run standalone: `node --import tsx tools/bench/mock-upstream.ts [--port N] [--tokens N]
 * [--token-delay-ms N]`; it prints `listening <url>` on stdout.
 */
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** Output tokens per response unless the request's limit is lower. */
export const DEFAULT_TOKENS = 16;
/** `usage.prompt_tokens` reported for every request. */
export const PROMPT_TOKENS = 12;
/** The text of one token. */
export const TOKEN_TEXT = 'tok ';

export interface MockUpstreamOptions {
  port?: number;
  host?: string;
  tokens?: number;
  tokenDelayMs?: number;
}

export interface MockUpstream {
  url: string;
  server: Server;
  requests(): number;
  close(): Promise<void>;
}

const ID = 'chatcmpl-bench';
const CREATED = 1_700_000_000;
const MODEL = 'bench-upstream';

function sse(obj: unknown): string {
  return `data: ${JSON.stringify(obj)}\n\n`;
}

function chunk(delta: Record<string, unknown>, finishReason: string | null): string {
  return sse({ id: ID, object: 'chat.completion.chunk', created: CREATED, model: MODEL, choices: [{ index: 0, delta, finish_reason: finishReason }] });
}

function usage(n: number) {
  return { prompt_tokens: PROMPT_TOKENS, completion_tokens: n, total_tokens: PROMPT_TOKENS + n };
}

/** The stream's pieces: one per token, then the tail (finish chunk, usage chunk, [DONE]). */
function buildStream(n: number, finish: string, includeUsage: boolean): { tokens: string[]; tail: string } {
  const tokens: string[] = [];
  for (let i = 0; i < n; i++) tokens.push(chunk(i === 0 ? { role: 'assistant', content: TOKEN_TEXT } : { content: TOKEN_TEXT }, null));
  let tail = chunk({}, finish);
  if (includeUsage) tail += sse({ id: ID, object: 'chat.completion.chunk', created: CREATED, model: MODEL, choices: [], usage: usage(n) });
  tail += 'data: [DONE]\n\n';
  return { tokens, tail };
}

function buildJson(n: number, finish: string): Buffer {
  return Buffer.from(
    JSON.stringify({
      id: ID,
      object: 'chat.completion',
      created: CREATED,
      model: MODEL,
      choices: [{ index: 0, message: { role: 'assistant', content: TOKEN_TEXT.repeat(n) }, finish_reason: finish, logprobs: null }],
      usage: usage(n),
    }),
  );
}

/** Dimensions of the mock's embeddings. */
export const EMBEDDING_DIMENSIONS = 64;

/** The mock's embedding of `text`: letter bigram counts hashed into 64 buckets (see the header). */
export function mockEmbedding(text: string): number[] {
  const letters = text.toLowerCase().replace(/[^a-z]/g, '');
  const v = new Array<number>(EMBEDDING_DIMENSIONS).fill(0);
  for (let i = 0; i + 1 < letters.length; i++) v[(letters.charCodeAt(i) * 31 + letters.charCodeAt(i + 1)) % EMBEDDING_DIMENSIONS] += 1;
  if (letters.length < 2) v[0] = 1;
  return v;
}

function embeddingsBody(raw: string): string | undefined {
  let body: { input?: unknown };
  try {
    body = JSON.parse(raw);
  } catch {
    return undefined;
  }
  const inputs = Array.isArray(body.input) ? body.input : [body.input];
  const data = inputs.map((input, index) => ({ object: 'embedding', index, embedding: mockEmbedding(typeof input === 'string' ? input : JSON.stringify(input)) }));
  return JSON.stringify({ object: 'list', data, model: MODEL, usage: { prompt_tokens: PROMPT_TOKENS * inputs.length, total_tokens: PROMPT_TOKENS * inputs.length } });
}

/** Starts the mock on 127.0.0.1 (port 0 = any free port). */
export async function startMockUpstream(options: MockUpstreamOptions = {}): Promise<MockUpstream> {
  const maxTokens = options.tokens ?? DEFAULT_TOKENS;
  const delay = options.tokenDelayMs ?? 0;
  const cache = new Map<string, { whole: Buffer; tokens: string[]; tail: string } | Buffer>();
  let count = 0;

  const respond = (res: ServerResponse, raw: string) => {
    let body: { stream?: boolean; max_tokens?: number; max_completion_tokens?: number; stream_options?: { include_usage?: boolean } };
    try {
      body = JSON.parse(raw);
    } catch {
      res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":{"message":"invalid JSON","type":"invalid_request_error"}}');
      return;
    }
    count++;
    const limit = body.max_completion_tokens ?? body.max_tokens ?? Number.POSITIVE_INFINITY;
    const n = Math.max(0, Math.min(maxTokens, limit));
    const finish = n < maxTokens ? 'length' : 'stop';
    if (body.stream !== true) {
      const key = `j${n}`;
      let buf = cache.get(key) as Buffer | undefined;
      if (!buf) cache.set(key, (buf = buildJson(n, finish)));
      const body = buf;
      const send = () => {
        if (res.destroyed) return;
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
        res.end(body);
      };
      if (delay <= 0) send();
      else {
        const timer = setTimeout(send, n * delay);
        res.on('close', () => clearTimeout(timer));
      }
      return;
    }
    const includeUsage = body.stream_options?.include_usage === true;
    const key = `s${n}${includeUsage ? 'u' : ''}`;
    let s = cache.get(key) as { whole: Buffer; tokens: string[]; tail: string } | undefined;
    if (!s) {
      const built = buildStream(n, finish, includeUsage);
      s = { ...built, whole: Buffer.from(built.tokens.join('') + built.tail) };
      cache.set(key, s);
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    if (delay <= 0) {
      res.end(s.whole);
      return;
    }
    const parts = s;
    let i = 0;
    let timer: NodeJS.Timeout | undefined;
    res.on('close', () => clearTimeout(timer));
    const next = () => {
      if (res.destroyed) return;
      if (i < parts.tokens.length) {
        res.write(parts.tokens[i++]);
        timer = setTimeout(next, delay);
      } else res.end(parts.tail);
    };
    next();
  };

  const server = createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/healthz') {
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
      return;
    }
    if (req.method === 'POST' && (req.url === '/v1/embeddings' || req.url === '/embeddings')) {
      let raw = '';
      req.setEncoding('utf8');
      req.on('data', (d: string) => (raw += d));
      req.on('end', () => {
        const out = embeddingsBody(raw);
        if (out === undefined) res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":{"message":"invalid JSON","type":"invalid_request_error"}}');
        else res.writeHead(200, { 'content-type': 'application/json' }).end(out);
      });
      return;
    }
    if (req.method !== 'POST' || (req.url !== '/v1/chat/completions' && req.url !== '/chat/completions')) {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":{"message":"not found","type":"invalid_request_error"}}');
      return;
    }
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (d: string) => (raw += d));
    req.on('end', () => respond(res, raw));
  });
  server.keepAliveTimeout = 65_000;
  server.requestTimeout = 0;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    server,
    requests: () => count,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

if (process.argv[1] && /mock-upstream\.[cm]?[jt]s$/.test(process.argv[1])) {
  void startMockUpstream({
    port: Number(arg('--port') ?? 0),
    tokens: arg('--tokens') ? Number(arg('--tokens')) : undefined,
    tokenDelayMs: arg('--token-delay-ms') ? Number(arg('--token-delay-ms')) : undefined,
  }).then((m) => {
    process.stdout.write(`listening ${m.url}\n`);
    const stop = () => void m.close().then(() => process.exit(0));
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
  });
}
