/**
 * The steps around each migration run, shared by ours, the ceiling and KSVM: a fresh CRD
 * with its objects (prepare), the proof in etcd (prove), the ConversionReviews counted
 * around the run (counted, conversionOf), and the CRD's removal after it.
 */
import path from 'node:path'
import { reviewCount, reviewsSince, settleReviews } from './conversion.js'
import { createBenchCrd, createWidgets, deleteBenchCrd, flipStorageToV2, managedFieldsCensus, proveStoredAtV2 } from './fixtures.js'
import { log } from './log.js'
import type { CaseSetup, Conv, MigrationContext } from './migration-context.js'
import type { MigrationRun, RunConversion, Tool } from './report.js'
import { round, waitForQuietProcesses } from './stats.js'

/**
 * A fresh CRD with `size` objects at v1, storage flipped to v2; with `conv`, the CRD
 * converts through the webhook, and the webhook is counted from here on.
 */
export async function prepare(ctx: MigrationContext, size: number, tool: Tool, conv?: Conv) {
  const { http, cp } = ctx
  const group = `${conv ? 'c' : 'r'}${ctx.nextRunSeq()}-${tool}.b${ctx.runId}.bench.crd-migrator.io`
  await createBenchCrd(http, group, conv ? { conversion: conv.webhook.conversion() } : {})
  conv?.webhook.resetStats()
  const t0 = performance.now()
  await createWidgets(http, group, size, 64)
  const createMs = performance.now() - t0
  let setup: CaseSetup | undefined
  if (conv) {
    await settleReviews(conv.webhook)
    const create = conv.webhook.stats.reviews
    conv.webhook.resetStats()
    await flipStorageToV2(http, cp.etcdEndpoint, group)
    // Longer quiet: the rebuilt storage's watch caches start in the background.
    await settleReviews(conv.webhook, 1500)
    const flip = conv.webhook.stats.reviews
    setup = { setupReviews: { create, flip }, managedFieldsBefore: await managedFieldsCensus(http, group, 'v2') }
  } else {
    await flipStorageToV2(http, cp.etcdEndpoint, group)
  }
  // Every run starts on a quiet API server: the flip's storage rebuild (its watch cache
  // decodes every object again) is the operator's upgrade, not the run's work. The
  // smoke run shares its control plane with other tests: it never gets quiet there,
  // and a smoke run's figures are not results.
  const quiet = await waitForQuietProcesses(path.join(cp.dir, 'run'), ctx.settings.smoke ? { timeoutMs: 2000 } : {})
  log(
    `${tool} N=${size}: ${size} objects created at v1 in ${round(createMs / 1000, 1)} s (${Math.round(size / (createMs / 1000))}/s); storage flipped to v2${setup ? ` (conversion: ${setup.setupReviews.create} reviews for the creates, ${setup.setupReviews.flip} for the flip)` : ''}; control plane quiet after ${round(quiet.waitedMs / 1000, 1)} s (${round(quiet.cpuPercent, 0)}% of a core${quiet.timedOut ? ', gave up waiting' : ''})`,
  )
  return { group, createMs, setup }
}

/** Every object of the run's CRD stored at v2 in etcd (with `conv`, in v2's shape too); logged when not. */
export async function prove(ctx: MigrationContext, group: string, size: number, conv?: Conv) {
  const etcd = await proveStoredAtV2(ctx.cp.etcdEndpoint, group, size, { checkV2Shape: conv !== undefined })
  if (!etcd.allV2)
    log(`NOT all at v2 in etcd: ${JSON.stringify(etcd.byApiVersion)}${etcd.shape ? `; v2 shape ${JSON.stringify(etcd.shape)}` : ''}`)
  return etcd
}

/** How long a migrating process may take before it is killed. */
export const timeoutFor = (size: number, conv?: Conv) => 120_000 + size * 20 + (conv ? size * conv.delayMs * 2 : 0)

