import type { Topic } from '@weir/core';
import { waitUntil } from './usage-records';

/** What {@link describeTopicContract} needs for one test: two handles on the same topic. */
export interface TopicFixture<T> {
  /** The handle messages are published on. */
  publisher: Topic<T>;
  /**
   * A second handle on the same topic: another connection (another process, in effect) for a
   * network topic, the same object in-process.
   */
  subscriber: Topic<T>;
  /**
   * Resolves once subscriptions and publishes made so far have reached the broker (flush both
   * connections); in-process, omit it.
   */
  settle?: () => Promise<void>;
  /** Releases connections and anything else the fixture created. */
  cleanup?: () => Promise<void>;
}

/**
 * The contract every {@link Topic} implementation passes (a jest `describe` block):
 * - every subscriber, on either handle, receives every message published after it subscribed,
 *   in publish order, structurally equal to what was published;
 * - messages published before a subscription are not delivered to it;
 * - after unsubscribe (idempotent) nothing more is delivered; other subscriptions go on;
 * - a handler that throws neither stops other subscribers nor its own later messages;
 * - publishing with no subscriber does not throw.
 * @param make creates a fresh fixture per test.
 * @param sample the i-th distinct message (i = 0, 1, …).
 */
export function describeTopicContract<T>(name: string, make: () => Promise<TopicFixture<T>> | TopicFixture<T>, sample: (i: number) => T): void {
  describe(`Topic contract: ${name}`, () => {
    let fx: TopicFixture<T>;
    const settle = () => fx.settle?.() ?? Promise.resolve();

    beforeEach(async () => {
      fx = await make();
    });
    afterEach(async () => {
      await fx.cleanup?.();
    });

    it('fans every message out to every subscriber, in order and intact', async () => {
      const a: T[] = [];
      const b: T[] = [];
      fx.subscriber.subscribe((m) => a.push(m));
      fx.publisher.subscribe((m) => b.push(m));
      await settle();
      const sent = Array.from({ length: 20 }, (_, i) => sample(i));
      for (const m of sent) fx.publisher.publish(m);
      await settle();
      await waitUntil(() => a.length >= sent.length && b.length >= sent.length, 5_000, 'all messages delivered');
      expect(a).toEqual(sent);
      expect(b).toEqual(sent);
    });

    it('does not deliver messages published before the subscription', async () => {
      fx.publisher.publish(sample(0));
      await settle();
      const got: T[] = [];
      fx.subscriber.subscribe((m) => got.push(m));
      await settle();
      fx.publisher.publish(sample(1));
      await settle();
      await waitUntil(() => got.length >= 1, 5_000, 'the later message delivered');
      expect(got).toEqual([sample(1)]);
    });

    it('stops delivering after unsubscribe, and only to that subscription', async () => {
      const gone: T[] = [];
      const kept: T[] = [];
      const unsubscribe = fx.subscriber.subscribe((m) => gone.push(m));
      fx.subscriber.subscribe((m) => kept.push(m));
      await settle();
      fx.publisher.publish(sample(0));
      await settle();
      await waitUntil(() => gone.length === 1 && kept.length === 1, 5_000, 'first message delivered');
      unsubscribe();
      unsubscribe();
      await settle();
      fx.publisher.publish(sample(1));
      await settle();
      await waitUntil(() => kept.length === 2, 5_000, 'second message delivered to the remaining subscriber');
      expect(gone).toEqual([sample(0)]);
      expect(kept).toEqual([sample(0), sample(1)]);
    });

    it('isolates a throwing handler', async () => {
      let thrown = 0;
      const got: T[] = [];
      fx.subscriber.subscribe(() => {
        thrown++;
        throw new Error('handler fault (expected by the test)');
      });
      fx.subscriber.subscribe((m) => got.push(m));
      await settle();
      fx.publisher.publish(sample(0));
      fx.publisher.publish(sample(1));
      await settle();
      await waitUntil(() => got.length === 2 && thrown === 2, 5_000, 'both messages delivered to both handlers');
      expect(got).toEqual([sample(0), sample(1)]);
    });

    it('publishes with no subscriber without throwing', async () => {
      expect(() => fx.publisher.publish(sample(0))).not.toThrow();
      await settle();
    });
  });
}
