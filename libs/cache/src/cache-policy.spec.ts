import { type TenantCachePolicy, WeirError } from '@weir/core';
import { cacheControlDirectivesOf, cacheDirectivesOf, cacheEnabled, checkTemplate, decideCache, templateOf } from './cache-policy';

const policy: TenantCachePolicy = { exact: { enabled: true, ttlMs: 60_000 }, deterministicOnly: true, allowOptIn: true, hitPriceFraction: 0.1 };
const none = { noCache: false, noStore: false, optIn: false };

describe('cacheDirectivesOf', () => {
  it.each([
    [undefined, undefined, none],
    ['no-cache', undefined, { noCache: true, noStore: false, optIn: false }],
    ['max-age=0, No-Store', undefined, { noCache: true, noStore: true, optIn: false }],
    ['private', undefined, none],
    [undefined, 'no-cache', { noCache: true, noStore: false, optIn: false }],
    [undefined, 'no-store', { noCache: true, noStore: true, optIn: false }],
    [undefined, 'opt_in', { noCache: false, noStore: false, optIn: true }],
    ['no-cache', 'opt_in', { noCache: true, noStore: false, optIn: true }],
  ])('Cache-Control %p, weir_cache %p', (header, body, expected) => {
    expect(cacheDirectivesOf(header, body)).toEqual(expected);
  });

  // RFC 9111 §5.2: comma-separated `name[=token|quoted-string]`, case-insensitive names, unknown ones ignored.
  const read = { noCache: false, noStore: false };
  const noRead = { noCache: true, noStore: false };
  const bypass = { noCache: true, noStore: true };
  it.each([
    ['no-store', bypass],
    ['NO-STORE', bypass],
    ['  no-store  ', bypass],
    ['no-cache="x"', noRead],
    ['No-Cache="x, y", private', noRead],
    ['no-cache=x', noRead],
    ['max-age=0', noRead],
    ['MAX-AGE = 0', noRead],
    ['max-age="0"', noRead],
    ['max-age=600', read],
    ['max-stale, no-transform, only-if-cached', read],
    ['private, max-age=0', noRead],
    ['x-custom="a,no-store", private', read],
    ['private, no-store', bypass],
    // several `Cache-Control` lines arrive joined by Node with ", "
    ['max-age=10, no-cache', noRead],
    [',, no-cache ,', noRead],
    ['nostore', read],
    ['', read],
    // malformed: the safe reading (neither read nor store)
    ['no-store;', bypass],
    ['no-cache;x', bypass],
    ['no-cache="x', bypass],
    ['max-age', bypass],
    ['max-age=-1', bypass],
    ['max-age=abc', bypass],
    ['max-age=1.5', bypass],
    ['no cache', bypass],
    ['=x', bypass],
    ['no-cache=a b', bypass],
  ])('Cache-Control %p', (header, expected) => {
    expect(cacheControlDirectivesOf(header)).toEqual(expected);
    expect(cacheDirectivesOf(header, undefined)).toEqual({ ...expected, optIn: false });
  });

  it('refuses another weir_cache value with a 400 naming the field', () => {
    expect(() => cacheDirectivesOf(undefined, 'yes')).toThrow(expect.objectContaining({ code: 'invalid_request', param: 'weir_cache' }));
  });
});

