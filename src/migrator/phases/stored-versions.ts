/**
 * Narrowing status.storedVersions to [storage], in one loop of read, decide, patch. The
 * JSON Patch tests what the decision read (storedVersionsPatch); a refused test (422) means
 * something moved, and the round repeats. Two decisions feed it:
 * - a frozen run's, the defence in depth of KEP-2855: the webhook should have kept the
 *   storage version still, but storedVersions is only narrowed when the CRD provably is
 *   still frozen, by this run (its owner annotation: not taken over), and has the storage
 *   version and generation it had when the objects were rewritten;
 * - an unfrozen run's (migrate-unfrozen.ts): only while the CRD has the uid, generation and
 *   storage version the rewrite started with.
 */
import { getCrd, patchStoredVersions, type StoredVersionsPrecondition } from '../../kube/crds.js'
import { isConflict, isUnprocessable } from '../../kube/api-errors.js'
import type { CustomResourceDefinition } from '../../kube/types.js'
import { CrdMigratorError, errorMessage } from '../../errors.js'
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

/** What a round decides from the CRD it read: patch (testing `expect`), nothing left to do, or leave it with why. */
type Narrowing = { action: 'narrow'; expect: StoredVersionsPrecondition } | { action: 'done' } | { action: 'keep'; why: string }

interface NarrowLoop {
  ctx: MigrationContext
  name: string
  storageVersion: string
  maxAttempts: number
  /** The CRD as the run's last write got it back: stands in for the first read. */
  known?: CustomResourceDefinition | undefined
  decide: (crd: CustomResourceDefinition) => Narrowing
  /** A patch refused again although nothing it tests moved ends the loop with that refusal. */
  stopOnRepeat: boolean
  /** The error the last round's refusal ends with. */
  lastRound: (err: unknown) => unknown
}

/** The CRD as narrowed (or found narrowed), or as read when the decision keeps storedVersions (with why). */
async function narrowLoop(o: NarrowLoop): Promise<{ crd: CustomResourceDefinition; kept?: string }> {
  const { ctx, name } = o
  const retry = requestRetry(o.maxAttempts, ctx.signal)
  let refused: { err: unknown; expect: StoredVersionsPrecondition } | undefined
  for (let round = 1; ; round++) {
    const crd = round === 1 && o.known ? o.known : await withRetry(() => getCrd(ctx.http, name), retry)
    const next = o.decide(crd)
    if (next.action === 'keep') return { crd, kept: next.why }
    // Already narrowed: by our own patch whose answer was lost, or by someone else.
    if (next.action === 'done') return { crd }
    if (o.stopOnRepeat && refused && JSON.stringify(refused.expect) === JSON.stringify(next.expect)) throw refused.err
    try {
      return { crd: await withRetry(() => patchStoredVersions(ctx.http, name, [o.storageVersion], next.expect), retry) }
    } catch (err) {
      // A failed `test` is a bare 422 (README, "API behaviour we rely on"): read again,
      // and the decision says what moved. 409 is not expected without a resourceVersion.
      if (!(isUnprocessable(err) || isConflict(err))) throw err
      if (round >= MAX_ROUNDS) throw o.lastRound(err)
      refused = { err, expect: next.expect }
    }
  }
}

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
  // `known` stands in for the first read: the patch tests what the read is checked for,
  // so a stale copy costs a 422 and a read, never a wrong narrowing.
  let uid: string | undefined
  const decide = (crd: CustomResourceDefinition): Narrowing => {
    const plan = planCrd(crd)
    uid ??= crd.metadata.uid
    const left = `status.storedVersions left as ${JSON.stringify(plan.storedVersions)}`
    if (crd.metadata.uid !== uid) {
      throw new CrdMigratorError(
        'CRDM_CRD_CHANGED',
        `the CRD was deleted and created again during the migration (uid ${uid} -> ${crd.metadata.uid}); ${left}, will migrate again`,
      )
    }
    if (crd.metadata.annotations?.[migratingAnnotation] !== MIGRATING_VALUE) {
      throw new CrdMigratorError(
        'CRDM_FREEZE_LIFTED',
        `the freeze (annotation ${migratingAnnotation}) was removed by someone else during the migration; ${left}`,
      )
    }
    // Frozen still, but by another instance that took the freeze over: the narrowing is its now.
    const owner = crd.metadata.annotations?.[StateAnnotation.owner]
    if (owner !== ctx.owner) throw freezeTakenOver(owner, `as ${JSON.stringify(plan.storedVersions)}`)
    if (plan.storageVersion !== storageVersion) {
      throw new CrdMigratorError(
        'CRDM_CRD_CHANGED',
        `storage version changed during the migration (${storageVersion} -> ${plan.storageVersion ?? 'none'}); ${left}, will migrate again`,
      )
    }
    if (plan.generation !== frozenGeneration) {
      throw new CrdMigratorError(
        'CRDM_CRD_CHANGED',
        `CRD generation changed during the migration (${frozenGeneration} -> ${plan.generation}); ${left}, will migrate again`,
      )
    }
    if (!plan.storageMigrationNeeded) return { action: 'done' }
    const annotations = { [migratingAnnotation]: MIGRATING_VALUE, [StateAnnotation.owner]: ctx.owner }
    return { action: 'narrow', expect: { uid: uid!, generation: frozenGeneration, storedVersions: plan.storedVersions, annotations } }
  }
  // A patch refused again although nothing it tested moved: a real refusal, not a race.
  return (await narrowLoop({ ctx, name, storageVersion, maxAttempts, known, decide, stopOnRepeat: true, lastRound: (err) => err })).crd
}

