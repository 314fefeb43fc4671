import type { EngineAdapter, EngineCapacity, EngineEvent, EngineRequest, LlamaCppEngineSpec } from '@weir/core';
import { type EmbeddingInput, WeirError, createAsyncQueue, encodeEmbeddingDelta } from '@weir/core';
import type {
  Llama,
  LlamaContext,
  LlamaContextSequence,
  LlamaEmbeddingContext,
  LlamaGrammar,
  LlamaModel,
  Token,
} from 'node-llama-cpp' with { 'resolution-mode': 'import' };
import { type EngineLogger, silentLogger } from '../logger';
import { toGrammarSchema, UnsupportedSchemaError } from './json-schema-grammar';
import { renderPlainPrompt } from './render-prompt';
import { COUNT_SLICE_CHARS, countInSlices } from '../tokenizers/slices';
import { refuseTools } from '../refuse-tools';

/**
 * The engine's own token counters, monotonically increasing since it was created (except
 * `activeSequences`, a gauge). Reconciliation compares them with the ledger; tests use
 * `generatedTokens` to see that production stops after a cancel.
 */
export interface LlamaCppEngineStats {
  /** Output tokens produced (counted as node-llama-cpp releases them in `onToken`), all generations. */
  generatedTokens: number;
  /** Prompt tokens evaluated (BOS included), all generations. */
  promptTokens: number;
  /** Sequences generating right now (0..`capacity.slots`). */
  activeSequences: number;
  /** Generations that ended (any reason, errors included). */
  completed: number;
}

/** The llama.cpp adapter: an {@link EngineAdapter} plus its counters and tokenizer. */
export interface LlamaCppEngine extends EngineAdapter {
  readonly kind: 'llamacpp';
  /** A snapshot of the engine's counters. */
  stats(): LlamaCppEngineStats;
  /**
   * Number of tokens the model's tokenizer makes of `text` (SentencePiece with its usual
   * leading-space prefix, no BOS). `countInputTokens` of a text input is this plus 1 (BOS).
   */
  tokenize(text: string): number;
}

/** Options of {@link createLlamaCppEngine}: the engine spec with its model path resolved. */
export type LlamaCppEngineOptions = LlamaCppEngineSpec & {
  modelPath: string;
  /**
   * The revision is an embedding revision (`kind: embedding`): only an embedding context is
   * created (no generation context, no KV cache for `sequences`), and only embedding inputs
   * are served. Default false: a generation context; an embedding input then gets an
   * embedding context created on first use.
   */
  embeddingOnly?: boolean;
};

/**
 * Default temperature when a request gives none: 0.8, llama.cpp server's default. Requests
 * that want greedy, deterministic output send 0.
 */
export const LLAMACPP_DEFAULT_TEMPERATURE = 0.8;

/** How long a generate call waits for a sequence still being cleared before `engine_unavailable` (ms); a sequence clears after the batch in flight, which takes seconds on a loaded 2-core host. The request's own abort signal ends the wait sooner. */
export const SEQUENCE_WAIT_MS = 30_000;

/** JSON-schema grammars kept per engine (by the schema's JSON text), most recently used last. */
const GRAMMAR_CACHE_SIZE = 32;

/** Preceding tokens given to `detokenize` so a token's leading space is rendered correctly. */
const DETOKENIZE_CONTEXT_TOKENS = 8;

type NodeLlamaCpp = typeof import('node-llama-cpp', { with: { 'resolution-mode': 'import' } });

let sharedLlama: Promise<Llama> | undefined;

/**
 * A llama.cpp log message as Weir logs it: the first line, at most 200 characters; for grammar
 * messages only up to the first colon-separated reason (they go on to quote the grammar, which
 * holds a request's schema).
 */