describe('templateOf and checkTemplate', () => {
  it('reads the header or the body; the same in both is fine', () => {
    expect(templateOf('faq@3', undefined)).toBe('faq@3');
    expect(templateOf(undefined, 'faq@3')).toBe('faq@3');
    expect(templateOf('faq@3', 'faq@3')).toBe('faq@3');
    expect(templateOf(undefined, undefined)).toBe('');
  });

  it.each([
    ['faq', undefined, 'x-weir-prompt-template'],
    [undefined, 'faq@', 'weir_prompt_template'],
    [undefined, 7, 'weir_prompt_template'],
    ['a@1', 'a@2', 'weir_prompt_template'],
    ['bad name@1', undefined, 'x-weir-prompt-template'],
  ])('refuses header %p body %p (param %s)', (header, body, param) => {
    let err: unknown;
    try {
      templateOf(header, body);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(WeirError);
    expect(err).toMatchObject({ code: 'invalid_request', param });
  });

  it('a declared list allows its names (any version) and name@version entries only', () => {
    const p = { ...policy, templates: ['faq', 'summary@2'] };
    expect(() => checkTemplate(p, 'faq@9')).not.toThrow();
    expect(() => checkTemplate(p, 'summary@2')).not.toThrow();
    expect(() => checkTemplate(p, '')).not.toThrow();
    expect(() => checkTemplate(p, 'summary@3')).toThrow(/not one your tenant declares/);
    expect(() => checkTemplate(p, 'other@1')).toThrow(expect.objectContaining({ code: 'invalid_request', param: 'weir_prompt_template' }));
    expect(() => checkTemplate(policy, 'anything@1')).not.toThrow();
  });
});

describe('decideCache', () => {
  const facts = { temperature: 0, endUser: false, directives: none };
  it.each([
    ['deterministic (temperature 0)', policy, facts, { read: true, store: true }],
    ['deterministic (seed)', policy, { ...facts, temperature: 1, seed: 4 }, { read: true, store: true }],
    ['not deterministic', policy, { ...facts, temperature: undefined }, { read: false, store: false, bypass: 'not_deterministic' }],
    ['temperature 0.7', policy, { ...facts, temperature: 0.7 }, { read: false, store: false, bypass: 'not_deterministic' }],
    ['opted in', policy, { ...facts, temperature: 0.7, directives: { ...none, optIn: true } }, { read: true, store: true }],
    ['opt-in refused by policy', { ...policy, allowOptIn: false }, { ...facts, temperature: 0.7, directives: { ...none, optIn: true } }, { read: false, store: false, bypass: 'not_deterministic' }],
    ['policy caches everything', { ...policy, deterministicOnly: false }, { ...facts, temperature: 1 }, { read: true, store: true }],
    ['end user', policy, { ...facts, endUser: true }, { read: false, store: false, bypass: 'personalised' }],
    ['personalised use case', { ...policy, personalisedUseCases: ['coach'] }, { ...facts, useCase: 'coach' }, { read: false, store: false, bypass: 'personalised' }],
    ['other use case', { ...policy, personalisedUseCases: ['coach'] }, { ...facts, useCase: 'faq' }, { read: true, store: true }],
    ['personalised use case in another case', { ...policy, personalisedUseCases: ['coach'] }, { ...facts, useCase: 'Coach' }, { read: false, store: false, bypass: 'personalised' }],
    ['personalised use case listed in capitals', { ...policy, personalisedUseCases: ['Coach.V2'] }, { ...facts, useCase: 'coach.v2' }, { read: false, store: false, bypass: 'personalised' }],
    ['no-cache', policy, { ...facts, directives: { ...none, noCache: true } }, { read: false, store: true }],
    ['no-store', policy, { ...facts, directives: { noCache: true, noStore: true, optIn: false } }, { read: false, store: false, bypass: 'no_store' }],
  ] as [string, TenantCachePolicy, Parameters<typeof decideCache>[1], object][])('%s', (_name, p, f, expected) => {
    expect(decideCache(p, f)).toEqual(expected);
  });

  it('cacheEnabled is false without a policy or with every tier off', () => {
    expect(cacheEnabled(undefined)).toBe(false);
    expect(cacheEnabled({ ...policy, exact: { enabled: false, ttlMs: 1 } })).toBe(false);
    expect(cacheEnabled({ ...policy, exact: { enabled: false, ttlMs: 1 }, semantic: { enabled: true, ttlMs: 1 } })).toBe(true);
    expect(cacheEnabled(policy)).toBe(true);
  });
});
