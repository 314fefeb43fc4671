/**
 * Idempotency keys (ARCHITECTURE.md §3): a client's `request_id` (or `Idempotency-Key`) is
 * claimed per tenant by the first generation that uses it; a repeat within the retention
 * window gets that generation's result instead of a second reservation and charge.
 */
import type { GenerationOutcome } from './services';
import type { ApiRoute } from './ports';
import type { ToolCallDelta } from './generation';

/**
 * What a finished generation leaves for replays: enough to rebuild the original response or
 * stream exactly (same generation id, same deltas, so the same SSE event ids). Holds output
 * text: retained only for requests that sent an idempotency key, and only for the retention
 * window.
 */
export interface RetainedResult {
  generationId: string;
  requestId: string;
  route: ApiRoute;
  modelRevision: string;
  /** When the original response was created (Unix seconds), for OpenAI's `created`. */
  createdS: number;
  /** The text deltas in order, as the original stream sent them. */
  deltas: string[];
  /** The tool-call fragments of delta `i` at index `i` (null for a delta without); absent when there were none. */
  deltaToolCalls?: (ToolCallDelta[] | null)[];
  outcome: GenerationOutcome;
}

/** A claimed key. */
export interface IdempotencyClaim {
  tenantId: string;
  requestId: string;
  /** SHA-256 (hex) of the canonical request body, to tell a repeat from a different request. */
  bodySha256: string;
  generationId: string;
  route: ApiRoute;
  /** `interrupted`: the generation holding the key died or failed after output (ADR 0002); a retry is told so, never charged again. */
  state: 'running' | 'done' | 'interrupted';
  /** Set once `state` is `done`. */
  result?: RetainedResult;
  /** Why it was interrupted (for the retry's error message), when `state` is `interrupted`. */
  interruption?: string;
}

/** Outcome of {@link IdempotencyStore.claim}. */
export type ClaimResult = { claimed: true } | { claimed: false; existing: IdempotencyClaim };

/**
 * Durable idempotency keys, shared by every gateway (Postgres in production; an in-memory
 * twin for a single process and for tests). Every `tenantId` here is the tenant's internal id
 * (`tenantKeyOf(caller)`, issue 14 §4), so a tenant created again under a deleted one's slug
 * never replays, waits on or learns of the deleted one's keys and results.
 */
export interface IdempotencyStore {
  /**
   * Claims `(tenantId, requestId)` for `generationId`. A key held by a running generation
   * whose lease (`leaseUntilMs`, epoch ms: its deadline plus a grace) has passed, or by a done
   * one whose retention has passed, is taken over (its gateway died or it expired).
   */
  claim(claim: { tenantId: string; requestId: string; bodySha256: string; generationId: string; route: ApiRoute; leaseUntilMs: number }): Promise<ClaimResult>;
  /** Stores the result and keeps it until `retainUntilMs` (epoch ms). Only the claiming generation may complete. */
  complete(tenantId: string, requestId: string, result: RetainedResult, retainUntilMs: number): Promise<void>;
  /**
   * Marks the key `interrupted` (its generation failed after producing billed output): a retry is
   * told so with `message` until `retainUntilMs` (epoch ms), never charged again. Only the claiming
   * generation may. With a settlement journal the durable mark is written by the journal's applier
   * from the relay's entry; this records it where the store keeps live claims.
   */
  interrupt(tenantId: string, requestId: string, generationId: string, message: string, retainUntilMs: number): Promise<void>;
  /** Drops the claim of a request that did no work (rejected, ended in the queue), so a retry runs. */
  abandon(tenantId: string, requestId: string, generationId: string): Promise<void>;
  /** The claim, if any (and not expired). */
  get(tenantId: string, requestId: string): Promise<IdempotencyClaim | undefined>;
  /** The retained result of a tenant's generation, by generation id (for `GET /v1/generations/{id}/events`). */
  findResult(tenantId: string, generationId: string): Promise<RetainedResult | undefined>;
  /** The live (not expired) claim a tenant's generation holds, running or done, by generation id. */
  findClaimByGeneration(tenantId: string, generationId: string): Promise<IdempotencyClaim | undefined>;
  /** Deletes expired keys; returns how many. */
  purgeExpired(nowMs: number): Promise<number>;
}
