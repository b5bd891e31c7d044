/**
 * `crd-migrator lift-freezes`, the chart's pre-delete hook (and pre-upgrade one with migrator.enabled=false),
 * so `helm uninstall` alone never leaves a CRD frozen: hold the Lease, wait for the leader to stop, lift this
 * release's freezes; its steps, and why as the migrator's ServiceAccount: docs/install.md#uninstall-safely.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import type { Logger } from 'pino'
import type { Config } from '../../config/schema.js'
import { seizeLease } from '../../controller/leader.js'
import { isConflict, isForbidden, isNotFound } from '../../kube/api-errors.js'
import { getCrd, listCrds } from '../../kube/crds.js'
import type { KubeHttp } from '../../kube/http.js'
import type { CustomResourceDefinition } from '../../kube/types.js'
import { readCrdState } from '../../state/crd-state.js'
import { writeLiftFreeze } from '../../state/crd-record.js'

export interface LiftFreezesOptions {
  /** Owners of this release: `<prefix><replicaset hash>-<pod suffix>`. */
  ownerPrefix: string
  /** Who holds the Lease meanwhile. */
  identity: string
  holdSeconds: number
  /** Polling of the CRDs while waiting for the leader to stop. */
  everyMs?: number
  signal?: AbortSignal
}

/** Whether `owner` names a pod of the Deployment whose pods are named `<prefix><hash>-<suffix>`. Pure. */
export function ownedByRelease(owner: string | undefined, ownerPrefix: string): boolean {
  if (owner === undefined || ownerPrefix === '' || !owner.startsWith(ownerPrefix)) return false
  return /^[a-z0-9]{1,10}-[a-z0-9]{5}$/.test(owner.slice(ownerPrefix.length))
}

export interface LiftReport {
  /** CRDs whose freeze was lifted. */
  lifted: string[]
  /** The leader that held the Lease before, if it was live. */
  stoppedLeader: string | undefined
  /** How long the wait for the leader to stop took. */
  waitedMs: number
}

export async function liftReleaseFreezes(http: KubeHttp, config: Config, options: LiftFreezesOptions, log: Logger): Promise<LiftReport> {
  const migrating = config.annotations.migrating
  const namespace = config.leaderElection.namespace ?? process.env.POD_NAMESPACE ?? 'default'
  const seized = await seizeLease(http, {
    namespace,
    name: config.leaderElection.leaseName,
    identity: options.identity,
    holdSeconds: options.holdSeconds,
  })
  log.info(
    { lease: `${namespace}/${config.leaderElection.leaseName}`, seized },
    'holding the Lease: no replica of the release migrates now',
  )
  const ours = (crds: CustomResourceDefinition[]) =>
    crds.filter((c) => {
      const s = readCrdState(c, migrating)
      return s.frozen && ownedByRelease(s.owner, options.ownerPrefix)
    })
  const started = Date.now()
  const leader = seized?.previousLive ? seized.previousHolder : undefined
  if (leader !== undefined) {
    // The leader stops at its next renewal (it sees our holder), or within its renew deadline at most.
    const bound = (config.leaderElection.renewDeadlineSeconds + 2 * config.leaderElection.retryPeriodSeconds) * 1000
    for (;;) {
      const frozen = ours(await listCrds(http))
      const handedOff = frozen.some((c) => {
        const s = readCrdState(c, migrating)
        return s.owner === leader && s.handedOff !== undefined
      })
      if (handedOff || Date.now() - started >= bound) break
      await sleep(options.everyMs ?? 250, undefined, { signal: options.signal })
    }
  }
  const waitedMs = Date.now() - started
  const lifted: string[] = []
  for (let pass = 0; pass < 10; pass++) {
    const frozen = ours(await listCrds(http))
    if (frozen.length === 0) return { lifted, stoppedLeader: leader, waitedMs }
    for (const crd of frozen) if (await liftOne(http, crd, migrating, options.ownerPrefix, log)) lifted.push(crd.metadata.name)
  }
  const left = ours(await listCrds(http)).map((c) => c.metadata.name)
  throw new Error(`freezes of the release are still set after 10 passes: ${left.join(', ')}`)
}

async function liftOne(
  http: KubeHttp,
  first: CustomResourceDefinition,
  migrating: string,
  ownerPrefix: string,
  log: Logger,
): Promise<boolean> {
  let crd = first
  for (let attempt = 0; attempt < 5; attempt++) {
    const state = readCrdState(crd, migrating)
    const reason = `the crd-migrator release was removed mid-run (its pre-delete hook lifted the freeze of ${state.owner ?? 'its pod'}); a new install migrates it again`
    try {
      await writeLiftFreeze(http, crd, migrating, reason)
      log.info({ crd: crd.metadata.name, owner: state.owner, phase: state.phase, progress: state.progress }, 'freeze lifted')
      return true
    } catch (err) {
      if (isNotFound(err)) return false
      if (!isConflict(err)) throw err
      crd = await getCrd(http, crd.metadata.name)
      const now = readCrdState(crd, migrating)
      if (!now.frozen || !ownedByRelease(now.owner, ownerPrefix)) return false
    }
  }
  return false
}

/** Whether the error says the release's migrator RBAC is gone (migrator.enabled=false already): nothing of ours can be frozen. */
export const noMigratorAccess = (err: unknown): boolean => isForbidden(err)
