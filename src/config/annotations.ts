/** Names for defaults declared in config/schema.ts; the fixed keys of our own prefix are in state/crd-state.ts. */
import { CONFIG_DEFAULTS } from './schema.js'

/** KEP-2855's migrating annotation (annotations.migrating). */
export const DEFAULT_MIGRATING_ANNOTATION: string = CONFIG_DEFAULTS.annotations.migrating
export const DEFAULT_MANAGED_SELECTOR: string = CONFIG_DEFAULTS.migrator.selector.labelSelector

export const DEFAULT_MIGRATOR_USERS: readonly string[] = CONFIG_DEFAULTS.identities.migratorUsers
export const DEFAULT_BREAK_GLASS_GROUPS: readonly string[] = CONFIG_DEFAULTS.identities.breakGlassGroups
/** kube-controller-manager's identities, which may change a CRD's StorageMigrating condition. */
export const DEFAULT_BUILTIN_MIGRATOR_USERS: readonly string[] = CONFIG_DEFAULTS.identities.builtinMigratorUsers
