import path from 'node:path';
/**
 * The configuration file's shapes as the control plane stores them: plain snake_case JSON
 * objects, exactly as a configuration file writes them (defaults not filled in, so a newer
 * data plane applies its own defaults). `@weir/config`'s `parseConfig` is the one validator.
 */

/** A JSON object. */
export type JsonObject = Record<string, unknown>;

/** A configuration-file object as composed from the store: what a snapshot's `body.config` holds. */
export interface ConfigFileObject {
  revisions: JsonObject[];
  aliases: JsonObject[];
  tenants: JsonObject[];
  /** Named PII redaction profiles (present when there is one). */
  redaction_profiles?: Record<string, JsonObject>;
  defaults: JsonObject;
}

/** The file's id syntax (`config-schema.ts`): 1 to 128 letters, digits or . _ : @ / -, starting with a letter or digit. */
export const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$/;

/** True for a non-null, non-array object. */
export function isJsonObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A YAML section as a list of objects (an empty section, `null`, is none). */
export function listSection(value: unknown): JsonObject[] {
  return Array.isArray(value) ? value.filter(isJsonObject) : [];
}

/** Drops keys whose value is null (YAML's empty sections). */
export function stripNulls(o: JsonObject): JsonObject {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== null));
}

/** The revision with a relative `engine.model_path` made absolute against `baseDir` (the config file's folder). */
export function absoluteModelPath(revision: JsonObject, baseDir: string): JsonObject {
  const engine = revision.engine;
  if (!isJsonObject(engine) || typeof engine.model_path !== 'string' || path.isAbsolute(engine.model_path)) return revision;
  return { ...revision, engine: { ...engine, model_path: path.resolve(baseDir, engine.model_path) } };
}
