/** How a migration's result is put into words: the summary and the counts annotation. */
import type { MigrationResult } from './context.js'
import { tenthsOfSeconds } from '../duration.js'

export function countsText(result: MigrationResult): string {
  const parts: string[] = []
  if (result.storage) {
    const c = result.storage.counts
    // The same words and numbers as the summary (summarize) and `migrate`'s detail line.
    parts.push(`rewritten=${c.rewritten}`, `alreadyCurrent=${c.current}`)
    if (c.conflict) parts.push(`writtenByOthers=${c.conflict}`)
    parts.push(`gone=${c.gone}`, `failed=${c.failed}`)
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
  const l = result.lossless
  if (l?.accepted) parts.push(`losslessAccepted=${l.accepted}`)
  if (l?.bookkeeping) parts.push(`losslessBookkeeping=${l.bookkeeping}`)
  if (l?.unchecked) parts.push(`losslessUnchecked=${l.unchecked}`)
  return parts.join(' ')
}

/** One clause per served old version whose managedFields entries the cleanup left (by design), with the next step; what `check --drop` counts. */
export function servedKeptSteps(kept: Record<string, { objects: number; entries?: number }> | undefined): string[] {
  return Object.entries(kept ?? {}).map(([v, { entries, objects }]) => {
    const what = entries === undefined ? 'managedFields entries' : `${entries} managedFields entr${entries === 1 ? 'y' : 'ies'}`
    return `${objects} object${objects === 1 ? ' keeps' : 's keep'} ${what} of ${v}, which is still served (left by design; check --drop ${v} counts them): to drop ${v}, set served: false on it, then run migrate again`
  })
}

export function summarize(result: MigrationResult): string {
  const parts: string[] = []
  if (result.storage) {
    // The words and numbers of last-counts (countsText) and of `migrate`'s detail line.
    const c = result.storage.counts
    const also = [
      c.conflict ? `${c.conflict} written by others meanwhile` : '',
      c.gone ? `${c.gone} deleted meanwhile` : '',
      c.failed ? `${c.failed} failed` : '',
      c.resumed ? `${c.resumed} done by an earlier run` : '',
    ].filter(Boolean)
    parts.push(
      `${c.rewritten} of ${c.seen} object(s) rewritten in ${result.storageVersion}, ${c.current} already current${also.map((a) => `, ${a}`).join('')}, storedVersions ${JSON.stringify(result.storedVersionsAfter)}`,
    )
  }
  if (result.builtin)
    parts.push(
      `objects rewritten in ${result.storageVersion} by the built-in StorageVersionMigration ${result.builtin.name} in ${tenthsOfSeconds(result.builtin.durationMs)}, storedVersions ${JSON.stringify(result.storedVersionsAfter)}`,
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
  const l = result.lossless
  // What the lossless check let through on purpose: consent, bookkeeping, objects it could not read.
  const checked = [
    l?.accepted ? `${l.accepted} with accepted changes` : '',
    l?.bookkeeping ? `${l.bookkeeping} with round-trip bookkeeping not stored` : '',
    l?.unchecked ? `${l.unchecked} not checkable (accepted: ${l.uncheckedReason ?? 'no view can read them'})` : '',
  ].filter(Boolean)
  if (checked.length) parts.push(`lossless check: ${checked.join(', ')}`)
  return parts.join('; ') || 'nothing to do'
}
