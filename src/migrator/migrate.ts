/**
 * One migration of one CRD, top to bottom: plan, freeze, rewrite every object in the
 * storage version, narrow status.storedVersions, clean managedFields of unserved
 * versions, unfreeze. The unfreeze runs whatever happened before it. Each step lives in a
 * file of its own (freeze.ts, phase-runner.ts, stored-versions.ts, state-writer.ts); the
 * CRD's state annotations in state/crd-state.ts.
 */
import { getCrd, patchCrdAnnotations } from '../kube/crds.js'
import type { CustomResourceDefinition } from '../kube/types.js'
import { blockedPatch, decideFreeze, readCrdState, upToDatePatch, type FreezeVerdict } from '../state/crd-state.js'
import { conversionStrategy, conversionWebhookOf } from '../kube/conversion.js'
import { ConversionGate } from './conversion/gate.js'
import { preflightConversion } from './conversion/preflight.js'
import { processCheckpointSeal } from './freeze/checkpoint-seal.js'
import { CrdMigratorError, errorCode, errorMessage } from '../errors.js'
import type { MigrationContext, MigrationResult, MigrationSettings, SkipReason } from './context.js'
import { freezeCrd, latestCrd, unfreezeCrd } from './freeze/freeze.js'
import { runPhase } from './phases/object-phase.js'
import { Phase, planCrd, versionHasStatusSubresource, type CrdPlan } from './plan.js'
import { countsText, summarize } from './report.js'
import { requestRetry, withRetry } from './engine/retry.js'
import { scanManagedFields } from './phases/managed-fields-scan.js'
import type { WalkResult } from './engine/walker.js'
import { StateWriter } from './freeze/state-writer.js'
import { guardFreeze } from './freeze/freeze-guard.js'
import { STORAGE_SETTLE_MS, waitForStorageEverywhere, type StorageSwitchReport } from './phases/storage-switch.js'
import { rulesForGroup, type StashRule } from './phases/stashes/rules.js'
import { runStashPhase, type StashResult } from './phases/stashes/stash-phase.js'
import { narrowStoredVersions } from './phases/stored-versions.js'
import {
  builtinActivity,
  builtinBusyReason,
  releaseHeldBuiltinMigrations,
  runBuiltinStoragePhase,
  unbackedConditionText,
} from './phases/builtin-storage.js'
import { isForbidden } from '../kube/api-errors.js'
import { storageMigratingCondition } from '../kube/builtin-migrations.js'

export type { MigrationContext, MigrationOutcome, MigrationResult, MigrationSettings, SkipReason } from './context.js'

/** What a run will do once it holds the freeze. */
interface RunPlan {
  storageVersion: string
  verdict: Extract<FreezeVerdict, { action: 'freeze' | 'resume' }>
  runStorage: boolean
  /** Stash rules of this CRD's group (phase StashedObjectMigration); empty: the phase does not run. */
  stashRules: StashRule[]
  runCleanup: boolean
}

