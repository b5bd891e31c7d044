/**
 * Pauses every request of a migration while the CRD's conversion webhook is down, as a circuit
 * breaker (one trial at a time with backoff, the first success closes it, an outage past the limit
 * fails the run: docs/conversion-webhooks.md). Pause, not retry each request: during an outage an
 * update is stored with *every* managedFields entry dropped (fieldmanager UpdateNoErrors); the
 * fewer requests in flight, the fewer objects that happens to.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { CrdMigratorError } from '../../errors.js'
import type { ConversionFailure } from '../../kube/conversion.js'
import { wholeSeconds } from '../../duration.js'

interface ConversionGateOptions {
  /** The webhook as people name it (service or URL), for messages. */
  webhook: string
  /** Fail the run when the webhook stays down this long. */
  outageLimitMs: number
  /** First pause between trials; doubles up to maxTrialIntervalMs. Default 500 ms. */
  minTrialIntervalMs?: number
  /** Default 5 s: a webhook that is back is noticed within this. */
  maxTrialIntervalMs?: number
  /** A new failure this soon after the gate closed counts as the same outage. Default 10 s. */
  sameOutageWindowMs?: number
  onOutage?: (failure: ConversionFailure) => void
  onRecovered?: (outageMs: number) => void
  now?: () => number
}

/** What acquire() hands out: whether this request is the trial of an open gate. */
interface ConversionPass {
  readonly trial: boolean
}

const OPEN_PASS: ConversionPass = Object.freeze({ trial: false })

export class ConversionGate {
  /** Start of the current outage, or undefined while the webhook answers. */
  private outageSince: number | undefined
  private closedAt = Number.NEGATIVE_INFINITY
  /** Start and length of the outage the last close ended, for a relapse. */
  private closed: { since: number; lasted: number } | undefined
  private lastFailure: ConversionFailure | undefined
  private trialInFlight = false
  private nextTrialAt = 0
  private trialInterval: number
  private failedWith: CrdMigratorError | undefined
  private readonly waiters = new Set<() => void>()
  private readonly now: () => number
  /** Outages seen (a relapse within the window counts once). */
  outages = 0
  outageMs = 0

  get webhook(): string {
    return this.options.webhook
  }

  constructor(private readonly options: ConversionGateOptions) {
    this.now = options.now ?? Date.now
    this.trialInterval = options.minTrialIntervalMs ?? 500
  }

  get open(): boolean {
    return this.outageSince !== undefined
  }

  /** While open: how long until the next trial may go (0: now, or one is in flight). */
  get nextTrialInMs(): number {
    return this.outageSince === undefined ? 0 : Math.max(0, this.nextTrialAt - this.now())
  }

  /** Waits until a request may be sent; throws once the outage outlasted the limit. */
  async acquire(signal?: AbortSignal): Promise<ConversionPass> {
    for (;;) {
      signal?.throwIfAborted()
      if (this.failedWith) throw this.failedWith
      if (this.outageSince === undefined) return OPEN_PASS
      this.checkLimit()
      const now = this.now()
      if (!this.trialInFlight && now >= this.nextTrialAt) {
        this.trialInFlight = true
        return { trial: true }
      }
      const wait = this.trialInFlight ? this.maxTrialInterval : Math.max(1, this.nextTrialAt - now)
      await this.park(wait, signal)
    }
  }

  /** The request got an answer that needed no failing conversion. */
  succeeded(pass: ConversionPass): void {
    // A trial's success closes the gate; then the pass is released as any other.
    if (pass.trial && this.outageSince !== undefined) {
      const lasted = this.now() - this.outageSince
      this.outageMs += lasted
      this.closed = { since: this.outageSince, lasted }
      this.outageSince = undefined
      this.closedAt = this.now()
      this.trialInterval = this.options.minTrialIntervalMs ?? 500
      this.options.onRecovered?.(lasted)
    }
    this.released(pass)
  }

  /** The request failed for a reason other than an outage (or was abandoned). */
  released(pass: ConversionPass): void {
    if (!pass.trial) return
    this.trialInFlight = false
    this.wakeAll()
  }

  /** The request met an outage: open the gate (or keep it open) and schedule the next trial. */
  failed(pass: ConversionPass, failure: ConversionFailure): void {
    this.lastFailure = failure
    const now = this.now()
    if (this.outageSince === undefined) {
      // A relapse right after a trial "succeeded" (a request that needed no conversion) is
      // the same outage: its limit keeps counting from the start.
      const relapse = this.closed !== undefined && now - this.closedAt < (this.options.sameOutageWindowMs ?? 10_000)
      if (relapse) {
        this.outageSince = this.closed!.since
        this.outageMs -= this.closed!.lasted
      } else {
        this.outageSince = now
        this.outages++
      }
      this.nextTrialAt = now + this.trialInterval
      this.options.onOutage?.(failure)
    }
    if (pass.trial) {
      this.trialInFlight = false
      this.trialInterval = Math.min(this.maxTrialInterval, this.trialInterval * 2)
      this.nextTrialAt = now + this.trialInterval
    }
    this.checkLimit()
    this.wakeAll()
  }

  private get maxTrialInterval(): number {
    return this.options.maxTrialIntervalMs ?? 5_000
  }

  private checkLimit(): void {
    if (this.outageSince === undefined || this.failedWith) return
    const lasted = this.now() - this.outageSince
    if (lasted < this.options.outageLimitMs) return
    this.failedWith = new CrdMigratorError(
      'CRDM_CONVERSION_OUTAGE',
      `conversion webhook ${this.options.webhook} did not answer for ${wholeSeconds(lasted)} (limit ${wholeSeconds(this.options.outageLimitMs)}): ${this.lastFailure?.detail ?? 'unknown error'}`,
    )
    this.wakeAll()
    throw this.failedWith
  }

  private wakeAll(): void {
    const waiters = [...this.waiters]
    this.waiters.clear()
    for (const wake of waiters) wake()
  }

  private async park(ms: number, signal?: AbortSignal): Promise<void> {
    let wake!: () => void
    const woken = new Promise<void>((resolve) => (wake = resolve))
    this.waiters.add(wake)
    const ac = new AbortController()
    const onAbort = () => ac.abort()
    signal?.addEventListener('abort', onAbort, { once: true })
    try {
      await Promise.race([woken, sleep(ms, undefined, { signal: ac.signal }).catch(() => {})])
    } finally {
      ac.abort()
      signal?.removeEventListener('abort', onAbort)
      this.waiters.delete(wake)
    }
  }
}
