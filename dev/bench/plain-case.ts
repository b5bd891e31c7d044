/**
 * The plain-CRD case: the concurrency sweeps of ours and the ceiling on the smallest size,
 * then every size with the ceiling, ours (best concurrency and defaults) and KSVM.
 */
import type { KsvmBuild } from './ksvm.js'
import { log } from './log.js'
import type { MigrationContext } from './migration-context.js'
import { KSVM_MANIFEST, KSVM_UNTHROTTLED, runCeilingOnce, runKsvmOnce, runOurs } from './migration-runs.js'
import type { MigrationRun } from './report.js'

export interface PlainCase {
  migrations: MigrationRun[]
  /** The sweep's fastest concurrency of ours (the first --sweep value without a sweep). */
  bestConcurrency: number
  /** The same for the ceiling. */
  ceilingConcurrency: number
}

export async function runPlainCase(ctx: MigrationContext, ksvm: KsvmBuild | undefined): Promise<PlainCase> {
  const { sweep, sizes, oursOnlyAbove, ksvmManifestMax, ksvmDefaultMax } = ctx.settings
  const migrations: MigrationRun[] = []

  // 1. The concurrency sweep of ours, qps 0, on the smallest size (none with one value).
  let bestConcurrency = sweep[0]!
  let bestRate = 0
  const swept = sweep.length > 1 && sizes.length > 0
  for (const c of swept ? sweep : []) {
    const run = await runOurs(ctx, sizes[0]!, 'ours-sweep', { concurrency: c, qps: 0 })
    migrations.push(run)
    if (run.objectsPerSecond > bestRate) {
      bestRate = run.objectsPerSecond
      bestConcurrency = c
    }
  }
  log(`best concurrency of ours: ${bestConcurrency}`)
  // The same sweep for the ceiling: on 2 cores 64 writes in flight can overload the API
  // server (p99 near a second) and make the "ceiling" lower than it is.
  let ceilingConcurrency = sweep[0]!
  let ceilingRate = 0
  for (const c of swept ? sweep : []) {
    const run = await runCeilingOnce(ctx, sizes[0]!, c, 'ceiling-sweep')
    migrations.push(run)
    if (run.objectsPerSecond > ceilingRate) {
      ceilingRate = run.objectsPerSecond
      ceilingConcurrency = c
    }
  }
  log(`best concurrency of the ceiling: ${ceilingConcurrency}`)

  // 2. Every size: ceiling, ours best, ours default, KSVM.
  for (const size of sizes) {
    // The main case: ours at the defaults, planned with `plan --measure` first.
    if (size > oursOnlyAbove) {
      migrations.push(await runOurs(ctx, size, 'ours-default', { planEstimate: true }))
      continue
    }
    migrations.push(await runCeilingOnce(ctx, size, ceilingConcurrency))
    migrations.push(await runOurs(ctx, size, 'ours-best', { concurrency: bestConcurrency, qps: 0 }))
    migrations.push(await runOurs(ctx, size, 'ours-default', { planEstimate: true }))
    if (ksvm) {
      migrations.push(await runKsvmOnce(ctx, ksvm, size, 'ksvm', KSVM_UNTHROTTLED))
      if (size <= ksvmManifestMax) migrations.push(await runKsvmOnce(ctx, ksvm, size, 'ksvm-manifest', KSVM_MANIFEST))
      if (size <= ksvmDefaultMax) migrations.push(await runKsvmOnce(ctx, ksvm, size, 'ksvm-default', {}))
    }
  }
  return { migrations, bestConcurrency, ceilingConcurrency }
}
