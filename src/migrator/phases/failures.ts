/**
 * How a phase's failed objects end the run: one coded error that counts them. Its message is
 * public (last-result annotation, Failed Event, read by people who may not list the objects), so
 * it names nobody; names and errors travel as data (the result's and the error's `failures`:
 * `migrate`'s output, the migrator's log).
 */
import { CrdMigratorError, type ErrorCode } from '../../errors.js'
import type { ObjectFailure, WalkResult } from '../engine/walker.js'
import type { StashResult } from '../context.js'

/** Where the names are, for readers of the public message. */
const NAMED_ELSEWHERE = "the objects and their errors are in the migrator's log and in `crd-migrator migrate`'s output"

/** A phase's failed objects; `failures` (the first of them, named) is for the log, never for the message. */
export class ObjectsFailedError extends CrdMigratorError {
  override readonly name: string = 'ObjectsFailedError'

  constructor(
    code: ErrorCode,
    message: string,
    readonly failures: readonly ObjectFailure[],
  ) {
    super(code, message)
  }
}

/** "2 CRDM_KUBE_API, 1 CRDM_CONVERSION_REFUSED" over the failures kept; the rest (of `failed`) unclassified. */
export function countByCode(failures: readonly ObjectFailure[], failed: number): string {
  const byCode = new Map<string, number>()
  for (const f of failures) byCode.set(f.code, (byCode.get(f.code) ?? 0) + 1)
  const parts = [...byCode].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])).map(([code, n]) => `${n} ${code}`)
  const unclassified = failed - failures.length
  if (unclassified > 0) parts.push(`${unclassified} more`)
  return parts.join(', ')
}

/** Fails the run when objects failed; refusals by the conversion webhook alone are CRDM_CONVERSION_REFUSED. */
export function failOnObjects(phase: WalkResult & { conversionRefused?: number }, what: string): void {
  const failed = phase.counts.failed
  if (failed === 0) return
  if (phase.conversionRefused === failed) {
    throw new ObjectsFailedError(
      'CRDM_CONVERSION_REFUSED',
      `the conversion webhook refused ${failed} object(s), which ${what}; the others were migrated (${NAMED_ELSEWHERE}, with the webhook's messages)`,
      phase.failures,
    )
  }
  throw new ObjectsFailedError(
    'CRDM_OBJECTS_FAILED',
    `${failed} object(s) ${what} (${countByCode(phase.failures, failed)}; ${NAMED_ELSEWHERE})`,
    phase.failures,
  )
}

export function failOnStashes(stashes: StashResult): void {
  const failed = stashes.counts.failed
  if (failed === 0) return
  throw new ObjectsFailedError(
    'CRDM_STASH_FAILED',
    `${failed} stashed cop${failed === 1 ? 'y' : 'ies'} not migrated (${NAMED_ELSEWHERE}, with why)`,
    stashes.failures,
  )
}
