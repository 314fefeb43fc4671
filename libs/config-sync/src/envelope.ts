/**
 * The signed envelope every configuration message travels in, and its three payload kinds
 * (docs/config-snapshots.md). Envelope, JSON:
 * `{"payload": "<a JSON string>", "signature": "<base64 Ed25519 over the UTF-8 bytes of payload>", "key_id": "<16 hex>"}`.
 * A verifier parses `payload` only after the signature checks.
 */
import { createHash, sign, verify } from 'node:crypto';
import { z } from 'zod';
import { WeirError } from '@weir/core';
import type { SigningKey, VerifyKey } from './keys';

/** A signed message as stored in the bucket (and in the last-good file). */
export interface Envelope {
  /** The payload as JSON text: exactly the bytes that were signed. */
  payload: string;
  /** Base64 (standard alphabet, padded) of the 64-byte Ed25519 signature over the UTF-8 bytes of `payload`. */
  signature: string;
  /** Id of the signing key's public half (16 hex, see `keyIdOf`). */
  key_id: string;
}

/** The only snapshot schema version this library reads. */
export const SNAPSHOT_SCHEMA_VERSION = 1;

/** A full configuration snapshot. */
export interface SnapshotPayload {
  type: 'snapshot';
  schema_version: 1;
  /** Integer ≥ 1, strictly increasing from one snapshot to the next. */
  version: number;
  /** ISO-8601 UTC (`…Z`) time the control plane issued it. */
  issued_at: string;
  /** `config`: a Weir configuration-file object (snake_case), what `@weir/config` `parseConfig` accepts; only checked to be an object here. */
  body: { config: Record<string, unknown> };
  /**
   * The latest revocation this snapshot includes (its `seq`) and {@link revocationDigest} of its
   * content: binds that seq to that content, so a different revocation re-sent under it is a
   * replay. Both or neither; absent when no revocation was ever published.
   */
  revocation_seq?: number;
  /** See `revocation_seq`: 64 lowercase hex. */
  revocation_sha256?: string;
}

/** "The snapshot `version` is still current", signed every few seconds by the control plane. */
export interface HeartbeatPayload {
  type: 'heartbeat';
  /** The control plane's current snapshot version (the announced head: a data plane refuses any snapshot below it). */
  version: number;
  /** ISO-8601 UTC. */
  issued_at: string;
  /** The control plane's latest published revocation `seq` (the announced revocation head); with `revocation_sha256`, or neither. */
  revocation_seq?: number;
  /** {@link revocationDigest} of revocation `revocation_seq`: a revocation under that seq with other content is a replay. */
  revocation_sha256?: string;
}

/** What a revocation acts on. */
export type RevocationKind = 'api_key' | 'tenant' | 'kill_switch';

/**
 * A fast-path revocation: `api_key` (that key stops authenticating; needs `api_key_id` or
 * `api_key_sha256`), `tenant` (every request of `tenant_id` is refused until a later snapshot
 * re-enables it), `kill_switch` (`enabled: true` refuses `tenant_id`'s requests, `false` lifts it).
 */
export interface RevocationPayload {
  type: 'revocation';
  /** Integer ≥ 1, strictly increasing across revocations. */
  seq: number;
  /** ISO-8601 UTC. */
  issued_at: string;
  kind: RevocationKind;
  tenant_id?: string;
  api_key_id?: string;
  /** 64 lowercase hex: SHA-256 of the full API key. */
  api_key_sha256?: string;
  enabled?: boolean;
}

/** Any payload an envelope may carry. */
export type ConfigPayload = SnapshotPayload | HeartbeatPayload | RevocationPayload;

/** Why an envelope did not open. */
export type EnvelopeRejectionReason = 'malformed' | 'unsigned' | 'bad_signature' | 'unknown_key' | 'invalid_payload';

/** The result of {@link openEnvelope}: the verified payload, or why not (never thrown). */
export type OpenEnvelopeResult =
  | {
      ok: true;
      payload: ConfigPayload;
      /** The key that verified it. */
      keyId: string;
      /** The signed payload text, byte for byte (to tell an identical redelivery from a conflicting one). */
      payloadText: string;
    }
  | {
      ok: false;
      reason: EnvelopeRejectionReason;
      /** A short, payload-free explanation (field paths and error codes only): safe to log. */
      detail: string;
    };

/** Envelopes larger than this (bytes or characters) are `malformed` without being parsed: 8 MiB. */
export const MAX_ENVELOPE_BYTES = 8 * 1024 * 1024;

