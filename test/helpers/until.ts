/**
 * Waiting on evidence instead of for a fixed time. `until` polls for a condition that
 * must become true ("eventually"), `consistently` for one that must stay true for a
 * while (the "nothing happened" checks). Both name what they wait for and the last value
 * seen when they fail.
 */
import { setTimeout as sleep } from 'node:timers/promises'

export interface PollOptions {
  /** Time between two reads (default 100 ms): longer for reads that cost the control plane. */
  everyMs?: number
}

const describe = (value: unknown): string => {
  if (value instanceof Error) return value.message
  if (value instanceof Map) return JSON.stringify(Object.fromEntries(value))
  return JSON.stringify(value) ?? String(value)
}

/** The one pause of the two pollers: time between reads is what a poll is made of. */
const nextPoll = (options: PollOptions) => sleep(options.everyMs ?? 100)

/**
 * Polls `read` until `check` accepts what it returns, and returns that; fails after
 * `timeoutMs` naming `what` and the last value (or error). For waiting on evidence.
 */
export async function until<T>(
  what: string,
  timeoutMs: number,
  read: () => Promise<T>,
  check: (value: T) => boolean,
  options: PollOptions = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs
  let last: string
  for (;;) {
    try {
      const value = await read()
      if (check(value)) return value
      last = describe(value)
    } catch (err) {
      last = describe(err)
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${last}`)
    await nextPoll(options)
  }
}

/**
 * Polls `read` for `durationMs` (first at once, last at the end) and fails the moment
 * `check` rejects what it returns, or `read` throws, naming `what` and that value; returns
 * the last value. For "nothing happened": a condition that must HOLD for a while, where a
 * fixed sleep and one look afterwards would miss a change that came and went.
 */
export async function consistently<T>(
  what: string,
  durationMs: number,
  read: () => Promise<T>,
  check: (value: T) => boolean,
  options: PollOptions = {},
): Promise<T> {
  const started = Date.now()
  const end = started + durationMs
  for (;;) {
    const value = await read().catch((err: unknown) => {
      throw new Error(`${what}: reading failed after ${Date.now() - started} ms of ${durationMs}: ${describe(err)}`)
    })
    if (!check(value)) throw new Error(`${what}: no longer true after ${Date.now() - started} ms of ${durationMs}; saw: ${describe(value)}`)
    if (Date.now() >= end) return value
    await nextPoll({ everyMs: Math.min(options.everyMs ?? 100, Math.max(end - Date.now(), 1)) })
  }
}

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
