import type { Logger } from 'pino'
import { StateAnnotation } from '../config/annotations.js'
import { getCrd, patchCrdAnnotations, patchStoredVersions } from '../kube/crds.js'
import { waitForStorageVersion } from '../kube/discovery.js'
import type { EventRecorder } from '../kube/events.js'
import { isConflict, isNotFound, type KubeHttp } from '../kube/http.js'
import { listMetadata } from '../kube/list-metadata.js'
import { resourceRef } from '../kube/paths.js'
import type { CustomResourceDefinition, PartialObjectMetadata } from '../kube/types.js'
import { processCheckpointSeal, type CheckpointBinding, type CheckpointSeal } from './checkpoint-seal.js'
import { decideFreeze, freezeAnnotations, readFreezeState } from './freeze.js'
import { managedFieldsPolicy } from './managed-fields.js'
import { scanManagedFields } from './scan.js'
import type { MigratorMetrics } from './metrics.js'
import { makeCleanupHandler, makeRewriteHandler, needsCleanup, type WriteContext } from './object-writes.js'
import { Phase, planCrd, versionHasStatusSubresource, type CrdPlan } from './plan.js'
import { ThrottleGate, withRetry } from './retry.js'
import { walkObjects, type Outcome, type WalkProgress, type WalkResult } from './walker.js'

export interface MigrationSettings {
  migratingAnnotation: string
  phases: readonly Phase[]
  useStatusSubresource: boolean
  concurrency: number
  qps: number
  pageSize: number
  maxAttempts: number
  progressIntervalMs: number
  rewriteServedManagedFields: boolean
  /** How long an owner may go without a heartbeat before its freeze is taken over. */
  takeoverAfterMs: number
  /** How long the new storage version must be visible in discovery before objects are rewritten (default 2 s). */
  storageSettleMs?: number
  /** Give up waiting for the API server to switch storage after this long (default 60 s). */
  storageSettleTimeoutMs?: number
}

export interface MigrationContext {
  http: KubeHttp
  logger: Logger
  /** Identity of this run, written as the freeze owner. */
  owner: string
  metrics?: MigratorMetrics
  events?: EventRecorder
  signal?: AbortSignal
  onProgress?: (phase: Phase, progress: WalkProgress) => void
  /** Seals the checkpoints this run writes and verifies the one it resumes from; default: this process's own. */
  checkpointSeal?: CheckpointSeal
}

export type MigrationOutcome = 'Succeeded' | 'Failed' | 'Skipped'
/** Why a run was Skipped, as a value callers can branch on (the reason text is for people). */
export type SkipReason = 'blocked' | 'frozen-by-another' | 'in-progress' | 'up-to-date'

export interface MigrationResult {
  crd: string
  outcome: MigrationOutcome
  reason: string
  skipReason?: SkipReason
  storageVersion: string | undefined
  /** The CRD's uid and generation this run looked at. */
  crdUid: string | undefined
  generation: number
  storedVersionsBefore: string[]
  storedVersionsAfter: string[]
  storage?: WalkResult
  cleanup?: WalkResult & { entriesRemoved: number }
  resumedFrom?: string
  durationMs: number
  /** Whether the run ended with the CRD left frozen (the unfreeze itself failed). */
  leftFrozen: boolean
}

export class MigrationFailed extends Error {}

/**
 * One migration of one CRD: freeze, rewrite every object in the storage version, set
 * status.storedVersions, clean managedFields of unserved versions, unfreeze. The unfreeze
 * runs whatever happened before it.
 */