const positiveInt = z.number().int().min(1).max(Number.MAX_SAFE_INTEGER);
const isoUtc = z.iso.datetime();
const id = z.string().min(1).max(256);

const sha256Hex = z.string().regex(/^[0-9a-f]{64}$/);

/** `revocation_seq` and `revocation_sha256` come together or not at all. */
const revocationHeadTogether = (p: { revocation_seq?: number; revocation_sha256?: string }, ctx: z.RefinementCtx): void => {
  if ((p.revocation_seq === undefined) !== (p.revocation_sha256 === undefined)) {
    ctx.addIssue({ code: 'custom', path: ['revocation_sha256'], message: 'revocation_seq and revocation_sha256 come together' });
  }
};

const snapshotSchema = z
  .object({
    type: z.literal('snapshot'),
    schema_version: z.literal(SNAPSHOT_SCHEMA_VERSION),
    version: positiveInt,
    issued_at: isoUtc,
    body: z.object({ config: z.record(z.string(), z.unknown()) }),
    revocation_seq: positiveInt.optional(),
    revocation_sha256: sha256Hex.optional(),
  })
  .superRefine(revocationHeadTogether);

const heartbeatSchema = z
  .object({
    type: z.literal('heartbeat'),
    version: positiveInt,
    issued_at: isoUtc,
    revocation_seq: positiveInt.optional(),
    revocation_sha256: sha256Hex.optional(),
  })
  .superRefine(revocationHeadTogether);

const revocationSchema = z
  .object({
    type: z.literal('revocation'),
    seq: positiveInt,
    issued_at: isoUtc,
    kind: z.enum(['api_key', 'tenant', 'kill_switch']),
    tenant_id: id.optional(),
    api_key_id: id.optional(),
    api_key_sha256: sha256Hex.optional(),
    enabled: z.boolean().optional(),
  })
  .superRefine((r, ctx) => {
    if (r.kind === 'api_key' && r.api_key_id === undefined && r.api_key_sha256 === undefined) {
      ctx.addIssue({ code: 'custom', path: ['api_key_id'], message: 'an api_key revocation names api_key_id or api_key_sha256' });
    }
    if ((r.kind === 'tenant' || r.kind === 'kill_switch') && r.tenant_id === undefined) {
      ctx.addIssue({ code: 'custom', path: ['tenant_id'], message: `a ${r.kind} revocation names tenant_id` });
    }
    if (r.kind === 'kill_switch' && r.enabled === undefined) {
      ctx.addIssue({ code: 'custom', path: ['enabled'], message: 'a kill_switch revocation says enabled true or false' });
    }
  });

const payloadSchema = z.discriminatedUnion('type', [snapshotSchema, heartbeatSchema, revocationSchema]);

// Compile-time check that the schemas and the documented interfaces agree.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const _payloadShapesAgree: Same<z.infer<typeof payloadSchema>, ConfigPayload> = true;
void _payloadShapesAgree;

/** A revocation's content, as both the control plane (from its store) and a data plane (from the payload) know it. */
export type RevocationContent = Omit<RevocationPayload, 'type'>;

/**
 * SHA-256 (64 lowercase hex) of a revocation's content: `seq`, `issued_at` (normalized to
 * `Date#toISOString`), `kind`, `tenant_id`, `api_key_id`, `api_key_sha256`, `enabled` (absent =
 * null), as the JSON array in that order. The same value whichever side computes it, whatever the
 * field order of the signed text. Heartbeats and snapshots carry it for the latest revocation, so
 * a revocation re-sent under that seq with other content is refused as a replay.
 * @throws RangeError when `issued_at` is not a valid time.
 */
export function revocationDigest(r: RevocationContent): string {
  const canonical = JSON.stringify([r.seq, new Date(r.issued_at).toISOString(), r.kind, r.tenant_id ?? null, r.api_key_id ?? null, r.api_key_sha256 ?? null, r.enabled ?? null]);
  return createHash('sha256').update(canonical, 'utf8').digest('hex');
}

const SIGNATURE_BASE64 = /^[A-Za-z0-9+/]{86}==$/;
const KEY_ID = /^[0-9a-f]{16}$/;

/**
 * Checks a payload against the contract; returns it (unknown fields dropped) or a payload-free
 * description of the first problems (`path: code`).
 */
