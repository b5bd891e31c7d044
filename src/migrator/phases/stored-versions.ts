/**
 * Narrowing status.storedVersions to [storage], the defence in depth of KEP-2855: the
 * webhook should have kept the storage version still, but storedVersions is only narrowed
 * when the CRD provably is still frozen and has the storage version and generation it had
 * when the objects were rewritten.
 */
import { getCrd, patchStoredVersions } from '../../kube/crds.js'
import { isConflict } from '../../kube/api-errors.js'
import type { CustomResourceDefinition } from '../../kube/types.js'
import { CrdMigratorError } from '../../errors.js'
import { MIGRATING_VALUE } from '../../state/crd-state.js'
import type { MigrationContext } from '../context.js'
import { planCrd } from '../plan.js'
import { requestRetry, withRetry } from '../engine/retry.js'

/** Conflicts with our own progress writes are expected; this many rounds of read, check, patch. */
const MAX_ROUNDS = 5

export async function narrowStoredVersions(
  ctx: MigrationContext,
  name: string,
  storageVersion: string,
  frozenGeneration: number,
  maxAttempts: number,
  migratingAnnotation: string,
): Promise<CustomResourceDefinition> {
  // Every object is done by now: an API server restart or an etcd hiccup at this point
  // must not fail the run. Both calls are safe to repeat: the read is a read, and the
  // patch carries the resourceVersion as precondition, so a retry after a lost answer
  // gets a 409 and goes round the loop (read, check, patch) again.
  const retry = requestRetry(maxAttempts, ctx.signal)
  for (let round = 1; ; round++) {
    const crd = await withRetry(() => getCrd(ctx.http, name), retry)
    const plan = planCrd(crd)
    if (crd.metadata.annotations?.[migratingAnnotation] !== MIGRATING_VALUE) {
      throw new CrdMigratorError(
        'CRDM_FREEZE_LIFTED',
        `the freeze (annotation ${migratingAnnotation}) was removed by someone else during the migration; status.storedVersions left as ${JSON.stringify(plan.storedVersions)}`,
      )
    }
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
    try {
      return await withRetry(() => patchStoredVersions(ctx.http, name, [storageVersion], crd.metadata.resourceVersion!), retry)
    } catch (err) {
      // Our own progress annotations also move the resourceVersion; re-check and retry.
      if (!isConflict(err) || round >= MAX_ROUNDS) throw err
    }
  }
}
