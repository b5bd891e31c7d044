import { setTimeout as sleep } from 'node:timers/promises'
import { classifyConversionError } from '../../kube/conversion.js'
import { isRetryable, isTooManyRequests, KubeApiError } from '../../kube/api-errors.js'
import { AdaptiveConcurrency, type AdaptiveSettings } from './adaptive-concurrency.js'
import type { ConversionGate } from '../conversion/gate.js'

export interface ThrottleGateOptions {
  /** Most requests in flight: the migration's concurrency, the cap of its adaptive limit; default unlimited (the gate only pauses). */
  maxConcurrency?: number
  /** Tuning of the adaptive limit (tests); `false` keeps the limit at the cap, a 429 still halves it. */
  adaptive?: Omit<AdaptiveSettings, 'max'> | false
  onLimitChange?: (limit: number) => void
  /** The clock of slots and latencies (tests); default performance.now. */
  now?: () => number
}

/** A slot of the gate, held by one request attempt: when it was taken (the gate's clock, performance.now()). */
type GateSlot = number

/**
 * Shared by every request of a migration: after a 429 with Retry-After nobody sends until then
 * (backing off one request while the others keep hammering relieves nothing). It also caps the
 * requests in flight with an adaptive limit (adaptive-concurrency.ts), else every writer would
 * start at once when the pause ends and the next pause would follow at once.
 */
export class ThrottleGate {
  private resumeAt = 0
  throttled = 0
  private readonly adaptive: AdaptiveConcurrency | undefined
  private readonly fixedLimit: number
  private inFlight = 0
  /** Acquirers waiting for a slot, served in arrival order (a big walk cannot starve a small one). */
  private readonly waiters: Array<(slot: GateSlot) => void> = []
  private drainTimer: NodeJS.Timeout | undefined
  private readonly now: () => number

  constructor(options: ThrottleGateOptions = {}) {
    this.now = options.now ?? (() => performance.now())
    const max = options.maxConcurrency
    this.fixedLimit = max === undefined ? Number.POSITIVE_INFINITY : Math.max(1, max)
    if (max !== undefined) {
      const tuning = options.adaptive === false ? { initial: max, tolerance: Number.POSITIVE_INFINITY } : options.adaptive
      this.adaptive = new AdaptiveConcurrency(
        { ...tuning, max },
        (limit) => {
          this.drain()
          options.onLimitChange?.(limit)
        },
        this.now,
      )
    }
  }

  /** The current cap on requests in flight (Infinity when unlimited). */
  get concurrencyLimit(): number {
    return this.adaptive?.limit ?? this.fixedLimit
  }

  get active(): number {
    return this.inFlight
  }

  get waiting(): number {
    return this.waiters.length
  }

  /** The adaptive limit's decisions so far (none without a cap). */
  get decisions(): AdaptiveConcurrency['decisions'] | undefined {
    return this.adaptive?.decisions
  }

  /** Pauses everyone for `seconds`; halves the limit unless already lowered after `slot` (the 429's attempt) started. */
  pauseFor(seconds: number, slot?: GateSlot): void {
    this.throttled++
    this.resumeAt = Math.max(this.resumeAt, Date.now() + seconds * 1000)
    this.adaptive?.throttled(slot ?? this.now())
  }

  async wait(signal?: AbortSignal): Promise<void> {
    for (let delay = this.resumeAt - Date.now(); delay > 0; delay = this.resumeAt - Date.now()) {
      await sleep(delay, undefined, signal ? { signal } : undefined)
    }
  }

  /** A slot at once when not paused, nobody waits before us and one is free; else undefined (then acquire). */
  tryAcquire(): GateSlot | undefined {
    if (this.waiters.length > 0 || this.inFlight >= this.concurrencyLimit || this.resumeAt > Date.now()) return undefined
    return this.take()
  }

  /** Waits for the pause to end and for a free slot under the limit, behind those already waiting. */
  acquire(signal?: AbortSignal): Promise<GateSlot> {
    if (signal?.aborted) return Promise.reject(abortError(signal))
    const slot = this.tryAcquire()
    if (slot !== undefined) return Promise.resolve(slot)
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        const i = this.waiters.indexOf(grant)
        if (i >= 0) this.waiters.splice(i, 1)
        reject(abortError(signal))
      }
      const grant = (granted: GateSlot) => {
        signal?.removeEventListener('abort', onAbort)
        resolve(granted)
      }
      this.waiters.push(grant)
      signal?.addEventListener('abort', onAbort, { once: true })
      this.drain()
    })
  }

  /** Gives the slot back: `throttled` when it got a 429 (call pauseFor too); `sample` false when its latency says nothing (list pages). */
  release(slot: GateSlot, throttled = false, sample = true): void {
    this.inFlight = Math.max(0, this.inFlight - 1)
    if (!throttled && sample) this.adaptive?.answered(slot, this.now() - slot)
    this.drain()
  }

  private take(): GateSlot {
    this.inFlight++
    this.adaptive?.started(this.inFlight)
    return this.now()
  }

  /** Hands free slots to the waiters, first come first served; after a pause, once it has ended. */
  private drain(): void {
    while (this.waiters.length > 0 && this.inFlight < this.concurrencyLimit) {
      const pause = this.resumeAt - Date.now()
      if (pause > 0) {
        this.drainTimer ??= setTimeout(() => {
          this.drainTimer = undefined
          this.drain()
        }, pause)
        return
      }
      const grant = this.waiters.shift()!
      grant(this.take())
    }
  }
}

