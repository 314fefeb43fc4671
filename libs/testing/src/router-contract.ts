import type { PlatformConfig, RouterService } from '@weir/core';
import { type ContractSubject, contractCallers, contractPlatformConfig } from './port-contract-fixtures';

/**
 * The contract every `RouterService` binding passes (a jest `describe` block), with the
 * semantics of the in-process static router:
 * - an allowed alias resolves to one of its targets' revisions, every `RevisionSpec` and
 *   `AliasSpec` field intact; the same sticky key always picks the same arm, and different
 *   keys reach every arm of a 1:1 canary;
 * - an unknown alias, an alias the tenant may not use and an unknown tenant all answer
 *   `model_not_found` (a value) with a message;
 * - `listAliases` returns the tenant's aliases in config order, `[]` for an unknown tenant.
 *
 * `setup` receives the fixture configuration ({@link contractPlatformConfig}) and runs once.
 */
export function describeRouterContract(name: string, setup: (config: PlatformConfig) => Promise<ContractSubject<RouterService>>): void {
  describe(`router contract: ${name}`, () => {
    const config = contractPlatformConfig();
    let subject: ContractSubject<RouterService>;
    const router = () => subject.service;
    const revision = (id: string) => config.revisions.find((r) => r.id === id);
    const alias = (n: string) => config.aliases.find((a) => a.name === n);

    beforeAll(async () => {
      subject = await setup(contractPlatformConfig());
    });
    afterAll(async () => {
      await subject?.close?.();
    });

    it('resolves an allowed alias to a target revision with every field intact', async () => {
      const result = await router().resolve(contractCallers.acme, 'tiny', 'req_contract_1');
      if (!result.ok) throw new Error(`expected a route, got ${result.message}`);
      expect(result.route.alias).toEqual(alias('tiny'));
      expect(['tiny@1', 'tiny@2']).toContain(result.route.revision.id);
      expect(result.route.revision).toEqual(revision(result.route.revision.id));
      expect(Array.isArray(result.route.fallbacks)).toBe(true);
    });

    it('resolves a single-target alias with its optional fields absent', async () => {
      const result = await router().resolve(contractCallers.acme, 'hosted', 'req_contract_2');
      if (!result.ok) throw new Error(`expected a route, got ${result.message}`);
      expect(result.route.revision).toEqual(revision('hosted@1'));
      expect(result.route.revision.replicas).toBeUndefined();
      expect(result.route.alias.description).toBeUndefined();
    });

    it('is sticky per key and reaches every arm across keys', async () => {
      const first = await router().resolve(contractCallers.acme, 'tiny', 'req_sticky');
      for (let i = 0; i < 5; i++) {
        const again = await router().resolve(contractCallers.acme, 'tiny', 'req_sticky');
        expect(again.ok && again.route.revision.id).toBe(first.ok && first.route.revision.id);
      }
      const seen = new Set<string>();
      for (let i = 0; i < 64; i++) {
        const r = await router().resolve(contractCallers.acme, 'tiny', `req_spread_${i}`);
        if (r.ok) seen.add(r.route.revision.id);
      }
      expect([...seen].sort()).toEqual(['tiny@1', 'tiny@2']);
    });

    it.each([
      ['an unknown alias', contractCallers.acme, 'nope'],
      ['an alias the tenant may not use', contractCallers.acme, 'private'],
      ['an unknown tenant', contractCallers.stranger, 'tiny'],
    ])('answers model_not_found for %s', async (_case, caller, aliasName) => {
      const result = await router().resolve(caller, aliasName, 'req_contract_3');
      expect(result.ok).toBe(false);
      if (result.ok) return;
      expect(result.reason).toBe('model_not_found');
      expect(result.message.length).toBeGreaterThan(0);
    });

    it('lists the aliases a tenant may use, in config order', async () => {
      expect(await router().listAliases(contractCallers.acme)).toEqual([alias('tiny'), alias('hosted')]);
      expect(await router().listAliases(contractCallers.globex)).toEqual(config.aliases);
      expect(await router().listAliases(contractCallers.stranger)).toEqual([]);
    });
  });
}