export async function migrateCrd(name: string, settings: MigrationSettings, ctx: MigrationContext): Promise<MigrationResult> {
  const started = Date.now()
  const log = ctx.logger.child({ crd: name })
  const crd = await withRetry(() => getCrd(ctx.http, name), requestRetry(settings.maxAttempts, ctx.signal))
  const plan = planCrd(crd)
  const base: MigrationResult = {
    crd: name,
    outcome: 'Skipped',
    reason: '',
    storageVersion: plan.storageVersion,
    crdUid: crd.metadata.uid,
    generation: plan.generation,
    storedVersionsBefore: plan.storedVersions,
    storedVersionsAfter: plan.storedVersions,
    durationMs: 0,
    leftFrozen: false,
  }

  // 1. Decide, before touching anything.
  const decided = await decideRun(crd, plan, settings, ctx)
  if ('skip' in decided) {
    log.info({ reason: decided.reason }, 'migration skipped')
    ctx.metrics?.migrations.inc({ result: 'Skipped' })
    return { ...base, reason: decided.reason, skipReason: decided.skip, durationMs: Date.now() - started }
  }
  const { storageVersion, verdict, runStorage, stashRules, runCleanup } = decided

  // 1b. A webhook-converted CRD: prove its webhook converts before freezing anything.
  const webhook = conversionWebhookOf(crd)
  if (webhook !== undefined) {
    const preflight = await preflightConversion(ctx.http, crd, storageVersion, settings.maxAttempts, ctx.signal)
    if (!preflight.ok) {
      const reason = `conversion webhook ${webhook} does not answer: ${preflight.detail}`
      log.warn({ webhook, detail: preflight.detail }, 'migration blocked: the conversion webhook does not answer; nothing frozen')
      ctx.metrics?.migrations.inc({ result: 'Blocked' })
      await patchCrdAnnotations(ctx.http, name, blockedPatch(reason)).catch((err: unknown) =>
        log.warn({ err }, 'could not record the Blocked state on the CRD'),
      )
      await ctx.events?.record(crd, 'Warning', 'MigrationBlocked', `CRDM_CONVERSION_OUTAGE: ${reason}`)
      return { ...base, outcome: 'Blocked', errorCode: 'CRDM_CONVERSION_OUTAGE', reason, durationMs: Date.now() - started }
    }
    log.debug({ webhook, reads: preflight.reads }, 'conversion webhook answers')
  }

  // 2. Freeze (or take over our own freeze, trusting only a sealed checkpoint).
  const seal = ctx.checkpointSeal ?? processCheckpointSeal()
  const frozen = await freezeCrd(crd, verdict, storageVersion, settings, ctx, seal)
  if (verdict.action === 'resume') {
    log.info(
      { previousOwner: verdict.previousOwner, checkpoint: verdict.checkpoint, trusted: frozen.resumeAfter !== undefined },
      'resuming a frozen migration',
    )
  }
  if (frozen.unverifiedCheckpoint !== undefined) {
    log.warn(
      { checkpoint: frozen.unverifiedCheckpoint, keySource: seal.source },
      'the checkpoint on the CRD has no seal this migrator can verify; every object is looked at again (objects already in the storage version cost a no-op request)',
    )
  }
  log.info(
    { storageVersion, generation: frozen.frozenGeneration, storedVersions: plan.storedVersions, resumedFrom: frozen.resumeAfter },
    'CRD frozen; migration started',
  )
  await ctx.events?.record(
    frozen.crd,
    'Normal',
    'MigrationStarted',
    startedMessage(storageVersion, plan, frozen.resumeAfter, frozen.unverifiedCheckpoint),
  )

  // From here the run holds only while its freeze does (freeze-guard.ts): everything it
  // does runs under the guard's signal, which a lifted freeze or a new generation aborts.
  const guard = guardFreeze(
    ctx.http,
    { name, uid: frozen.crd.metadata.uid, generation: frozen.frozenGeneration, migratingAnnotation: settings.migratingAnnotation },
    log,
    ctx.signal,
  )
  guard.check(frozen.crd)
  const runCtx: MigrationContext = { ...ctx, signal: guard.signal }
  const binding = frozen.binding
  const state = new StateWriter(ctx, name, settings.progressIntervalMs, (checkpoint) => (binding ? seal.seal(binding, checkpoint) : null), {
    onWritten: (crd) => guard.check(crd),
    halt: guard.signal,
  })
  const result: MigrationResult = { ...base, outcome: 'Failed', resumedFrom: frozen.resumeAfter }
  let current = frozen.crd
  const conversion = webhook !== undefined ? conversionGate(name, webhook, settings, ctx, frozen.crd) : undefined
  const run = {
    state,
    conversion,
    // See makeRewriteHandler: an apply fails during a webhook outage where an update would drop managedFields.
    rewrite: conversionStrategy(crd) === 'Webhook' ? ('apply' as const) : ('merge-patch' as const),
  }
  try {
    // 3. Every object in the storage version, then storedVersions := [storage].
    if (runStorage) {
      await state.phase(Phase.StorageVersionMigration)
      // Every API server must store the new version before any object is rewritten.
      result.apiServers = await storageSwitched(current, storageVersion, settings, runCtx, state)
      if (settings.engine === 'builtin') {
        // kube-controller-manager rewrites the objects; everything around it stays ours.
        result.builtin = await runBuiltinStoragePhase(current, settings, runCtx, state)
        log.info(
          { builtinMigration: result.builtin.name, durationMs: result.builtin.durationMs },
          'built-in StorageVersionMigration succeeded',
        )
      } else {
        result.storage = await runPhase(Phase.StorageVersionMigration, { kind: 'crd', crd: current, storageVersion }, settings, runCtx, {
          ...run,
          resumeAfter: frozen.resumeAfter,
        })
        failOnObjects(result.storage, 'could not be rewritten')
      }
    }
    // 3b. Copies stashed in other objects, before storedVersions says the old version can go.
    if (stashRules.length > 0) {
      await state.phase(Phase.StashedObjectMigration)
      result.stashes = await runStashPhase(current, storageVersion, stashRules, settings, runCtx)
      failOnStashes(result.stashes)
    }
    if (runStorage) {
      await state.phase('UpdatingStoredVersions')
      // And still, right before storedVersions says the old version is gone. The report is
      // the last check's: a run whose second check fails must not say every server stores it.
      result.apiServers = undefined
      result.apiServers = await storageSwitched(current, storageVersion, { ...settings, storageSettleMs: 0 }, runCtx, state)
      guard.signal.throwIfAborted()
      current = await narrowStoredVersions(
        runCtx,
        name,
        storageVersion,
        frozen.frozenGeneration,
        settings.maxAttempts,
        settings.migratingAnnotation,
      )
      result.storedVersionsAfter = current.status?.storedVersions ?? []
      log.info({ storedVersions: result.storedVersionsAfter }, 'status.storedVersions updated')
    }
    // 4. managedFields of unserved versions.
    if (runCleanup) {
      await state.phase(Phase.CleanupManagedFields)
      result.cleanup = await runPhase(Phase.CleanupManagedFields, { kind: 'crd', crd: current, storageVersion }, settings, runCtx, run)
      failOnObjects(result.cleanup, 'kept managedFields of unserved versions')
    }
    result.outcome = 'Succeeded'
    result.reason = summarize(result)
  } catch (err) {
    // Stopped from outside, or by a lost freeze: the reason it was given says why better
    // than the aborted request.
    const lost = guard.lost
    const stopped = ctx.signal?.aborted === true
    result.outcome = 'Failed'
    if (lost) {
      result.errorCode = lost.code
      result.reason = lost.message
    } else {
      result.errorCode = stopped ? 'CRDM_ABORTED' : errorCode(err)
      result.reason = stopped && ctx.signal?.reason instanceof Error ? ctx.signal.reason.message : errorMessage(err)
    }
    log.error({ err, code: result.errorCode }, 'migration failed')
  } finally {
    // 5. Unfreeze, whatever happened.
    guard.stop()
    await state.stop()
    if (conversion && webhook !== undefined)
      result.conversion = { webhook, outages: conversion.outages, outageSeconds: Math.round(conversion.outageMs / 100) / 10 }
    result.durationMs = Date.now() - started
    const outcome = result.outcome === 'Succeeded' ? 'Succeeded' : 'Failed'
    const lifted = await unfreezeCrd(
      name,
      {
        outcome,
        reason: failureText(result),
        counts: countsText(result),
        durationMs: result.durationMs,
        frozenGeneration: frozen.frozenGeneration,
      },
      settings,
      ctx,
    )
    result.leftFrozen = !lifted
  }
  if (!result.leftFrozen) await releaseHeldBuiltinMigrations(ctx, current)
  ctx.metrics?.migrations.inc({ result: result.outcome })
  await ctx.events?.record(
    await latestCrd(current, ctx),
    result.outcome === 'Succeeded' ? 'Normal' : 'Warning',
    `Migration${result.outcome}`,
    failureText(result),
  )
  log.info({ outcome: result.outcome, reason: result.reason, durationMs: result.durationMs }, 'migration finished')
  return result
}

