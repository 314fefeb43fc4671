import { describeTopicContract } from '@weir/testing';
import { createInProcessTopic } from './in-process-topic';

describeTopicContract('in-process', () => {
  const topic = createInProcessTopic<{ n: number; id: string }>();
  return { publisher: topic, subscriber: topic };
}, (i) => ({ n: i, id: `m${i}` }));

describe('createInProcessTopic', () => {
  it('delivers synchronously, before publish returns', () => {
    const topic = createInProcessTopic<number>();
    const got: number[] = [];
    topic.subscribe((m) => got.push(m));
    topic.publish(1);
    expect(got).toEqual([1]);
  });

  it('reports a throwing handler to onHandlerError and goes on', () => {
    const errors: unknown[] = [];
    const topic = createInProcessTopic<number>({ onHandlerError: (e) => errors.push(e) });
    const got: number[] = [];
    topic.subscribe(() => {
      throw new Error('boom');
    });
    topic.subscribe((m) => got.push(m));
    topic.publish(7);
    expect(got).toEqual([7]);
    expect(errors).toHaveLength(1);
    expect((errors[0] as Error).message).toBe('boom');
  });

  it('applies (un)subscribes made during a publish from the next publish', () => {
    const topic = createInProcessTopic<number>();
    const late: number[] = [];
    let unsubscribeSelf: () => void = () => undefined;
    const self: number[] = [];
    unsubscribeSelf = topic.subscribe((m) => {
      self.push(m);
      unsubscribeSelf();
      topic.subscribe((x) => late.push(x));
    });
    topic.publish(1);
    topic.publish(2);
    expect(self).toEqual([1]);
    expect(late).toEqual([2]);
  });

  it('treats the same function subscribed twice as two subscriptions', () => {
    const topic = createInProcessTopic<number>();
    const got: number[] = [];
    const handler = (m: number) => got.push(m);
    const off1 = topic.subscribe(handler);
    topic.subscribe(handler);
    topic.publish(1);
    off1();
    topic.publish(2);
    expect(got).toEqual([1, 1, 2]);
  });
});
