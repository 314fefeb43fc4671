import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import express, { type NextFunction, type Request, type Response } from 'express';
import { createCapacityController, type PoolTelemetrySample } from '@weir/capacity';
import { adminErrorResponse } from './admin-error';
import { createCapacityRouter } from './capacity-routes';

const T0 = Date.UTC(2025, 0, 1);

const sample = (pool: string, over: Partial<PoolTelemetrySample> = {}): PoolTelemetrySample => ({
  pool,
  source: 'scheduler-1',
  at: T0,
  queuedRequests: 30,
  queuedOutputTokens: 15_000,
  runningRequests: 2,
  replicas: 2,
  healthyReplicas: 2,
  admittedRequestsTotal: 0,
  completedRequestsTotal: 0,
  outputTokensTotal: 0,
  inputTokensTotal: 0,
  busyReplicaSecondsTotal: 0,
  ...over,
});

describe('capacity routes', () => {
  let server: Server;
  let base: string;
  let now = T0;
  const clock = { now: () => now };
  const controller = createCapacityController({ clock, replicaTokensPerSecondHint: 500 });

  beforeAll(async () => {
    // Mounted as the admin router mounts it: under /admin/v1, its errors going to the admin error handler.
    const app = express();
    const admin = express.Router();
    admin.use(createCapacityRouter({ capacity: controller, clock }));
    admin.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
      const mapped = adminErrorResponse(err);
      res.status(mapped.status).json(mapped.body);
    });
    app.use('/admin/v1', admin);
    server = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/admin/v1`;
  });
  afterAll(async () => {
    await new Promise((resolve) => server.close(resolve));
  });

  it('lists no pools before any telemetry, then every pool by name', async () => {
    expect(await (await fetch(`${base}/capacity`)).json()).toEqual({ data: [] });
    controller.ingest(sample('interactive'));
    controller.ingest(sample('acme/dedicated', { queuedRequests: 0, queuedOutputTokens: 0, replicas: 1, healthyReplicas: 1 }));
    now = T0 + 4_000;
    const res = await fetch(`${base}/capacity`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { data: Array<Record<string, unknown>> };
    expect(body.data.map((d) => d.pool)).toEqual(['acme/dedicated', 'interactive']);
    // 15,000 queued tokens / 30 s = 500 tokens/s at 500 × 0.7 → 2, + 1.
    expect(body.data[1]).toMatchObject({
      pool: 'interactive',
      desired_replicas: 3,
      recommended_replicas: 3,
      current_replicas: 2,
      healthy_replicas: 2,
      demand_tokens_per_second: 500,
      backlog_tokens_per_second: 500,
      replica_tokens_per_second: 500,
      basis: 'hint',
      at: new Date(T0).toISOString(),
      telemetry_at: new Date(T0).toISOString(),
      telemetry_age_ms: 4_000,
    });
    expect(body.data[1].lines).toEqual(controller.decision('interactive')?.lines);
  });

  it('shows one pool, a name with a slash raw or escaped', async () => {
    const one = await fetch(`${base}/capacity/interactive`);
    expect(one.status).toBe(200);
    expect(await one.json()).toMatchObject({ pool: 'interactive', desired_replicas: 3 });
    for (const path of ['acme/dedicated', 'acme%2Fdedicated']) {
      const res = await fetch(`${base}/capacity/${path}`);
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({ pool: 'acme/dedicated', desired_replicas: 1, current_replicas: 1 });
    }
  });

  it('answers 404 not_found for a pool without telemetry', async () => {
    const res = await fetch(`${base}/capacity/gpu-xl`);
    expect(res.status).toBe(404);
    const body = (await res.json()) as { error: { code: string; type: string; message: string } };
    expect(body.error).toMatchObject({ code: 'not_found', type: 'not_found_error' });
    expect(body.error.message).toContain('"gpu-xl"');
  });
});
