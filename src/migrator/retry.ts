import { setTimeout as sleep } from 'node:timers/promises'
import { isRetryable, isTooManyRequests, KubeApiError } from '../kube/http.js'

/**
 * Shared by every request of a migration: when the API server answers 429 with
 * Retry-After, nobody sends until that time has passed. Backing off one request while
 * the others keep hammering would not relieve the server.
 */
export class ThrottleGate {
  private resumeAt = 0
  throttled = 0

  pauseFor(seconds: number): void {
    this.throttled++
    this.resumeAt = Math.max(this.resumeAt, Date.now() + seconds * 1000)
  }

  async wait(signal?: AbortSignal): Promise<void> {
    for (let delay = this.resumeAt - Date.now(); delay > 0; delay = this.resumeAt - Date.now()) {
      await sleep(delay, undefined, signal ? { signal } : undefined)
    }
  }
}

export interface RetryOptions {
  maxAttempts: number
  baseDelayMs?: number
  maxDelayMs?: number
  gate?: ThrottleGate
  signal?: AbortSignal
  /** Told about each 429 (for metrics). */
  onThrottled?: () => void
  onRetry?: (err: unknown, attempt: number) => void
}

/** Exponential backoff with full jitter for transient errors; 429 waits for Retry-After. */
export async function withRetry<T>(fn: () => Promise<T>, options: RetryOptions): Promise<T> {
  const base = options.baseDelayMs ?? 200
  const max = options.maxDelayMs ?? 10_000
  for (let attempt = 1; ; attempt++) {
    await options.gate?.wait(options.signal)
    try {
      return await fn()
    } catch (err) {
      if (isTooManyRequests(err)) {
        options.onThrottled?.()
        const seconds = (err as KubeApiError).retryAfterSeconds ?? 1
        options.gate?.pauseFor(seconds)
      }
      if (!isRetryable(err) || attempt >= options.maxAttempts) throw err
      options.onRetry?.(err, attempt)
      const ceiling = Math.min(max, base * 2 ** (attempt - 1))
      const delay = isTooManyRequests(err) && !options.gate ? ((err as KubeApiError).retryAfterSeconds ?? 1) * 1000 : Math.random() * ceiling
      await sleep(delay, undefined, options.signal ? { signal: options.signal } : undefined)
    }
  }
}
