/**
 * The migration pipeline: every run builds its client once (runContext) and reads its CRD (decide.ts readRun), then
 * reads top to bottom in its mode's function: frozen (migrateCrd), unfrozen, resource. The dry runs: dry-run.ts.
 */
import { CrdMigratorError } from '../errors.js'
import { unlessNotFound } from '../kube/api-errors.js'
import { conversionWebhookOf } from '../kube/conversion.js'
import { getCrd } from '../kube/crds.js'
import type { KubeHttp } from '../kube/http.js'
import { resourceRef, type ResourceRef } from '../kube/paths.js'
import { describeResourceName, resolveResource, type ResourceName } from '../kube/resources.js'
import { readCrdState } from '../state/crd-state.js'
import { accessDenied, forbiddenToMigrate } from './access-preflight.js'
import {
  runContext,
  startingResult,
  type MigrationContext,
  type MigrationResult,
  type MigrationSettings,
  type RunContext,
} from './context.js'
import { preflightConversion } from './conversion/webhook-preflight.js'
import { decideRun, readRun } from './decide.js'
import { DataLossError, proveLossless } from './lossless/check.js'
import type { LosslessReport } from './lossless/verdict.js'
import { failOnObjects } from './phases/failures.js'
import { runPhase, type PhaseTarget } from './phases/object-phase.js'
import type { RewriteWrite } from './phases/object-writes.js'
import { cleanupPhase, stashPhase, storagePhase, storedVersionsPhase, workBeforeFreeze } from './phases/run-phases.js'
import { STORAGE_SETTLE_MS, waitForStorageEverywhere } from './phases/storage-switch.js'
import { narrowUnderStart } from './phases/stored-versions.js'
import { Phase } from './plan.js'
import { summarize } from './report.js'
import { RunReporter } from './reporter.js'
import { beginRun, endRun, lostFreeze } from './run.js'

export type { MigrationResult, MigrationSettings } from './context.js'

/** Mode frozen (a managed CRD), like a reconcile: decide (reads only), preflight, freeze, phases, then unfreeze whatever happened. */
export async function migrateCrd(name: string, settings: MigrationSettings, caller: MigrationContext): Promise<MigrationResult> {
  const started = Date.now()
  const ctx = runContext(caller, settings)
  const report = new RunReporter(name, ctx)
  const start = await readRun(name, ctx.client)
  const { crd, base } = start
  const took = () => Date.now() - started

  // Decide, before touching anything.
  if (start.blocked !== undefined) return report.skipped({ ...base, reason: start.blocked, skipReason: 'blocked', durationMs: took() })
  const plan = await decideRun(start, settings, ctx)
  if ('skip' in plan) return report.skipped({ ...base, reason: plan.reason, skipReason: plan.skip, durationMs: took() })
  // Nothing to freeze for: a new run without a storage phase counts its work first.
  const idle = plan.verdict.action === 'freeze' && !plan.runStorage ? await workBeforeFreeze(crd, plan, settings, ctx) : undefined
  if (idle) return report.skipped({ ...base, reason: idle, skipReason: 'up-to-date', durationMs: took() })
  const denied = await forbiddenToMigrate(crd, plan, settings, ctx)
  if (denied) return report.forbidden(crd, { ...base, outcome: 'Failed', errorCode: 'CRDM_FORBIDDEN', reason: denied, durationMs: took() })

  // A webhook-converted CRD: prove its webhook converts before freezing anything.
  const webhook = conversionWebhookOf(crd)
  const preflight = webhook ? await preflightConversion(ctx.client, crd, plan.storageVersion) : undefined
  if (webhook && preflight && !preflight.ok) {
    const reason = `conversion webhook ${webhook} does not answer: ${preflight.detail}`
    const blocked: MigrationResult = { ...base, outcome: 'Blocked', errorCode: 'CRDM_CONVERSION_OUTAGE', reason, durationMs: took() }
    return report.blocked(crd, blocked, webhook, preflight.detail)
  }

  // Objects whose rewrite would not keep their content: the first page, before freezing
  // (the common case, a field every object loses, never freezes); all of them in the run.
  let firstLossless: LosslessReport | undefined
  if (plan.runStorage) {
    try {
      firstLossless = await proveLossless(crd, plan.storageVersion, settings, ctx, { maxPages: 1 })
    } catch (err) {
      if (!(err instanceof DataLossError)) throw err
      return report.refused(crd, {
        ...base,
        outcome: 'Blocked',
        errorCode: err.code,
        reason: err.message,
        lossless: err.report,
        durationMs: took(),
      })
    }
  }

  const run = await beginRun(start, plan, settings, ctx, report, started)
  run.checkedBeforeFreeze = firstLossless
  try {
    if (plan.runStorage) await storagePhase(run)
    if (plan.stashRules.length > 0) await stashPhase(run)
    if (plan.runStorage) await storedVersionsPhase(run)
    if (plan.runCleanup) await cleanupPhase(run)
    run.result.outcome = 'Succeeded'
    run.result.reason = summarize(run.result)
  } catch (err) {
    report.failed(run.result, err, ctx.signal, lostFreeze(run, err))
  }
  const after = await endRun(run, ctx)
  return report.finished(run.result, after)
}