export function llamaLogLine(message: string): string {
  const first = message.trim().split('\n')[0] ?? '';
  if (/grammar/i.test(message)) return `${first.split(':').slice(0, 2).join(':').slice(0, 120)} (grammar withheld: it quotes a request's schema)`;
  return first.length > 200 ? `${first.slice(0, 200)}…` : first;
}

/**
 * One `Llama` (the native backend) per process, shared by every engine: disposing one
 * backend while another engine still uses it is not safe, so engines dispose only their
 * model and context. Threads are capped per context (`spec.threads`).
 */
function loadLlama(nlc: NodeLlamaCpp, logger: EngineLogger): Promise<Llama> {
  sharedLlama ??= nlc.getLlama({
    gpu: false,
    build: 'never',
    skipDownload: true,
    maxThreads: 1,
    logLevel: nlc.LlamaLogLevel.error,
    // llama.cpp's error messages carry no prompt text, except grammar errors, which quote the
    // grammar (built from a request's schema): those are reduced to their first line's reason.
    logger: (level, message) => logger.warn({ llamaLevel: level, message: llamaLogLine(message) }, 'llama.cpp'),
  });
  return sharedLlama;
}

/**
 * Loads a GGUF model and creates one context of `spec.contextSize` tokens × `spec.sequences`
 * sequences on `spec.threads` threads (node-llama-cpp batches the sequences together:
 * continuous batching on one context).
 *
 * - `capacity` = `{slots: spec.sequences, contextTokens: spec.contextSize}`.
 * - `generate` takes a free sequence, drives a `LlamaCompletion` on the plain-text prompt
 *   ({@link renderPlainPrompt}), yields one `delta` per chunk of tokens node-llama-cpp releases
 *   (usually one token; several when they complete one UTF-8 character), as it is produced
 *   (`tokens` = the tokens that chunk stands for) and one `end`: `stop` (end-of-generation
 *   token or a stop sequence, whose text is not returned; a token straddling the stop text is
 *   dropped whole, e.g. " Lily" for stop "Lily"), `length` (`maxOutputTokens`, or the
 *   context filled up: output is capped at `contextSize − inputTokens`) or `aborted` (the
 *   request's signal fired; the partial output is kept). `usage.inputTokens` = BOS + the
 *   tokenizer count of the rendered prompt; `usage.outputTokens` = tokens released in
 *   `onToken`, including those produced after the abort (the text of a matched stop sequence
 *   and the end-of-generation token are not counted); `usageSource: reported`. The sum of the
 *   deltas' `tokens` equals `usage.outputTokens`.
 * - Sampling: `temperature` 0 is greedy and deterministic; undefined means
 *   {@link LLAMACPP_DEFAULT_TEMPERATURE}. `topP`, `seed` and `stop` are passed to llama.cpp;
 *   repeat penalties are off (OpenAI semantics: no penalty unless asked).
 * - `outputSchema`: generation is constrained by node-llama-cpp's JSON-schema grammar
 *   (`llama.createGrammarForJsonSchema`) built from the schema as {@link toGrammarSchema}
 *   rewrites it (grammars are cached per schema, {@link GRAMMAR_CACHE_SIZE} of them); the output
 *   is then a JSON document of that shape unless it is cut short (`length`, `aborted`). A schema
 *   the grammar cannot express throws `WeirError('invalid_request', {param: 'output_schema'})`
 *   before any work.
 * - `spec.testTokenDelayMs` (test only, ms): each sequence waits this long after every token
 *   before decoding the next, so it produces at most one token per delay: a slow producer for
 *   cancellation and deadline tests. 0 (production) adds nothing.
 *
 * Throws from `generate` (as the first `next()` rejects): `WeirError('engine_unavailable',
 * {retryable: true})` when no sequence is free (the scheduler should prevent it) or the
 * engine is closed; `WeirError('context_length_exceeded', {param: 'input'})` when the prompt
 * leaves no room for one output token. Other faults are wrapped as `internal`.
 *
 * @throws from the factory itself when the model cannot be loaded (file missing, bad GGUF).
 */
