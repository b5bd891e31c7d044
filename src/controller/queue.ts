/**
 * A work queue in the manner of client-go's: a name is queued at most once, is never
 * handled by two workers at once (a name added while it is being handled is handled
 * again afterwards), and failures back off exponentially per name.
 */
export class WorkQueue {
  /** Names waiting, in the order queued. */
  private readonly queued = new Set<string>()
  private readonly active = new Set<string>()
  private readonly dirty = new Set<string>()
  private readonly failures = new Map<string, number>()
  private readonly timers = new Map<string, NodeJS.Timeout>()
  private readonly waiters: (() => void)[] = []

  constructor(
    private readonly baseDelayMs = 1000,
    private readonly maxDelayMs = 5 * 60_000,
    /** Told the number of names waiting each time it changes (a metric). */
    private readonly onLength?: (length: number) => void,
  ) {}

  add(name: string): void {
    if (this.active.has(name)) {
      this.dirty.add(name)
      return
    }
    if (this.queued.has(name)) return
    this.queued.add(name)
    this.onLength?.(this.queued.size)
    this.waiters.shift()?.()
  }

  addAfter(name: string, delayMs: number): void {
    if (this.timers.has(name)) return
    const timer = setTimeout(() => {
      this.timers.delete(name)
      this.add(name)
    }, delayMs)
    timer.unref()
    this.timers.set(name, timer)
  }

  /** Re-queues after this name's next backoff step; returns the delay. */
  addRateLimited(name: string): number {
    const n = (this.failures.get(name) ?? 0) + 1
    this.failures.set(name, n)
    const delay = Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** (n - 1))
    this.addAfter(name, delay)
    return delay
  }

  forget(name: string): void {
    this.failures.delete(name)
  }

  get length(): number {
    return this.queued.size
  }

  /** Waits for the next name; undefined once `signal` aborts. */
  async next(signal: AbortSignal): Promise<string | undefined> {
    while (!signal.aborted) {
      const [name] = this.queued
      if (name !== undefined) {
        this.queued.delete(name)
        this.onLength?.(this.queued.size)
        this.active.add(name)
        return name
      }
      await new Promise<void>((resolve) => {
        const onAbort = () => {
          const i = this.waiters.indexOf(wake)
          if (i >= 0) this.waiters.splice(i, 1)
          resolve()
        }
        const wake = () => {
          signal.removeEventListener('abort', onAbort)
          resolve()
        }
        this.waiters.push(wake)
        signal.addEventListener('abort', onAbort, { once: true })
      })
    }
    return undefined
  }

  done(name: string): void {
    this.active.delete(name)
    if (this.dirty.delete(name)) this.add(name)
  }

  /** `workers` names at once (never one twice) until `signal` aborts; a reconcile that throws re-queues its name after backoff. */
  async process(
    signal: AbortSignal,
    reconcile: (name: string) => Promise<unknown>,
    onFailure: (name: string, err: unknown, retryInMs: number) => void,
    workers = 1,
  ): Promise<void> {
    const worker = async () => {
      while (!signal.aborted) {
        const name = await this.next(signal)
        if (name === undefined) break
        try {
          await reconcile(name)
        } catch (err) {
          if (signal.aborted) break
          onFailure(name, err, this.addRateLimited(name))
        } finally {
          this.done(name)
        }
      }
    }
    try {
      await Promise.all(Array.from({ length: Math.max(1, workers) }, worker))
    } finally {
      this.shutdown()
    }
  }

  shutdown(): void {
    for (const t of this.timers.values()) clearTimeout(t)
    this.timers.clear()
  }
}
