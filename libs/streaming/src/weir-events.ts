/**
 * Weir's own stream on `/v1/generations` (ARCHITECTURE.md §8): every event has `id:` 1, 2,
 * 3, … and an `event:` name; `start`, then `delta`*, then exactly one `end`.
 */
import type { FinishReason } from '@weir/core';

/** `event: start`. */
export interface WeirStartData {
  generation_id: string;
  request_id: string;
  model_revision: string;
}

/** `event: delta`. */
export interface WeirDeltaData {
  text: string;
}

/** `event: end` (also the body of a finished non-stream generation, without `text`). */
export interface WeirEndData {
  finish_reason: FinishReason;
  usage: { input_tokens: number; output_tokens: number; cost_usd: number };
  model_used: string;
  fallback_reason?: string;
  error?: { type: string; code: string; message: string };
}

/** A Weir stream event, before framing. */
export type WeirStreamEvent =
  | { event: 'start'; data: WeirStartData }
  | { event: 'delta'; data: WeirDeltaData }
  | { event: 'end'; data: WeirEndData };
