export * from './types';
export * from './rules-engine';
export * from './openai-engine';
export * from './window';
export * from './policies';
