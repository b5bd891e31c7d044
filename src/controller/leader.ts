import { setTimeout as sleep } from 'node:timers/promises'
import type { Logger } from 'pino'
import type { Config } from '../config/schema.js'
import { type KubeHttp } from '../kube/http.js'
import { isConflict, unlessNotFound } from '../kube/api-errors.js'
import { microTime } from '../kube/events.js'
import { collectionPath, objectPath, type ResourceRef } from '../kube/paths.js'
import { HandOff } from '../migrator/freeze/hand-off.js'

type LeaderElectionOptions = Pick<Config['leaderElection'], 'leaseDurationSeconds' | 'renewDeadlineSeconds' | 'retryPeriodSeconds'> & {
  namespace: string
  name: string
  identity: string
}

interface Lease {
  metadata: { name: string; namespace: string; resourceVersion?: string }
  spec: {
    holderIdentity?: string | null
    leaseDurationSeconds?: number
    acquireTime?: string | null
    renewTime?: string | null
    leaseTransitions?: number
  }
}

const LEASES: ResourceRef = { group: 'coordination.k8s.io', version: 'v1', plural: 'leases', kind: 'Lease', namespaced: true }

/**
 * Lease-based leader election as client-go's: the holder renews every retry period and gives up
 * after the renew deadline; others take over once the lease has not changed for its duration on
 * their own clock (so clock skew between replicas does not matter).
 */
export class LeaderElector {
  private observed: { record: string; at: number } | undefined
  /** Set when the last attempt found the Lease held by another identity. */
  private takenBy: string | undefined

  constructor(
    private readonly http: KubeHttp,
    private readonly options: LeaderElectionOptions,
    private readonly logger: Logger,
    /** Told true on taking the lease, false the moment a term ends (lost, or shutting down): the leader metric. */
    private readonly onLeadership: (leading: boolean) => void = () => {},
  ) {}

  private get path(): string {
    return objectPath(LEASES, this.options.namespace, this.options.name)
  }

  /** Waits for leadership, runs `lead` with a signal aborted when it is lost or `stop` aborts, then releases the lease. */
  async run(stop: AbortSignal, lead: (signal: AbortSignal) => Promise<void>): Promise<void> {
    while (!stop.aborted) {
      if (await this.attempt('leader election: lease request failed')) break
      await sleep(this.options.retryPeriodSeconds * 1000, undefined, { signal: stop }).catch(() => {})
    }
    if (stop.aborted) return
    this.logger.info({ identity: this.options.identity, lease: `${this.options.namespace}/${this.options.name}` }, 'became leader')
    const leading = new AbortController()
    this.onLeadership(true)
    leading.signal.addEventListener('abort', () => this.onLeadership(false), { once: true })
    // The term's runs hand their freezes off to the next leader (migrator/freeze/hand-off.ts),
    // never lift them: shutting down (a rolling upgrade) or losing the Lease alike.
    const onStop = () => leading.abort(stop.reason instanceof HandOff ? stop.reason : new HandOff('shutting down'))
    stop.addEventListener('abort', onStop, { once: true })
    const renewals = this.renewLoop(leading)
    try {
      await lead(leading.signal)
    } finally {
      stop.removeEventListener('abort', onStop)
      const lost = leading.signal.aborted && !stop.aborted
      leading.abort(new Error('leadership ended'))
      await renewals
      if (!lost) await this.release().catch((err) => this.logger.warn({ err }, 'could not release the lease'))
    }
  }

  private async renewLoop(leading: AbortController): Promise<void> {
    let lastRenew = Date.now()
    while (!leading.signal.aborted) {
      await sleep(this.options.retryPeriodSeconds * 1000, undefined, { signal: leading.signal }).catch(() => {})
      if (leading.signal.aborted) return
      if (await this.attempt('leader election: renew failed')) lastRenew = Date.now()
      else if (this.takenBy !== undefined) {
        // Someone else holds the Lease now (a replica after our renewals failed, or the
        // chart's uninstall hook): stop at once, as client-go does.
        this.logger.error({ holder: this.takenBy }, 'lost leadership: the lease is held by another')
        leading.abort(new HandOff(`leadership lost to ${this.takenBy}`))
      } else if (Date.now() - lastRenew > this.options.renewDeadlineSeconds * 1000) {
        this.logger.error('lost leadership: could not renew the lease within the renew deadline')
        leading.abort(new HandOff('leadership lost'))
      }
    }
  }

