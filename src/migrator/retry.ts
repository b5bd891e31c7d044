import { setTimeout as sleep } from 'node:timers/promises'
import { classifyConversionError } from '../kube/conversion.js'
import { isRetryable, isTooManyRequests, KubeApiError } from '../kube/http.js'
import type { ConversionGate } from './conversion-gate.js'

export interface ThrottleGateOptions {
  /**
   * Most requests in flight through the gate (the migration's concurrency). A 429 halves
   * the gate's own limit, which then grows back by one per `increaseIntervalMs` without a
   * 429. Default: unlimited (the gate only pauses).
   */
  maxConcurrency?: number
  /** Default 1000 ms. */
  increaseIntervalMs?: number
}

/** A slot of the gate, held by one request attempt. */
export interface GateSlot {
  readonly startedAt: number
}

/**
 * Shared by every request of a migration: when the API server answers 429 with
 * Retry-After, nobody sends until that time has passed. Backing off one request while
 * the others keep hammering would not relieve the server.
 *
 * Pausing alone is not enough: when the pause ends, every writer would start at once,
 * the server (still at its limit) would refuse all but a few, and the next pause would
 * follow at once; with a busy API server the migration would make a few writes per
 * second and run out of attempts. So the gate also caps the requests in flight, AIMD
 * style: a 429 halves the cap (once per pause, however many requests of the same burst
 * were refused), and a period without 429 raises it by one, up to the configured
 * concurrency. Time-based growth, not per success, because a server that accepts N
 * requests at a time answers N+1 with a 429 within milliseconds.
 */
export class ThrottleGate {
  private resumeAt = 0
  throttled = 0
  private limit: number
  private readonly maxLimit: number
  private readonly increaseIntervalMs: number
  private lastChange = 0
  private inFlight = 0
  private readonly waiters = new Set<() => void>()

  constructor(options: ThrottleGateOptions = {}) {
    this.maxLimit = Math.max(1, options.maxConcurrency ?? Number.POSITIVE_INFINITY)
    this.limit = this.maxLimit
    this.increaseIntervalMs = options.increaseIntervalMs ?? 1000
  }

  /** The current cap on requests in flight (Infinity when unlimited). */
  get concurrencyLimit(): number {
    return this.limit
  }

  /**
   * Pause everyone for `seconds`. With `slot` (the attempt that got the 429), the cap is
   * halved unless it was already lowered after that attempt started.
   */
  pauseFor(seconds: number, slot?: GateSlot): void {
    this.throttled++
    const now = Date.now()
    this.resumeAt = Math.max(this.resumeAt, now + seconds * 1000)
    if (Number.isFinite(this.limit) && (slot === undefined || slot.startedAt >= this.lastChange)) {
      this.limit = Math.max(1, Math.floor(this.limit / 2))
      // Growth is counted from the end of the pause, not from the 429.
      this.lastChange = this.resumeAt
    }
  }

  async wait(signal?: AbortSignal): Promise<void> {
    for (let delay = this.resumeAt - Date.now(); delay > 0; delay = this.resumeAt - Date.now()) {
      await sleep(delay, undefined, signal ? { signal } : undefined)
    }
  }

  /** Waits for the pause to end and for a free slot under the cap. */
  async acquire(signal?: AbortSignal): Promise<GateSlot> {
    for (;;) {
      await this.wait(signal)
      if (this.inFlight < this.limit) {
        this.inFlight++
        return { startedAt: Date.now() }
      }
      await this.park(signal)
    }
  }

  /** Gives the slot back; `throttled` when its attempt got a 429 (call pauseFor too). */
  release(_slot: GateSlot, throttled = false): void {
    this.inFlight = Math.max(0, this.inFlight - 1)
    const now = Date.now()
    if (!throttled && this.limit < this.maxLimit && now - this.lastChange >= this.increaseIntervalMs) {
      this.limit = Math.min(this.maxLimit, this.limit + 1)
      this.lastChange = now
    }
    const waiters = [...this.waiters]
    this.waiters.clear()
    for (const wake of waiters) wake()
  }

  private park(signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        this.waiters.delete(wake)
        reject(abortError(signal))
      }
      const wake = () => {
        signal?.removeEventListener('abort', onAbort)
        resolve()
      }
      if (signal?.aborted) return reject(abortError(signal))
      this.waiters.add(wake)
      signal?.addEventListener('abort', onAbort, { once: true })
    })
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
  /**
   * The run's conversion-webhook gate: a request that meets a webhook outage waits there
   * (without spending attempts; the gate's outage limit bounds the wait), and a refusal by
   * the webhook is the object's own failure, never retried.
   */
  conversion?: ConversionGate
  signal?: AbortSignal
  /** Told about each 429 (for metrics). */
  onThrottled?: () => void
  onRetry?: (err: unknown, attempt: number) => void
}

/**
 * The one retry policy of a migration's requests (CRD reads, the freeze, list pages,
 * writes, the storedVersions patch): `maxAttempts` tries with the default backoff,
 * stopped by the run's signal. Writes add the run's throttle gate and hooks.
 */
export function requestRetry(maxAttempts: number, signal?: AbortSignal): RetryOptions {
  return { maxAttempts, signal }
}

/**
 * Lifting the freeze: longer backoff (about a minute in all), and deliberately not tied to
 * the run's signal: a cancelled run must still lift its freeze, a CRD left frozen blocks
 * storage edits.
 */
export const UNFREEZE_RETRY: Readonly<RetryOptions> = Object.freeze({ maxAttempts: 8, baseDelayMs: 500, maxDelayMs: 15_000 })

/**
 * Exponential backoff for transient errors; 429 waits for Retry-After. The delay before
 * retry n is between half and all of min(maxDelay, base * 2^(n-1)) ("equal jitter"):
 * random enough to spread writers apart, and with a guaranteed minimum, so the retries of
 * one request span a known time. With the defaults (base 200 ms, max 10 s) and 8
 * attempts that is 11.3 to 22.6 s: an API server restart (a few seconds) is ridden out.
 */
export async function withRetry<T>(fn: () => Promise<T>, options: RetryOptions): Promise<T> {
  const base = options.baseDelayMs ?? 200
  const max = options.maxDelayMs ?? 10_000
  const gate = options.gate
  const conversionGate = options.conversion
  for (let attempt = 1; ; attempt++) {
    const pass = conversionGate ? await conversionGate.acquire(options.signal) : undefined
    let slot: GateSlot | undefined
    try {
      slot = gate ? await gate.acquire(options.signal) : undefined
    } catch (err) {
      if (pass) conversionGate!.released(pass)
      throw err
    }
    try {
      const result = await fn()
      if (slot) gate!.release(slot)
      if (pass) conversionGate!.succeeded(pass)
      return result
    } catch (err) {
      const throttled = isTooManyRequests(err)
      if (slot) gate!.release(slot, throttled)
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
        const seconds = (err as KubeApiError).retryAfterSeconds ?? 1
        gate?.pauseFor(seconds, slot)
      }
      if (!isRetryable(err) || attempt >= options.maxAttempts) throw err
      options.onRetry?.(err, attempt)
      const ceiling = Math.min(max, base * 2 ** (attempt - 1))
      const delay = throttled
        ? gate
          ? 0
          : ((err as KubeApiError).retryAfterSeconds ?? 1) * 1000
        : ceiling / 2 + Math.random() * (ceiling / 2)
      if (delay > 0) await sleep(delay, undefined, options.signal ? { signal: options.signal } : undefined)
    }
  }
}