export async function migrateCrd(name: string, settings: MigrationSettings, ctx: MigrationContext): Promise<MigrationResult> {
  const started = Date.now()
  const log = ctx.logger.child({ crd: name })
  // Reads and the freeze are retried on transient errors like the writes are (the freeze
  // carries the resourceVersion it was decided on, so a repeat cannot freeze a CRD that
  // changed meanwhile: it gets a 409 and the run stops before it starts).
  const retry = { maxAttempts: settings.maxAttempts, ...(ctx.signal ? { signal: ctx.signal } : {}) }
  let crd = await withRetry(() => getCrd(ctx.http, name), retry)
  const plan = planCrd(crd)
  const base = {
    crd: name,
    storageVersion: plan.storageVersion,
    crdUid: crd.metadata.uid,
    generation: plan.generation,
    storedVersionsBefore: plan.storedVersions,
    storedVersionsAfter: plan.storedVersions,
    leftFrozen: false,
  }
  const skip = (skipReason: SkipReason, reason: string): MigrationResult => {
    log.info({ reason }, 'migration skipped')
    ctx.metrics?.migrations.inc({ result: 'Skipped' })
    return { ...base, outcome: 'Skipped', reason, skipReason, durationMs: Date.now() - started }
  }
  if (plan.blockedReason || !plan.storageVersion) return skip('blocked', plan.blockedReason ?? 'no storage version')
  const storageVersion = plan.storageVersion

  const freeze = decideFreeze(readFreezeState(crd, settings.migratingAnnotation), ctx.owner, storageVersion, settings.takeoverAfterMs)
  if (freeze.action === 'foreign') return skip('frozen-by-another', freeze.reason)
  if (freeze.action === 'wait') return skip('in-progress', freeze.reason)

  // A resumed freeze runs the storage phase whatever storedVersions says now: the run that
  // froze the CRD did so for a reason, and storedVersions could have been narrowed since.
  const runStorage = settings.phases.includes(Phase.StorageVersionMigration) && (plan.storageMigrationNeeded || freeze.action === 'resume')
  const runCleanup = settings.phases.includes(Phase.CleanupManagedFields)
  if (settings.useStatusSubresource && runStorage && !versionHasStatusSubresource(crd, storageVersion)) {
    return skip('blocked', `useStatusSubresource is set but version ${storageVersion} has no status subresource`)
  }
  if (freeze.action === 'freeze' && !runStorage) {
    if (!runCleanup) return skip('up-to-date', `nothing to do: status.storedVersions is [${storageVersion}]`)
    const pending = await countManagedFieldsWork(crd, plan, settings, ctx)
    if (pending === 0) {
      await recordUpToDate(ctx, crd)
      return skip('up-to-date', `nothing to do: status.storedVersions is [${storageVersion}] and no managedFields entry of an unserved version`)
    }
  }

  const seal = ctx.checkpointSeal ?? processCheckpointSeal()
  let resumedFrom: string | undefined
  let unverifiedCheckpoint: string | undefined
  if (freeze.action === 'resume') {
    const state = readFreezeState(crd, settings.migratingAnnotation)
    const binding = checkpointBinding(crd, storageVersion, state.frozenGeneration, state.startedAt)
    if (freeze.checkpoint !== undefined) {
      if (binding && seal.verify(binding, freeze.checkpoint, state.checkpointSeal)) resumedFrom = freeze.checkpoint
      else unverifiedCheckpoint = freeze.checkpoint
    }
    log.info({ previousOwner: freeze.previousOwner, checkpoint: freeze.checkpoint, trusted: resumedFrom !== undefined }, 'resuming a frozen migration')
    if (unverifiedCheckpoint !== undefined) {
      log.warn({ checkpoint: unverifiedCheckpoint, keySource: seal.source },
        'the checkpoint on the CRD has no seal this migrator can verify; every object is looked at again (objects already in the storage version cost a no-op request)')
    }
    const rv = crd.metadata.resourceVersion
    crd = await withRetry(() => patchCrdAnnotations(ctx.http, name, { [StateAnnotation.owner]: ctx.owner, [StateAnnotation.heartbeat]: new Date().toISOString() }, rv), retry)
  } else {
    const rv = crd.metadata.resourceVersion
    crd = await withRetry(() => patchCrdAnnotations(ctx.http, name, freezeAnnotations(settings.migratingAnnotation, ctx.owner, storageVersion, plan.generation), rv), retry)
  }
  const frozenGeneration = readFreezeState(crd, settings.migratingAnnotation).frozenGeneration ?? plan.generation
  log.info({ storageVersion, generation: frozenGeneration, storedVersions: plan.storedVersions, resumedFrom }, 'CRD frozen; migration started')
  await ctx.events?.record(crd, 'Normal', 'MigrationStarted', `Migrating to storage version ${storageVersion} (storedVersions ${JSON.stringify(plan.storedVersions)})${resumedFrom ? `, resuming after ${resumedFrom}` : ''}${unverifiedCheckpoint !== undefined ? `; the checkpoint ${unverifiedCheckpoint} has no valid seal, so every object is checked again` : ''}`)

  const frozen = readFreezeState(crd, settings.migratingAnnotation)
  const binding = checkpointBinding(crd, storageVersion, frozenGeneration, frozen.startedAt)
  const sealCheckpoint = (checkpoint: string) => (binding ? seal.seal(binding, checkpoint) : null)
  const state = new StateWriter(ctx, name, settings.progressIntervalMs, sealCheckpoint)
  const result: MigrationResult = { ...base, outcome: 'Failed', reason: '', durationMs: 0, ...(resumedFrom ? { resumedFrom } : {}) }
  try {
    if (runStorage) {
      await state.phase(Phase.StorageVersionMigration)
      await waitForStorageVersion(ctx.http, { group: crd.spec.group, plural: crd.spec.names.plural, kind: crd.spec.names.kind }, storageVersion, {
        timeoutMs: settings.storageSettleTimeoutMs ?? 60_000,
        settleMs: settings.storageSettleMs ?? 2_000,
        ...(ctx.signal ? { signal: ctx.signal } : {}),
      })
      result.storage = await runPhase(Phase.StorageVersionMigration, crd, storageVersion, settings, ctx, state, resumedFrom)
      const failed = result.storage.counts.failed
      if (failed > 0) throw new MigrationFailed(`${failed} object(s) could not be rewritten, e.g. ${result.storage.failures[0]?.key}: ${result.storage.failures[0]?.error}`)
      await state.phase('UpdatingStoredVersions')
      crd = await updateStoredVersions(ctx, name, storageVersion, frozenGeneration, settings.maxAttempts)
      result.storedVersionsAfter = crd.status?.storedVersions ?? []
      log.info({ storedVersions: result.storedVersionsAfter }, 'status.storedVersions updated')
    }
    if (runCleanup) {
      await state.phase(Phase.CleanupManagedFields)
      result.cleanup = await runPhase(Phase.CleanupManagedFields, crd, storageVersion, settings, ctx, state, undefined) as MigrationResult['cleanup']
      if (result.cleanup!.counts.failed > 0) {
        throw new MigrationFailed(`${result.cleanup!.counts.failed} object(s) kept managedFields of unserved versions, e.g. ${result.cleanup!.failures[0]?.key}: ${result.cleanup!.failures[0]?.error}`)
      }
    }
    result.outcome = 'Succeeded'
    result.reason = summarize(result)
  } catch (err) {
    result.outcome = 'Failed'
    result.reason = err instanceof Error ? err.message : String(err)
    log.error({ err }, 'migration failed')
  } finally {
    state.stop()
    result.durationMs = Date.now() - started
    result.leftFrozen = !(await unfreeze(ctx, name, settings.migratingAnnotation, result, frozenGeneration))
  }
  ctx.metrics?.migrations.inc({ result: result.outcome })
  const latest = await getCrd(ctx.http, name).catch(() => crd)
  await ctx.events?.record(latest, result.outcome === 'Succeeded' ? 'Normal' : 'Warning', `Migration${result.outcome}`, result.reason)
  log.info({ outcome: result.outcome, reason: result.reason, durationMs: result.durationMs }, 'migration finished')
  return result
}

