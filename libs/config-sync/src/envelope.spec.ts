import { sign } from 'node:crypto';
import { WeirError } from '@weir/core';
import { encodeEnvelope, openEnvelope, signPayload, type ConfigPayload, type Envelope, type SnapshotPayload } from './envelope';
import { generateSigningKeyPair, loadSigningKey, loadVerifyKey } from './keys';

const pair = generateSigningKeyPair();
const key = loadSigningKey(pair.privateKeyPem);
const verifyKey = loadVerifyKey(pair.publicKeyPem);
const other = generateSigningKeyPair();
const otherKey = loadSigningKey(other.privateKeyPem);

const snapshot: SnapshotPayload = {
  type: 'snapshot',
  schema_version: 1,
  version: 3,
  issued_at: '2025-01-02T03:04:05.000Z',
  body: { config: { tenants: [{ id: 'acme' }], models: [] } },
};

function reason(input: unknown): string {
  const r = openEnvelope(input, verifyKey);
  return r.ok ? 'ok' : r.reason;
}

/** An envelope whose payload text is `text`, correctly signed by `k`. */
function signedText(text: string, k = key): Envelope {
  return { payload: text, signature: sign(null, Buffer.from(text, 'utf8'), k.privateKey).toString('base64'), key_id: k.keyId };
}

