/**
 * The conversion case: the ceiling (merge patch and apply) and ours on a CRD that converts
 * through the dev conversion webhook (started here, in the bench's process, and stopped
 * after), answering at once and slowly, with the ConversionReviews counted.
 */
import { startConversionWebhook } from '../conversion/webhook.js'
import { runConversionProbe } from './conversion.js'
import { log } from './log.js'
import type { Conv, MigrationContext } from './migration-context.js'
import { runCeilingOnce, runOurs } from './migration-runs.js'
import type { ConversionCase, MigrationRun, Tool } from './report.js'
import { round } from './stats.js'

/** Every size of --conversion-sizes, at each webhook delay; ours-best and the ceiling at `bestConcurrency`. */
export async function runConversionCase(ctx: MigrationContext, bestConcurrency: number): Promise<ConversionCase> {
  const { conversionSizes, conversionDelayMs } = ctx.settings
  // The webhook, in this process (the API server calls it); the migrators' processes know
  // nothing of it.
  const webhook = await startConversionWebhook()
  try {
    log(`conversion webhook at ${webhook.url}`)
    const probe = ctx.settings.skipConversionProbe
      ? null
      : await runConversionProbe(ctx.http, ctx.cp.etcdEndpoint, webhook, `probe.b${ctx.runId}.bench.crd-migrator.io`, log)
    const delays = conversionDelayMs > 0 ? [0, conversionDelayMs] : [0]
    const runs: MigrationRun[] = []
    for (const size of conversionSizes) {
      for (const delayMs of delays) {
        const conv: Conv = { webhook, delayMs }
        // The ceiling at ours' best concurrency, not its own from the plain sweep: through a
        // webhook each write waits on ~8 reviews in a row, so the rate is latency-bound and
        // follows the writes in flight; ours-best / ceiling then compares equal concurrency.
        runs.push(await runCeilingOnce(ctx, size, bestConcurrency, 'ceiling', conv))
        runs.push(await runCeilingOnce(ctx, size, bestConcurrency, 'ceiling-apply', conv))
        runs.push(await runOurs(ctx, size, 'ours-best', { concurrency: bestConcurrency, qps: 0, conv }))
        runs.push(await runOurs(ctx, size, 'ours-default', { conv }))
      }
    }
    const find = (size: number, delayMs: number, tool: Tool) =>
      runs.find((m) => m.size === size && m.tool === tool && m.conversion?.webhookDelayMs === delayMs)
    const ratio = (a: MigrationRun | undefined, b: MigrationRun | undefined) =>
      a && b ? round(a.objectsPerSecond / b.objectsPerSecond, 2) : null
    return {
      webhook:
        "a CRD whose v1 `spec: {replicas, image, ...}` and v2 `spec: {template: {replicas, containers: [{image}]}, ...}` (dev/conversion/shapes.ts) convert through the dev conversion webhook (dev/conversion/webhook.ts: HTTPS on 127.0.0.1, in the bench's main process, ConversionReview v1; the delay is slept before each answer).",
      sizes: conversionSizes,
      delaysMs: delays,
      runs,
      ratios: conversionSizes.flatMap((size) =>
        delays.map((delayMs) => {
          const ceiling = find(size, delayMs, 'ceiling')
          return {
            size,
            delayMs,
            oursBestVsCeiling: ratio(find(size, delayMs, 'ours-best'), ceiling),
            oursDefaultVsCeiling: ratio(find(size, delayMs, 'ours-default'), ceiling),
            ceilingApplyVsCeiling: ratio(find(size, delayMs, 'ceiling-apply'), ceiling),
          }
        }),
      ),
      probe,
    }
  } finally {
    await webhook.stop()
  }
}
