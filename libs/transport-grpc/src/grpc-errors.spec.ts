import * as grpc from '@grpc/grpc-js';
import { type AdmissionService, WEIR_ERROR_CODES, WeirError, isWeirError } from '@weir/core';
import { reservationRequest } from '@weir/testing';
import { GRPC_STATUS_BY_WEIR_CODE, createAdmissionGrpcClient, createAdmissionGrpcServer, startGrpcServer, type RunningGrpcServer } from './index';

/** An admission whose reserve throws whatever the test sets. */
function throwingAdmission(): AdmissionService & { next: unknown } {
  const admission = {
    next: undefined as unknown,
    async reserve(): Promise<never> {
      throw admission.next;
    },
    async settle() {},
    async release() {},
  };
  return admission;
}

describe('Weir error ↔ gRPC status', () => {
  const impl = throwingAdmission();
  let server: RunningGrpcServer;
  let client: ReturnType<typeof createAdmissionGrpcClient>;
  beforeAll(async () => {
    server = await startGrpcServer({ services: [createAdmissionGrpcServer(impl)] });
    client = createAdmissionGrpcClient({ address: server.address });
  });
  afterAll(async () => {
    client.close();
    await server.close();
  });

  const caught = async (): Promise<WeirError> => {
    const error = await client.reserve(reservationRequest()).then(
      () => undefined,
      (e: unknown) => e,
    );
    if (!isWeirError(error)) throw new Error(`expected a WeirError, got ${String(error)}`);
    return error;
  };

  it.each(WEIR_ERROR_CODES.map((code, i) => [code, i]))('round-trips %s exactly', async (code, i) => {
    impl.next = new WeirError(code, `public message for ${code}`, {
      retryable: i % 2 === 0,
      retryAfterMs: i % 3 === 0 ? undefined : 250 * i,
      param: i % 4 === 0 ? 'max_tokens' : undefined,
      cause: new Error('secret cause'),
    });
    const error = await caught();
    expect({ code: error.code, message: error.message, retryable: error.retryable, retryAfterMs: error.retryAfterMs, param: error.param }).toEqual({
      code,
      message: `public message for ${code}`,
      retryable: i % 2 === 0,
      retryAfterMs: i % 3 === 0 ? undefined : 250 * i,
      param: i % 4 === 0 ? 'max_tokens' : undefined,
    });
    const status = error.cause as grpc.ServiceError;
    expect(status.code).toBe(GRPC_STATUS_BY_WEIR_CODE[code]);
    expect(status.metadata.get('weir-error-code')).toEqual([code]);
  });

  it('sends a non-Weir fault as internal without its message', async () => {
    impl.next = new Error('db password is hunter2');
    const error = await caught();
    expect(error.code).toBe('internal');
    expect(error.message).not.toContain('hunter2');
    expect((error.cause as grpc.ServiceError).code).toBe(grpc.status.INTERNAL);
  });

  it('maps only the try-elsewhere codes to UNAVAILABLE (the one status clients retry)', () => {
    const unavailable = Object.entries(GRPC_STATUS_BY_WEIR_CODE)
      .filter(([, s]) => s === grpc.status.UNAVAILABLE)
      .map(([c]) => c)
      .sort();
    expect(unavailable).toEqual(['config_stale', 'engine_unavailable', 'shutting_down', 'upstream_unavailable']);
    expect(Object.keys(GRPC_STATUS_BY_WEIR_CODE).sort()).toEqual([...WEIR_ERROR_CODES].sort());
  });

  it('names a transport failure after the service (no server: upstream_unavailable)', async () => {
    const dead = createAdmissionGrpcClient({ address: '127.0.0.1:1' });
    const error = await dead.reserve(reservationRequest()).catch((e: unknown) => e);
    dead.close();
    expect(error).toBeInstanceOf(WeirError);
    expect(error).toMatchObject({ code: 'upstream_unavailable', retryable: true });
    expect((error as WeirError).message).toContain('admission');
  });
});