/**
 * Whether to run at all, and which phases. A resumed freeze runs the storage phase
 * whatever storedVersions says now: the run that froze the CRD did so for a reason, and
 * storedVersions could have been narrowed since. Managed-fields-only work is counted
 * before freezing, so a CRD with nothing to do is never frozen.
 */
async function decideRun(
  crd: CustomResourceDefinition,
  plan: CrdPlan,
  settings: MigrationSettings,
  ctx: MigrationContext,
): Promise<RunPlan | { skip: SkipReason; reason: string }> {
  if (plan.blockedReason || !plan.storageVersion) return { skip: 'blocked', reason: plan.blockedReason ?? 'no storage version' }
  const storageVersion = plan.storageVersion
  const verdict = decideFreeze(readCrdState(crd, settings.migratingAnnotation), ctx.owner, storageVersion, settings.takeoverAfterMs)
  if (verdict.action === 'foreign') return { skip: 'frozen-by-another', reason: verdict.reason }
  if (verdict.action === 'wait') return { skip: 'in-progress', reason: verdict.reason }
  if (verdict.action === 'freeze') {
    const busy = await builtinBusy(crd, ctx)
    if (busy) return { skip: 'builtin-migration', reason: busy }
  }

  const runStorage = settings.phases.includes(Phase.StorageVersionMigration) && (plan.storageMigrationNeeded || verdict.action === 'resume')
  const runCleanup = settings.phases.includes(Phase.CleanupManagedFields)
  const stashRules = settings.phases.includes(Phase.StashedObjectMigration) ? rulesForGroup(settings.stashes ?? [], crd.spec.group) : []
  if (settings.useStatusSubresource && runStorage && !versionHasStatusSubresource(crd, storageVersion)) {
    return { skip: 'blocked', reason: `useStatusSubresource is set but version ${storageVersion} has no status subresource` }
  }
  if (verdict.action === 'freeze' && !runStorage) {
    // Stashes and managedFields are counted (read only) before freezing anything.
    const stashes = stashRules.length ? await runStashPhase(crd, storageVersion, stashRules, settings, ctx, { dryRun: true }) : undefined
    const stashWork = stashes ? stashes.counts.seen - stashes.counts.current : 0
    if (!runCleanup && stashWork === 0) return { skip: 'up-to-date', reason: `nothing to do: status.storedVersions is [${storageVersion}]` }
    const cleanupWork = runCleanup ? (await scanManagedFields(ctx.http, crd, storageVersion, settings, ctx.signal)).objects : 0
    if (cleanupWork === 0 && stashWork === 0) {
      // For `status` only: never read back for a decision.
      const patch = upToDatePatch(crd)
      if (patch) await patchCrdAnnotations(ctx.http, crd.metadata.name, patch)
      return {
        skip: 'up-to-date',
        reason: `nothing to do: status.storedVersions is [${storageVersion}] and no managedFields entry of an unserved version${stashes ? ', no stashed copy at another version' : ''}`,
      }
    }
  }
  return { storageVersion, verdict, runStorage, stashRules, runCleanup }
}

