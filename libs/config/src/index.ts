export { ConfigError, isConfigError, type ConfigProblem } from './config-error';
export { MAX_ALIAS_TARGET_WEIGHT } from './config-schema';
export { parseConfig, loadConfigFile, type ParseConfigOptions } from './parse-config';
export {
  defaultConfig,
  STORIES260K_SHA256,
  STORIES260K_SIZE_BYTES,
  STORIES260K_URL,
  type DefaultConfigOptions,
} from './default-config';
export {
  resolveModelFile,
  sha256OfFile,
  type ModelFileLogger,
  type ModelFileSource,
  type ResolveModelFileOptions,
  type ResolveModelFileResult,
} from './resolve-model-file';
export { loadAllInOneEnv, LOG_LEVELS, type AllInOneEnv, type LogLevel } from './all-in-one-env';
export { replicaPlacement, servingReplicas, type ReplicaPlacement } from './serving-replicas';
export { nonRoutingChanges, watchConfigFile, type ConfigWatcher, type WatchConfigOptions } from './watch-config';
export {
  addressAllowed,
  createGuardedLookup,
  credentialEnvProblem,
  DEFAULT_CREDENTIAL_ENV_ALLOW,
  DEFAULT_CREDENTIAL_HOSTS,
  DEFAULT_MODEL_DOWNLOAD_HOSTS,
  DEFAULT_MODEL_DOWNLOAD_MAX_BYTES,
  DEFAULT_UPSTREAM_HOSTS,
  EgressRefusedError,
  egressConfigProblems,
  egressPolicyFromEnv,
  hostAllowed,
  METADATA_NAMES,
  METADATA_RANGES,
  modelDownloadHostProblem,
  modelPathProblem,
  newModelPathProblems,
  parseHostRule,
  processEgressPolicy,
  upstreamEgressProblem,
  type EgressPolicy,
  type HostRule,
  type LookupFunction,
} from './egress-policy';