/**
 * Mode unfrozen: a StorageVersionMigration for a CRD outside `migrator.selector` (what it does: docs/ksvm-and-builtin.md).
 * No freeze (only a CRD handed to crd-migrator is ever frozen); storedVersions narrowed only if the CRD still has the
 * run's uid and generation, tested in the patch itself (as kube-controller-manager's storageversionmigrator does).
 */
export async function migrateCrdUnfrozen(name: string, settings: MigrationSettings, caller: MigrationContext): Promise<MigrationResult> {
  const started = Date.now()
  const ctx = runContext(caller, settings)
  const report = new RunReporter(name, ctx, { crd: name, unmanaged: true })
  const { log } = report
  const start = await readRun(name, ctx.client)
  const { crd, plan, base: result } = start
  const finish = (r: MigrationResult) => report.ended({ ...r, durationMs: Date.now() - started })
  if (start.blocked !== undefined) return finish({ ...result, skipReason: 'blocked', reason: start.blocked })
  const storageVersion = start.storageVersion
  // Another KEP-2855 migration holds the CRD: wait for it rather than write under it.
  if (readCrdState(crd, settings.migratingAnnotation).frozen)
    return finish({
      ...result,
      skipReason: 'frozen-by-another',
      reason: `the CRD is frozen (${settings.migratingAnnotation}) by a migration in progress; waiting for it`,
    })

  const denied = await accessDenied(resourceRef(crd, storageVersion), settings.useStatusSubresource, ctx)
  if (denied) {
    log.error({ reason: denied }, 'migration refused: the migrator may not migrate these objects')
    return finish({ ...result, outcome: 'Failed', errorCode: 'CRDM_FORBIDDEN', reason: `${denied}; nothing was written` })
  }

  log.info({ storageVersion, generation: plan.generation, storedVersions: plan.storedVersions }, 'rewriting every object, without a freeze')
  // Every API server stores `storageVersion` (a lagging one would write objects in the old one).
  const storageEverywhere = (settleMs: number) =>
    waitForStorageEverywhere(ctx.http, crd, storageVersion, settings, { settleMs, signal: ctx.signal, logger: ctx.logger })
  return runWithoutFreeze(report, result, started, ctx.signal, async () => {
    result.apiServers = await storageEverywhere(settings.storageSettleMs ?? STORAGE_SETTLE_MS)
    // No freeze here, but the same promise: no object loses or gains content through its rewrite.
    await proveLossless(crd, storageVersion, settings, ctx, { result })
    const how = `in ${storageVersion} without a freeze`
    const rewritten = await rewriteEveryObject({ kind: 'crd', crd, storageVersion }, settings, ctx, result, how, start.rewrite)
    result.apiServers = await storageEverywhere(0)
    const narrowed = await narrowUnderStart(name, { uid: crd.metadata.uid, generation: plan.generation, storageVersion }, ctx.client)
    result.storedVersionsAfter = narrowed.storedVersions
    return narrowed.kept !== undefined
      ? `${rewritten}; status.storedVersions left as ${JSON.stringify(narrowed.storedVersions)}: ${narrowed.kept}`
      : `${rewritten}, storedVersions ${JSON.stringify(narrowed.storedVersions)}`
  })
}

