/**
 * The product's one pool of workers over a list: at most `max` items at once. Several
 * migrations at once (`migrate CRD...` and the controller run at most
 * `migrator.maxParallelCrds` CRDs at a time, all under one write budget, engine/budget.ts;
 * each CRD keeps its own freeze, state annotations, result and Events: only the budget of
 * writes is shared), and the reads and writes that need no more than a bound: the lossless
 * check's dry runs, `plan --measure`'s writes, the storage switch's CRD reads, `status`.
 * The object phases' writes have their own runner (engine/task-runner.ts: an adaptive
 * limit, QPS and retries).
 */

export interface ParallelHooks {
  /** Items not started yet, each time that changes. */
  onQueued?: (queued: number) => void
  /** Items running, each time that changes. */
  onInFlight?: (inFlight: number) => void
}

/**
 * Runs `run` over the items, at most `max` at once (at least one worker), started in the
 * items' order; returns the results in that order. When `run` rejects, so does the pool,
 * at once, while the other workers go on (a migration reports its own failure instead).
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