/**
 * Why Kubernetes' own migrator keeps us off this CRD now (one migrator at a time), or
 * undefined: a pending or running built-in StorageVersionMigration for its resource. A
 * StorageMigrating=True condition without one is said in the log and not waited for.
 * Without permission to list them only the CRD's condition is looked at (said in the log).
 */
async function builtinBusy(crd: CustomResourceDefinition, ctx: MigrationContext): Promise<string | undefined> {
  let activity
  try {
    activity = await builtinActivity(ctx.http, crd)
  } catch (err) {
    if (!isForbidden(err)) throw err
    ctx.logger.warn(
      { crd: crd.metadata.name, err },
      'cannot list storagemigration.k8s.io StorageVersionMigrations (RBAC); only the CRD condition tells whether the built-in migrator runs',
    )
    return builtinBusyReason({ condition: storageMigratingCondition(crd), migrations: undefined })
  }
  if (activity.api === undefined) return undefined
  const unbacked = unbackedConditionText(activity)
  if (unbacked !== undefined) {
    ctx.logger.warn(
      { crd: crd.metadata.name, condition: unbacked },
      'the CRD says StorageMigrating=True but no built-in StorageVersionMigration of its resource is pending or running (one was deleted mid-run, or someone else wrote it); not waiting for it',
    )
  }
  return builtinBusyReason(activity)
}

/**
 * Fails the run when objects failed. Refusals by the conversion webhook are listed by name
 * with the webhook's message (the first ten; all of them are in the log and the result).
 */
