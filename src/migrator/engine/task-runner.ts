import { TokenBucket } from './budget.js'

/**
 * Runs the walker's per-object tasks: at most `limit` at once, started at `qps` a second at most
 * (0: none; its own TokenBucket), in order; with a shared bucket (budget.ts) each start also takes a
 * token there. Tasks must not reject. No per-task promise, event or timer check: this runs once per
 * object, and CPU per object is benched (npm run bench, "client CPU").
 */
export class TaskRunner {
  private readonly queue: Array<(() => Promise<unknown>) | undefined> = []
  private head = 0
  private running = 0
  private readonly bucket: TokenBucket | undefined
  private timer: NodeJS.Timeout | undefined
  private watchers: Array<{ ready: () => boolean; resolve: () => void }> = []
  /** A token of the shared bucket granted to this runner and not yet used. */
  private sharedToken = false
  private waitingShared = false
  private readonly sharedGranted = () => {
    this.waitingShared = false
    this.sharedToken = true
    this.pump()
  }
  private readonly finished = () => {
    this.running--
    this.pump()
  }

  constructor(
    private concurrency: number,
    qps: number,
    now: () => number = () => performance.now(),
    private readonly shared?: TokenBucket,
  ) {
    this.bucket = qps > 0 ? new TokenBucket(qps, now) : undefined
  }

  /** Tasks running now. */
  get pending(): number {
    return this.running
  }

  /** Tasks waiting to start. */
  get size(): number {
    return this.queue.length - this.head
  }

  get limit(): number {
    return this.concurrency
  }

  /** A new limit on tasks at once; a higher one starts waiting tasks now. */
  set limit(n: number) {
    this.concurrency = Math.max(1, n)
    this.pump()
  }

  add(task: () => Promise<unknown>): void {
    this.queue.push(task)
    this.pump()
  }

  /**
   * Drops the tasks not started (the walk stopped): else each would start at `qps` only to return
   * at once (a page of 500 objects at qps 8 kept a stopping leader for a minute).
   */
  clear(): void {
    this.queue.length = 0
    this.head = 0
    if (this.watchers.length) this.notify()
  }

  whenSizeBelow(n: number): Promise<void> {
    return this.when(() => this.size < n)
  }

  whenIdle(): Promise<void> {
    return this.when(() => this.size === 0 && this.running === 0)
  }

  private when(ready: () => boolean): Promise<void> {
    if (ready()) return Promise.resolve()
    return new Promise((resolve) => this.watchers.push({ ready, resolve }))
  }

  private pump(): void {
    while (this.running < this.concurrency && this.head < this.queue.length) {
      if (this.bucket && !this.takeStart(this.bucket)) break
      if (this.shared && !this.takeShared()) {
        // The own token goes back: it was not used.
        this.bucket?.giveBack()
        break
      }
      const task = this.queue[this.head]!
      this.queue[this.head++] = undefined
      this.running++
      task().then(this.finished, this.finished)
    }
    // Drop what was started from the front once it is most of the array.
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue.splice(0, this.head)
      this.head = 0
    }
    if (this.watchers.length) this.notify()
  }

  /** Takes a start from the bucket; false (and a timer for when the next one is there) when it is empty. */
  private takeStart(bucket: TokenBucket): boolean {
    if (bucket.tryTake()) return true
    this.timer ??= setTimeout(() => {
      this.timer = undefined
      this.pump()
    }, bucket.msUntilToken())
    return false
  }

  /** Takes a start from the shared bucket; false (queued there for the next one) when none is there for us yet. */
  private takeShared(): boolean {
    if (this.sharedToken) {
      this.sharedToken = false
      return true
    }
    if (this.waitingShared) return false
    if (this.shared!.tryTake()) return true
    this.waitingShared = true
    this.shared!.enqueue(this.sharedGranted)
    return false
  }

  private notify(): void {
    const waiting = this.watchers
    this.watchers = []
    for (const w of waiting) {
      if (w.ready()) w.resolve()
      else this.watchers.push(w)
    }
  }
}