/** What an unfrozen run started from: storedVersions are narrowed only while these still hold. */
export interface RewriteStart {
  uid: string | undefined
  generation: number
  storageVersion: string
}

/**
 * Whether to narrow storedVersions to `[storage]` now, from the CRD as read after every
 * object was rewritten: `narrow` (with what the patch tests), `done` (already narrowed), or
 * `keep` with why (the CRD was replaced, or its spec changed: the storage version may have
 * moved under the rewrite, which no freeze prevented).
 */
export function storedVersionsAfterRewrite(
  start: RewriteStart,
  crd: Pick<CustomResourceDefinition, 'metadata' | 'spec' | 'status'>,
): { action: 'narrow' } | { action: 'done' } | { action: 'keep'; why: string } {
  const storedVersions = crd.status?.storedVersions ?? []
  const storage = crd.spec.versions.filter((v) => v.storage).map((v) => v.name)
  if (crd.metadata.uid !== start.uid) return { action: 'keep', why: 'the CRD was deleted and created again during the rewrite' }
  const generation = crd.metadata.generation ?? 0
  if (generation !== start.generation)
    return { action: 'keep', why: `the CRD's generation changed during the rewrite (${start.generation} -> ${generation})` }
  // Same generation, same spec: the storage version cannot differ; checked all the same.
  if (storage.length !== 1 || storage[0] !== start.storageVersion)
    return { action: 'keep', why: `the storage version is no longer ${start.storageVersion}` }
  if (storedVersions.length === 1 && storedVersions[0] === start.storageVersion) return { action: 'done' }
  return { action: 'narrow' }
}

/** An unfrozen run's narrowing: the same patch as a frozen run's, without the freeze to test (there is none). */
export async function narrowUnderStart(
  ctx: MigrationContext,
  name: string,
  start: RewriteStart,
  maxAttempts: number,
): Promise<{ storedVersions: string[]; kept?: string }> {
  const decide = (crd: CustomResourceDefinition): Narrowing => {
    const next = storedVersionsAfterRewrite(start, crd)
    if (next.action !== 'narrow') return next
    const storedVersions = crd.status?.storedVersions ?? []
    return { action: 'narrow', expect: { uid: crd.metadata.uid ?? '', generation: start.generation, storedVersions, annotations: {} } }
  }
  const lastRound = (err: unknown) =>
    new CrdMigratorError('CRDM_CRD_CHANGED', `status.storedVersions could not be narrowed: ${errorMessage(err)}`, { cause: err })
  const { crd, kept } = await narrowLoop({
    ctx,
    name,
    storageVersion: start.storageVersion,
    maxAttempts,
    decide,
    stopOnRepeat: false,
    lastRound,
  })
  const storedVersions = crd.status?.storedVersions ?? []
  return kept === undefined ? { storedVersions } : { storedVersions, kept }
}
