/**
 * A run holds only while its freeze does. A break-glass user who removes the migrating
 * annotation has stopped the migration on purpose (the webhook now lets storage move), and
 * a CRD whose generation moved under the freeze (a version added, its schema changed) is
 * no longer the CRD the run froze: either way every further write is wasted at best, and
 * narrowing storedVersions afterwards would be wrong. A freeze whose owner annotation no
 * longer names this run was taken over (another instance saw no heartbeat for
 * takeoverAfterSeconds: a long pause, a frozen node, a lost Lease) and is the new owner's:
 * this run stops and leaves the freeze and its state annotations alone (run.ts endRun).
 * So, from the freeze to the end of the run, the CRD is watched (a watch of that one
 * name), and every CRD the run's own heartbeat writes get back is looked at too (the same
 * check, for when the watch is not allowed or lags); the first sign aborts the run's
 * signal with a coded error (CRDM_FREEZE_LIFTED, CRDM_FREEZE_TAKEN_OVER,
 * CRDM_CRD_CHANGED; CRDM_FORBIDDEN when the heartbeat itself is refused), which the run
 * reports as its failure. Writes in flight at that moment
 * finish (at most the writes in flight); no new one starts.
 */
import type { Logger } from 'pino'
import { CrdMigratorError, errorMessage } from '../../errors.js'
import type { KubeHttp } from '../../kube/http.js'
import { CRD_API } from '../../kube/paths.js'
import type { CustomResourceDefinition } from '../../kube/types.js'
import { listAndWatch } from '../../kube/watch.js'
import { sanitizeText } from '../../sanitize.js'
import { MIGRATING_VALUE, StateAnnotation } from '../../state/crd-state.js'

/** What the run froze. */
export interface FrozenCrd {
  name: string
  uid: string | undefined
  generation: number
  migratingAnnotation: string
  /** This run's identity, written in the owner annotation (StateAnnotation.owner, a fixed key) by the freeze or its takeover. */
  owner: string
  /** The revision the freeze left it at: watched from there, without a first list (the run has that copy). */
  resourceVersion?: string | undefined
}

/**
 * Why a run on `frozen` must stop, seeing `crd` (the CRD as the API server has it now), or
 * undefined while the freeze holds. Pure.
 */
export function freezeLost(frozen: FrozenCrd, crd: Pick<CustomResourceDefinition, 'metadata'> | undefined): CrdMigratorError | undefined {
  if (crd === undefined)
    return new CrdMigratorError('CRDM_CRD_CHANGED', `CustomResourceDefinition ${frozen.name} was deleted during the migration`)
  if (frozen.uid !== undefined && crd.metadata.uid !== undefined && crd.metadata.uid !== frozen.uid) {
    return new CrdMigratorError(
      'CRDM_CRD_CHANGED',
      `CustomResourceDefinition ${frozen.name} was deleted and created again during the migration`,
    )
  }
  if (crd.metadata.annotations?.[frozen.migratingAnnotation] !== MIGRATING_VALUE) {
    return new CrdMigratorError(
      'CRDM_FREEZE_LIFTED',
      `the freeze (annotation ${frozen.migratingAnnotation}) was removed by someone else during the migration; ` +
        `stopped at once, status.storedVersions left as they were`,
    )
  }
  const owner = crd.metadata.annotations?.[StateAnnotation.owner]
  if (owner !== frozen.owner) return freezeTakenOver(owner, 'as they were')
  const generation = crd.metadata.generation ?? 0
  if (generation !== frozen.generation) {
    return new CrdMigratorError(
      'CRDM_CRD_CHANGED',
      `CRD generation changed during the migration (${frozen.generation} -> ${generation}); stopped at once, ` +
        `status.storedVersions left as they were, will migrate again`,
    )
  }
  return undefined
}

/**
 * The freeze is still set but no longer this run's: `owner` (undefined: the owner
 * annotation was removed) holds it now. Said with where status.storedVersions stands.
 */
