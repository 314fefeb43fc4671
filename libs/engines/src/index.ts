export * from './logger';
export * from './llamacpp/llamacpp-engine';
export { renderPlainPrompt } from './llamacpp/render-prompt';
export { MAX_GRAMMAR_REPETITION, toGrammarSchema, UnsupportedSchemaError } from './llamacpp/json-schema-grammar';
export * from './openai-compatible/openai-compatible-engine';
export {
  CHAT_MESSAGE_OVERHEAD_TOKENS,
  CHAT_REPLY_PRIMING_TOKENS,
  countInputWith,
  utf8TokenUpperBound,
} from './openai-compatible/token-bound';
export { upstreamStatusError, retryAfterMs, UpstreamResponseError } from './openai-compatible/upstream-errors';
export { createRemoteTokenCounter, type RemoteTokenCounterOptions, type TokenCounter } from './openai-compatible/remote-token-counter';
export * from './simulated/simulated-engine';
export * from './anthropic/anthropic-engine';
export * from './create-engine';
export * from './remote-replicas';
export { declaredTokenizer, tiktokenTokenizer, type TextTokenizer, type TiktokenEncoding } from './tokenizers/tiktoken';
export { egressDispatcher, egressRefusalError, isEgressRefusal } from './egress-dispatcher';
export { createEngineEmbedder } from './engine-embedder';
