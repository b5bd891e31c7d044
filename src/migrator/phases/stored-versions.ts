/**
 * Narrowing status.storedVersions to [storage], the defence in depth of KEP-2855: the
 * webhook should have kept the storage version still, but storedVersions is only narrowed
 * when the CRD provably is still frozen, by this run (its owner annotation: not taken
 * over), and has the storage version and generation it had when the objects were
 * rewritten.
 */
import { getCrd, patchStoredVersions, type StoredVersionsPrecondition } from '../../kube/crds.js'
import { isConflict, isUnprocessable } from '../../kube/api-errors.js'
import type { CustomResourceDefinition } from '../../kube/types.js'
import { CrdMigratorError } from '../../errors.js'
import { MIGRATING_VALUE, StateAnnotation } from '../../state/crd-state.js'
import { freezeTakenOver } from '../freeze/freeze-guard.js'
import type { MigrationContext } from '../context.js'
import { planCrd } from '../plan.js'
import { requestRetry, withRetry } from '../engine/retry.js'

/**
 * Rounds of read, check, patch. Our own progress and heartbeat writes cannot make the patch
 * fail (it tests no resourceVersion); a round is repeated only when what it tests moved.
 */
const MAX_ROUNDS = 5

export async function narrowStoredVersions(
  ctx: MigrationContext,
  name: string,
  storageVersion: string,
  frozenGeneration: number,
  maxAttempts: number,
  migratingAnnotation: string,
  known?: CustomResourceDefinition,
): Promise<CustomResourceDefinition> {
  // Every object is done by now: an API server restart or an etcd hiccup at this point
  // must not fail the run, and neither must the run's own progress and heartbeat writes to
  // the same CRD (issue 34: a resourceVersion precondition lost to them 5 times in a row
  // under load). So the patch tests what matters instead (storedVersionsPatch): the uid
  // and generation read, the freeze and its owner (this run), the storedVersions read.
  // Both calls are safe to repeat: the read is a read, and a retry of a patch whose answer
  // was lost is refused (422: storedVersions moved) and goes round the loop, whose read
  // finds it narrowed.
  // `known`, the CRD as the run's last write got it back, stands in for the first read:
  // the patch tests what the read is checked for, so a stale copy costs a 422 and a read,
  // never a wrong narrowing.
  const retry = requestRetry(maxAttempts, ctx.signal)
  let uid: string | undefined
  let refused: { err: unknown; expect: StoredVersionsPrecondition } | undefined
  for (let round = 1; ; round++) {
    const crd = round === 1 && known ? known : await withRetry(() => getCrd(ctx.http, name), retry)
    const plan = planCrd(crd)
    uid ??= crd.metadata.uid
    if (crd.metadata.uid !== uid) {
      throw new CrdMigratorError(
        'CRDM_CRD_CHANGED',
        `the CRD was deleted and created again during the migration (uid ${uid} -> ${crd.metadata.uid}); status.storedVersions left as ${JSON.stringify(plan.storedVersions)}, will migrate again`,
      )
    }
    if (crd.metadata.annotations?.[migratingAnnotation] !== MIGRATING_VALUE) {
      throw new CrdMigratorError(
        'CRDM_FREEZE_LIFTED',
        `the freeze (annotation ${migratingAnnotation}) was removed by someone else during the migration; status.storedVersions left as ${JSON.stringify(plan.storedVersions)}`,
      )
    }
    // Frozen still, but by another instance that took the freeze over: the narrowing is its now.
    const owner = crd.metadata.annotations?.[StateAnnotation.owner]
    if (owner !== ctx.owner) throw freezeTakenOver(owner, `as ${JSON.stringify(plan.storedVersions)}`)
    if (plan.storageVersion !== storageVersion) {
      throw new CrdMigratorError(
        'CRDM_CRD_CHANGED',
        `storage version changed during the migration (${storageVersion} -> ${plan.storageVersion ?? 'none'}); status.storedVersions left as ${JSON.stringify(plan.storedVersions)}, will migrate again`,
      )
    }
    if (plan.generation !== frozenGeneration) {
      throw new CrdMigratorError(
        'CRDM_CRD_CHANGED',
        `CRD generation changed during the migration (${frozenGeneration} -> ${plan.generation}); status.storedVersions left as ${JSON.stringify(plan.storedVersions)}, will migrate again`,
      )
    }
    // Already narrowed: by our own patch whose answer was lost, or by someone else.
    if (!plan.storageMigrationNeeded) return crd
    const expect: StoredVersionsPrecondition = {
      uid: uid!,
      generation: frozenGeneration,
      storedVersions: plan.storedVersions,
      annotations: { [migratingAnnotation]: MIGRATING_VALUE, [StateAnnotation.owner]: ctx.owner },
    }
    // The last patch was refused although nothing it tested moved: a real refusal.
    if (refused && JSON.stringify(refused.expect) === JSON.stringify(expect)) throw refused.err
    try {
      return await withRetry(() => patchStoredVersions(ctx.http, name, [storageVersion], expect), retry)
    } catch (err) {
      // A failed `test` is a bare 422 (README, "API behaviour we rely on"): read again,
      // and the checks above say what moved. 409 is not expected without a resourceVersion.
      if (!(isUnprocessable(err) || isConflict(err)) || round >= MAX_ROUNDS) throw err
      refused = { err, expect }
    }
  }
}
