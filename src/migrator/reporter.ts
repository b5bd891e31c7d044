/**
 * What people see of a run: each outcome's log line, Event and metric, so the orchestrators carry
 * none; a failed run is classified here too, once. The words (summaries, counts) are report.ts's.
 */
import type { Logger } from 'pino'
import { errorCode, errorMessage, type CrdMigratorError } from '../errors.js'
import { ObjectsFailedError } from './phases/failures.js'
import type { CustomResourceDefinition } from '../kube/types.js'
import { describeResume, type FreezeVerdict } from '../state/crd-state.js'
import { writeBlocked } from '../state/crd-record.js'
import type { ConversionFailure } from '../kube/conversion.js'
import type { MigrationContext, MigrationResult } from './context.js'
import type { Frozen } from './freeze/freeze.js'
import type { CrdPlan } from './plan.js'

export class RunReporter {
  readonly log: Logger
  /** The start's Event, until it is recorded or folded into the end's (see started). */
  private start: { crd: CustomResourceDefinition; message: string; timer: NodeJS.Timeout } | undefined
  private startRecorded: Promise<void> | undefined

  /** `bindings`: the log's fields, `{ crd: name }` unless told. */
  constructor(
    readonly name: string,
    private readonly ctx: MigrationContext,
    bindings: Record<string, unknown> = { crd: name },
  ) {
    this.log = ctx.logger.child(bindings)
  }

  skipped(result: MigrationResult): MigrationResult {
    this.log.info({ reason: result.reason }, 'migration skipped')
    this.ctx.metrics?.migrations.inc({ result: 'Skipped' })
    return result
  }

  /** Nothing was frozen: the CRD's conversion webhook does not answer. Said on the CRD too. */
  async blocked(crd: CustomResourceDefinition, result: MigrationResult, webhook: string, detail: string): Promise<MigrationResult> {
    this.log.warn({ webhook, detail }, 'migration blocked: the conversion webhook does not answer; nothing frozen')
    return this.blockedOn(crd, result, result.reason)
  }

  /** Nothing was frozen or written: rewriting would change the objects' content (lossless/check.ts). Said on the CRD too. */
  async refused(crd: CustomResourceDefinition, result: MigrationResult): Promise<MigrationResult> {
    this.log.warn({ code: result.errorCode, reason: result.reason }, 'migration blocked before the freeze: rewriting would change data')
    return this.blockedOn(crd, result, failureText(result))
  }

  /** A Blocked run's metric, its state annotation (saying `text`) and its Event. */
  private async blockedOn(crd: CustomResourceDefinition, result: MigrationResult, text: string): Promise<MigrationResult> {
    this.ctx.metrics?.migrations.inc({ result: 'Blocked' })
    await writeBlocked(this.ctx.http, this.name, text).catch((err: unknown) =>
      this.log.warn({ err }, 'could not record the Blocked state on the CRD'),
    )
    await this.ctx.events?.record(crd, 'Warning', 'MigrationBlocked', failureText(result))
    return result
  }

  /** Nothing was frozen or written: the migrator may not list or patch the objects (migrator/access-preflight.ts). */
  async forbidden(crd: CustomResourceDefinition, result: MigrationResult): Promise<MigrationResult> {
    this.log.error({ code: result.errorCode, reason: result.reason }, 'migration refused: the migrator may not migrate these objects')
    this.ctx.metrics?.migrations.inc({ result: 'Failed' })
    await this.ctx.events?.record(crd, 'Warning', 'MigrationForbidden', failureText(result))
    return result
  }

  /**
   * The run began. Its Event waits `deferMs` (the progress interval): a run that ends sooner says its
   * start in the end's Event (one Event, not two); a longer one records it, so `kubectl events` shows it.
   */
  started(plan: CrdPlan, storageVersion: string, verdict: FreezeVerdict, frozen: Frozen, keySource: string, deferMs: number): void {
    if (verdict.action === 'resume') {
      // A warning, so the CLI says it too: a run killed with -9 is taken over without a word otherwise.
      this.log.warn(
        { previousOwner: verdict.previousOwner, checkpoint: verdict.checkpoint, trusted: frozen.resumeAfter !== undefined },
        describeResume(verdict.previousOwner, verdict.previous, this.ctx.owner),
      )
    }
    if (frozen.unverifiedCheckpoint !== undefined) {
      this.log.warn(
        { checkpoint: frozen.unverifiedCheckpoint, keySource },
        'the checkpoint on the CRD has no seal this migrator can verify; every object is looked at again (objects already in the storage version cost a no-op request)',
      )
    }
    this.log.info(
      { storageVersion, generation: frozen.frozenGeneration, storedVersions: plan.storedVersions, resumedFrom: frozen.resumeAfter },
      'CRD frozen; migration started',
    )
    let message = `Migrating to storage version ${storageVersion} (storedVersions ${JSON.stringify(plan.storedVersions)})`
    if (frozen.resumeAfter) message += `, resuming after ${frozen.resumeAfter}`
    if (frozen.unverifiedCheckpoint !== undefined)
      message += `; the checkpoint ${frozen.unverifiedCheckpoint} has no valid seal, so every object is checked again`
    if (!this.ctx.events) return
    const timer = setTimeout(() => this.recordStart(), deferMs)
    timer.unref()
    this.start = { crd: frozen.crd, message, timer }
  }

