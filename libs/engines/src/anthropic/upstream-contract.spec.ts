import { anthropicWire, describeUpstreamEngineContract, openAIChatWire } from '@weir/testing';
import { createOpenAICompatibleEngine } from '../openai-compatible/openai-compatible-engine';
import { createAnthropicEngine } from './anthropic-engine';

// One set of upstream scenarios (libs/testing `describeUpstreamEngineContract`) run against
// every HTTP upstream adapter, each on a scripted upstream speaking its provider's wire format.

describeUpstreamEngineContract('anthropic', () => ({
  wire: anthropicWire,
  createAdapter: (url) =>
    createAnthropicEngine({ kind: 'anthropic', baseUrl: url, upstreamModel: 'claude-up', firstTokenTimeoutMs: 5000, idleTimeoutMs: 5000, maxConcurrency: 4 }),
}));

describeUpstreamEngineContract('openai-compatible', () => ({
  wire: openAIChatWire,
  createAdapter: (url) =>
    createOpenAICompatibleEngine({
      kind: 'openai-compatible',
      baseUrl: url,
      upstreamModel: 'up-model',
      api: 'chat',
      firstTokenTimeoutMs: 5000,
      idleTimeoutMs: 5000,
      maxConcurrency: 4,
    }),
}));
