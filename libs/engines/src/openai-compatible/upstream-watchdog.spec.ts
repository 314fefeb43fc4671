import { WeirError } from '@weir/core';
import { classifyUpstreamFailure, createStreamWatchdog } from './upstream-watchdog';

const state = { timedOut: undefined, outputStarted: false, firstTokenTimeoutMs: 100, idleTimeoutMs: 200 } as const;

describe('classifyUpstreamFailure', () => {
  it('keeps a WeirError, and maps timeouts and connection failures by when they happened', () => {
    const own = new WeirError('upstream_bad_request', 'no');
    expect(classifyUpstreamFailure(own, state)).toBe(own);
    expect(classifyUpstreamFailure(new Error('x'), { ...state, timedOut: 'first' })).toMatchObject({ code: 'upstream_timeout', retryable: true });
    expect(classifyUpstreamFailure(new Error('x'), { ...state, timedOut: 'idle' })).toMatchObject({ code: 'upstream_timeout', retryable: false });
    const refused = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
    expect(classifyUpstreamFailure(refused, state)).toMatchObject({ code: 'upstream_unavailable', retryable: true });
    expect(classifyUpstreamFailure(refused, { ...state, outputStarted: true })).toMatchObject({ code: 'upstream_error' });
    expect(classifyUpstreamFailure(new Error('odd'), state)).toMatchObject({ code: 'upstream_error', retryable: false });
  });
});

describe('createStreamWatchdog', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('aborts the call when the armed timer fires, and says which one; a cleared timer never fires', () => {
    const controller = new AbortController();
    const w = createStreamWatchdog(controller);
    w.arm('first', 100);
    expect(w.armed).toBe(true);
    w.clear();
    jest.advanceTimersByTime(500);
    expect(controller.signal.aborted).toBe(false);
    w.arm('idle', 50);
    jest.advanceTimersByTime(50);
    expect(controller.signal.aborted).toBe(true);
    expect(w.timedOut).toBe('idle');
  });
});
