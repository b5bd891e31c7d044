/**
 * Waiting on evidence instead of for a fixed time. `until` polls for a condition that
 * must become true ("eventually"), `consistently` for one that must stay true for a
 * while (the "nothing happened" checks): the tooling's one poll loop, dev/wait.ts.
 */
export { until, consistently, type PollOptions } from '../../dev/wait.js'

/**
 * A count that grows (objects settled, tasks started) and that tests wait on without
 * polling: `reached(n)` resolves as soon as `set`/`add` bring it to n or more.
 */
export class Watermark {
  #value = 0
  #waiters: Array<{ n: number; resolve: () => void }> = []

  get value(): number {
    return this.#value
  }

  set(value: number): void {
    this.#value = value
    const ready = this.#waiters.filter((w) => w.n <= value)
    this.#waiters = this.#waiters.filter((w) => w.n > value)
    for (const w of ready) w.resolve()
  }

  add(delta = 1): void {
    this.set(this.#value + delta)
  }

  reached(n: number): Promise<void> {
    if (this.#value >= n) return Promise.resolve()
    return new Promise((resolve) => this.#waiters.push({ n, resolve }))
  }
}
