import { natsNames } from './namespace';

describe('natsNames', () => {
  it('keeps the historical names for the default namespace', () => {
    expect(natsNames()).toEqual({
      usageStream: 'WEIR_USAGE',
      usageSubjectPrefix: 'weir.usage',
      ledgerDurable: 'weir-ledger',
      cancelSubject: 'weir.cancel',
      healthSubject: 'weir.health',
      burnRateAlertSubject: 'weir.alerts.burn_rate',
    });
  });
  it('separates deployments', () => {
    expect(natsNames('team-b')).toEqual({
      usageStream: 'TEAM_B_USAGE',
      usageSubjectPrefix: 'team-b.usage',
      ledgerDurable: 'team-b-ledger',
      cancelSubject: 'team-b.cancel',
      healthSubject: 'team-b.health',
      burnRateAlertSubject: 'team-b.alerts.burn_rate',
    });
  });
  it.each(['', 'UPPER', 'a.b', 'a b', 'x'.repeat(33)])('refuses %j', (ns) => {
    expect(() => natsNames(ns)).toThrow(/WEIR_NATS_NAMESPACE/);
  });
});