function checkpointBinding(crd: CustomResourceDefinition, storageVersion: string, frozenGeneration: number | undefined, startedAt: string | undefined): CheckpointBinding | undefined {
  const uid = crd.metadata.uid
  if (!uid || frozenGeneration === undefined || !startedAt) return undefined
  return { crdUid: uid, targetStorageVersion: storageVersion, frozenGeneration, startedAt }
}

async function runPhase(
  phase: Phase,
  crd: CustomResourceDefinition,
  storageVersion: string,
  settings: MigrationSettings,
  ctx: MigrationContext,
  state: StateWriter,
  resumeAfter: string | undefined,
): Promise<WalkResult & { entriesRemoved: number }> {
  const started = Date.now()
  // Caps the writes in flight below the configured concurrency while the API server throttles.
  const gate = new ThrottleGate({ maxConcurrency: settings.concurrency })
  const write: WriteContext = {
    http: ctx.http,
    ref: resourceRef(crd, storageVersion),
    retry: {
      maxAttempts: settings.maxAttempts,
      gate,
      ...(ctx.signal ? { signal: ctx.signal } : {}),
      onThrottled: () => ctx.metrics?.throttled.inc(),
      onRetry: (err, attempt) => ctx.logger.debug({ crd: crd.metadata.name, err: String(err), attempt }, 'retrying write'),
    },
  }
  let entriesRemoved = 0
  const policy = phase === Phase.CleanupManagedFields ? managedFieldsPolicy(crd, storageVersion, settings) : undefined
  const handler = policy
    ? makeCleanupHandler(write, policy, removed => { entriesRemoved += removed })
    : makeRewriteHandler(write, settings.useStatusSubresource)
  const labels = { crd: crd.metadata.name, phase }
  const pages = listMetadata(ctx.http, write.ref, {
    pageSize: settings.pageSize,
    ...(ctx.signal ? { signal: ctx.signal } : {}),
    fetchPage: fetch => withRetry(fetch, write.retry),
    onRestart: after => ctx.logger.warn({ crd: crd.metadata.name, after }, 'list continue token expired; listing again after the last key seen'),
  })
  try {
    const result = await walkObjects(pages, handler, {
      concurrency: settings.concurrency,
      qps: settings.qps,
      ...(resumeAfter !== undefined ? { resumeAfter } : {}),
      ...(ctx.signal ? { signal: ctx.signal } : {}),
      // Objects with nothing to clean are settled from the list, not paced at --qps.
      ...(policy ? { skip: (item: PartialObjectMetadata) => !needsCleanup(item, policy), onSkipped: () => ctx.metrics?.objects.inc({ ...labels, outcome: 'skipped' }) } : {}),
      onWriteStart: () => ctx.metrics?.writesInFlight.inc(),
      onWriteEnd: (outcome: Outcome | 'failed', seconds: number) => {
        ctx.metrics?.writesInFlight.dec()
        ctx.metrics?.writeDuration.observe({ phase }, seconds)
        ctx.metrics?.objects.inc({ ...labels, outcome })
      },
      onProgress: progress => {
        ctx.metrics?.remaining.set(labels, Math.max(0, (progress.total ?? progress.counts.seen) - done(progress)))
        ctx.onProgress?.(phase, progress)
        void state.progress(phase, progress)
      },
    })
    await state.progress(phase, { counts: result.counts, total: result.counts.seen, checkpoint: result.checkpoint, inFlight: 0 }, true)
    ctx.metrics?.phaseDuration.observe({ ...labels, result: result.counts.failed > 0 ? 'Failed' : 'Succeeded' }, (Date.now() - started) / 1000)
    return { ...result, entriesRemoved }
  } catch (err) {
    ctx.metrics?.phaseDuration.observe({ ...labels, result: 'Failed' }, (Date.now() - started) / 1000)
    throw err
  } finally {
    ctx.metrics?.remaining.remove(labels)
  }
}


