/** The chaos proof (issue 13, item 8): the harness the CLI (`tools/chaos/run.ts`) and the e2e suite run. */
export { runChaos, formatChaosReport, type ChaosRunResult } from './run';
export { planChaos, chaosConfigYaml, type ChaosPlan, type ChaosRunOptions, type ChaosTopologyKind, type PlannedRequest, type PlannedFault } from './plan';
export { checkChaos, INVARIANTS, type ChaosEvidence, type ChaosVerdict, type InvariantName, type InvariantResult, type Violation } from './checks';
export type { RequestRecord, AttemptRecord } from './client';
