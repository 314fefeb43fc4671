/**
 * What the control plane does with `WEIR_CONFIG` on start ({@link applyConfigFileAtStart}),
 * chosen by `WEIR_CONFIG_IMPORT` ({@link ConfigImportMode}).
 */
import { CONFIG_FILE_ACTOR, importConfigFile, seedFromConfigFile, type ControlPlane } from '@weir/control-plane';
import { EnvError } from '@weir/service-runtime';
import type { WeirLogger } from '@weir/telemetry';

/**
 * `WEIR_CONFIG_IMPORT`: how `WEIR_CONFIG` meets a store that already holds configuration.
 * - `empty` (default): the file seeds an empty store only; afterwards the store is the source of
 *   truth and the file is ignored.
 * - `placement`: as `empty`, and on every later start the `replicas` of each revision the store
 *   and the file both list are taken from the file (where revisions are served, e.g. engines
 *   started on new ports); nothing else is touched. The split launcher uses it.
 * - `always`: as `empty`, and on every later start the whole file replaces the stored
 *   configuration when it differs (tenants, apps, aliases, defaults; revisions only in their
 *   replicas and deprecation, see `importConfig`), as the all-in-one does with an edited file:
 *   admin-API changes to what the file covers are overwritten.
 * Every import is one change by actor `config-file` (audited, a new snapshot), or nothing when
 * the store already matches.
 */
export type ConfigImportMode = 'empty' | 'placement' | 'always';

const MODES: readonly ConfigImportMode[] = ['empty', 'placement', 'always'];

/**
 * Reads `WEIR_CONFIG_IMPORT`'s value.
 * @throws EnvError for anything but `empty`, `placement` or `always`.
 */
export function parseConfigImportMode(value: string): ConfigImportMode {
  const mode = MODES.find((m) => m === value.trim().toLowerCase());
  if (!mode) throw new EnvError([`WEIR_CONFIG_IMPORT: expected one of ${MODES.join(', ')} (got ${JSON.stringify(value)})`]);
  return mode;
}

/**
 * Seeds an empty store from `filePath`; on a store that is not empty, imports it as `mode` says
 * (see {@link ConfigImportMode}). Call it before `republishLatest`: an import publishes its own
 * snapshot.
 * @throws ConfigError when the file cannot be read or is invalid; InvalidChangeError when the
 *   composed configuration would be invalid; WeirError `conflict` when (`always`) the file changes
 *   a stored revision in more than its replicas or deprecation, or moves an app between tenants.
 *   Nothing is written when it throws: the service should not start on a file it was told to apply.
 */
export async function applyConfigFileAtStart(controlPlane: ControlPlane, filePath: string, mode: ConfigImportMode, logger: WeirLogger): Promise<void> {
  const seeded = await seedFromConfigFile(controlPlane.db, filePath);
  if (seeded.seeded) {
    logger.info({ version: seeded.version, revisions: seeded.revisions, aliases: seeded.aliases, tenants: seeded.tenants }, 'store seeded from WEIR_CONFIG');
    return;
  }
  if (mode === 'empty') {
    logger.info({ mode }, 'store not empty; WEIR_CONFIG not imported (WEIR_CONFIG_IMPORT=empty)');
    return;
  }
  const result = await importConfigFile(controlPlane, filePath, CONFIG_FILE_ACTOR, { scope: mode === 'placement' ? 'placement' : 'all' });
  if (result.imported) logger.info({ mode, version: result.version }, 'WEIR_CONFIG imported over the stored configuration');
  else logger.info({ mode }, 'WEIR_CONFIG matches the stored configuration; nothing imported');
}
