/**
 * One write budget for the process, shared by every migration running at once: one throttle gate
 * and one `--qps` bucket, so several CRDs cost the API server what one costs; fair, so a big CRD
 * does not starve the small ones (docs/operator-upgrade.md#many-crds-at-once). Without a budget
 * (one CRD at a time) each phase makes its own gate and bucket.
 */
import { ThrottleGate, type ThrottleGateOptions } from './retry.js'

/**
 * A token bucket as client-go's: `qps` a second, bursts of a tenth of a second's worth. Shared:
 * a runner finding it empty queues, and tokens go to queued runners in arrival order.
 */
export class TokenBucket {
  private readonly burst: number
  private tokens: number
  private refilledAt: number
  private timer: NodeJS.Timeout | undefined
  private readonly waiters: Array<() => void> = []

  constructor(
    readonly qps: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    if (!(qps > 0)) throw new RangeError(`TokenBucket: qps must be > 0, got ${qps}`)
    this.burst = Math.max(1, qps / 10)
    this.tokens = this.burst
    this.refilledAt = now()
  }

  /** Takes a token when one is there and nobody queued before us. */
  tryTake(): boolean {
    if (this.waiters.length > 0) return false
    this.refill()
    if (this.tokens < 1) return false
    this.tokens--
    return true
  }

  giveBack(): void {
    this.tokens++
  }

  /** How long until a whole token is there, as of the last refill (at least 1 ms). */
  msUntilToken(): number {
    return Math.max(1, Math.ceil(((1 - this.tokens) * 1000) / this.qps))
  }

  /** Queues for a token: `grant` is called (asynchronously) once one is taken for the caller. */
  enqueue(grant: () => void): void {
    this.waiters.push(grant)
    this.schedule()
  }

  private refill(): void {
    const now = this.now()
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.refilledAt) * this.qps) / 1000)
    this.refilledAt = now
  }

  private drain(): void {
    this.refill()
    while (this.waiters.length > 0 && this.tokens >= 1) {
      this.tokens--
      this.waiters.shift()!()
    }
    this.schedule()
  }

  private schedule(): void {
    if (this.waiters.length === 0 || this.timer) return
    this.refill()
    this.timer = setTimeout(() => {
      this.timer = undefined
      this.drain()
    }, this.msUntilToken())
  }
}

interface WriteBudgetOptions {
  /** Writes in flight at most, over every migration: the cap of the shared adaptive limit (migrator.concurrency). */
  concurrency: number
  /** Writes started per second over every migration; 0: no fixed rate (migrator.qps). */
  qps: number
  /** Tuning of the adaptive limit (tests). */
  adaptive?: ThrottleGateOptions['adaptive']
  /** The clock (tests); default performance.now. */
  now?: () => number
}

export class WriteBudget {
  readonly gate: ThrottleGate
  /** The shared --qps bucket; undefined when there is no fixed rate. */
  readonly rate: TokenBucket | undefined
  readonly qps: number
  private readonly listeners = new Set<(limit: number) => void>()

  constructor(options: WriteBudgetOptions) {
    this.qps = Math.max(0, options.qps)
    this.gate = new ThrottleGate({
      ...options,
      maxConcurrency: Math.max(1, options.concurrency),
      onLimitChange: (limit) => {
        for (const listener of this.listeners) listener(limit)
      },
    })
    this.rate = this.qps > 0 ? new TokenBucket(this.qps, options.now) : undefined
  }

  /** Told each time the shared limit changes, until the returned function is called. */
  onLimitChange(listener: (limit: number) => void): () => void {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  }

  /** A CRD's own rate besides the shared bucket: its migrator.crds.<name>.qps when that differs from the process's, else none. */
  ownQps(crdQps: number): number {
    return crdQps > 0 && crdQps !== this.qps ? crdQps : 0
  }
}
