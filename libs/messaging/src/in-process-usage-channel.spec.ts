import type { UsageRecord } from '@weir/core';
import { buildUsageRecord, describeUsageChannelContract, waitUntil } from '@weir/testing';
import { createInProcessUsageChannel } from './in-process-usage-channel';

describeUsageChannelContract('in-process', async () => {
  const { sink, source } = createInProcessUsageChannel({ retryBaseMs: 10, retryMaxMs: 50 });
  return { sink, source, cleanup: () => source.stop({ timeoutMs: 1_000 }) };
});

describe('createInProcessUsageChannel', () => {
  it('never calls the handler synchronously from record()', async () => {
    const { sink, source } = createInProcessUsageChannel();
    const got: UsageRecord[] = [];
    await source.start(async (batch) => {
      got.push(...batch);
    });
    sink.record(buildUsageRecord(1));
    expect(got).toHaveLength(0);
    await sink.flush();
    expect(got).toHaveLength(1);
    await source.stop();
  });

  it('delivers in batches of at most batchSize, one at a time', async () => {
    const { sink, source } = createInProcessUsageChannel({ batchSize: 4 });
    const sizes: number[] = [];
    let concurrent = 0;
    let maxConcurrent = 0;
    await source.start(async (batch) => {
      concurrent++;
      maxConcurrent = Math.max(maxConcurrent, concurrent);
      sizes.push(batch.length);
      await new Promise((resolve) => setTimeout(resolve, 1));
      concurrent--;
    });
    for (let i = 0; i < 10; i++) sink.record(buildUsageRecord(i));
    await sink.flush();
    expect(sizes).toEqual([4, 4, 2]);
    expect(maxConcurrent).toBe(1);
    await source.stop();
  });

  it('reports saturation at capacity but keeps every record', async () => {
    const { sink, source } = createInProcessUsageChannel({ capacity: 3 });
    for (let i = 0; i < 5; i++) sink.record(buildUsageRecord(i));
    expect(sink.pending()).toBe(5);
    expect(sink.saturated()).toBe(true);
    const got: UsageRecord[] = [];
    await source.start(async (batch) => {
      got.push(...batch);
    });
    await sink.flush();
    expect(got).toHaveLength(5);
    expect(sink.saturated()).toBe(false);
    expect(sink.pending()).toBe(0);
    await source.stop();
  });

  it('backs off between redeliveries (exponential, from retryBaseMs)', async () => {
    const { sink, source } = createInProcessUsageChannel({ retryBaseMs: 20, retryMaxMs: 1_000 }, { random: () => 0.999999 });
    const times: number[] = [];
    await source.start(async () => {
      times.push(Date.now());
      if (times.length < 4) throw new Error('down');
    });
    sink.record(buildUsageRecord(1));
    await sink.flush();
    const gaps = times.slice(1).map((t, i) => t - times[i]);
    // 20, 40, 80 ms (timer granularity allows a few ms early/late)
    expect(gaps[0]).toBeGreaterThanOrEqual(15);
    expect(gaps[1]).toBeGreaterThanOrEqual(35);
    expect(gaps[2]).toBeGreaterThanOrEqual(75);
    await source.stop();
  });

  it('stop drains what was recorded before it; a timed-out stop keeps the rest queued', async () => {
    const { sink, source } = createInProcessUsageChannel({ retryBaseMs: 10, retryMaxMs: 10 });
    let fail = true;
    const got: UsageRecord[] = [];
    await source.start(async (batch) => {
      if (fail) throw new Error('down');
      got.push(...batch);
    });
    sink.record(buildUsageRecord(1));
    await source.stop({ timeoutMs: 50 });
    expect(got).toHaveLength(0);
    expect(sink.pending()).toBe(1);
    fail = false;
    await source.start(async (batch) => {
      got.push(...batch);
    });
    sink.record(buildUsageRecord(2));
    await source.stop();
    expect(got.map((r) => r.generationId)).toEqual([buildUsageRecord(1).generationId, buildUsageRecord(2).generationId]);
    expect(sink.pending()).toBe(0);
  });

  it('refuses a second start while started', async () => {
    const { source } = createInProcessUsageChannel();
    await source.start(async () => undefined);
    await expect(source.start(async () => undefined)).rejects.toThrow(/already started/);
    await source.stop();
  });

  it('keeps records recorded after stop for the next start', async () => {
    const { sink, source } = createInProcessUsageChannel();
    await source.start(async () => undefined);
    await source.stop();
    sink.record(buildUsageRecord(1));
    const flushed = sink.flush();
    const got: UsageRecord[] = [];
    await source.start(async (batch) => {
      got.push(...batch);
    });
    await flushed;
    await waitUntil(() => got.length === 1);
    await source.stop();
  });
});