/** `plural.group`, the CRD's name, when the resource is a custom resource; undefined for a built-in one. */
export async function crdDefining(http: KubeHttp, ref: ResourceRef): Promise<string | undefined> {
  if (ref.group === '') return undefined
  const name = `${ref.plural}.${ref.group}`
  return unlessNotFound(getCrd(http, name).then(() => name))
}

/** A resource as StorageVersionMigration objects and `migrate --resource` name it: a custom resource is a CRD migration (mode frozen). */
export async function migrateResource(
  resource: ResourceName,
  settingsFor: (name: string) => MigrationSettings,
  ctx: MigrationContext,
): Promise<MigrationResult> {
  const ref = await resolveResource(ctx.http, resource)
  const crdName = await crdDefining(ctx.http, ref)
  if (crdName) return migrateCrd(crdName, settingsFor(crdName), ctx)
  return migrateWithoutCrd(describeResourceName({ ...resource, version: undefined }), ref, settingsFor(ref.plural), ctx)
}

/**
 * Mode resource: a built-in resource (no CRD, freeze or storedVersions), every object rewritten once: how Secrets are
 * re-encrypted after a key rotation (docs/ksvm-and-builtin.md).
 */
export async function migrateWithoutCrd(
  name: string,
  ref: ResourceRef,
  settings: MigrationSettings,
  caller: MigrationContext,
): Promise<MigrationResult> {
  const started = Date.now()
  const ctx = runContext(caller, settings)
  const report = new RunReporter(name, ctx, { resource: name })
  const result = startingResult(name, undefined, { storageVersion: ref.version, generation: 0, storedVersions: [] })
  report.log.info({ version: ref.version }, 'rewriting every object of a built-in resource')
  return runWithoutFreeze(report, result, started, ctx.signal, async () => {
    // Before the first list: a resource outside the migrator's RBAC fails here, named (access-preflight.ts).
    const denied = await accessDenied(ref, false, ctx)
    if (denied) throw new CrdMigratorError('CRDM_FORBIDDEN', `${denied}; nothing was written`)
    // Merge patches: built-in resources have no conversion webhooks, and their
    // managedFields are never of a version the API server cannot convert.
    const how = `through ${ref.group ? `${ref.group}/` : ''}${ref.version}`
    return rewriteEveryObject({ kind: 'resource', name, ref }, { ...settings, useStatusSubresource: false }, ctx, result, how)
  })
}

/** A run without a freeze: `work` does it and says what it did; a failure is classified, and the end counted and logged. */
async function runWithoutFreeze(
  report: RunReporter,
  result: MigrationResult,
  started: number,
  signal: AbortSignal | undefined,
  work: () => Promise<string>,
): Promise<MigrationResult> {
  result.outcome = 'Failed'
  try {
    result.reason = await work()
    result.outcome = 'Succeeded'
  } catch (err) {
    report.failed(result, err, signal)
  }
  return report.ended({ ...result, durationMs: Date.now() - started })
}

/** Every object of `target` rewritten once (failed ones fail the run): how many, said `how`. */
async function rewriteEveryObject(
  target: PhaseTarget,
  settings: MigrationSettings,
  ctx: RunContext,
  result: MigrationResult,
  how: string,
  rewrite?: RewriteWrite,
): Promise<string> {
  result.storage = await runPhase(Phase.StorageVersionMigration, target, settings, ctx, {
    rewrite,
    onStopped: (partial) => (result.storage = partial),
  })
  failOnObjects(result.storage, 'could not be rewritten')
  const c = result.storage.counts
  return `${c.rewritten + c.conflict} of ${c.seen} object(s) rewritten ${how}, ${c.current} already current`
}