export function failOnObjects(phase: WalkResult & { conversionRefused?: number }, what: string): void {
  const failed = phase.counts.failed
  if (failed === 0) return
  const refused = phase.failures.filter((f) => f.error.startsWith('CRDM_CONVERSION_REFUSED'))
  if (phase.conversionRefused === failed) {
    const named = refused
      .slice(0, 10)
      .map((f) => `${f.key} (${f.error.replace(/^CRDM_CONVERSION_REFUSED: the conversion webhook refused it: /, '')})`)
    const more = failed > named.length ? `, and ${failed - named.length} more` : ''
    throw new CrdMigratorError(
      'CRDM_CONVERSION_REFUSED',
      `the conversion webhook refused ${failed} object(s), which ${what}: ${named.join('; ')}${more}; the others were migrated`,
    )
  }
  throw new CrdMigratorError(
    'CRDM_OBJECTS_FAILED',
    `${failed} object(s) ${what}, e.g. ${phase.failures[0]?.key}: ${phase.failures[0]?.error}`,
  )
}

/** Fails the run when stashes could not be migrated; each is named with its reason (the first ten). */
function failOnStashes(stashes: StashResult): void {
  const failed = stashes.counts.failed
  if (failed === 0) return
  const named = stashes.failures.slice(0, 10).map((f) => `${f.key} (${f.error})`)
  throw new CrdMigratorError(
    'CRDM_STASH_FAILED',
    `${failed} stashed cop${failed === 1 ? 'y' : 'ies'} not migrated: ${named.join('; ')}${failed > named.length ? `, and ${failed - named.length} more` : ''}`,
  )
}

/** Waits until every API server stores `storageVersion` (storage-switch.ts), telling the CRD and metrics. */
async function storageSwitched(
  crd: CustomResourceDefinition,
  storageVersion: string,
  settings: MigrationSettings,
  ctx: MigrationContext,
  state: StateWriter,
): Promise<StorageSwitchReport> {
  const report = await waitForStorageEverywhere(
    ctx.http,
    { group: crd.spec.group, plural: crd.spec.names.plural, kind: crd.spec.names.kind },
    storageVersion,
    {
      timeoutMs: settings.storageSettleTimeoutMs,
      settleMs: settings.storageSettleMs ?? STORAGE_SETTLE_MS,
      signal: ctx.signal,
      endpoints: settings.apiServerEndpoints,
      logger: ctx.logger.child({ crd: crd.metadata.name }),
      onWaiting: (servers) => void state.waiting(`waiting for API server(s) ${servers.join(', ')} to store ${storageVersion}`),
    },
  )
  ctx.metrics?.apiServers.set({ state: 'listed' }, report.listed)
  ctx.metrics?.apiServers.set({ state: 'checked' }, report.checked)
  return report
}

/** The run's conversion-webhook gate, wired to the log, Events and metrics. */
function conversionGate(
  name: string,
  webhook: string,
  settings: MigrationSettings,
  ctx: MigrationContext,
  crd: CustomResourceDefinition,
): ConversionGate {
  const log = ctx.logger.child({ crd: name, webhook })
  return new ConversionGate({
    webhook,
    outageLimitMs: settings.conversionOutageLimitMs,
    onOutage: (failure) => {
      log.warn({ detail: failure.detail }, 'conversion webhook does not answer; every request paused until it does')
      ctx.metrics?.conversionOutages.inc({ crd: name })
      void ctx.events?.record(
        crd,
        'Warning',
        'ConversionWebhookUnavailable',
        `Paused: conversion webhook ${webhook} does not answer (${failure.detail}); resuming when it does`,
      )
    },
    onRecovered: (ms) => {
      log.info({ outageSeconds: ms / 1000 }, 'conversion webhook answers again; resuming')
      ctx.metrics?.conversionOutageSeconds.inc({ crd: name }, ms / 1000)
    },
  })
}

/** The reason, led by its error code when the run failed. */
function failureText(result: MigrationResult): string {
  return result.errorCode ? `${result.errorCode}: ${result.reason}` : result.reason
}

function startedMessage(storageVersion: string, plan: CrdPlan, resumedFrom: string | undefined, unverified: string | undefined): string {
  let message = `Migrating to storage version ${storageVersion} (storedVersions ${JSON.stringify(plan.storedVersions)})`
  if (resumedFrom) message += `, resuming after ${resumedFrom}`
  if (unverified !== undefined) message += `; the checkpoint ${unverified} has no valid seal, so every object is checked again`
  return message
}
