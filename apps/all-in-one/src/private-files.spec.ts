/**
 * Files only the service user can read (issue 14, part 6), on the running all-in-one: started
 * with umask 000, its data directory and everything in it (the embedded database, the
 * settlement journal, the signing key, the lock) are owner-only after a generation is served
 * and settled; a signing key file (WEIR_CONFIG_SIGNING_KEY_FILE) others can read is refused at
 * start with the fix.
 */
import { chmodSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { generateSigningKeyPair } from '@weir/config-sync';
import { startTestPlatform } from './test-platform';

jest.setTimeout(120_000);

const DEMO_KEY = 'wk_privfile_' + 'Q'.repeat(43);
const CONFIG = `revisions:
  - id: sim@1
    model: sim
    engine: { kind: simulated, prefill_tokens_per_second: 1000000, decode_step_ms: [[1, 1], [32, 2]], max_sequences: 8 }
    context_window: 4096
    max_output_tokens: 64
    default_output_tokens: 4
    pricing: { input_per_mtok: 1, output_per_mtok: 2 }
aliases:
  - name: sim
    revision: sim@1
tenants:
  - id: demo
    name: Demo
    apps: [{ id: demo-app, name: Demo app }]
`;

/** Every entry below `root` (itself included) with a group or other permission bit, as `path mode`. */
function notPrivate(root: string): string[] {
  const out: string[] = [];
  const visit = (p: string) => {
    const st = statSync(p);
    if ((st.mode & 0o077) !== 0) out.push(`${path.relative(root, p) || '.'} ${(st.mode & 0o777).toString(8)}`);
    if (st.isDirectory()) for (const name of readdirSync(p)) visit(path.join(p, name));
  };
  visit(root);
  return out;
}

describe('all-in-one: private files whatever the umask', () => {
  let savedUmask: number;
  beforeEach(() => {
    savedUmask = process.umask(0);
  });
  afterEach(() => {
    process.umask(savedUmask);
  });

  it('under umask 000 the data directory and the files created in it are owner-only', async () => {
    const running = await startTestPlatform('private', CONFIG, DEMO_KEY, { keepDir: true });
    const dataDir = path.join(running.dir, 'data');
    try {
      const res = await fetch(`${running.platform.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim', messages: [{ role: 'user', content: 'hello' }], max_tokens: 2 }),
      });
      expect(res.status).toBe(200);
      await res.text();
      expect(readdirSync(dataDir).sort()).toEqual(expect.arrayContaining(['journal', 'pg']));
      expect(notPrivate(dataDir)).toEqual([]);
    } finally {
      await running.stop();
    }
    expect(notPrivate(dataDir)).toEqual([]);
    rmSync(running.dir, { recursive: true, force: true });
  });

  it('refuses a signing key file with mode 0644, saying chmod 600 <path>', async () => {
    const keyDir = mkdtempSync(path.join(os.tmpdir(), 'weir-key-'));
    const keyFile = path.join(keyDir, 'signing.pem');
    try {
      writeFileSync(keyFile, generateSigningKeyPair().privateKeyPem);
      chmodSync(keyFile, 0o644);
      await expect(startTestPlatform('loosekey', CONFIG, DEMO_KEY, { platform: { signingKeyFile: keyFile } })).rejects.toThrow(`chmod 600 ${keyFile}`);
    } finally {
      rmSync(keyDir, { recursive: true, force: true });
    }
  });
});
