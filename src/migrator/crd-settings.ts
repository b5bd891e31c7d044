import type { Config } from '../config/schema.js'
import type { MigrationSettings } from './context.js'
import { ALL_PHASES } from './plan.js'
import { resolveStashRules } from './phases/stashes/rules.js'
import { acceptedFieldsFor } from '../config/accept-entries.js'

/**
 * The settings of one CRD's migration: the global ones, overridden by its own entry, then by the run's overrides: what only
 * the command line asks for, one run at a time, never a config file's standing order (`migrate --force`: rewrite every
 * object whatever status.storedVersions says).
 */
export function settingsFor(config: Config, crdName: string, overrides: { force?: boolean } = {}): MigrationSettings {
  const m = config.migrator
  const own = m.crds[crdName]
  const skip = new Set([...m.skipPhases, ...(own?.skipPhases ?? [])])
  return {
    migratingAnnotation: config.annotations.migrating,
    phases: ALL_PHASES.filter((p) => !skip.has(p)),
    useStatusSubresource: own?.useStatusSubresource ?? false,
    concurrency: own?.concurrency ?? m.concurrency,
    qps: own?.qps ?? m.qps,
    pageSize: m.pageSize,
    maxAttempts: m.maxAttempts,
    progressIntervalMs: m.progressIntervalSeconds * 1000,
    rewriteServedManagedFields: m.rewriteServedManagedFields,
    takeoverAfterMs: m.takeoverAfterSeconds * 1000,
    conversionOutageLimitMs: m.conversionOutageLimitSeconds * 1000,
    storageSettleTimeoutMs: m.storageSwitchTimeoutSeconds * 1000,
    engine: own?.engine ?? m.engine,
    losslessCheck: m.losslessCheck,
    acceptedRemovals: acceptedFieldsFor(crdName, m.acceptRemovals),
    acceptedChanges: acceptedFieldsFor(crdName, m.acceptChanges),
    ...(m.acceptUnchecked.includes(crdName) ? { acceptUnchecked: true } : {}),
    ...(m.consentAnnotations ? { consentFromCrd: true } : {}),
    builtinStartTimeoutMs: m.builtinStartTimeoutSeconds * 1000,
    ...(m.apiServerEndpoints.length ? { apiServerEndpoints: m.apiServerEndpoints } : {}),
    ...(overrides.force ? { force: true } : {}),
    ...(m.stashPresets.length || m.stashes.length ? { stashes: resolveStashRules(m.stashPresets, m.stashes) } : {}),
  }
}
