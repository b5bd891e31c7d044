/**
 * One phase over every object: metadata listed page by page, each object written (a no-op
 * rewrite or a managedFields cleanup), the walk wired into metrics, progress and state.
 */
import { classifyConversionError, isConversionRefusal } from '../../kube/conversion.js'
import { listOrderKey, resourceRef, type ResourceRef } from '../../kube/paths.js'
import { CrdMigratorError, describeError } from '../../errors.js'
import type { CustomResourceDefinition, PartialObjectMetadata } from '../../kube/types.js'
import type { CleanupResult, MigrationContext, MigrationSettings, RunContext } from '../context.js'
import type { MigratorMetrics } from '../metrics.js'
import { managedFieldsPolicy, needsManagedFieldsCleanup, type ManagedFieldsPolicy } from './managed-fields.js'
import { makeCleanupHandler, makeRewriteHandler, type WriteContext } from './object-writes.js'
import { Phase } from '../plan.js'
import { ThrottleGate } from '../engine/retry.js'
import type { MigrationRun } from '../run.js'
import { settled, walkObjects, type Outcome, type WalkOptions, type WalkProgress } from '../engine/walker.js'
import { ServedEntriesCount } from './served-entries.js'

/** What a phase walks: a CRD's custom resources (through storage), or a built-in resource (storage phase only, merge patches). */
export type PhaseTarget =
  { kind: 'crd'; crd: CustomResourceDefinition; storageVersion: string } | { kind: 'resource'; name: string; ref: ResourceRef }

/** What a run hands each phase besides the target and settings (a frozen run's state, conversion gate and rewrite; none for a built-in resource). */
type PhaseRun = Partial<Pick<MigrationRun, 'state' | 'conversion' | 'rewrite'>> & {
  /** Objects up to this list key were finished by an earlier run (storage phase only). */
  resumeAfter?: string | undefined
  /** Told the counts so far when the run is stopped mid-phase (the phase then throws). */
  onStopped?: (partial: CleanupResult) => void
}

/** Finds and removes managedFields entries of versions the CRD does not define at all (see makeRewriteHandler). */
function undefinedVersionsDrop(
  write: WriteContext,
  crd: CustomResourceDefinition,
  settings: MigrationSettings,
  count: (cleaned: { removed: number; relabelled: number }) => void,
) {
  // Removed, not relabelled: only applies (webhook conversion) get here, and field paths differ between versions.
  const policy: ManagedFieldsPolicy = {
    ...managedFieldsPolicy(crd, write.ref.version, settings),
    servedVersions: new Set(crd.spec.versions.map((v) => v.name)),
    rewriteServedNonStorage: false,
    relabelUnserved: false,
  }
  return {
    present: (item: PartialObjectMetadata) => needsManagedFieldsCleanup(item.metadata.managedFields, policy),
    drop: makeCleanupHandler(write, policy, count),
  }
}