  private recordStart(): void {
    const start = this.start
    if (!start) return
    this.start = undefined
    clearTimeout(start.timer)
    this.startRecorded = this.ctx.events?.record(start.crd, 'Normal', 'MigrationStarted', start.message)
  }

  /** A lost freeze or a stop from outside says why better than the aborted request; a loss found before any write is Blocked. */
  failed(result: MigrationResult, err: unknown, outer: AbortSignal | undefined, lost?: CrdMigratorError): void {
    const stopped = outer?.aborted === true
    result.errorCode = lost ? lost.code : stopped ? 'CRDM_ABORTED' : errorCode(err)
    result.outcome = result.errorCode === 'CRDM_DATA_LOSS' ? 'Blocked' : 'Failed'
    result.reason = lost ? lost.message : stopped && outer?.reason instanceof Error ? outer.reason.message : errorMessage(err)
    logRunFailure(this.log, result, err)
  }

  /** The end of every run: its metric and its log line (a frozen run records its Event first: finished). */
  ended(result: MigrationResult): MigrationResult {
    this.ctx.metrics?.migrations.inc({ result: result.outcome })
    this.log.info({ outcome: result.outcome, reason: result.reason, durationMs: result.durationMs }, 'migration finished')
    return result
  }

  /** The run's end, as the CRD is now (its Event is recorded on it). */
  async finished(result: MigrationResult, crd: CustomResourceDefinition): Promise<MigrationResult> {
    // A start not yet told goes with the end, in the same words.
    const start = this.start
    if (start) clearTimeout(start.timer)
    this.start = undefined
    await this.startRecorded
    await this.ctx.events?.record(
      crd,
      result.outcome === 'Succeeded' ? 'Normal' : 'Warning',
      `Migration${result.outcome}`,
      start ? `${failureText(result)}. Started: ${start.message}` : failureText(result),
    )
    return this.ended(result)
  }

  /** The conversion webhook stopped answering mid-run: every request pauses (conversion/gate.ts). */
  conversionOutage(crd: CustomResourceDefinition, webhook: string, failure: ConversionFailure): void {
    this.log.warn({ webhook, detail: failure.detail }, 'conversion webhook does not answer; every request paused until it does')
    this.ctx.metrics?.conversionOutages.inc({ crd: this.name })
    void this.ctx.events?.record(
      crd,
      'Warning',
      'ConversionWebhookUnavailable',
      `Paused: conversion webhook ${webhook} does not answer (${failure.detail}); resuming when it does`,
    )
  }

  conversionRecovered(webhook: string, outageMs: number): void {
    this.log.info({ webhook, outageSeconds: outageMs / 1000 }, 'conversion webhook answers again; resuming')
    this.ctx.metrics?.conversionOutageSeconds.inc({ crd: this.name }, outageMs / 1000)
  }
}

export function failureText(result: MigrationResult): string {
  return result.errorCode ? `${result.errorCode}: ${result.reason}` : result.reason
}

/** A failed run's log line; a stop from outside (Ctrl-C, shutdown) is no error and carries no stack. */
function logRunFailure(log: Logger, result: MigrationResult, err: unknown): void {
  if (result.errorCode === 'CRDM_ABORTED') log.info({ code: result.errorCode, reason: result.reason }, 'migration stopped')
  // The public reason counts failed objects; the log names them (ObjectsFailedError).
  else if (err instanceof ObjectsFailedError)
    log.error({ err, code: result.errorCode, failed: err.failures.map((f) => `${f.key}: ${f.error}`) }, 'migration failed')
  else log.error({ err, code: result.errorCode }, 'migration failed')
}
