import { type TenantCachePolicy, WeirError } from '@weir/core';
import { cacheDirectivesOf, cacheEnabled, checkTemplate, decideCache, templateOf } from './cache-policy';

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