/**
 * Runs the migrating process; with `conv`, at the webhook's delay, counting the reviews
 * from just before it starts until the webhook is quiet after it exits.
 */
export async function counted<T>(size: number, run: () => Promise<T>, conv?: Conv) {
  if (!conv) return { r: await run() }
  conv.webhook.setDelay(conv.delayMs)
  conv.webhook.resetStats()
  try {
    const r = await run()
    const exited = performance.now()
    const atExit = reviewCount(conv.webhook.stats)
    // The time of the last review after the exit: the webhook's counter polled.
    let lastAt = exited
    let seen = atExit.reviews
    const poll = setInterval(() => {
      if (conv.webhook.stats.reviews !== seen) {
        seen = conv.webhook.stats.reviews
        lastAt = performance.now()
      }
    }, 10)
    // The API server's watch cache of v1 converts the writes' events one at a time and
    // can be far behind: give it until every event could have been converted.
    await settleReviews(conv.webhook, 500, 30_000 + size * (conv.delayMs + 5) * 2).finally(() => clearInterval(poll))
    const all = reviewCount(conv.webhook.stats)
    return { r, atExit, all, after: reviewsSince(all, atExit).reviews, lastAfterMs: lastAt - exited }
  } finally {
    conv.webhook.setDelay(0)
  }
}

/**
 * After a plain run (proved): its CRD and objects go, so the API server's watch caches
 * and etcd do not carry every earlier run's objects into the next (100,000 objects per
 * run add up). Waited for: the deletion is work of the API server.
 */
export const dropCrd = (ctx: MigrationContext, group: string, size: number) => deleteBenchCrd(ctx.http, group, 180_000 + size * 10)

/** After a conversion run (proved, counted): its CRD goes, so nothing of it is counted in the next. */
export async function dropConversionCrd(ctx: MigrationContext, group: string, size: number, conv: Conv) {
  await deleteBenchCrd(ctx.http, group)
  await settleReviews(conv.webhook, 500, 30_000 + size * 10)
}

/** What the webhook saw of a conversion run, from `counted`'s figures and the setup's. */
export async function conversionOf(
  ctx: MigrationContext,
  group: string,
  size: number,
  conv: Conv,
  setup: CaseSetup,
  c: { all?: ReturnType<typeof reviewCount>; after?: number; lastAfterMs?: number },
  write: string,
  extra: Pick<RunConversion, 'requests' | 'productReport'> = {},
): Promise<RunConversion> {
  const all = c.all!
  return {
    webhookDelayMs: conv.delayMs,
    write,
    reviews: all.reviews,
    objects: all.objects,
    byDirection: all.byDirection,
    reviewsPerObject: round(all.reviews / size, 3)!,
    objectsPerReview: all.reviews ? round(all.objects / all.reviews, 3) : null,
    reviewsAfterExit: c.after ?? 0,
    lastReviewAfterExitMs: round(c.lastAfterMs ?? 0, 0)!,
    ...setup,
    managedFieldsAfter: await managedFieldsCensus(ctx.http, group, 'v2'),
    ...extra,
  }
}

/** The no-op write ours sent, from its requests (OursChildOutput.requests). */
export function writeOf(requests: Record<string, number>): string {
  const writes = Object.keys(requests).filter((k) => /^PATCH \S+ object/.test(k))
  const kinds = new Set(
    writes.map((k) => (k.includes('apply-patch') ? 'apply' : k.includes('merge-patch') ? 'merge-patch' : null)).filter(Boolean),
  )
  return kinds.size ? [...kinds].join(' + ') : 'none seen'
}

/** The run's ConversionReviews for its log line ('' for a plain run). */
export function reviewsText(run: MigrationRun): string {
  const c = run.conversion
  return c
    ? `; ${c.reviews} ConversionReviews = ${c.reviewsPerObject}/object ${JSON.stringify(c.byDirection)}, ${c.objectsPerReview} objects/review`
    : ''
}
