/**
 * Hands a running freeze to the next leader when `serve` shuts down or loses its Lease: lifting it
 * would open the storage version to changes, with objects half rewritten, until the next leader froze
 * it again. Freeze, owner, phase and sealed checkpoint stay; the heartbeat goes and the hand-off is
 * recorded, so the next leader resumes at once. The CLI (`migrate`) lifts its own.
 */
import { getCrd } from '../../kube/crds.js'
import { isConflict, isNotFound } from '../../kube/api-errors.js'
import { readCrdState } from '../../state/crd-state.js'
import { writeHandOff } from '../../state/crd-record.js'
import type { MigrationContext } from '../context.js'

/** The reason of an abort that hands the run's freeze off instead of lifting it. */
export class HandOff extends Error {
  override readonly name = 'HandOff'
}

/** Whether a signal was aborted to hand off (serve's shutdown, a lost Lease). */
export function handsOff(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true && signal.reason instanceof HandOff
}

/**
 * Writes the hand-off on the CRD, only while the freeze is still this run's (read, then a
 * patch on that resourceVersion: a takeover meanwhile wins). Returns whether it was written.
 */
export async function handOffFreeze(
  name: string,
  migratingAnnotation: string,
  progress: string | undefined,
  ctx: Pick<MigrationContext, 'http' | 'owner' | 'logger'>,
): Promise<boolean> {
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const crd = await getCrd(ctx.http, name)
      const state = readCrdState(crd, migratingAnnotation)
      if (!state.frozen || state.owner !== ctx.owner) return false
      await writeHandOff(ctx.http, crd, progress)
      return true
    } catch (err) {
      if (isNotFound(err)) return false
      if (isConflict(err)) continue
      ctx.logger.warn({ crd: name, err }, 'could not record the hand-off; the next leader resumes once the heartbeat is stale')
      return false
    }
  }
  return false
}
