import { createReplicaProber } from './replica-prober';

describe('createReplicaProber', () => {
  it('ejects after consecutive failures (refused or timed out) and restores on one success', async () => {
    const answers = new Map<string, 'ok' | 'refuse' | 'hang'>([
      ['a', 'ok'],
      ['b', 'ok'],
    ]);
    const changes: string[] = [];
    const prober = createReplicaProber({
      replicaIds: ['a', 'b'],
      intervalMs: 60_000,
      startupGraceMs: 0,
      timeoutMs: 30,
      failuresToEject: 2,
      probe: async (id) => {
        const a = answers.get(id);
        if (a === 'refuse') throw new Error('ECONNREFUSED');
        if (a === 'hang') return new Promise<boolean>(() => undefined);
        return true;
      },
      onChange: (id, healthy, reason) => changes.push(`${id}:${healthy}:${reason}`),
    });
    try {
      answers.set('a', 'refuse');
      answers.set('b', 'hang');
      await prober.probeAll();
      expect(changes).toEqual([]); // one failure is not enough
      await prober.probeAll();
      expect(changes.sort()).toEqual(['a:false:probe_error', 'b:false:probe_timeout']);
      await prober.probeAll();
      expect(changes).toHaveLength(2); // reported once per change
      answers.set('a', 'ok');
      await prober.probeAll();
      expect(changes).toContain('a:true:recovered');
    } finally {
      prober.stop();
    }
  });

  it('reports recovery of a replica another component marked unhealthy', async () => {
    const changes: string[] = [];
    const prober = createReplicaProber({ replicaIds: ['a'], intervalMs: 60_000, probe: async () => true, onChange: (id, healthy) => changes.push(`${id}:${healthy}`) });
    try {
      prober.markUnhealthy('a');
      await prober.probeAll();
      expect(changes).toEqual(['a:true']);
    } finally {
      prober.stop();
    }
  });

  it('does not eject a replica that is still starting up (never answered, within the grace)', async () => {
    let t = 0;
    let up = false;
    const changes: string[] = [];
    const prober = createReplicaProber({
      replicaIds: ['a'],
      intervalMs: 60_000,
      startupGraceMs: 10_000,
      now: () => t,
      probe: async () => up,
      onChange: (id, healthy) => changes.push(`${id}:${healthy}`),
    });
    try {
      for (let i = 0; i < 5; i++) await prober.probeAll();
      expect(changes).toEqual([]);
      up = true;
      await prober.probeAll();
      up = false;
      for (let i = 0; i < 3; i++) await prober.probeAll();
      expect(changes).toEqual(['a:false']); // once it has answered, failures count at once
      t = 20_000;
      expect(changes).toHaveLength(1);
    } finally {
      prober.stop();
    }
  });
});