function abortError(signal: AbortSignal | undefined): Error {
  return Object.assign(new Error('The operation was aborted'), { name: 'AbortError', code: 'ABORT_ERR', cause: signal?.reason as unknown })
}

export interface RetryOptions {
  maxAttempts: number
  baseDelayMs?: number
  maxDelayMs?: number
  gate?: ThrottleGate
  /** The run's conversion-webhook gate: an outage waits there without spending attempts; a refusal is the object's own failure, never retried. */
  conversion?: ConversionGate
  signal?: AbortSignal
  /** Whether the answers' latency feeds the gate's adaptive limit (default true; false for list pages). */
  sampleLatency?: boolean
  onThrottled?: () => void
  onRetry?: (err: unknown, attempt: number) => void
}

/** How many 429s a request may get, as a multiple of maxAttempts, before it fails (see withRetry). */
const THROTTLED_ATTEMPTS_FACTOR = 4

/**
 * Lifting the freeze: about a minute of backoff, deliberately not tied to the run's signal: a
 * cancelled run must still lift it (a CRD left frozen blocks storage edits).
 */
export const UNFREEZE_RETRY: Readonly<RetryOptions> = Object.freeze({ maxAttempts: 8, baseDelayMs: 500, maxDelayMs: 15_000 })

/**
 * Exponential backoff for transient errors; a 429 waits for Retry-After. Delay before retry n:
 * between half and all of min(maxDelay, base × 2^(n-1)) ("equal jitter": spread, with a known
 * minimum). The defaults and 8 attempts span 11.3–22.6 s: an API server restart is ridden out.
 */
export async function withRetry<T>(fn: () => Promise<T>, options: RetryOptions): Promise<T> {
  const base = options.baseDelayMs ?? 200
  const max = options.maxDelayMs ?? 10_000
  const gate = options.gate
  const conversionGate = options.conversion
  const sample = options.sampleLatency !== false
  // A 429 asks us to wait, not a failure: it spends its own budget (THROTTLED_ATTEMPTS_FACTOR ×
  // maxAttempts), so a throttling server slows a migration down instead of failing its objects.
  let throttledAnswers = 0
  let tries = 0
  for (let attempt = 1; ; attempt++) {
    tries++
    const pass = conversionGate ? await conversionGate.acquire(options.signal) : undefined
    // Most attempts find a free slot: taken without a promise (this runs once per write).
    let slot: GateSlot | undefined = gate?.tryAcquire()
    if (gate && slot === undefined) {
      try {
        slot = await gate.acquire(options.signal)
      } catch (err) {
        if (pass) conversionGate!.released(pass)
        throw err
      }
    }
    try {
      const result = await fn()
      if (slot !== undefined) gate!.release(slot, false, sample)
      if (pass) conversionGate!.succeeded(pass)
      return result
    } catch (err) {
      const throttled = isTooManyRequests(err)
      const retryAfterSeconds = throttled ? ((err as KubeApiError).retryAfterSeconds ?? 1) : 0
      if (slot !== undefined) gate!.release(slot, throttled, sample)
      const conversion = classifyConversionError(err)
      if (pass) {
        if (conversion?.kind === 'outage') {
          conversionGate!.failed(pass, conversion)
          attempt--
          continue
        }
        conversionGate!.released(pass)
      }
      // The webhook's answer about this object will not change by asking again.
      if (conversion?.kind === 'refused') throw err
      if (throttled) {
        options.onThrottled?.()
        gate?.pauseFor(retryAfterSeconds, slot)
        if (++throttledAnswers >= options.maxAttempts * THROTTLED_ATTEMPTS_FACTOR) throw err
        attempt--
      }
      if (!isRetryable(err) || attempt >= options.maxAttempts) throw err
      options.onRetry?.(err, tries)
      const ceiling = Math.min(max, base * 2 ** (attempt - 1))
      // A 429 waits its Retry-After: in the gate, which pauses everyone, else here.
      const delay = throttled ? (gate ? 0 : retryAfterSeconds * 1000) : ceiling / 2 + Math.random() * (ceiling / 2)
      if (delay > 0) await sleep(delay, undefined, options.signal ? { signal: options.signal } : undefined)
    }
  }
}
