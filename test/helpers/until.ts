import { setTimeout as sleep } from 'node:timers/promises'

/**
 * Polls `read` until `check` accepts what it returns, and returns that; fails after
 * `timeoutMs` naming `what` and the last value (or error). For waiting on evidence.
 */
export async function until<T>(what: string, timeoutMs: number, read: () => Promise<T>, check: (value: T) => boolean): Promise<T> {
  const deadline = Date.now() + timeoutMs
  let last: string
  for (;;) {
    try {
      const value = await read()
      if (check(value)) return value
      last = JSON.stringify(value)
    } catch (err) {
      last = err instanceof Error ? err.message : String(err)
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${last}`)
    await sleep(100)
  }
}
