/* eslint-disable @typescript-eslint/no-explicit-any -- documents are mutated freely to build invalid cases, as in parse-config.spec.ts */
import { ConfigError } from './config-error';
import { parseConfig } from './parse-config';

/** A revision of a hosted upstream, with or without remote replicas. */
function revision(id: string, extra: Record<string, any> = {}): Record<string, any> {
  return {
    id,
    model: 'm',
    engine: { kind: 'openai-compatible', base_url: 'http://127.0.0.1:8000/v1', upstream_model: 'm' },
    context_window: 4096,
    max_output_tokens: 1024,
    default_output_tokens: 256,
    pricing: { input_per_mtok: 1, output_per_mtok: 2 },
    ...extra,
  };
}

const replica = (id: string, pool?: string): Record<string, any> => ({ id, base_url: `http://127.0.0.1:${8001 + Number(id.slice(-1))}/v1`, slots: 4, ...(pool ? { pool } : {}) });

/** Two revisions, one alias each, and a tenant with a dedicated pool that m@1's third replica serves. */
function file(): Record<string, any> {
  return {
    revisions: [revision('m@1', { replicas: [replica('m@1/0'), replica('m@1/1', 'batch'), replica('m@1/2', 'acme-dedicated')] }), revision('n@1')],
    aliases: [
      { name: 'm', revision: 'm@1' },
      { name: 'n', targets: [{ revision: 'n@1', weight: 1 }] },
    ],
    tenants: [
      { id: 'acme', name: 'Acme', dedicated_pool: 'acme-dedicated' },
      { id: 'globex', name: 'Globex' },
    ],
  };
}

function problems(doc: Record<string, any>): string[] {
  try {
    parseConfig(JSON.stringify(doc), 'w.json');
  } catch (err) {
    if (err instanceof ConfigError) return err.problems.map((p) => `${p.path}: ${p.message}`);
    throw err;
  }
  return [];
}

describe('pool cross-checks', () => {
  it('accepts interactive, batch and dedicated pools that replicas serve', () => {
    expect(problems(file())).toEqual([]);
  });

  describe("a tenant's dedicated_pool must be served by some replica", () => {
    it('refuses a dedicated pool no replica is in, naming the path', () => {
      const doc = file();
      doc.revisions[0].replicas[2].pool = 'interactive';
      expect(problems(doc)).toEqual([
        `tenants[0].dedicated_pool: no replica is in pool "acme-dedicated", so this tenant's requests could never run (a tenant with a dedicated pool runs only there): set pool: acme-dedicated on a revision or on some of its replicas`,
      ]);
    });

    it('names each tenant whose pool is unserved', () => {
      const doc = file();
      doc.tenants[1].dedicated_pool = 'globex-dedicated';
      expect(problems(doc)).toEqual([expect.stringMatching(/^tenants\[1\]\.dedicated_pool: no replica is in pool "globex-dedicated"/)]);
    });

    it("counts a revision without replicas as one in-process replica in the revision's pool", () => {
      const doc = file();
      doc.revisions[0].replicas[2].pool = 'interactive';
      doc.revisions[1].pool = 'acme-dedicated';
      doc.aliases[1] = { name: 'n', revision: 'm@1' };
      expect(problems(doc)).toEqual([]);
    });

    it("counts replicas without a pool of their own in their revision's pool", () => {
      const doc = file();
      doc.revisions[0].replicas = [replica('m@1/0', 'interactive'), replica('m@1/1')];
      doc.revisions[0].pool = 'acme-dedicated';
      expect(problems(doc)).toEqual([]);
    });

    it("does not count a revision's pool that every replica overrides", () => {
      const doc = file();
      doc.revisions[0].replicas = [replica('m@1/0', 'interactive'), replica('m@1/1', 'batch')];
      doc.revisions[0].pool = 'acme-dedicated';
      expect(problems(doc)).toEqual([expect.stringMatching(/^tenants\[0\]\.dedicated_pool: no replica is in pool "acme-dedicated"/)]);
    });

    it('leaves "interactive" and "batch" as dedicated pools to their own check', () => {
      const doc = file();
      doc.tenants[1].dedicated_pool = 'batch';
      expect(problems(doc)).toEqual([`tenants[1].dedicated_pool: "batch" is a shared pool; name the tenant's own pool (for example "globex-dedicated")`]);
    });
  });

  describe('a revision an alias targets must have a replica outside the batch pool', () => {
    it('refuses a revision without replicas in the batch pool, naming the alias and the revision', () => {
      const doc = file();
      doc.revisions[1].pool = 'batch';
      expect(problems(doc)).toEqual([
        `aliases[1].targets[0].revision: alias "n" targets revision "n@1", whose replica is in the "batch" pool: interactive requests to the alias (the default priority) would have no pool to run in; put the revision or one of its replicas in the "interactive" pool, or target another revision`,
      ]);
    });

    it('refuses a revision whose replicas are all in batch (the shorthand alias form)', () => {
      const doc = file();
      doc.revisions[0].replicas = [replica('m@1/0', 'batch'), replica('m@1/1', 'batch')];
      doc.tenants[0].dedicated_pool = undefined;
      expect(problems(doc)).toEqual([expect.stringMatching(/^aliases\[0\]\.revision: alias "m" targets revision "m@1", whose 2 replicas are all in the "batch" pool/)]);
    });

    it("refuses one canary arm in batch, at that arm's path", () => {
      const doc = file();
      doc.revisions.push(revision('n@2', { pool: 'batch' }));
      doc.aliases[1].targets.push({ revision: 'n@2', weight: 1 });
      expect(problems(doc)).toEqual([expect.stringMatching(/^aliases\[1\]\.targets\[1\]\.revision: alias "n" targets revision "n@2"/)]);
    });

    it("accepts a batch revision with one replica of its own in interactive", () => {
      const doc = file();
      doc.revisions[1] = revision('n@1', { pool: 'batch', replicas: [replica('n@1/0'), replica('n@1/1', 'interactive')] });
      expect(problems(doc)).toEqual([]);
    });

    it('accepts a batch-only revision no alias targets', () => {
      const doc = file();
      doc.revisions.push(revision('nightly@1', { pool: 'batch' }));
      expect(problems(doc)).toEqual([]);
    });
  });
});