export function validatePayload(value: unknown): { ok: true; payload: ConfigPayload } | { ok: false; detail: string } {
  const result = payloadSchema.safeParse(value);
  if (result.success) return { ok: true, payload: result.data };
  const detail = result.error.issues
    .slice(0, 3)
    .map((issue) => `${issue.path.length > 0 ? issue.path.join('.') : '(root)'}: ${issue.code}`)
    .join('; ');
  return { ok: false, detail };
}

/**
 * Signs a payload: serializes it once (that text is what is signed and stored) and returns the
 * envelope.
 * @throws WeirError `invalid_request` when `payload` does not satisfy the contract (a bug in the
 *   caller: nothing invalid is ever signed).
 */
export function signPayload(payload: ConfigPayload, key: SigningKey): Envelope {
  const checked = validatePayload(payload);
  if (!checked.ok) throw new WeirError('invalid_request', `refusing to sign an invalid config payload (${checked.detail})`);
  const text = JSON.stringify(payload);
  const signature = sign(null, Buffer.from(text, 'utf8'), key.privateKey).toString('base64');
  return { payload: text, signature, key_id: key.keyId };
}

/** The envelope as stored: UTF-8 JSON bytes. */
export function encodeEnvelope(envelope: Envelope): Uint8Array {
  return Buffer.from(JSON.stringify(envelope), 'utf8');
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Opens an envelope: bytes (UTF-8 JSON), JSON text, or an already-parsed value. Checks, in
 * order: shape (`malformed`), presence of a signature (`unsigned`: no `signature`, e.g. a bare
 * payload written into the bucket), the key id against `keys` (`unknown_key`), the Ed25519
 * signature (`bad_signature`), then parses and validates the payload (`invalid_payload`).
 * Several keys may be given (rotation): the one whose id matches is used. Never throws.
 */
export function openEnvelope(input: Uint8Array | string | unknown, keys: VerifyKey | readonly VerifyKey[]): OpenEnvelopeResult {
  try {
    return openUnchecked(input, Array.isArray(keys) ? keys : [keys as VerifyKey]);
  } catch {
    // Defence in depth: hostile input must never surface as an exception.
    return { ok: false, reason: 'malformed', detail: 'unreadable envelope' };
  }
}

function openUnchecked(input: unknown, keys: readonly VerifyKey[]): OpenEnvelopeResult {
  let value: unknown = input;
  if (input instanceof Uint8Array) {
    if (input.byteLength > MAX_ENVELOPE_BYTES) return fail('malformed', `envelope larger than ${MAX_ENVELOPE_BYTES} bytes`);
    let text: string;
    try {
      text = utf8.decode(input);
    } catch {
      return fail('malformed', 'envelope is not UTF-8');
    }
    value = text;
  }
  if (typeof value === 'string') {
    if (value.length > MAX_ENVELOPE_BYTES) return fail('malformed', `envelope larger than ${MAX_ENVELOPE_BYTES} characters`);
    try {
      value = JSON.parse(value);
    } catch {
      return fail('malformed', 'envelope is not JSON');
    }
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return fail('malformed', 'envelope is not a JSON object');
  const env = value as Record<string, unknown>;
  if (env.signature === undefined || env.signature === null || env.signature === '') return fail('unsigned', 'envelope has no signature');
  if (typeof env.payload !== 'string') return fail('malformed', 'envelope payload is not a string');
  if (typeof env.signature !== 'string') return fail('malformed', 'envelope signature is not a string');
  if (typeof env.key_id !== 'string' || !KEY_ID.test(env.key_id)) return fail('malformed', 'envelope key_id is not 16 hex characters');
  const key = keys.find((k) => k.keyId === env.key_id);
  if (!key) return fail('unknown_key', `signed by key ${env.key_id}, which is not a configured verify key`);
  if (!SIGNATURE_BASE64.test(env.signature)) return fail('bad_signature', 'signature is not 64 bytes of base64');
  const signed = Buffer.from(env.payload, 'utf8');
  if (!verify(null, signed, key.publicKey, Buffer.from(env.signature, 'base64'))) {
    return fail('bad_signature', `signature does not verify with key ${key.keyId}`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(env.payload);
  } catch {
    return fail('invalid_payload', 'signed payload is not JSON');
  }
  const checked = validatePayload(parsed);
  if (!checked.ok) return fail('invalid_payload', checked.detail);
  return { ok: true, payload: checked.payload, keyId: key.keyId, payloadText: env.payload };
}

function fail(reason: EnvelopeRejectionReason, detail: string): OpenEnvelopeResult {
  return { ok: false, reason, detail };
}
