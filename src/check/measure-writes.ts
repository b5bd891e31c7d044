/** `plan --measure`'s burst of dry-run writes (docs/operator-upgrade.md#how-long-will-it-take-plan---measure). */
import { describeError } from '../errors.js'
import { conversionStrategy } from '../kube/conversion.js'
import { Accept } from '../kube/http.js'
import { pageRequest } from '../kube/list-pages.js'
import { collectionPath, resourceRef } from '../kube/paths.js'
import type { CustomResourceDefinition, PartialObjectMetadata } from '../kube/types.js'
import type { RunClient } from '../migrator/engine/run-client.js'
import { runInParallel } from '../migrator/parallel.js'
import { planCrd } from '../migrator/plan.js'
import { plainText } from '../sanitize.js'
import { makeRewriteHandler } from '../migrator/phases/object-writes.js'
import type { WriteSample } from './write-rate.js'

export interface MeasureOptions {
  /** Objects written at most (spread over the CRDs in order). */
  samples: number
  /** Writes in flight at most: the migrator's --concurrency. */
  concurrency: number
  /** No write starts after this many milliseconds. */
  budgetMs: number
  /** The CRDs whose migration writes through the status subresource (--crds <name>.useStatusSubresource). */
  statusSubresource?: (crd: string) => boolean
  signal?: AbortSignal | undefined
}

/** One object to write, and the migrator's own rewrite of its CRD. */
interface Target {
  item: PartialObjectMetadata
  write: (item: PartialObjectMetadata) => Promise<unknown>
}

/**
 * Lists up to `samples` objects, then writes each once, timed, with the storage phase's own
 * write (makeRewriteHandler) through a dryRun=All client, so what is measured cannot drift from
 * what a migration sends. A 429 waits for its Retry-After: the wait is part of the rate.
 */
export async function measureWrites(
  client: RunClient,
  crds: readonly CustomResourceDefinition[],
  options: MeasureOptions,
): Promise<WriteSample> {
  const dryRun = client.asDryRun()
  try {
    return await timeWrites(await pickTargets(client, dryRun, crds, options), options)
  } finally {
    dryRun.http.close()
  }
}

async function timeWrites(targets: Target[], options: MeasureOptions): Promise<WriteSample> {
  const concurrency = Math.max(1, Math.min(options.concurrency, targets.length))
  let written = 0
  let failed = 0
  let firstError: string | undefined
  const started = performance.now()
  const deadline = started + options.budgetMs
  let ended = started
  await runInParallel(targets, concurrency, async (target) => {
    // No write starts after the budget: the targets left are passed over.
    if (performance.now() >= deadline) return
    options.signal?.throwIfAborted()
    try {
      await target.write(target.item)
      written++
    } catch (err) {
      options.signal?.throwIfAborted()
      failed++
      firstError ??= plainText(describeError(err))
    }
    ended = performance.now()
  })
  return { written, failed, wallMs: ended - started, concurrency, firstError }
}

/** The objects to write: a page of each CRD that has a storage version, until there are enough. */
async function pickTargets(
  client: RunClient,
  dryRun: RunClient,
  crds: readonly CustomResourceDefinition[],
  options: MeasureOptions,
): Promise<Target[]> {
  const targets: Target[] = []
  for (const crd of crds) {
    const left = options.samples - targets.length
    if (left <= 0) break
    const plan = planCrd(crd)
    if (!plan.storageVersion || plan.blockedReason || !plan.servedVersions.includes(plan.storageVersion)) continue
    const ref = resourceRef(crd, plan.storageVersion)
    const request = pageRequest<PartialObjectMetadata>(client, collectionPath(ref), {
      accept: Accept.partialObjectMetadataList,
      signal: options.signal,
    })
    // Right after a storage flip the API server answers 429 while it re-initialises storage.
    const page = await request({ limit: left, continue: undefined })
    // As the migrator writes this CRD: server-side apply when a webhook converts, else an empty merge patch.
    const write = makeRewriteHandler(
      { client: dryRun, ref },
      options.statusSubresource?.(crd.metadata.name) ?? false,
      conversionStrategy(crd) === 'Webhook' ? 'apply' : 'merge-patch',
    )
    for (const item of page.items.slice(0, left)) targets.push({ item, write })
  }
  return targets
}
