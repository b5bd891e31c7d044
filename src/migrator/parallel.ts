/**
 * The product's one pool of workers over a list, at most `max` at once: CRD migrations in
 * parallel (one write budget, engine/budget.ts; each keeps its own freeze, state and result),
 * and bounded reads and writes (lossless dry runs, `plan --measure`, CRD reads, `status`). The
 * object phases' writes have their own runner (engine/task-runner.ts: adaptive limit, QPS, retries).
 */

interface ParallelHooks {
  /** Items not started yet, each time that changes. */
  onQueued?: (queued: number) => void
  /** Items running, each time that changes. */
  onInFlight?: (inFlight: number) => void
}

/**
 * Runs `run` over the items, at most `max` at once, started and returned in order. A rejection
 * rejects the pool at once while the other workers go on (a migration reports its own failure).
 */
export async function runInParallel<T, R>(
  items: readonly T[],
  max: number,
  run: (item: T, index: number) => Promise<R>,
  hooks: ParallelHooks = {},
): Promise<R[]> {
  const results = new Array<R>(items.length)
  let next = 0
  let inFlight = 0
  hooks.onQueued?.(items.length)
  const worker = async () => {
    while (next < items.length) {
      const index = next++
      hooks.onQueued?.(items.length - next)
      hooks.onInFlight?.(++inFlight)
      try {
        results[index] = await run(items[index]!, index)
      } finally {
        hooks.onInFlight?.(--inFlight)
      }
    }
  }
  await Promise.all(Array.from({ length: Math.max(1, Math.min(max, items.length)) }, worker))
  return results
}