describe('signPayload / openEnvelope', () => {
  it.each<[string, ConfigPayload]>([
    ['snapshot', snapshot],
    ['heartbeat', { type: 'heartbeat', version: 3, issued_at: '2025-01-02T03:04:10.000Z' }],
    ['api_key revocation', { type: 'revocation', seq: 1, issued_at: '2025-01-02T03:04:11.000Z', kind: 'api_key', api_key_id: 'k1', tenant_id: 'acme' }],
    ['tenant revocation', { type: 'revocation', seq: 2, issued_at: '2025-01-02T03:04:12.000Z', kind: 'tenant', tenant_id: 'acme' }],
    ['kill switch', { type: 'revocation', seq: 3, issued_at: '2025-01-02T03:04:13.000Z', kind: 'kill_switch', tenant_id: 'acme', enabled: false }],
  ])('round-trips a %s from bytes, text and object', (_name, payload) => {
    const env = signPayload(payload, key);
    expect(env.key_id).toBe(pair.keyId);
    expect(JSON.parse(env.payload)).toEqual(payload);
    for (const input of [encodeEnvelope(env), JSON.stringify(env), env]) {
      const r = openEnvelope(input, verifyKey);
      expect(r).toEqual({ ok: true, payload, keyId: pair.keyId, payloadText: env.payload });
    }
  });

  it('refuses to sign a payload that breaks the contract', () => {
    expect(() => signPayload({ ...snapshot, version: 0 }, key)).toThrow(WeirError);
    expect(() => signPayload({ type: 'revocation', seq: 1, issued_at: snapshot.issued_at, kind: 'kill_switch', tenant_id: 't' }, key)).toThrow(/enabled/);
  });

  it('rejects a payload with one byte changed (bad_signature)', () => {
    const env = signPayload(snapshot, key);
    const tampered = { ...env, payload: env.payload.replace('"version":3', '"version":4') };
    expect(tampered.payload).not.toBe(env.payload);
    expect(reason(tampered)).toBe('bad_signature');
    // The same through the stored bytes: flip one byte inside the payload.
    const bytes = encodeEnvelope(env);
    const i = Buffer.from(bytes).indexOf('acme');
    bytes[i] = 'b'.charCodeAt(0);
    expect(reason(bytes)).toBe('bad_signature');
  });

  it('rejects a signature made by another key under our key id (bad_signature) and another key id (unknown_key)', () => {
    const forged = signPayload(snapshot, otherKey);
    expect(reason(forged)).toBe('unknown_key');
    expect(reason({ ...forged, key_id: pair.keyId })).toBe('bad_signature');
    // Several verify keys (rotation): the matching one is used.
    const r = openEnvelope(forged, [verifyKey, loadVerifyKey(other.publicKeyPem)]);
    expect(r.ok && r.keyId).toBe(other.keyId);
  });

  it.each<[string, string, unknown]>([
    ['a bare payload', 'unsigned', snapshot],
    ['an envelope without signature', 'unsigned', { payload: JSON.stringify(snapshot), key_id: pair.keyId }],
    ['an empty signature', 'unsigned', { payload: JSON.stringify(snapshot), signature: '', key_id: pair.keyId }],
    ['a null signature', 'unsigned', { payload: JSON.stringify(snapshot), signature: null, key_id: pair.keyId }],
    ['not JSON', 'malformed', 'snapshot v3'],
    ['invalid UTF-8', 'malformed', new Uint8Array([0x7b, 0xff, 0xfe, 0x7d])],
    ['a JSON array', 'malformed', '[1,2]'],
    ['JSON null', 'malformed', 'null'],
    ['a number', 'malformed', 42],
    ['undefined', 'malformed', undefined],
    ['an object payload', 'malformed', { payload: snapshot, signature: 'x', key_id: pair.keyId }],
    ['a numeric signature', 'malformed', { payload: '{}', signature: 7, key_id: pair.keyId }],
    ['no key id', 'malformed', { payload: '{}', signature: 'AAAA' }],
    ['a short signature', 'bad_signature', { payload: '{}', signature: 'AAAA', key_id: pair.keyId }],
    ['an oversized envelope', 'malformed', new Uint8Array(8 * 1024 * 1024 + 1)],
  ])('classifies %s as %s without throwing', (_name, expected, input) => {
    expect(reason(input)).toBe(expected);
  });

  it('rejects a getter that throws as malformed (hostile objects never escape as exceptions)', () => {
    const hostile = Object.defineProperty({}, 'signature', {
      get() {
        throw new Error('boom');
      },
    });
    expect(reason(hostile)).toBe('malformed');
  });

  it.each<[string, string]>([
    ['signed non-JSON', 'not json'],
    ['an unknown type', JSON.stringify({ type: 'config', version: 1 })],
    ['schema_version 2', JSON.stringify({ ...snapshot, schema_version: 2 })],
    ['version 0', JSON.stringify({ ...snapshot, version: 0 })],
    ['a fractional version', JSON.stringify({ ...snapshot, version: 1.5 })],
    ['a non-UTC issued_at', JSON.stringify({ ...snapshot, issued_at: '2025-01-02T03:04:05+01:00' })],
    ['config that is an array', JSON.stringify({ ...snapshot, body: { config: [] } })],
    ['config missing', JSON.stringify({ ...snapshot, body: {} })],
    ['an api_key revocation naming no key', JSON.stringify({ type: 'revocation', seq: 1, issued_at: snapshot.issued_at, kind: 'api_key' })],
    ['a tenant revocation naming no tenant', JSON.stringify({ type: 'revocation', seq: 1, issued_at: snapshot.issued_at, kind: 'tenant' })],
    ['a bad api_key_sha256', JSON.stringify({ type: 'revocation', seq: 1, issued_at: snapshot.issued_at, kind: 'api_key', api_key_sha256: 'XYZ' })],
  ])('rejects a correctly signed payload with %s as invalid_payload', (_name, text) => {
    const r = openEnvelope(signedText(text), verifyKey);
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.reason).toBe('invalid_payload');
      expect(r.detail).not.toContain('acme');
    }
  });

  it('never puts payload contents into the detail', () => {
    const secret = 'sk-very-secret-value';
    const text = JSON.stringify({ ...snapshot, version: secret });
    const r = openEnvelope(signedText(text), verifyKey);
    expect(r.ok).toBe(false);
    expect(JSON.stringify(r)).not.toContain(secret);
  });
});