export async function createLlamaCppEngine(
  spec: LlamaCppEngineOptions,
  opts: {
    logger?: EngineLogger;
    /** How long a generate waits for a sequence still being cleared (ms). Default {@link SEQUENCE_WAIT_MS}. */
    sequenceWaitMs?: number;
  } = {},
): Promise<LlamaCppEngine> {
  const logger = opts.logger ?? silentLogger;
  const nlc: NodeLlamaCpp = await import('node-llama-cpp');
  const llama = await loadLlama(nlc, logger);
  const loadStarted = performance.now();
  const model: LlamaModel = await llama.loadModel({ modelPath: spec.modelPath });
  const context: LlamaContext | undefined = spec.embeddingOnly
    ? undefined
    : await model.createContext({
        contextSize: spec.contextSize,
        sequences: spec.sequences,
        threads: spec.threads,
      });
  const free: LlamaContextSequence[] = [];
  for (let i = 0; context && i < spec.sequences; i += 1) {
    const sequence = context.getSequence();
    if (spec.testTokenDelayMs > 0) slowDownSequence(sequence, spec.testTokenDelayMs);
    free.push(sequence);
  }
  // The embedding context: at once for an embedding revision, else on the first embedding input.
  let embeddingContext: Promise<LlamaEmbeddingContext> | undefined = spec.embeddingOnly
    ? model.createEmbeddingContext({ contextSize: spec.contextSize, threads: spec.threads })
    : undefined;
  if (embeddingContext) await embeddingContext;
  // One embedding context evaluates one input at a time: calls queue here, in arrival order.
  let embeddingTurn: Promise<unknown> = Promise.resolve();
  logger.info(
    { sequences: spec.sequences, contextSize: spec.contextSize, threads: spec.threads, loadMs: Math.round(performance.now() - loadStarted) },
    'llama.cpp engine loaded',
  );

  const counters = { generatedTokens: 0, promptTokens: 0, activeSequences: 0, completed: 0 };
  const running = new Set<Promise<unknown>>();
  let closed = false;
  const bos = model.tokens.bos;
  const capacity: EngineCapacity = { slots: spec.sequences, contextTokens: spec.contextSize };

  // Grammars by the schema's JSON text (Map order = recency). A grammar is immutable and shared
  // by concurrent sequences: each completion keeps its own evaluation state.
  const grammars = new Map<string, Promise<LlamaGrammar>>();
  const grammarFor = async (schema: object): Promise<LlamaGrammar> => {
    const key = JSON.stringify(schema);
    let grammar = grammars.get(key);
    if (grammar) grammars.delete(key);
    else {
      let forGrammar: object;
      try {
        forGrammar = toGrammarSchema(schema);
      } catch (error) {
        if (error instanceof UnsupportedSchemaError) throw new WeirError('invalid_request', `\`output_schema\` ${error.message}.`, { param: 'output_schema' });
        throw error;
      }
      grammar = llama.createGrammarForJsonSchema(forGrammar as Parameters<Llama['createGrammarForJsonSchema']>[0]) as Promise<LlamaGrammar>;
      // A schema the grammar generator rejects is the request's fault, and is not cached.
      grammar.catch(() => grammars.delete(key));
    }
    grammars.set(key, grammar);
    if (grammars.size > GRAMMAR_CACHE_SIZE) grammars.delete(grammars.keys().next().value as string);
    try {
      return await grammar;
    } catch (error) {
      throw new WeirError('invalid_request', '`output_schema` cannot be turned into a llama.cpp grammar; simplify it (see docs/api.md, output_schema).', { param: 'output_schema', cause: error });
    }
  };

  const tokenizePrompt = (text: string): Token[] => {
    const tokens = model.tokenize(text);
    return bos == null ? tokens : [bos, ...tokens];
  };

  // A caller whose slot was granted just before the previous generation's sequence was back
  // in the pool (its history is cleared asynchronously after the stream ended) waits for it
  // briefly instead of failing: the scheduler in front never grants more slots than sequences.
  const sequenceWaiters: Array<(sequence: LlamaContextSequence | undefined) => void> = [];
  const waitForSequence = (signal: AbortSignal): Promise<LlamaContextSequence | undefined> =>
    new Promise((resolve) => {
      const done = (sequence: LlamaContextSequence | undefined) => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        const i = sequenceWaiters.indexOf(done);
        if (i >= 0) sequenceWaiters.splice(i, 1);
        resolve(sequence);
      };
      const onAbort = () => done(undefined);
      const timer = setTimeout(() => done(undefined), opts.sequenceWaitMs ?? SEQUENCE_WAIT_MS);
      signal.addEventListener('abort', onAbort, { once: true });
      sequenceWaiters.push(done);
    });

  // Token ids a token-array embedding input may hold: 0 … vocabulary − 1 (the GGUF's token list; read once).
  const vocabulary = (model.fileInfo.metadata as { tokenizer?: { ggml?: { tokens?: readonly unknown[] } } }).tokenizer?.ggml?.tokens?.length;
  /** Tokens of one embedding item as the embedding context evaluates it (BOS included for a text). */
  const embeddingTokens = (item: string | number[]): Token[] => (typeof item === 'string' ? tokenizePrompt(item) : (item as Token[]));

  /**
   * An embedding input: one vector per item ({@link encodeEmbeddingDelta}), in order, then `end`
   * `stop` with the items' tokens as input and no output. Items run one after another on the
   * embedding context; the signal is checked between items (an item being evaluated finishes).
   */
  async function* embed(input: EmbeddingInput, request: EngineRequest): AsyncGenerator<EngineEvent, void, undefined> {
    if (input.dimensions !== undefined && input.dimensions !== model.embeddingVectorSize) {
      throw new WeirError('invalid_request', `this model's embeddings have ${model.embeddingVectorSize} dimensions and cannot be shortened; leave out \`dimensions\``, { param: 'dimensions' });
    }
    const itemTokens = input.items.map(embeddingTokens);
    for (const [i, tokens] of itemTokens.entries()) {
      if (tokens.length > spec.contextSize) {
        throw new WeirError('context_length_exceeded', `input[${i}] is ${tokens.length} tokens; the embedding context holds ${spec.contextSize}`, { param: 'input' });
      }
      if (typeof input.items[i] !== 'string' && vocabulary !== undefined && tokens.some((t) => !Number.isInteger(t) || t < 0 || t >= vocabulary)) {
        throw new WeirError('invalid_request', `input[${i}] holds a token id outside this model's vocabulary (0 to ${vocabulary - 1})`, { param: 'input' });
      }
    }
    const inputTokens = itemTokens.reduce((n, t) => n + t.length, 0);
    const ctx = await (embeddingContext ??= model.createEmbeddingContext({ contextSize: spec.contextSize, threads: spec.threads }));
    let done = 0;
    for (const tokens of itemTokens) {
      if (request.signal.aborted) break;
      const turn = embeddingTurn.then(() => ctx.getEmbeddingFor(tokens));
      embeddingTurn = turn.catch(() => undefined);
      let vector: readonly number[];
      try {
        vector = (await turn).vector;
      } catch (error) {
        logger.error({ generationId: request.generationId, err: error }, 'llama.cpp embedding failed');
        throw new WeirError('internal', 'engine embedding failed', { cause: error });
      }
      counters.promptTokens += tokens.length;
      done += tokens.length;
      yield { type: 'delta', text: encodeEmbeddingDelta(vector), tokens: 0 };
    }
    counters.completed += 1;
    // Stopped between items: the items evaluated so far are billed.
    yield request.signal.aborted
      ? { type: 'end', reason: 'aborted', usage: { inputTokens: done, outputTokens: 0 }, usageSource: 'reported' }
      : { type: 'end', reason: 'stop', usage: { inputTokens, outputTokens: 0 }, usageSource: 'reported' };
  }

  async function* generate(request: EngineRequest): AsyncGenerator<EngineEvent, void, undefined> {
    refuseTools(request, 'llama.cpp');
    if (closed) throw new WeirError('engine_unavailable', 'engine is closed', { retryable: true });
    if (request.input.kind === 'embedding') {
      yield* embed(request.input, request);
      return;
    }
    if (!context) throw new WeirError('invalid_request', 'this revision is an embedding model: it serves POST /v1/embeddings only', { param: 'model' });
    const prompt = tokenizePrompt(renderPlainPrompt(request.input));
    // LlamaCompletion prepends BOS itself; pass the prompt without it.
    const promptTokens = bos == null ? prompt : prompt.slice(1);
    const inputTokens = prompt.length;
    if (inputTokens + 1 > spec.contextSize) {
      throw new WeirError(
        'context_length_exceeded',
        `prompt is ${inputTokens} tokens; the context holds ${spec.contextSize} tokens including at least 1 output token`,
        { param: 'input' },
      );
    }
    const grammar = request.outputSchema ? await grammarFor(request.outputSchema) : undefined;
    if (request.signal.aborted) {
      yield { type: 'end', reason: 'aborted', usage: { inputTokens, outputTokens: 0 }, usageSource: 'reported' };
      return;
    }
    const sequence = free.pop() ?? (await waitForSequence(request.signal));
    if (!sequence) {
      if (request.signal.aborted) {
        yield { type: 'end', reason: 'aborted', usage: { inputTokens, outputTokens: 0 }, usageSource: 'reported' };
        return;
      }
      throw new WeirError('engine_unavailable', 'no free sequence on this engine replica', { retryable: true });
    }

    counters.activeSequences += 1;
    counters.promptTokens += inputTokens;
    const abort = new AbortController();
    const onAbort = (): void => abort.abort(request.signal.reason);
    request.signal.addEventListener('abort', onAbort, { once: true });
    const queue = createAsyncQueue<EngineEvent>();
    const completion = new nlc.LlamaCompletion({ contextSequence: sequence });
    let outputTokens = 0;
    const recentTokens: Token[] = [...prompt];
    const stop = (request.sampling.stop ?? []).filter((s) => s.length > 0);

    const run = (async () => {
      try {
        const result = await completion.generateCompletionWithMeta(promptTokens, {
          signal: abort.signal,
          stopOnAbortSignal: true,
          maxTokens: Math.min(request.maxOutputTokens, spec.contextSize - inputTokens),
          temperature: request.sampling.temperature ?? LLAMACPP_DEFAULT_TEMPERATURE,
          topP: request.sampling.topP,
          seed: request.sampling.seed,
          customStopTriggers: stop.length > 0 ? stop : undefined,
          grammar,
          repeatPenalty: false,
          // Never shift the context silently: output ends with `length` when it is full.
          disableContextShift: true,
          contextShiftSize: 1,
          // node-llama-cpp calls onToken then onTextChunk for the same released tokens, but its
          // text chunk is detokenized without the prompt as context, which drops a SentencePiece
          // leading space on the first output token ("Lily and Tom" → "were", not " were"). So the
          // delta's text is detokenized here with the preceding tokens as context.
          onToken: (tokens) => {
            outputTokens += tokens.length;
            counters.generatedTokens += tokens.length;
            const text = model.detokenize(tokens, false, recentTokens.slice(-DETOKENIZE_CONTEXT_TOKENS));
            recentTokens.push(...tokens);
            queue.push({ type: 'delta', text, tokens: tokens.length });
          },
        });
        const meta = result.metadata;
        const stopReason = meta.stopReason;
        const reason = stopReason === 'abort' ? 'aborted' : stopReason === 'maxTokens' ? 'length' : 'stop';
        // The stop sequence that matched: node-llama-cpp hands back the trigger as given (a string here).
        const trigger = meta.stopReason === 'customStopTrigger' ? meta.customStopTrigger.filter((p): p is string => typeof p === 'string').join('') : '';
        const stopSequence = stop.includes(trigger) ? trigger : undefined;
        queue.push({ type: 'end', reason, usage: { inputTokens, outputTokens }, usageSource: 'reported', ...(stopSequence !== undefined ? { stopSequence } : {}) });
        queue.end();
      } catch (error) {
        if (abort.signal.aborted) {
          // Aborted before the first token (e.g. while waiting for the sequence lock).
          queue.push({ type: 'end', reason: 'aborted', usage: { inputTokens, outputTokens }, usageSource: 'reported' });
          queue.end();
        } else {
          logger.error({ generationId: request.generationId, err: error }, 'llama.cpp generation failed');
          queue.fail(new WeirError('internal', 'engine generation failed', { cause: error }));
        }
      } finally {
        request.signal.removeEventListener('abort', onAbort);
        completion.dispose({ disposeSequence: false });
        try {
          await sequence.clearHistory();
          const waiter = sequenceWaiters.shift();
          if (waiter) waiter(sequence);
          else free.push(sequence);
        } catch (error) {
          logger.error({ err: error }, 'could not clear a sequence; it is retired');
        }
        counters.activeSequences -= 1;
        counters.completed += 1;
      }
    })();
    running.add(run);
    void run.finally(() => running.delete(run));

    try {
      for (;;) {
        const next = await queue.next();
        if (next.done) return;
        yield next.value;
      }
    } finally {
      // The consumer stopped early (or the stream ended): stop decoding and wait until the
      // sequence is back in the pool, so a following generate finds it free.
      abort.abort(new Error('consumer stopped reading'));
      await run;
    }
  }

  return {
    kind: 'llamacpp',
    capacity,
    stats: () => ({ ...counters }),
    tokenize: (text) => model.tokenize(text).length,
    // llama.cpp's tokenizer runs on this thread (≈ 1 s for 1 MiB of prose, measured with the
    // tiny model): a long prompt is tokenized in slices with the event loop turning between
    // them, and no further than just past the context window (issue 14 part 2).
    countInputTokens: async (input, limit) => {
      if (input.kind === 'embedding') return input.items.reduce((n, item) => n + (typeof item === 'string' ? tokenizePrompt(item).length : item.length), 0);
      const text = renderPlainPrompt(input);
      if (text.length <= COUNT_SLICE_CHARS) return tokenizePrompt(text).length;
      return (bos == null ? 0 : 1) + (await countInSlices(text, (slice) => model.tokenize(slice).length, limit));
    },
    generate,
    async close() {
      if (closed) return;
      closed = true;
      await Promise.allSettled([...running]);
      await embeddingTurn;
      if (embeddingContext) await (await embeddingContext).dispose();
      await context?.dispose();
      await model.dispose();
    },
  };
}

/**
 * Test-only slow producer: wraps this sequence's `evaluate` token generator (the loop
 * `LlamaCompletion` drives) so that it sleeps `delayMs` after each token is handed out and
 * before the next one is decoded. A context-wide dispatch schedule cannot do this: llama.cpp
 * dispatches at once when every sequence has work queued.
 */
function slowDownSequence(sequence: LlamaContextSequence, delayMs: number): void {
  const evaluate = sequence.evaluate.bind(sequence);
  sequence.evaluate = async function* slowEvaluate(tokens, options) {
    const inner = evaluate(tokens, options);
    try {
      let input: Parameters<typeof inner.next>[0];
      for (;;) {
        const result = await inner.next(input);
        if (result.done) return;
        input = yield result.value;
        await new Promise((resolve) => setTimeout(resolve, delayMs));
      }
    } finally {
      await inner.return(undefined);
    }
  };
}
