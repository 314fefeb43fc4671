/** The control plane's store, admin API and snapshot composition (issue 7). */
export {
  createControlPlane,
  SNAPSHOT_SCHEMA_VERSION,
  type Actor,
  type AppliedChange,
  type ChangeDescription,
  type CommittedChange,
  type ControlPlane,
  type ControlPlaneDeps,
  type ControlPlaneLogger,
  type ControlPlaneOptions,
  type RevocationRequest,
} from './control-plane';
export { composeConfig } from './compose-config';
export type { ConfigFileObject, JsonObject } from './config-shapes';
export { seedFromConfigFile, SEED_ACTOR, type SeedResult } from './seed';
export {
  createInMemorySnapshotSink,
  type InMemorySnapshotSink,
  type RevocationToPublish,
  type SnapshotSink,
  type SnapshotToPublish,
} from './snapshot-sink';
export { adminTokenPrefix, checkSuppliedAdminToken, hashAdminToken, mintAdminToken, type AdminRole, type MintedAdminToken } from './admin-token';
export { authenticateAdmin, registerBootstrapAdminToken, type AuthenticatedAdmin, type BootstrapAdminResult } from './admin-auth';
export { InvalidChangeError, adminErrorResponse, type AdminErrorBody } from './admin-error';
export { type AdminAuthFailures, createAdminRouter, type AdminRouterDeps, type AdminRouterOptions } from './admin-router';
export { createControlPlaneHttpApp, type ControlPlaneHttpDeps } from './http-app';
export { CONFIG_FILE_ACTOR, importConfig, importConfigFile, readConfigFileObject, type ImportConfigOptions, type ImportResult } from './import-config';
export { FIRST_ADMIN_TOKEN_ACTOR, mintFirstAdminToken } from './first-admin-token';
export { AUTO_ROLLBACK_ACTION, rollbackCanaryArm } from './routes/models';
export {
  capacityDecisionView,
  createCapacityRouter,
  registerCapacityRoutes,
  type CapacityDecisionSource,
  type CapacityDecisionView,
  type CapacityRoutesDeps,
} from './capacity-routes';
export * from './eval';
export { actorOf, type AdminCaller, type AdminRequest } from './routes/context';
export {
  createDeprecationAnnouncer,
  DEPRECATION_ANNOUNCED_ACTION,
  DEPRECATION_ANNOUNCER_ACTOR,
  dueAnnouncements,
  type DeprecationAnnouncement,
  type DeprecationAnnouncer,
  type DeprecationAnnouncerOptions,
  type DeprecationReach,
} from './deprecation-announcer';
