/**
 * Names for the defaults of the configurable annotation key, selector and identities.
 * They are declared in the config schema (config/schema.ts), like every other default;
 * these constants are read from it, for code that needs a default without a Config. The
 * keys crd-migrator writes under its own prefix are not configurable: see
 * state/crd-state.ts.
 */
import { CONFIG_DEFAULTS } from './schema.js'

/** KEP-2855's migrating annotation (annotations.migrating). */
export const DEFAULT_MIGRATING_ANNOTATION: string = CONFIG_DEFAULTS.annotations.migrating
/** The default selector of managed CRDs: a label users add to opt a CRD in. */
export const DEFAULT_MANAGED_SELECTOR: string = CONFIG_DEFAULTS.migrator.selector.labelSelector

/** Default identity of the migrator: the ServiceAccount the Helm chart deploys. */
export const DEFAULT_MIGRATOR_USERS: readonly string[] = CONFIG_DEFAULTS.identities.migratorUsers
export const DEFAULT_BREAK_GLASS_GROUPS: readonly string[] = CONFIG_DEFAULTS.identities.breakGlassGroups
/** kube-controller-manager's identities, which may change a CRD's StorageMigrating condition. */
export const DEFAULT_BUILTIN_MIGRATOR_USERS: readonly string[] = CONFIG_DEFAULTS.identities.builtinMigratorUsers