async function countManagedFieldsWork(crd: CustomResourceDefinition, plan: CrdPlan, settings: MigrationSettings, ctx: MigrationContext): Promise<number> {
  const scan = await scanManagedFields(ctx.http, crd, plan.storageVersion!, settings, ctx.signal)
  return scan.objects
}

/** Remembers that this generation needs nothing, so the controller does not scan it again. */
async function recordUpToDate(ctx: MigrationContext, crd: CustomResourceDefinition): Promise<void> {
  const a = crd.metadata.annotations ?? {}
  const generation = String(crd.metadata.generation ?? 0)
  if (a[StateAnnotation.observedGeneration] === generation && a[StateAnnotation.lastResult] === 'Succeeded') return
  await patchCrdAnnotations(ctx.http, crd.metadata.name, { [StateAnnotation.observedGeneration]: generation, [StateAnnotation.lastResult]: 'Succeeded' })
}

/**
 * The defence in depth of KEP-2855: the webhook should have kept the storage version
 * still, but storedVersions is only narrowed when the CRD provably has the storage
 * version and generation it had when the objects were rewritten.
 */
async function updateStoredVersions(ctx: MigrationContext, name: string, storageVersion: string, frozenGeneration: number, maxAttempts: number): Promise<CustomResourceDefinition> {
  // Every object is done by now: an API server restart or an etcd hiccup at this point
  // must not fail the run. Both calls are safe to repeat: the read is a read, and the
  // patch carries the resourceVersion as precondition, so a retry after a lost answer
  // gets a 409 and goes round the loop (read, check, patch) again.
  const retry = { maxAttempts, ...(ctx.signal ? { signal: ctx.signal } : {}) }
  for (let attempt = 1; ; attempt++) {
    const crd = await withRetry(() => getCrd(ctx.http, name), retry)
    const plan = planCrd(crd)
    if (plan.storageVersion !== storageVersion) {
      throw new MigrationFailed(`storage version changed during the migration (${storageVersion} -> ${plan.storageVersion ?? 'none'}); status.storedVersions left as ${JSON.stringify(plan.storedVersions)}, will migrate again`)
    }
    if (plan.generation !== frozenGeneration) {
      throw new MigrationFailed(`CRD generation changed during the migration (${frozenGeneration} -> ${plan.generation}); status.storedVersions left as ${JSON.stringify(plan.storedVersions)}, will migrate again`)
    }
    try {
      return await withRetry(() => patchStoredVersions(ctx.http, name, [storageVersion], crd.metadata.resourceVersion!), retry)
    } catch (err) {
      // Our own progress annotations also move the resourceVersion; re-check and retry.
      if (!isConflict(err) || attempt >= 5) throw err
    }
  }
}

