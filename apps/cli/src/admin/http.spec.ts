import { ApiError, createJsonClient, type FetchFn } from './http';

const failWith = (error: unknown): FetchFn => async () => Promise.reject(error);

describe('createJsonClient', () => {
  it('builds the URL from the base, the path and the defined query values', async () => {
    const urls: string[] = [];
    const fetch: FetchFn = async (url) => {
      urls.push(url);
      return new Response('', { status: 200 });
    };
    const client = createJsonClient({ baseUrl: 'http://cp:8090/admin/v1/', credential: 'wa_x', fetch });
    expect(await client.request('GET', '/audit', { query: { limit: 5, entity_type: 'alias', action: undefined } })).toBeUndefined();
    expect(urls).toEqual(['http://cp:8090/admin/v1/audit?limit=5&entity_type=alias']);
  });

  it.each([
    ['a timeout', new DOMException('The operation was aborted due to timeout', 'TimeoutError'), 'cannot reach http://cp:8090 (no answer within 1000 ms); check --url and that the service is running'],
    ['a refused connection', new TypeError('fetch failed', { cause: Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:8090'), { code: 'ECONNREFUSED' }) }), 'cannot reach http://cp:8090 (ECONNREFUSED); check --url and that the service is running'],
    ['a bad host', new TypeError('fetch failed', { cause: new Error('getaddrinfo ENOTFOUND cp') }), 'cannot reach http://cp:8090 (getaddrinfo ENOTFOUND cp); check --url and that the service is running'],
  ])('turns %s into an ApiError with status 0', async (_what, error, message) => {
    const client = createJsonClient({ baseUrl: 'http://cp:8090', credential: 'wa_x', timeoutMs: 1000, addressHint: '--url', fetch: failWith(error) });
    const e = await client.request('GET', '/tenants').catch((err: unknown) => err);
    expect(e).toBeInstanceOf(ApiError);
    expect(e).toMatchObject({ status: 0, code: 'unreachable', message });
  });

  it("keeps the server's code and param", async () => {
    const fetch: FetchFn = async () => new Response(JSON.stringify({ error: { message: 'Invalid body: name: expected a non-empty string.', type: 'invalid_request_error', param: 'name', code: 'invalid_request' } }), { status: 400 });
    const e = await createJsonClient({ baseUrl: 'http://cp', credential: 'wa_x', fetch }).request('POST', '/tenants', { body: {} }).catch((err: unknown) => err);
    expect(e).toMatchObject({ status: 400, code: 'invalid_request', param: 'name', message: 'Invalid body: name: expected a non-empty string.' });
  });
});
