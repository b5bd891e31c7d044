/** A run that holds its freeze, as every phase is handed it (phases/run-phases.ts): begun after the decision, always ended. */
import type { Logger } from 'pino'
import { CrdMigratorError, errorMessage } from '../errors.js'
import { conversionWebhookOf } from '../kube/conversion.js'
import type { CustomResourceDefinition } from '../kube/types.js'
import type { MigrationContext, MigrationResult, MigrationSettings, RunContext } from './context.js'
import { ConversionGate } from './conversion/gate.js'
import type { RunPlan, RunStart } from './decide.js'
import { processCheckpointSeal } from './freeze/checkpoint-seal.js'
import { guardFreeze, type FreezeGuard } from './freeze/freeze-guard.js'
import { freezeCrd, latestCrd, unfreezeCrd, type Frozen } from './freeze/freeze.js'
import { StateWriter } from './freeze/state-writer.js'
import { handOffFreeze, handsOff } from './freeze/hand-off.js'
import type { RewriteWrite } from './phases/object-writes.js'
import { releaseHeldBuiltinMigrations } from './phases/builtin-storage.js'
import type { LosslessReport } from './lossless/verdict.js'
import { countsText } from './report.js'
import { failureText, type RunReporter } from './reporter.js'

export interface MigrationRun {
  name: string
  plan: RunPlan
  settings: MigrationSettings
  /** The run's context with the freeze guard's signal, its client's too: a lost freeze stops every request. */
  ctx: RunContext
  log: Logger
  /** The CRD as the run last wrote or read it. */
  crd: CustomResourceDefinition
  frozen: Frozen
  state: StateWriter
  /** Set when the CRD converts through a webhook: every request pauses there during an outage. */
  conversion: ConversionGate | undefined
  rewrite: RewriteWrite
  result: MigrationResult
  guard: FreezeGuard
  /** When migrateCrd began (the result's duration counts from there). */
  started: number
  /** The lossless check's first pages, before the freeze (migrate.ts). */
  checkedBeforeFreeze?: LosslessReport | undefined
}

/** Freezes the CRD (or takes over our own freeze, trusting only a sealed checkpoint) and sets the run up around it. */
export async function beginRun(
  { crd, plan: crdPlan, base, rewrite }: RunStart,
  plan: RunPlan,
  settings: MigrationSettings,
  ctx: RunContext,
  report: RunReporter,
  started: number,
): Promise<MigrationRun> {
  const name = crd.metadata.name
  const seal = ctx.checkpointSeal ?? processCheckpointSeal()
  const frozen = await freezeCrd(crd, plan.verdict, plan.storageVersion, settings, ctx, seal)
  report.started(crdPlan, plan.storageVersion, plan.verdict, frozen, seal.source, settings.progressIntervalMs)
  // From here the run holds only while its freeze does (freeze-guard.ts): everything it
  // does runs under the guard's signal, which a lifted freeze or a new generation aborts.
  const guard = guardFreeze(
    ctx.http,
    {
      name,
      uid: frozen.crd.metadata.uid,
      generation: frozen.frozenGeneration,
      migratingAnnotation: settings.migratingAnnotation,
      owner: ctx.owner,
      resourceVersion: frozen.crd.metadata.resourceVersion,
    },
    report.log,
    ctx.signal,
  )
  guard.check(frozen.crd)
  const binding = frozen.binding
  const state = new StateWriter(ctx, name, settings.progressIntervalMs, (checkpoint) => (binding ? seal.seal(binding, checkpoint) : null), {
    onWritten: (written) => guard.check(written),
    onForbidden: (err) => guard.heartbeatForbidden(err),
    halt: guard.signal,
  })
  const webhook = conversionWebhookOf(crd)
  const conversion =
    webhook === undefined
      ? undefined
      : new ConversionGate({
          webhook,
          outageLimitMs: settings.conversionOutageLimitMs,
          onOutage: (failure) => report.conversionOutage(frozen.crd, webhook, failure),
          onRecovered: (ms) => report.conversionRecovered(webhook, ms),
        })
  return {
    name,
    plan,
    settings,
    ctx: { ...ctx, signal: guard.signal, client: ctx.client.with({ signal: guard.signal }) },
    log: report.log,
    crd: frozen.crd,
    frozen,
    state,
    conversion,
    rewrite,
    result: { ...base, outcome: 'Failed', resumedFrom: frozen.resumeAfter },
    guard,
    started,
  }
}