export async function runPhase(
  phase: Phase,
  target: PhaseTarget,
  settings: MigrationSettings,
  ctx: RunContext,
  run: PhaseRun,
): Promise<CleanupResult> {
  const started = Date.now()
  const crd = target.kind === 'crd' ? target.crd : undefined
  const name = target.kind === 'crd' ? target.crd.metadata.name : target.name
  const labels = { crd: name, phase }
  const { gate, stopFollowing } = phaseGate(settings, ctx, labels)
  const counts = { entriesRemoved: 0, entriesRelabelled: 0, conversionRefused: 0, staleWrites: 0 }
  const write: WriteContext = {
    client: ctx.client.with({
      gate,
      ...(run.conversion ? { conversion: run.conversion } : {}),
      onThrottled: () => ctx.metrics?.throttled.inc(),
      onRetry: (err, attempt) => ctx.logger.debug({ crd: name, err, attempt }, 'retrying write'),
    }),
    ref: target.kind === 'crd' ? resourceRef(target.crd, target.storageVersion) : target.ref,
    onStale: () => counts.staleWrites++,
  }
  const count = (cleaned: { removed: number; relabelled: number }) => {
    counts.entriesRemoved += cleaned.removed
    counts.entriesRelabelled += cleaned.relabelled
  }
  const policy = phase === Phase.CleanupManagedFields && crd ? managedFieldsPolicy(crd, write.ref.version, settings) : undefined
  const writeObject = policy
    ? makeCleanupHandler(write, policy, count)
    : makeRewriteHandler(write, settings.useStatusSubresource, run.rewrite, crd && undefinedVersionsDrop(write, crd, settings, count))
  // Every failed object is logged (the result keeps the first 100); a refusal by the
  // conversion webhook is named as such.
  const objectFailed = (key: string, err: unknown): unknown => {
    const conversion = classifyConversionError(err)
    const failure =
      conversion?.kind === 'refused'
        ? // The code says who refused; the message is the webhook's own.
          new CrdMigratorError('CRDM_CONVERSION_REFUSED', conversion.detail, { cause: err })
        : err
    if (conversion?.kind === 'refused') counts.conversionRefused++
    ctx.logger.warn({ crd: name, phase, object: key, error: describeError(failure) }, 'object failed')
    return failure
  }
  const handler = async (item: PartialObjectMetadata) => {
    try {
      return await writeObject(item)
    } catch (err) {
      throw objectFailed(listOrderKey(item.metadata.namespace, item.metadata.name), err)
    }
  }
  // The walk's live counts (updated in place), for a run stopped mid-phase.
  let live: WalkProgress | undefined
  // Entries of served old versions the cleanup leaves (they go once the version is unserved).
  const servedKept = policy && !policy.rewriteServedNonStorage ? new ServedEntriesCount(policy) : undefined
  try {
    const options = walkOptions(labels, settings, ctx, run, gate, { policy, servedKept, objectFailed })
    const result = await walkObjects(phasePages(write, crd, settings, ctx, name), handler, {
      ...options,
      onProgress: (progress) => {
        live = progress
        options.onProgress(progress)
      },
    })
    // The final count: written with the next tick, or by the unfreeze if the run ends first.
    run.state?.progress(phase, { counts: result.counts, total: result.counts.seen, checkpoint: result.checkpoint, inFlight: 0 })
    ctx.metrics?.phaseDuration.observe(
      { ...labels, result: result.counts.failed > 0 ? 'Failed' : 'Succeeded' },
      (Date.now() - started) / 1000,
    )
    const kept = servedKept?.result()
    return { ...result, ...counts, ...(kept ? { servedEntriesKept: kept } : {}) }
  } catch (err) {
    if (ctx.signal?.aborted && live) run.onStopped?.({ counts: { ...live.counts }, failures: [], checkpoint: live.checkpoint, ...counts })
    ctx.metrics?.phaseDuration.observe({ ...labels, result: 'Failed' }, (Date.now() - started) / 1000)
    throw err
  } finally {
    stopFollowing?.()
    ctx.metrics?.remaining.remove(labels)
    ctx.metrics?.concurrencyLimit.remove(labels)
    if (gate.decisions)
      ctx.logger.debug({ crd: name, phase, limit: gate.concurrencyLimit, decisions: gate.decisions }, 'adaptive concurrency')
  }
}

/**
 * The writes' gate: adaptive under the configured concurrency (retry.ts), or the process's shared
 * one (budget.ts), its limit followed in the metrics until `stopFollowing`.
 */
function phaseGate(
  settings: MigrationSettings,
  ctx: MigrationContext,
  labels: { crd: string; phase: Phase },
): { gate: ThrottleGate; stopFollowing: (() => void) | undefined } {
  const budget = ctx.budget
  const gate =
    budget?.gate ??
    new ThrottleGate({
      maxConcurrency: settings.concurrency,
      onLimitChange: (limit) => ctx.metrics?.concurrencyLimit.set(labels, limit),
    })
  const limitSeen = () => Math.min(settings.concurrency, gate.concurrencyLimit)
  const stopFollowing = budget?.onLimitChange(() => ctx.metrics?.concurrencyLimit.set(labels, limitSeen()))
  ctx.metrics?.concurrencyLimit.set(labels, budget ? limitSeen() : gate.concurrencyLimit)
  return { gate, stopFollowing }
}

