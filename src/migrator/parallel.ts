/**
 * The product's one pool of workers over a list, at most `max` at once: CRD migrations in
 * parallel (one write budget, engine/budget.ts; each keeps its own freeze, state and result),
 * and bounded reads and writes (lossless dry runs, `plan --measure`, CRD reads, `status`). The
 * object phases' writes have their own runner (engine/task-runner.ts: adaptive limit, QPS, retries).
 */

/**
 * Runs `run` over the items, at most `max` at once, started and returned in order. A rejection
 * rejects the pool at once while the other workers go on (a migration reports its own failure).
 */
export async function runInParallel<T, R>(items: readonly T[], max: number, run: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length)
  let next = 0
  const worker = async () => {
    while (next < items.length) {
      const index = next++
      results[index] = await run(items[index]!, index)
    }
  }
  await Promise.all(Array.from({ length: Math.max(1, Math.min(max, items.length)) }, worker))
  return results
}