/** Returns whether the freeze is gone. Retries for a while: a CRD left frozen blocks storage edits. */
async function unfreeze(ctx: MigrationContext, name: string, migratingAnnotation: string, result: MigrationResult, frozenGeneration: number): Promise<boolean> {
  const annotations: Record<string, string | null> = {
    [migratingAnnotation]: null,
    [StateAnnotation.owner]: null,
    [StateAnnotation.heartbeat]: null,
    [StateAnnotation.checkpoint]: null,
    [StateAnnotation.checkpointSeal]: null,
    [StateAnnotation.phase]: result.outcome,
    [StateAnnotation.lastResult]: result.outcome === 'Succeeded' ? 'Succeeded' : `Failed: ${truncate(result.reason, 200)}`,
    [StateAnnotation.lastCounts]: countsAnnotation(result),
    [StateAnnotation.lastDuration]: `${(result.durationMs / 1000).toFixed(1)}s`,
    [StateAnnotation.finishedAt]: new Date().toISOString(),
  }
  if (result.outcome === 'Succeeded') annotations[StateAnnotation.observedGeneration] = String(frozenGeneration)
  try {
    // Deliberately not tied to ctx.signal: a cancelled run must still lift its freeze.
    await withRetry(() => patchCrdAnnotations(ctx.http, name, annotations), { maxAttempts: 8, baseDelayMs: 500, maxDelayMs: 15_000 })
    return true
  } catch (err) {
    if (isNotFound(err)) return true
    ctx.logger.error({ crd: name, err }, 'could not remove the migrating annotation; the CRD stays frozen until a later run resumes it')
    return false
  }
}

