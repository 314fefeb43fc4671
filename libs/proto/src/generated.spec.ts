import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { commonV1, relayV1, routerV1 } from './index';

// buf and protoc-gen-es are local npm packages (node_modules/.bin): no network, nothing to
// skip. These checks keep the committed code equal to what proto/ generates.
const root = path.resolve(__dirname, '../../..');
const buf = path.join(root, 'node_modules/.bin/buf');
const committed = path.join(root, 'libs/proto/src/gen');

function listFiles(dir: string, prefix = ''): string[] {
  return readdirSync(dir)
    .flatMap((name) => {
      const full = path.join(dir, name);
      const rel = path.join(prefix, name);
      return statSync(full).isDirectory() ? listFiles(full, rel) : [rel];
    })
    .sort();
}

describe('generated code', () => {
  let out: string;
  beforeAll(() => {
    out = mkdtempSync(path.join(tmpdir(), 'weir-proto-'));
  });
  afterAll(() => rmSync(out, { recursive: true, force: true }));

  it('passes buf lint (STANDARD)', () => {
    expect(() => execFileSync(buf, ['lint', 'proto'], { cwd: root, stdio: 'pipe' })).not.toThrow();
  });

  it('equals a fresh `buf generate` (run proto/generate.sh when this fails)', () => {
    execFileSync(buf, ['generate', 'proto', '--template', 'proto/buf.gen.yaml', '-o', out], { cwd: root, stdio: 'pipe' });
    const fresh = path.join(out, 'libs/proto/src/gen');
    expect(listFiles(committed)).toEqual(listFiles(fresh));
    for (const file of listFiles(fresh)) {
      expect({ file, text: readFileSync(path.join(committed, file), 'utf8') }).toEqual({
        file,
        text: readFileSync(path.join(fresh, file), 'utf8'),
      });
    }
  });
});

describe('runtime', () => {
  it('round-trips a message through the binary format', () => {
    const request = create(routerV1.ResolveRequestSchema, {
      caller: { tenantId: 't', appId: 'a', apiKeyId: 'k' },
      alias: 'tiny',
      stickyKey: 'req_1',
    });
    expect(fromBinary(routerV1.ResolveRequestSchema, toBinary(routerV1.ResolveRequestSchema, request))).toEqual(request);
  });

  it('declares the retry-safe methods as idempotent', () => {
    expect(routerV1.RouterService.method.resolve.idempotency).not.toBe(0);
    expect(relayV1.RelayService.method.generate.idempotency).toBe(0);
    expect(relayV1.RelayService.method.generate.methodKind).toBe('server_streaming');
    expect(commonV1.FinishReason.CONTENT_FILTER).toBe(6);
  });
});
