/**
 * A revision that names a file which is not a GGUF model (issue 14): Weir reads the magic itself
 * and refuses it with a fixed message, and a library's failure is reported with a fixed text,
 * so neither the start-up warnings nor any log line quote the file's bytes.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { createLogger } from '@weir/telemetry';
import { startTestPlatform, type TestPlatform } from './test-platform';

jest.setTimeout(120_000);

const DEMO_KEY = 'wk_badmodel_' + 'B'.repeat(43);
const SECRET = 'root:$6$SNTLhash42:19000:0:99999:7:::';

const config = (notGguf: string, fakeGguf: string) => `revisions:
  - id: evil95@1
    model: evil95
    engine: { kind: llamacpp, threads: 1, sequences: 1, model_path: ${JSON.stringify(notGguf)}, model_sha256: "${'0'.repeat(64)}" }
    context_window: 512
    max_output_tokens: 64
    default_output_tokens: 8
    pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 }
  - id: fake@1
    model: fake
    engine: { kind: llamacpp, threads: 1, sequences: 1, model_path: ${JSON.stringify(fakeGguf)} }
    context_window: 512
    max_output_tokens: 64
    default_output_tokens: 8
    pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 }
  - id: sim@1
    model: sim
    engine: { kind: simulated }
    context_window: 512
    max_output_tokens: 64
    default_output_tokens: 8
    pricing: { input_per_mtok: 0.1, output_per_mtok: 0.2 }
aliases:
  - name: sim
    revision: sim@1
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
`;

describe('a revision naming a file that is not a GGUF model (all-in-one start-up)', () => {
  let running: TestPlatform | undefined;
  let files: string;
  const lines: string[] = [];

  beforeAll(async () => {
    files = mkdtempSync(path.join(os.tmpdir(), 'weir-badmodel-'));
    const notGguf = path.join(files, 'shadow');
    writeFileSync(notGguf, `${SECRET}\n`);
    // A plausible header (version 3, no tensors, no metadata), so only llama.cpp itself can refuse
    // it (its error text is not shown).
    const fakeGguf = path.join(files, 'fake.gguf');
    writeFileSync(fakeGguf, Buffer.concat([Buffer.from('GGUF'), Buffer.from([3, 0, 0, 0]), Buffer.alloc(16), Buffer.from(SECRET.repeat(8))]));
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(chunk.toString('utf8'));
        done();
      },
    });
    running = await startTestPlatform('badmodel', config(notGguf, fakeGguf), DEMO_KEY, { logger: createLogger({ name: 'weir', level: 'debug', destination: sink }) });
  });

  afterAll(async () => {
    await running?.stop();
    rmSync(files, { recursive: true, force: true });
  });

  it('serves the rest, refuses the non-GGUF file with the fixed message, and quotes none of either file in warnings or logs', () => {
    const warnings = running?.platform.warnings ?? [];
    expect(warnings).toContain(`revision evil95@1 is not served: ${path.join(files, 'shadow')} is not a GGUF model file`);
    expect(warnings).toContainEqual(expect.stringMatching(/^revision fake@1 is not served: its engine failed to start \(\w+\); check the model file and the engine settings$/));
    expect(running?.platform.aliases).toEqual(['sim']);
    expect(lines.join('\n')).toContain('is not a GGUF model file');
    for (const text of [...warnings, ...lines]) {
      expect(text).not.toContain('SNTLhash42');
      expect(text).not.toContain('root:');
      expect(text).not.toMatch(/got "root/);
    }
  });
});
