import { WeirError } from '@weir/core';
import { generationsBody, parseBody, priorityOf } from './schemas';

describe('priorityOf (the scheduling class of a request)', () => {
  it.each([
    { header: undefined, body: undefined, tier: undefined, want: undefined },
    { header: undefined, body: 'batch' as const, tier: undefined, want: 'batch' },
    { header: 'batch', body: undefined, tier: undefined, want: 'batch' },
    { header: ' Interactive ', body: undefined, tier: undefined, want: 'interactive' },
    { header: 'batch', body: 'interactive' as const, tier: undefined, want: 'interactive' },
    { header: undefined, body: undefined, tier: 'flex', want: 'batch' },
    { header: undefined, body: undefined, tier: 'default', want: undefined },
    { header: 'interactive', body: undefined, tier: 'flex', want: 'interactive' },
  ])('header $header, body $body, service_tier $tier → $want', ({ header, body, tier, want }) => {
    expect(priorityOf(header, body, tier)).toBe(want);
  });

  it('answers invalid_request naming the header for another value', () => {
    let error: unknown;
    try {
      priorityOf('urgent');
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(WeirError);
    expect(error).toMatchObject({ code: 'invalid_request', param: 'x-weir-priority' });
  });

  it.each(['foo', 5, 'FLEX', ''])('answers invalid_request naming service_tier for %p', (tier) => {
    expect(() => priorityOf(undefined, undefined, tier)).toThrow(expect.objectContaining({ code: 'invalid_request', param: 'service_tier' }));
  });

  it('takes every OpenAI service_tier, and null as absent', () => {
    for (const tier of ['auto', 'default', 'scale', 'priority', null]) expect(priorityOf(undefined, undefined, tier)).toBeUndefined();
  });

  it('accepts priority on /v1/generations and refuses another value, naming the field', () => {
    expect(parseBody(generationsBody, { model_alias: 'm', input: 'x', priority: 'batch' })).toMatchObject({ priority: 'batch' });
    expect(() => parseBody(generationsBody, { model_alias: 'm', input: 'x', priority: 'low' })).toThrow(expect.objectContaining({ param: 'priority' }));
  });
});
