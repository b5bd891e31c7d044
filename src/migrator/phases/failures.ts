/** How objects that failed in a phase end the run: one coded error that names them. */
import { CrdMigratorError } from '../../errors.js'
import type { ObjectFailure, WalkResult } from '../engine/walker.js'
import type { StashResult } from '../context.js'

/** The first ten, named with their messages; how many more. */
function named(failures: readonly ObjectFailure[], failed: number): string {
  const shown = failures.slice(0, 10).map((f) => `${f.key} (${f.message})`)
  return `${shown.join('; ')}${failed > shown.length ? `, and ${failed - shown.length} more` : ''}`
}

/**
 * Fails the run when objects failed. Refusals by the conversion webhook are listed by name
 * with the webhook's message (the first ten; all of them are in the log and the result).
 */
export function failOnObjects(phase: WalkResult & { conversionRefused?: number }, what: string): void {
  const failed = phase.counts.failed
  if (failed === 0) return
  if (phase.conversionRefused === failed) {
    const refused = phase.failures.filter((f) => f.code === 'CRDM_CONVERSION_REFUSED')
    throw new CrdMigratorError(
      'CRDM_CONVERSION_REFUSED',
      `the conversion webhook refused ${failed} object(s), which ${what}: ${named(refused, failed)}; the others were migrated`,
    )
  }
  throw new CrdMigratorError(
    'CRDM_OBJECTS_FAILED',
    `${failed} object(s) ${what}, e.g. ${phase.failures[0]?.key}: ${phase.failures[0]?.error}`,
  )
}

/** Fails the run when stashes could not be migrated; each is named with its reason (the first ten). */
export function failOnStashes(stashes: StashResult): void {
  const failed = stashes.counts.failed
  if (failed === 0) return
  throw new CrdMigratorError(
    'CRDM_STASH_FAILED',
    `${failed} stashed cop${failed === 1 ? 'y' : 'ies'} not migrated: ${stashes.failures
      .slice(0, 10)
      .map((f) => `${f.key} (${f.error})`)
      .join('; ')}${failed > 10 ? `, and ${failed - 10} more` : ''}`,
  )
}