  /** tryAcquireOrRenew, a failed request logged with `failed` and counted as not leading. */
  private attempt(failed: string): Promise<boolean> {
    return this.tryAcquireOrRenew().catch((err: unknown) => {
      this.logger.warn({ err }, failed)
      return false
    })
  }

  async tryAcquireOrRenew(): Promise<boolean> {
    const now = new Date()
    this.takenBy = undefined
    const timeoutMs = this.options.renewDeadlineSeconds * 1000
    const lease = (await unlessNotFound(this.http.request<Lease>({ method: 'GET', path: this.path, timeoutMs })))?.body
    const spec = {
      holderIdentity: this.options.identity,
      leaseDurationSeconds: this.options.leaseDurationSeconds,
      renewTime: microTime(now),
    }
    if (!lease) {
      try {
        await this.http.request({
          method: 'POST',
          path: collectionPath(LEASES, this.options.namespace),
          body: {
            apiVersion: 'coordination.k8s.io/v1',
            kind: 'Lease',
            metadata: { name: this.options.name, namespace: this.options.namespace },
            spec: { ...spec, acquireTime: microTime(now), leaseTransitions: 0 },
          },
        })
        return true
      } catch (err) {
        if (isConflict(err) || (err as { status?: number }).status === 409) return false
        throw err
      }
    }
    const holder = lease.spec.holderIdentity ?? ''
    const record = JSON.stringify([holder, lease.spec.renewTime, lease.spec.leaseDurationSeconds])
    if (this.observed?.record !== record) this.observed = { record, at: Date.now() }
    const duration = (lease.spec.leaseDurationSeconds ?? this.options.leaseDurationSeconds) * 1000
    const held = holder !== '' && holder !== this.options.identity && Date.now() - this.observed.at < duration
    if (held) {
      this.takenBy = holder
      return false
    }
    return putLease(this.http, this.path, lease, spec, holder === this.options.identity)
  }

  /** Lets the next replica take over at once instead of waiting out the lease. */
  private async release(): Promise<void> {
    const lease = (await this.http.request<Lease>({ method: 'GET', path: this.path })).body
    if (lease.spec.holderIdentity !== this.options.identity) return
    await this.http.request({
      method: 'PUT',
      path: this.path,
      body: { ...lease, spec: { ...lease.spec, holderIdentity: null, leaseDurationSeconds: 1, renewTime: microTime() } },
    })
  }
}

/**
 * Takes the Lease whoever holds it, for `holdSeconds` (uninstall hook, `lift-freezes`): a leader seeing another holder
 * stops at its next renewal and hands its runs off (renewLoop); candidates wait the hold out. Says who held it before,
 * and whether that holder was live (by the seizer's clock, below); undefined when there is no Lease (no replica ever led).
 */
export async function seizeLease(http: KubeHttp, lease: { namespace: string; name: string; identity: string; holdSeconds: number }) {
  const path = objectPath(LEASES, lease.namespace, lease.name)
  for (;;) {
    const current = (await unlessNotFound(http.request<Lease>({ method: 'GET', path })))?.body
    if (!current) return undefined
    const holder = current.spec.holderIdentity ?? undefined
    const renewed = current.spec.renewTime ? Date.parse(current.spec.renewTime) : Number.NaN
    // Live unless clearly expired (twice its duration, so clock skew errs on the side of waiting).
    const live =
      holder !== undefined && holder !== lease.identity && !(Date.now() - renewed > 2 * (current.spec.leaseDurationSeconds ?? 15) * 1000)
    const mine = holder === lease.identity
    const taken = { holderIdentity: lease.identity, leaseDurationSeconds: lease.holdSeconds, renewTime: microTime() }
    if (await putLease(http, path, current, taken, mine)) return { previousHolder: mine ? undefined : holder, previousLive: live }
  }
}

/** `taken` as holder, duration and renewTime; a new holder (not `mine`) starts a term: acquireTime now, +1 transition. False on a 409. */
async function putLease(
  http: KubeHttp,
  path: string,
  lease: Lease,
  taken: { holderIdentity: string; leaseDurationSeconds: number; renewTime: string },
  mine: boolean,
): Promise<boolean> {
  try {
    await http.request({
      method: 'PUT',
      path,
      body: {
        ...lease,
        spec: {
          ...lease.spec,
          ...taken,
          acquireTime: mine ? lease.spec.acquireTime : taken.renewTime,
          leaseTransitions: (lease.spec.leaseTransitions ?? 0) + (mine ? 0 : 1),
        },
      },
    })
    return true
  } catch (err) {
    if (isConflict(err)) return false
    throw err
  }
}
