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
  defaults: JsonObject;
}

/** The file's id syntax (`config-schema.ts`): 1 to 128 letters, digits or . _ : @ / -, starting with a letter or digit. */
export const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$/;

/** True for a non-null, non-array object. */
export function isJsonObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
