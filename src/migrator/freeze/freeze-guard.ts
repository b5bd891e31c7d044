/**
 * A run holds only while its freeze does: a lifted freeze, a generation moved under it or a
 * takeover (the owner annotation no longer naming this run) makes further writes wasted and
 * narrowing storedVersions wrong (docs/migrate-one-crd.md#one-migration-step-by-step). So from freeze
 * to end the CRD is watched (that one name), and every copy the heartbeat gets back is checked too
 * (for when the watch is forbidden or lags); the first sign aborts the run's signal with a coded
 * error. Writes in flight finish; no new one starts.
 */
import type { Logger } from 'pino'
import { CrdMigratorError, errorMessage } from '../../errors.js'
import type { KubeHttp } from '../../kube/http.js'
import { CRD_API } from '../../kube/paths.js'
import type { CustomResourceDefinition } from '../../kube/types.js'
import { listAndWatch } from '../../kube/watch.js'
import { sanitizeText } from '../../sanitize.js'
import { MIGRATING_VALUE, StateAnnotation } from '../../state/crd-state.js'

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

/** Why a run on `frozen` must stop, seeing `crd` as the API server has it now; undefined while the freeze holds. Pure. */
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

/** The freeze is still set but now `owner`'s (undefined: the owner annotation was removed); said with where storedVersions stands. */
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
 * The heartbeat was answered 403: RBAC no longer lets the migrator patch the CRD, so its freeze
 * would go stale while the run kept writing; it stops (the unfreeze may fail the same way, run.ts).
 */
function heartbeatForbidden(name: string, err: unknown): CrdMigratorError {
  return new CrdMigratorError(
    'CRDM_FORBIDDEN',
    `the migrator may no longer patch CustomResourceDefinition ${name} (its heartbeat was refused: ${errorMessage(err)}); ` +
      `stopped at once, status.storedVersions left as they were`,
    { cause: err },
  )
}

/** Characters of a foreign owner's name kept in a message. */
const OWNER_MAX = 253

export type FreezeGuard = ReturnType<typeof guardFreeze>

/** Watches `frozen` until stop(), aborting `signal` when its freeze is lost (see the header). */
export function guardFreeze(http: KubeHttp, frozen: FrozenCrd, logger: Logger, parent?: AbortSignal) {
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
    /** Aborted by the parent signal (with its reason) or when the freeze is lost (with a CrdMigratorError). */
    signal: run.signal,
    /** Looks at a copy of the CRD the run got back from the API server (a heartbeat write's answer). */
    check: (crd: CustomResourceDefinition) => check(crd),
    /** The heartbeat was answered 403: the run cannot keep its freeze alive, so it stops (CRDM_FORBIDDEN). */
    heartbeatForbidden: (err: unknown) => {
      if (lost === undefined && !run.signal.aborted) stopWith(heartbeatForbidden(frozen.name, err))
    },
    get lost(): CrdMigratorError | undefined {
      return lost
    },
    stop: () => {
      parent?.removeEventListener('abort', onParentAbort)
      watch.abort()
    },
  }
}
