/**
 * Narrowing status.storedVersions to [storage]: read, decide, patch, the patch testing what was read.
 * A frozen run narrows only while the CRD is provably still frozen by it, with the storage version and
 * generation its objects were rewritten under (KEP-2855's defence in depth); an unfrozen run only while
 * uid, generation and storage version are as it started.
 */
import { getCrd } from '../../kube/crds.js'
import { isConflict, isUnprocessable } from '../../kube/api-errors.js'
import type { CustomResourceDefinition } from '../../kube/types.js'
import { CrdMigratorError, errorMessage } from '../../errors.js'
import { MIGRATING_VALUE, StateAnnotation } from '../../state/crd-state.js'
import { writeStoredVersions, type StoredVersionsPrecondition } from '../../state/crd-record.js'
import { freezeTakenOver } from '../freeze/freeze-guard.js'
import type { MigrationContext } from '../context.js'
import { planCrd } from '../plan.js'
import type { RunClient } from '../engine/run-client.js'

/** Rounds of read, check, patch; one is repeated only when what the patch tests moved (storedVersionsPatch). */
const MAX_ROUNDS = 5

/** What a round decides from the CRD it read: patch (testing `expect`), nothing left to do, or leave it with why. */
type Narrowing = { action: 'narrow'; expect: StoredVersionsPrecondition } | { action: 'done' } | { action: 'keep'; why: string }
type Refused = { err: unknown; expect: StoredVersionsPrecondition } | undefined

/**
 * The CRD as narrowed (or found so), or as read when `decide` keeps storedVersions (with
 * why). `decide` sees the last refusal; `lastRound` turns the last round's into the error.
 */
async function narrowLoop(
  name: string,
  storageVersion: string,
  client: RunClient,
  decide: (crd: CustomResourceDefinition, refused: Refused) => Narrowing,
  lastRound: (err: unknown) => unknown,
  known?: CustomResourceDefinition,
): Promise<{ crd: CustomResourceDefinition; kept?: string }> {
  let refused: Refused
  for (let round = 1; ; round++) {
    const crd = round === 1 && known ? known : await getCrd(client, name)
    const next = decide(crd, refused)
    if (next.action === 'keep') return { crd, kept: next.why }
    // Already narrowed: by our own patch whose answer was lost, or by someone else.
    if (next.action === 'done') return { crd }
    try {
      return { crd: await writeStoredVersions(client, name, [storageVersion], next.expect) }
    } catch (err) {
      // A failed `test` is a bare 422 (README, "API behaviour we rely on"): read again,
      // and the decision says what moved. 409 is not expected without a resourceVersion.
      if (!(isUnprocessable(err) || isConflict(err))) throw err
      if (round >= MAX_ROUNDS) throw lastRound(err)
      refused = { err, expect: next.expect }
    }
  }
}

export async function narrowStoredVersions(
  ctx: MigrationContext,
  name: string,
  storageVersion: string,
  frozenGeneration: number,
  client: RunClient,
  migratingAnnotation: string,
  known?: CustomResourceDefinition,
): Promise<CustomResourceDefinition> {
  // Every object is done by now: an API server restart, an etcd hiccup or our own progress and
  // heartbeat writes (a resourceVersion precondition loses to them) must not fail the run. So the
  // patch tests what matters (storedVersionsPatch); a retried patch whose answer was lost gets a
  // 422, and the next read finds it narrowed. `known` stands in for the first read: a stale copy
  // costs a 422 and a read, never a wrong narrowing.
  let uid: string | undefined
  const decide = (crd: CustomResourceDefinition, refused: Refused): Narrowing => {
    const plan = planCrd(crd)
    uid ??= crd.metadata.uid
    const left = `status.storedVersions left as ${JSON.stringify(plan.storedVersions)}`
    const changed = (what: string, detail: string) =>
      new CrdMigratorError('CRDM_CRD_CHANGED', `${what} during the migration (${detail}); ${left}, will migrate again`)
    if (crd.metadata.uid !== uid) throw changed('the CRD was deleted and created again', `uid ${uid} -> ${crd.metadata.uid}`)
    if (crd.metadata.annotations?.[migratingAnnotation] !== MIGRATING_VALUE) {
      throw new CrdMigratorError(
        'CRDM_FREEZE_LIFTED',
        `the freeze (annotation ${migratingAnnotation}) was removed by someone else during the migration; ${left}`,
      )
    }
    // Frozen still, but by another instance that took the freeze over: the narrowing is its now.
    const owner = crd.metadata.annotations?.[StateAnnotation.owner]
    if (owner !== ctx.owner) throw freezeTakenOver(owner, `as ${JSON.stringify(plan.storedVersions)}`)
    if (plan.storageVersion !== storageVersion)
      throw changed('storage version changed', `${storageVersion} -> ${plan.storageVersion ?? 'none'}`)
    if (plan.generation !== frozenGeneration) throw changed('CRD generation changed', `${frozenGeneration} -> ${plan.generation}`)
    if (!plan.storageMigrationNeeded) return { action: 'done' }
    const annotations = { [migratingAnnotation]: MIGRATING_VALUE, [StateAnnotation.owner]: ctx.owner }
    const expect = { uid: uid!, generation: frozenGeneration, storedVersions: plan.storedVersions, annotations }
    // The last patch was refused although nothing it tested moved: a real refusal.
    if (refused && JSON.stringify(refused.expect) === JSON.stringify(expect)) throw refused.err
    return { action: 'narrow', expect }
  }
  return (await narrowLoop(name, storageVersion, client, decide, (err) => err, known)).crd
}

/** What an unfrozen run started from: storedVersions are narrowed only while these still hold. */
export type RewriteStart = { uid: string | undefined; generation: number; storageVersion: string }

/**
 * From the CRD as read after every object was rewritten: `keep` when it was replaced or its spec
 * changed (the storage version may have moved under the rewrite, which no freeze prevented).
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
  name: string,
  start: RewriteStart,
  client: RunClient,
): Promise<{ storedVersions: string[]; kept: string | undefined }> {
  const decide = (crd: CustomResourceDefinition): Narrowing => {
    const next = storedVersionsAfterRewrite(start, crd)
    if (next.action !== 'narrow') return next
    const storedVersions = crd.status?.storedVersions ?? []
    return { action: 'narrow', expect: { uid: crd.metadata.uid ?? '', generation: start.generation, storedVersions, annotations: {} } }
  }
  const lastRound = (err: unknown) =>
    new CrdMigratorError('CRDM_CRD_CHANGED', `status.storedVersions could not be narrowed: ${errorMessage(err)}`, { cause: err })
  const { crd, kept } = await narrowLoop(name, start.storageVersion, client, decide, lastRound)
  return { storedVersions: crd.status?.storedVersions ?? [], kept }
}
