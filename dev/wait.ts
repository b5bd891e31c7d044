/**
 * Waiting on evidence instead of for a fixed time, for the tooling and the tests (which
 * re-export it from test/helpers/until.ts): the one poll loop. `poll` and `waitFor` ask
 * until an answer comes (a process healthy, a CRD Established, a flow schema in use),
 * `until` and `consistently` are the tests' "eventually" and "nothing happened". Each
 * names what it waits for when it fails.
 */
import { setTimeout as sleep } from 'node:timers/promises'

export interface PollOptions {
  /** Time between two reads (default 100 ms): longer for reads that cost the control plane. */
  everyMs?: number
}

/**
 * Calls `attempt` until it returns something other than undefined, and returns that; once
 * `timeoutMs` has passed (after one last attempt), undefined. An error `attempt` throws ends
 * the wait at once: a process that exited, an answer that will not change.
 */
export async function poll<T>(timeoutMs: number, attempt: () => Promise<T | undefined>, options: PollOptions = {}): Promise<T | undefined> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const found = await attempt()
    if (found !== undefined || Date.now() > deadline) return found
    await sleep(options.everyMs ?? 100)
  }
}

/**
 * `poll`, failing after `timeoutMs` with `timedOut()` when given, else with an error naming
 * `what` (what was awaited: "etcd healthy", "CRD x Established").
 */
export async function waitFor<T>(
  what: string,
  timeoutMs: number,
  attempt: () => Promise<T | undefined>,
  options: PollOptions & { timedOut?: () => Error } = {},
): Promise<T> {
  const found = await poll(timeoutMs, attempt, options)
  if (found !== undefined) return found
  throw options.timedOut?.() ?? new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
}

const describe = (value: unknown): string => {
  if (value instanceof Error) return value.message
  if (value instanceof Map) return JSON.stringify(Object.fromEntries(value))
  return JSON.stringify(value) ?? String(value)
}

/**
 * Polls `read` until `check` accepts what it returns, and returns that; fails after
 * `timeoutMs` naming `what` and the last value (or error: `read` may fail for a while).
 */
export async function until<T>(
  what: string,
  timeoutMs: number,
  read: () => Promise<T>,
  check: (value: T) => boolean,
  options: PollOptions = {},
): Promise<T> {
  let last = ''
  const found = await waitFor(
    what,
    timeoutMs,
    async () => {
      try {
        const value = await read()
        if (check(value)) return { value }
        last = describe(value)
      } catch (err) {
        last = describe(err)
      }
      return undefined
    },
    { ...options, timedOut: () => new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${last}`) },
  )
  return found.value
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
    await sleep(Math.min(options.everyMs ?? 100, Math.max(end - Date.now(), 1)))
  }
}
