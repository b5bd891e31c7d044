/** How a migration's result is put into words: the summary and the counts annotation. */
import type { MigrationResult } from './context.js'

export function countsText(result: MigrationResult): string {
  const parts: string[] = []
  if (result.storage) {
    const c = result.storage.counts
    parts.push(`rewritten=${c.rewritten + c.conflict}`, `alreadyCurrent=${c.current}`, `gone=${c.gone}`, `failed=${c.failed}`)
    if (c.resumed) parts.push(`resumed=${c.resumed}`)
    if (result.storage.conversionRefused) parts.push(`conversionRefused=${result.storage.conversionRefused}`)
  }
  if (result.builtin) parts.push(`builtinMigration=${result.builtin.name}`)
  if (result.stashes) {
    const c = result.stashes.counts
    parts.push(`stashesMigrated=${c.migrated}`, `stashesCurrent=${c.current}`, `stashesFailed=${c.failed}`)
  }
  if (result.cleanup)
    parts.push(
      `managedFieldsCleaned=${result.cleanup.counts.rewritten}`,
      `managedFieldsEntriesRemoved=${result.cleanup.entriesRemoved}`,
      ...(result.cleanup.entriesRelabelled ? [`managedFieldsEntriesRelabelled=${result.cleanup.entriesRelabelled}`] : []),
      `cleanupFailed=${result.cleanup.counts.failed}`,
      ...(result.cleanup.staleWrites ? [`cleanupRetriedAfterConcurrentWrite=${result.cleanup.staleWrites}`] : []),
    )
  if (result.conversion?.outages) parts.push(`conversionOutages=${result.conversion.outages}`)
  return parts.join(' ')
}

/**
 * The next step when the cleanup left managedFields entries of a served old version (by
 * design: users may still apply with it), one clause per version; what `check --drop`
 * counts against dropping it. Empty when there are none.
 */
export function servedKeptSteps(result: { cleanup?: { servedKept?: Record<string, number> | undefined } | undefined }): string[] {
  return Object.entries(result.cleanup?.servedKept ?? {}).map(
    ([v, n]) =>
      `${n} object${n === 1 ? ' keeps' : 's keep'} managedFields entries of ${v}, which is still served (left by design; check --drop ${v} counts them): to drop ${v}, set served: false on it, then run migrate again`,
  )
}

export function summarize(result: MigrationResult): string {
  const parts: string[] = []
  if (result.storage)
    parts.push(
      `${result.storage.counts.seen} object(s) rewritten in ${result.storageVersion}, storedVersions ${JSON.stringify(result.storedVersionsAfter)}`,
    )
  if (result.builtin)
    parts.push(
      `objects rewritten in ${result.storageVersion} by the built-in StorageVersionMigration ${result.builtin.name} in ${(result.builtin.durationMs / 1000).toFixed(1)}s, storedVersions ${JSON.stringify(result.storedVersionsAfter)}`,
    )
  if (result.stashes)
    parts.push(
      `${result.stashes.counts.migrated} stashed cop${result.stashes.counts.migrated === 1 ? 'y' : 'ies'} moved to ${result.storageVersion}`,
    )
  if (result.cleanup) {
    const { entriesRemoved: removed, entriesRelabelled: relabelled } = result.cleanup
    parts.push(
      `${removed} managedFields entr${removed === 1 ? 'y' : 'ies'} of unserved versions removed${relabelled ? `, ${relabelled} relabelled to ${result.storageVersion}` : ''} from ${result.cleanup.counts.rewritten} object(s)`,
    )
  }
  return parts.join('; ') || 'nothing to do'
}