function countsAnnotation(result: MigrationResult): string {
  const parts: string[] = []
  if (result.storage) {
    const c = result.storage.counts
    parts.push(`rewritten=${c.rewritten + c.conflict}`, `alreadyCurrent=${c.current}`, `gone=${c.gone}`, `failed=${c.failed}`)
    if (c.resumed) parts.push(`resumed=${c.resumed}`)
  }
  if (result.cleanup) parts.push(`managedFieldsCleaned=${result.cleanup.counts.rewritten}`, `managedFieldsEntriesRemoved=${result.cleanup.entriesRemoved}`, `cleanupFailed=${result.cleanup.counts.failed}`)
  return parts.join(' ')
}

function summarize(result: MigrationResult): string {
  const parts: string[] = []
  if (result.storage) parts.push(`${result.storage.counts.seen} object(s) rewritten in ${result.storageVersion}, storedVersions ${JSON.stringify(result.storedVersionsAfter)}`)
  if (result.cleanup) parts.push(`${result.cleanup.entriesRemoved} managedFields entr${result.cleanup.entriesRemoved === 1 ? 'y' : 'ies'} of unserved versions removed from ${result.cleanup.counts.rewritten} object(s)`)
  return parts.join('; ') || 'nothing to do'
}

const truncate = (s: string, n: number) => (s.length > n ? `${s.slice(0, n - 1)}…` : s)

export function done(p: WalkProgress): number {
  const c = p.counts
  return c.rewritten + c.current + c.skipped + c.gone + c.conflict + c.failed + c.resumed
}

/**
 * Writes phase, progress, checkpoint and heartbeat annotations on a timer, never per
 * object: the CRD is watched by every controller in the cluster, so per-object updates
 * would be a storm. The heartbeat also tells other replicas this run is alive.
 */
class StateWriter {
  private latest: { phase: Phase; progress: string; checkpoint: string | undefined } | undefined
  private written = ''
  private pending: Promise<unknown> = Promise.resolve()
  private readonly timer: NodeJS.Timeout

  constructor(
    private readonly ctx: MigrationContext,
    private readonly name: string,
    intervalMs: number,
    private readonly sealCheckpoint: (checkpoint: string) => string | null,
  ) {
    this.timer = setInterval(() => void this.flush(), intervalMs)
    this.timer.unref()
  }

  async phase(phase: string): Promise<void> {
    this.latest = undefined
    await this.write({ [StateAnnotation.phase]: phase, [StateAnnotation.progress]: null })
  }

  /** Remembers the latest progress; the timer writes it. `final` writes it now. */
  async progress(phase: Phase, p: WalkProgress, final = false): Promise<void> {
    this.latest = { phase, progress: `${done(p)}/${p.total ?? '?'}`, checkpoint: p.checkpoint }
    if (final) await this.flush()
  }

  stop(): void {
    clearInterval(this.timer)
  }

  private flush(): Promise<void> {
    const annotations: Record<string, string | null> = {}
    const latest = this.latest
    if (latest) {
      annotations[StateAnnotation.progress] = latest.progress
      if (latest.phase === Phase.StorageVersionMigration) {
        annotations[StateAnnotation.checkpoint] = latest.checkpoint ?? null
        annotations[StateAnnotation.checkpointSeal] = latest.checkpoint === undefined ? null : this.sealCheckpoint(latest.checkpoint)
      }
    }
    const key = JSON.stringify(annotations)
    // Heartbeat even without news, so a slow phase is not mistaken for a dead run.
    if (key === this.written && latest) annotations[StateAnnotation.phase] = latest.phase
    this.written = key
    return this.write(annotations)
  }

  private write(annotations: Record<string, string | null>): Promise<void> {
    const next = this.pending.then(async () => {
      try {
        await patchCrdAnnotations(this.ctx.http, this.name, { ...annotations, [StateAnnotation.heartbeat]: new Date().toISOString() })
      } catch (err) {
        // Progress is informational; the migration goes on and the next write may succeed.
        this.ctx.logger.warn({ crd: this.name, err: String(err) }, 'could not write progress annotations')
      }
    })
    this.pending = next
    return next
  }
}
