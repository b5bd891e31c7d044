/**
 * Runs the walker's per-object tasks: at most `limit` at once, at most `qps` started in
 * any one-second window (0: no limit), in the order they were added. This is what
 * p-queue did for the walker, without its per-task promise, events and timer checks: it
 * runs once per object of every migration, and the migrator's CPU per object is measured
 * against the simplest possible client (npm run bench, "client CPU").
 *
 * Tasks must not reject: the walker's catch their own errors.
 */
export class TaskRunner {
  private readonly queue: Array<(() => Promise<unknown>) | undefined> = []
  private head = 0
  private running = 0
  private windowStart = Number.NEGATIVE_INFINITY
  private startedInWindow = 0
  private timer: NodeJS.Timeout | undefined
  private watchers: Array<{ ready: () => boolean; resolve: () => void }> = []
  private readonly finished = () => {
    this.running--
    this.pump()
  }

  constructor(
    private concurrency: number,
    private readonly qps: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

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

  /** Resolves once fewer than `n` tasks wait. */
  whenSizeBelow(n: number): Promise<void> {
    return this.when(() => this.size < n)
  }

  /** Resolves once no task waits or runs. */
  whenIdle(): Promise<void> {
    return this.when(() => this.size === 0 && this.running === 0)
  }

  private when(ready: () => boolean): Promise<void> {
    if (ready()) return Promise.resolve()
    return new Promise((resolve) => this.watchers.push({ ready, resolve }))
  }

  private pump(): void {
    while (this.running < this.concurrency && this.head < this.queue.length) {
      if (this.qps > 0 && !this.takeStart()) break
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

  /** Counts a start in the current one-second window; false (and a timer for the next window) when it is full. */
  private takeStart(): boolean {
    const now = this.now()
    if (now - this.windowStart >= 1000) {
      this.windowStart = now
      this.startedInWindow = 0
    }
    if (this.startedInWindow < this.qps) {
      this.startedInWindow++
      return true
    }
    this.timer ??= setTimeout(
      () => {
        this.timer = undefined
        this.pump()
      },
      Math.max(1, this.windowStart + 1000 - now),
    )
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
