import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { LlamaCppEngineSpec } from '@weir/core';
import { egressPolicyFromEnv, type LookupFunction, resolveModelFile } from './index';
import { isGgufFile } from './resolve-model-file';

/** 16 KiB that stand in for a model: a GGUF header (version 3, no tensors, no metadata), then filler. */
const BODY = Buffer.concat([Buffer.from('GGUF', 'latin1'), Buffer.from([3, 0, 0, 0]), Buffer.alloc(16), Buffer.from('GGUF'.repeat(4090))]);
const GOOD_SHA = createHash('sha256').update(BODY).digest('hex');
const WRONG_SHA = 'b'.repeat(64);

function engine(overrides: Partial<LlamaCppEngineSpec> = {}): LlamaCppEngineSpec {
  return { kind: 'llamacpp', threads: 1, sequences: 1, contextSize: 512, testTokenDelayMs: 0, ...overrides };
}

describe('resolveModelFile', () => {
  let server: Server;
  let baseUrl: string;
  let requests: string[];
  let dir: string;

  beforeAll(async () => {
    server = createServer((req, res) => {
      requests.push(req.url ?? '');
      if (req.url === '/model.gguf') {
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': BODY.length });
        res.end(BODY);
      } else if (req.url === '/chunked.gguf') {
        // No content-length: the cap is enforced while streaming.
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        res.write(BODY.subarray(0, 8192));
        res.end(BODY.subarray(8192));
      } else if (req.url === '/elsewhere.gguf') {
        res.writeHead(302, { location: `http://files.attacker.example:${(server.address() as AddressInfo).port}/model.gguf` });
        res.end();
      } else if (req.url === '/moved.gguf') {
        res.writeHead(302, { location: '/model.gguf' });
        res.end();
      } else {
        res.writeHead(404);
        res.end('not found');
      }
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await new Promise((resolve) => server.close(resolve));
  });
  beforeEach(() => {
    requests = [];
    dir = mkdtempSync(path.join(tmpdir(), 'weir-model-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  const cacheDir = () => path.join(dir, 'cache');

  it('downloads, verifies and caches; a second call uses the cache without a request', async () => {
    const spec = engine({ modelUrl: `${baseUrl}/moved.gguf`, modelSha256: GOOD_SHA });
    const first = await resolveModelFile(spec, { cacheDir: cacheDir(), allowDownload: true });
    expect(first).toEqual({ ok: true, source: 'download', path: path.join(cacheDir(), `${GOOD_SHA}.gguf`) });
    expect(readdirSync(cacheDir())).toEqual([`${GOOD_SHA}.gguf`]);
    expect(requests).toEqual(['/moved.gguf', '/model.gguf']);

    requests = [];
    const second = await resolveModelFile(spec, { cacheDir: cacheDir(), allowDownload: true });
    expect(second).toEqual({ ok: true, source: 'cache', path: path.join(cacheDir(), `${GOOD_SHA}.gguf`) });
    expect(requests).toEqual([]);
  });

  it('fails on a wrong sha256 and leaves no file behind', async () => {
    const result = await resolveModelFile(engine({ modelUrl: `${baseUrl}/model.gguf`, modelSha256: WRONG_SHA }), {
      cacheDir: cacheDir(),
      allowDownload: true,
    });
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.reason).toContain(`has sha256 ${GOOD_SHA}, expected ${WRONG_SHA}`);
    expect(readdirSync(cacheDir())).toEqual([]);
  });

  it('fails on a 404 and leaves no file behind', async () => {
    const result = await resolveModelFile(engine({ modelUrl: `${baseUrl}/missing.gguf`, modelSha256: GOOD_SHA }), {
      cacheDir: cacheDir(),
      allowDownload: true,
    });
    expect(result).toEqual({ ok: false, reason: expect.stringContaining('HTTP 404') });
    if (!result.ok) expect(result.reason).toContain('WEIR_MODEL_PATH');
    expect(readdirSync(cacheDir())).toEqual([]);
  });

  it('fails on a connection error with a fix', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const result = await resolveModelFile(engine({ modelUrl: `http://127.0.0.1:${port}/m.gguf`, modelSha256: GOOD_SHA }), {
      cacheDir: cacheDir(),
      allowDownload: true,
    });
    expect(result).toEqual({ ok: false, reason: expect.stringMatching(/download .* failed .*WEIR_MODEL_PATH/) });
  });

  it('replaces a cached file whose sha256 does not match', async () => {
    mkdirSync(cacheDir(), { recursive: true });
    writeFileSync(path.join(cacheDir(), `${GOOD_SHA}.gguf`), 'corrupt');
    const result = await resolveModelFile(engine({ modelUrl: `${baseUrl}/model.gguf`, modelSha256: GOOD_SHA }), {
      cacheDir: cacheDir(),
      allowDownload: true,
    });
    expect(result).toMatchObject({ ok: true, source: 'download' });
    expect(requests).toEqual(['/model.gguf']);
  });

  it('does not download when downloads are disabled', async () => {
    const result = await resolveModelFile(engine({ modelUrl: `${baseUrl}/model.gguf`, modelSha256: GOOD_SHA }), {
      cacheDir: cacheDir(),
      allowDownload: false,
    });
    expect(result).toEqual({ ok: false, reason: expect.stringContaining('WEIR_ALLOW_MODEL_DOWNLOAD=false') });
    expect(requests).toEqual([]);
  });

  it('prefers the override, then an existing model_path, with no request', async () => {
    const local = path.join(dir, 'local.gguf');
    writeFileSync(local, BODY);
    const spec = engine({ modelPath: local, modelUrl: `${baseUrl}/model.gguf`, modelSha256: GOOD_SHA });
    const other = path.join(dir, 'other.gguf');
    writeFileSync(other, Buffer.concat([Buffer.from('GGUF', 'latin1'), Buffer.from([3, 0, 0, 0]), Buffer.alloc(16)]));
    await expect(resolveModelFile(spec, { modelPathOverride: other, cacheDir: cacheDir(), allowDownload: true })).resolves.toEqual({
      ok: true,
      path: other,
      source: 'override',
    });
    await expect(resolveModelFile(spec, { cacheDir: cacheDir(), allowDownload: true })).resolves.toEqual({ ok: true, path: local, source: 'path' });
    expect(requests).toEqual([]);
    expect(existsSync(cacheDir())).toBe(false);
  });

  it('refuses an existing file that is not GGUF with a fixed reason quoting none of its bytes, before llama.cpp sees it (issue 14)', async () => {
    const shadowLike = path.join(dir, 'shadow');
    writeFileSync(shadowLike, 'root:$6$SECRETHASH:19000:0:99999:7:::\n');
    const short = path.join(dir, 'short.gguf');
    writeFileSync(short, 'GG');
    // The magic and version 3, then counts read from text: billions of tensors in a 25-byte file
    // (node-llama-cpp's reader loops on it and the start never ends).
    const forged = path.join(dir, 'forged.gguf');
    writeFileSync(forged, Buffer.concat([Buffer.from('GGUF', 'latin1'), Buffer.from([3, 0, 0, 0]), Buffer.from('SECRETFAKE-QWERTY', 'latin1')]));
    const oldVersion = path.join(dir, 'v9.gguf');
    writeFileSync(oldVersion, Buffer.concat([Buffer.from('GGUF', 'latin1'), Buffer.from([9, 0, 0, 0]), Buffer.alloc(16)]));
    for (const file of [shadowLike, short, forged, oldVersion]) {
      const viaPath = await resolveModelFile(engine({ modelPath: file, modelSha256: GOOD_SHA }), { cacheDir: cacheDir(), allowDownload: false });
      expect(viaPath).toEqual({ ok: false, reason: `${file} is not a GGUF model file` });
      const viaOverride = await resolveModelFile(engine({}), { modelPathOverride: file, cacheDir: cacheDir(), allowDownload: false });
      expect(viaOverride).toEqual({ ok: false, reason: `${file} is not a GGUF model file` });
    }
    expect(requests).toEqual([]);
  });

  it('takes a GGUF header whose counts the file can hold (an empty model: no tensors, no metadata)', async () => {
    const empty = path.join(dir, 'empty.gguf');
    writeFileSync(empty, Buffer.concat([Buffer.from('GGUF', 'latin1'), Buffer.from([3, 0, 0, 0]), Buffer.alloc(16)]));
    await expect(isGgufFile(empty)).resolves.toBe(true);
    const oneTensorShort = path.join(dir, 'one-tensor.gguf');
    const header = Buffer.concat([Buffer.from('GGUF', 'latin1'), Buffer.from([3, 0, 0, 0]), Buffer.from([1, 0, 0, 0, 0, 0, 0, 0]), Buffer.alloc(8)]);
    writeFileSync(oneTensorShort, Buffer.concat([header, Buffer.alloc(23)]));
    await expect(isGgufFile(oneTensorShort)).resolves.toBe(false);
    writeFileSync(oneTensorShort, Buffer.concat([header, Buffer.alloc(24)]));
    await expect(isGgufFile(oneTensorShort)).resolves.toBe(true);
  });

    it('fails when the override does not exist, naming WEIR_MODEL_PATH', async () => {
    const result = await resolveModelFile(engine({ modelUrl: `${baseUrl}/model.gguf`, modelSha256: GOOD_SHA }), {
      modelPathOverride: path.join(dir, 'nope.gguf'),
      cacheDir: cacheDir(),
      allowDownload: true,
    });
    expect(result).toEqual({ ok: false, reason: expect.stringContaining('WEIR_MODEL_PATH names') });
    expect(requests).toEqual([]);
  });

  it('falls back from a missing model_path to the download', async () => {
    const logs: string[] = [];
    const logger = { info: (_f: object, m: string) => logs.push(`info ${m}`), warn: (_f: object, m: string) => logs.push(`warn ${m}`) };
    const spec = engine({ modelPath: path.join(dir, 'missing.gguf'), modelUrl: `${baseUrl}/model.gguf`, modelSha256: GOOD_SHA });
    await expect(resolveModelFile(spec, { cacheDir: cacheDir(), allowDownload: true, logger })).resolves.toMatchObject({ ok: true, source: 'download' });
    expect(logs).toEqual([
      'warn configured model_path does not exist; looking in the model cache',
      'info downloading model',
      'info model downloaded and verified',
    ]);
  });

  it('fails with a fix when there is nothing to find or fetch', async () => {
    await expect(resolveModelFile(engine(), { cacheDir: cacheDir(), allowDownload: true })).resolves.toEqual({
      ok: false,
      reason: expect.stringContaining('set WEIR_MODEL_PATH'),
    });
  });

  describe('egress: allowed hosts and a size cap', () => {
    const small = egressPolicyFromEnv({ WEIR_MODEL_DOWNLOAD_MAX_BYTES: '10000' }); // BODY is 16,384 bytes

    it.each([
      ['/model.gguf', 'it is 16384 bytes, over the 10000-byte cap (WEIR_MODEL_DOWNLOAD_MAX_BYTES)'],
      ['/chunked.gguf', 'it is over the 10000-byte cap (WEIR_MODEL_DOWNLOAD_MAX_BYTES); the partial file was deleted'],
    ])('refuses %s over the cap and leaves no file behind', async (file, message) => {
      const result = await resolveModelFile(engine({ modelUrl: `${baseUrl}${file}`, modelSha256: GOOD_SHA }), { cacheDir: cacheDir(), allowDownload: true, egress: small });
      expect(result).toEqual({ ok: false, reason: expect.stringContaining(message) });
      expect(readdirSync(cacheDir())).toEqual([]);
    });

    it('refuses a host outside WEIR_MODEL_DOWNLOAD_HOSTS without a request', async () => {
      const egress = egressPolicyFromEnv({ WEIR_MODEL_DOWNLOAD_HOSTS: 'huggingface.co' });
      const result = await resolveModelFile(engine({ modelUrl: `${baseUrl}/model.gguf`, modelSha256: GOOD_SHA }), { cacheDir: cacheDir(), allowDownload: true, egress });
      expect(result).toEqual({ ok: false, reason: expect.stringContaining('127.0.0.1 is not an allowed model download host: add it to WEIR_MODEL_DOWNLOAD_HOSTS') });
      expect(requests).toEqual([]);
    });

    it('refuses a redirect to a host outside the list', async () => {
      const result = await resolveModelFile(engine({ modelUrl: `${baseUrl}/elsewhere.gguf`, modelSha256: GOOD_SHA }), { cacheDir: cacheDir(), allowDownload: true, egress: egressPolicyFromEnv({}) });
      expect(result).toEqual({ ok: false, reason: expect.stringContaining('it redirects to http://files.attacker.example') });
      expect(requests).toEqual(['/elsewhere.gguf']);
    });

    it('refuses at connect an allowed name that resolves to a link-local address', async () => {
      const egress = egressPolicyFromEnv({ WEIR_MODEL_DOWNLOAD_HOSTS: '*.weir-test.example' });
      const toMetadata: LookupFunction = (_host, _options, callback) => callback(null, [{ address: '169.254.169.254', family: 4 }]);
      const port = new URL(baseUrl).port;
      const result = await resolveModelFile(engine({ modelUrl: `http://models.weir-test.example:${port}/model.gguf`, modelSha256: GOOD_SHA }), {
        cacheDir: cacheDir(),
        allowDownload: true,
        egress,
        lookup: toMetadata,
      });
      expect(result).toEqual({ ok: false, reason: expect.stringContaining('refused to connect to models.weir-test.example: it resolves to 169.254.169.254') });
      expect(requests).toEqual([]);
      // The same name resolving to this machine downloads.
      const toLoopback: LookupFunction = (_host, _options, callback) => callback(null, [{ address: '127.0.0.1', family: 4 }]);
      const ok = await resolveModelFile(engine({ modelUrl: `http://models.weir-test.example:${port}/model.gguf`, modelSha256: GOOD_SHA }), {
        cacheDir: cacheDir(),
        allowDownload: true,
        egress,
        lookup: toLoopback,
      });
      expect(ok).toMatchObject({ ok: true, source: 'download' });
    });
  });
});