/** The lost freeze a failed run ends with, if any: the storedVersions patch may see a takeover before the guard does (its owner test). */
export function lostFreeze(run: MigrationRun, err: unknown): CrdMigratorError | undefined {
  return run.guard.lost ?? (err instanceof CrdMigratorError && err.code === 'CRDM_FREEZE_TAKEN_OVER' ? err : undefined)
}

/**
 * Lifts the freeze whatever happened, recording the outcome on the CRD, then releases a built-in migration it held back;
 * returns the CRD as it is now. Never lifts a freeze taken over by another instance (lifting it would end its new owner's run),
 * nor one handed off (`serve` stopping or its Lease lost: freeze/hand-off.ts): the next owner keeps it.
 */
export async function endRun(run: MigrationRun, outer: MigrationContext): Promise<CustomResourceDefinition> {
  const { result, conversion } = run
  run.guard.stop()
  // Progress the writer had not written yet goes with the unfreeze (kept on a failure).
  // Stopped in any case: no state write starts after this.
  const progress = await run.state.stop()
  if (conversion)
    result.conversion = {
      webhook: conversion.webhook,
      outages: conversion.outages,
      outageSeconds: Math.round(conversion.outageMs / 100) / 10,
    }
  result.durationMs = Date.now() - run.started
  const takenOver = run.guard.lost?.code === 'CRDM_FREEZE_TAKEN_OVER' ? run.guard.lost : undefined
  if (takenOver || result.errorCode === 'CRDM_FREEZE_TAKEN_OVER') {
    // Taken over after the last phase ended: still not ours to record or lift.
    if (takenOver && result.errorCode !== takenOver.code) {
      result.outcome = 'Failed'
      result.errorCode = takenOver.code
      result.reason = takenOver.message
    }
    // The freeze is held, by its new owner: not "left frozen" by us (the reason says who).
    result.leftFrozen = false
    return latestCrd(run.crd, outer)
  }
  if (handsOff(outer.signal) && result.outcome !== 'Succeeded') {
    const handedOff = await handOffFreeze(run.name, run.settings.migratingAnnotation, progress, outer)
    result.outcome = 'Failed'
    result.errorCode = 'CRDM_ABORTED'
    result.reason = handedOff
      ? `handed off to the next leader (${errorMessage(outer.signal?.reason)}): the freeze stays, the next leader resumes the run`
      : `stopped (${errorMessage(outer.signal?.reason)}): the freeze stays until the next leader resumes the run`
    result.leftFrozen = true
    return run.crd
  }
  const unfrozen = await unfreezeCrd(
    run.name,
    {
      outcome: result.outcome === 'Succeeded' || result.outcome === 'Blocked' ? result.outcome : 'Failed',
      reason: failureText(result),
      counts: countsText(result),
      durationMs: result.durationMs,
      frozenGeneration: run.frozen.frozenGeneration,
      progress,
    },
    run.settings,
    outer,
  )
  if (!unfrozen.lifted) {
    result.leftFrozen = true
    notLifted(result, run.settings.migratingAnnotation, unfrozen.error)
    return latestCrd(run.crd, outer)
  }
  result.leftFrozen = false
  await releaseHeldBuiltinMigrations(outer, run.crd)
  return unfrozen.crd ?? latestCrd(run.crd, outer)
}

/**
 * The freeze could not be lifted: the run Failed whatever the phases did, so `migrate` exits non-zero and the Event is
 * a Warning. The reason gives the earlier outcome by its code only: a StorageVersionMigration's status quotes it.
 */
function notLifted(result: MigrationResult, migratingAnnotation: string, err: unknown): void {
  const before = result.outcome === 'Failed' && result.errorCode ? `Failed (${result.errorCode})` : result.outcome
  result.outcome = 'Failed'
  result.errorCode = 'CRDM_UNFREEZE_FAILED'
  result.reason =
    `the freeze could not be lifted (${errorMessage(err)}): the CRD stays frozen until a later run resumes it or someone allowed to ` +
    `lifts it (kubectl annotate crd ${result.crd} ${migratingAnnotation}-); the run itself had ended ${before}`
}
