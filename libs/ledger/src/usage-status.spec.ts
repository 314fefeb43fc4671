import { usageStatusFor } from './usage-status';

describe('usageStatusFor', () => {
  it.each([
    ['stop', 'completed'],
    ['length', 'completed'],
    ['cancelled', 'cancelled'],
    ['deadline', 'deadline'],
    ['error', 'failed'],
    ['content_filter', 'filtered'],
    ['tool_calls', 'completed'],
  ] as const)('%s → %s', (reason, status) => {
    expect(usageStatusFor(reason)).toBe(status);
  });
});