export function freezeTakenOver(owner: string | undefined, storedVersions: string): CrdMigratorError {
  // The owner annotation is text from the cluster: anyone allowed to annotate the CRD wrote it.
  const who = owner ? sanitizeText(owner, OWNER_MAX) : ''
  return new CrdMigratorError(
    'CRDM_FREEZE_TAKEN_OVER',
    who
      ? `the freeze was taken over by ${who} during the migration (this run's heartbeat had gone unseen for longer than the takeover time); ` +
          `stopped at once, the freeze left to ${who}, which finishes the migration; status.storedVersions left ${storedVersions}`
      : `the freeze's owner annotation (${StateAnnotation.owner}) was removed during the migration while the CRD stayed frozen; ` +
          `stopped at once, the freeze left as it is; status.storedVersions left ${storedVersions}`,
  )
}

/**
 * The run's heartbeat was answered 403: RBAC no longer lets the migrator patch the CRD. Its
 * freeze would go stale and be taken over (or stay set with nobody to lift it) while the
 * run kept writing, so it stops; the unfreeze that follows may fail for the same reason
 * (CRDM_UNFREEZE_FAILED, run.ts).
 */
export function heartbeatForbidden(name: string, err: unknown): CrdMigratorError {
  return new CrdMigratorError(
    'CRDM_FORBIDDEN',
    `the migrator may no longer patch CustomResourceDefinition ${name} (its heartbeat was refused: ${errorMessage(err)}); ` +
      `stopped at once, status.storedVersions left as they were`,
    { cause: err },
  )
}

/** Characters of a foreign owner's name kept in a message. */
const OWNER_MAX = 253

export interface FreezeGuard {
  /** Aborted by the parent signal (with its reason) or when the freeze is lost (with a CrdMigratorError). */
  readonly signal: AbortSignal
  /** Looks at a copy of the CRD the run got back from the API server (a heartbeat write's answer). */
  check(crd: CustomResourceDefinition): void
  /** The heartbeat was answered 403: the run cannot keep its freeze alive, so it stops (CRDM_FORBIDDEN). */
  heartbeatForbidden(err: unknown): void
  /** Why the freeze was lost, once it was. */
  readonly lost: CrdMigratorError | undefined
  /** Ends the watch. */
  stop(): void
}

/** Watches `frozen` until stop(), aborting `signal` when its freeze is lost (see the header). */
export function guardFreeze(http: KubeHttp, frozen: FrozenCrd, logger: Logger, parent?: AbortSignal): FreezeGuard {
  const run = new AbortController()
  const watch = new AbortController()
  let lost: CrdMigratorError | undefined
  const onParentAbort = () => run.abort(parent?.reason)
  if (parent?.aborted) onParentAbort()
  else parent?.addEventListener('abort', onParentAbort, { once: true })

  const stopWith = (why: CrdMigratorError) => {
    lost = why
    logger.warn({ crd: frozen.name, code: why.code, reason: why.message }, 'the freeze was lost; stopping the migration')
    run.abort(why)
  }
  const check = (crd: CustomResourceDefinition | undefined) => {
    if (lost !== undefined || run.signal.aborted) return
    const why = freezeLost(frozen, crd)
    if (why !== undefined) stopWith(why)
  }

  let failures = 0
  void listAndWatch<CustomResourceDefinition>(
    http,
    CRD_API,
    {
      onObject: (crd) => {
        failures = 0
        check(crd)
      },
      onDeleted: (crd) => {
        if (crd.metadata.name === frozen.name) check(undefined)
      },
      onError: (err) => {
        // The heartbeat's check still holds: say it once, then at debug.
        if (failures++ === 0)
          logger.warn({ crd: frozen.name, err }, 'cannot watch the CRD during the migration; the heartbeat still checks the freeze')
        else logger.debug({ crd: frozen.name, err }, 'CRD watch failed again')
      },
    },
    watch.signal,
    { fieldSelector: `metadata.name=${frozen.name}`, pageSize: 1, resourceVersion: frozen.resourceVersion },
  )

  return {
    signal: run.signal,
    check: (crd) => check(crd),
    heartbeatForbidden: (err) => {
      if (lost === undefined && !run.signal.aborted) stopWith(heartbeatForbidden(frozen.name, err))
    },
    get lost() {
      return lost
    },
    stop: () => {
      parent?.removeEventListener('abort', onParentAbort)
      watch.abort()
    },
  }
}
