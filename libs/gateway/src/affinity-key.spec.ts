import { affinityKeyOf } from './pipeline';

describe('affinityKeyOf', () => {
  const system = { role: 'system' as const, content: 'You are a careful assistant. '.repeat(100) };

  it('is the same for prompts that share their beginning, per tenant, and never holds the text', () => {
    const a = affinityKeyOf('acme', { kind: 'chat', messages: [system, { role: 'user', content: 'first question' }] });
    const b = affinityKeyOf('acme', { kind: 'chat', messages: [system, { role: 'user', content: 'another question' }] });
    expect(a).toBe(b);
    expect(affinityKeyOf('globex', { kind: 'chat', messages: [system, { role: 'user', content: 'first question' }] })).not.toBe(a);
    expect(a).toMatch(/^acme:[A-Za-z0-9_-]{16}$/);
    expect(a).not.toContain('careful');
  });

  it('differs for prompts that differ early, and tells roles apart', () => {
    expect(affinityKeyOf('acme', { kind: 'text', text: 'alpha beta' })).not.toBe(affinityKeyOf('acme', { kind: 'text', text: 'gamma beta' }));
    expect(affinityKeyOf('acme', { kind: 'chat', messages: [{ role: 'user', content: 'hi' }] })).not.toBe(
      affinityKeyOf('acme', { kind: 'chat', messages: [{ role: 'system', content: 'hi' }] }),
    );
  });
});
