/**
 * Folds repeated review lines: a client retrying a refused write in a tight loop would fill
 * the log, and formatting a line costs more than the decision. The next logged line of a kind
 * says how many were left out; metrics and the audit log still have each.
 */

/** How long identical review lines are folded into one. */
export const REPEAT_WINDOW_MS = 10_000
/** Kinds remembered at most; past it, kinds whose window has passed are forgotten (all, if none has). */
export const REPEAT_MAX_KINDS = 1024

interface Seen {
  /** When the last logged line of this kind was written. */
  loggedAt: number
  /** Repeats since then that were not logged. */
  leftOut: number
}

export class RepeatSampler {
  private readonly seen = new Map<string, Seen>()

  constructor(
    private readonly windowMs = REPEAT_WINDOW_MS,
    private readonly maxKinds = REPEAT_MAX_KINDS,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /**
   * A review of kind `key`: the number of earlier repeats left out of the log (0 for none)
   * when this one is to be logged, or undefined when it is a repeat to leave out.
   */
  admit(key: string): number | undefined {
    const now = this.now()
    const seen = this.seen.get(key)
    if (seen && now - seen.loggedAt < this.windowMs) {
      seen.leftOut++
      return undefined
    }
    if (seen) {
      const leftOut = seen.leftOut
      seen.loggedAt = now
      seen.leftOut = 0
      return leftOut
    }
    if (this.seen.size >= this.maxKinds) this.forgetOld(now)
    this.seen.set(key, { loggedAt: now, leftOut: 0 })
    return 0
  }

  /** Kinds remembered now (tests). */
  get size(): number {
    return this.seen.size
  }

  private forgetOld(now: number): void {
    for (const [key, seen] of this.seen) if (now - seen.loggedAt >= this.windowMs) this.seen.delete(key)
    // Every kind is recent (many users or CRDs at once): start over rather than grow.
    if (this.seen.size >= this.maxKinds) this.seen.clear()
  }
}
