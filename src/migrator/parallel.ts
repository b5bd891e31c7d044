/**
 * The product's one pool of workers over a list (its users: docs/development.md, "Where each
 * concept lives"). The object phases' writes have their own runner (engine/task-runner.ts).
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
