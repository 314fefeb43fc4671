import { type ArmStats, DEFAULT_CANARY_THRESHOLDS, judgeCanary } from './canary-judge';

function arm(n: number, errors: number, p95: number | null, ttftN = n - errors): ArmStats {
  return { n, errors, error_rate: n === 0 ? 0 : errors / n, ttft_n: ttftN, p95_ttft_ms: p95 };
}

describe('judgeCanary (defaults: 50 requests, +5% errors, ×1.5 p95 TTFT)', () => {
  it.each([
    ['healthy', arm(100, 1, 120), arm(100, 1, 100), 'keep'],
    ['too little canary traffic, however bad', arm(49, 49, null, 0), arm(1000, 0, 100), 'keep'],
    ['too little stable traffic', arm(100, 50, 100), arm(49, 0, 100), 'keep'],
    ['error rate exactly +5% is tolerated', arm(100, 6, 100), arm(100, 1, 100), 'keep'],
    ['error rate +6%', arm(100, 7, 100), arm(100, 1, 100), 'error_rate'],
    ['p95 TTFT exactly ×1.5 is tolerated', arm(100, 0, 150), arm(100, 0, 100), 'keep'],
    ['p95 TTFT ×1.51', arm(100, 0, 151), arm(100, 0, 100), 'p95_ttft'],
    ['errors named first when both regress', arm(100, 20, 900), arm(100, 0, 100), 'error_rate'],
    ['TTFT rule needs first-token volume', arm(100, 5, 900, 40), arm(100, 0, 100), 'keep'],
    ['stable p95 of 0 ms compared as 1 ms', arm(100, 0, 2), arm(100, 0, 0), 'p95_ttft'],
    ['a better canary', arm(100, 0, 50), arm(100, 10, 100), 'keep'],
  ])('%s', (_name, canary, stable, expected) => {
    const verdict = judgeCanary(canary, stable, DEFAULT_CANARY_THRESHOLDS);
    expect(verdict.action === 'keep' ? 'keep' : verdict.trigger).toBe(expected);
  });

  it('says why in numbers', () => {
    const verdict = judgeCanary(arm(200, 30, 100), arm(200, 2, 100));
    expect(verdict).toEqual({ action: 'roll_back', trigger: 'error_rate', reason: 'error rate 15.0% vs stable 1.0% (+14.0% > +5.0% allowed) over 200 / 200 requests' });
    const slow = judgeCanary(arm(60, 0, 400), arm(60, 0, 100), { minRequests: 10, errorRateDelta: 0.05, p95TtftRatio: 2 });
    expect(slow).toEqual({ action: 'roll_back', trigger: 'p95_ttft', reason: 'p95 TTFT 400 ms vs stable 100 ms (more than ×2) over 60 / 60 first tokens' });
  });

  it('reports not enough traffic distinctly from healthy', () => {
    expect(judgeCanary(arm(10, 0, 1), arm(10, 0, 1))).toEqual({ action: 'keep', why: 'not_enough_traffic' });
    expect(judgeCanary(arm(50, 0, 1), arm(50, 0, 1))).toEqual({ action: 'keep', why: 'healthy' });
  });
});