/** The objects' metadata, page by page, through the phase's client. */
function phasePages(
  write: WriteContext,
  crd: CustomResourceDefinition | undefined,
  settings: MigrationSettings,
  ctx: MigrationContext,
  name: string,
) {
  // List pages ride out throttling and transient errors like the writes, through the same
  // gate (run-client.ts: their latency does not steer the limit).
  return write.client.listMetadata(write.ref, {
    pageSize: settings.pageSize,
    // A page the webhook refuses to convert to the storage version is listed through the
    // versions its objects may still be stored in; the refused objects then fail one by one.
    alternateVersions: (crd?.status?.storedVersions ?? []).filter(
      (v) => v !== write.ref.version && crd?.spec.versions.some((d) => d.name === v && d.served),
    ),
    listThroughAlternate: isConversionRefusal,
    // Objects no version can list (refused, and their stored version unserved) fail one by one.
    unreadable: isConversionRefusal,
    onRestart: (after) => ctx.logger.warn({ crd: name, after }, 'list continue token expired; listing again after the last key seen'),
  })
}

/** The walk's pacing, skips and hooks: metrics, progress and the state annotations. */
function walkOptions(
  labels: { crd: string; phase: Phase },
  settings: MigrationSettings,
  ctx: MigrationContext,
  run: PhaseRun,
  gate: ThrottleGate,
  cleanup: {
    policy: ManagedFieldsPolicy | undefined
    servedKept: ServedEntriesCount | undefined
    objectFailed: (key: string, err: unknown) => unknown
  },
): WalkOptions & { onProgress: (progress: WalkProgress) => void } {
  const { policy, servedKept } = cleanup
  const budget = ctx.budget
  // Per object: metric series bound once (no label hashing per write), one progress text.
  const m = ctx.metrics
  const outcomes = m && boundOutcomes(m, labels)
  const writeDuration = m?.writeDuration.labels({ phase: labels.phase })
  // A gauge read at each scrape: set four times a second, not after every object.
  let remainingSetAt = Number.NEGATIVE_INFINITY
  return {
    concurrency: settings.concurrency,
    concurrencyLimit: () => gate.concurrencyLimit,
    // With a budget the process's --qps is the shared bucket; a CRD's own qps applies besides.
    qps: budget ? budget.ownQps(settings.qps) : settings.qps,
    ...(budget?.rate ? { rate: budget.rate } : {}),
    ...(run.resumeAfter !== undefined ? { resumeAfter: run.resumeAfter } : {}),
    signal: ctx.signal,
    onUnreadable: (object) => {
      outcomes?.failed.inc()
      return cleanup.objectFailed(object.key, object.error)
    },
    // Objects with nothing to clean are settled from the list, not paced at --qps.
    ...(policy && {
      skip: (item: PartialObjectMetadata) => {
        servedKept?.add(item.metadata.managedFields)
        return !needsManagedFieldsCleanup(item.metadata.managedFields, policy)
      },
      onSkipped: () => outcomes?.skipped.inc(),
    }),
    ...(m && {
      onWriteStart: () => m.writesInFlight.inc(),
      onWriteEnd: (outcome: Outcome | 'failed', seconds: number) => {
        m.writesInFlight.dec()
        writeDuration!.observe(seconds)
        outcomes![outcome].inc()
      },
    }),
    onProgress: (progress) => {
      const now = performance.now()
      if (m && now - remainingSetAt >= 250) {
        remainingSetAt = now
        m.remaining.set(labels, Math.max(0, (progress.total ?? progress.counts.seen) - settled(progress)))
      }
      ctx.onProgress?.(labels.phase, progress)
      run.state?.progress(labels.phase, progress)
    },
  }
}

/** crd_migrator_objects_total of one phase, a series per outcome, bound once. */
function boundOutcomes(metrics: MigratorMetrics, labels: { crd: string; phase: Phase }) {
  const outcomes = ['rewritten', 'current', 'skipped', 'gone', 'conflict', 'failed'] as const
  const bound = outcomes.map((outcome) => [outcome, metrics.objects.labels({ ...labels, outcome })])
  return Object.fromEntries(bound) as Record<Outcome | 'failed', { inc: () => void }>
}
