import { upstreamStatusError } from './upstream-errors';

describe('upstreamStatusError', () => {
  it.each([
    [400, 'upstream_bad_request', false],
    [401, 'upstream_error', false],
    [403, 'upstream_error', false],
    [404, 'upstream_bad_request', false],
    [408, 'upstream_unavailable', true],
    [409, 'upstream_error', false],
    [422, 'upstream_bad_request', false],
    [429, 'upstream_unavailable', true],
    [500, 'upstream_unavailable', true],
    [503, 'upstream_unavailable', true],
    [529, 'upstream_unavailable', true],
  ])('maps HTTP %i to %s (retryable: %s): only 408, 429 and 5xx are worth trying again', (status, code, retryable) => {
    const error = upstreamStatusError(status, '{"error":{"message":"no"}}', {});
    expect(error.code).toBe(code);
    expect(error.retryable).toBe(retryable);
  });

  it('carries the upstream Retry-After on a retryable status', () => {
    expect(upstreamStatusError(429, '', { 'retry-after': '2' }).retryAfterMs).toBe(2_000);
  });
});
