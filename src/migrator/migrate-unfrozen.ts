/**
 * A StorageVersionMigration for a CRD crd-migrator does not manage (not selected by
 * `migrator.selector`): what kube-storage-version-migrator and Kubernetes' built-in
 * migrator do, and no more. No freeze (only a CRD the operator handed to crd-migrator is
 * ever frozen), no state annotations, no managedFields cleanup: every object is rewritten
 * once in the storage version, as for a built-in resource (migrate-resource.ts), and
 * `status.storedVersions` is narrowed to `[storage]` only if the CRD still has the uid and
 * generation the run started with (kube-controller-manager's storageversionmigrator does
 * the same with the generation its StorageMigrating condition recorded), tested in the
 * patch itself. Before anything is listed, the migrator's RBAC on the objects is asked
 * (access-preflight.ts), and before the objects are rewritten and again before narrowing,
 * every API server must store the storage version (storage-switch.ts); then every object's
 * rewrite is proven to keep its content (lossless/check.ts), as in a frozen run.
 */
import { conversionStrategy } from '../kube/conversion.js'
import { getCrd } from '../kube/crds.js'
import { readCrdState } from '../state/crd-state.js'
import { accessDenied } from './access-preflight.js'
import {
  runContext,
  startingResult,
  type MigrationContext,
  type RunContext,
  type MigrationResult,
  type MigrationSettings,
} from './context.js'
import { failOnObjects } from './phases/failures.js'
import { DataLossError, proveLossless } from './lossless/check.js'
import { runPhase, type PhaseTarget } from './phases/object-phase.js'
import type { RewriteWrite } from './phases/object-writes.js'
import { STORAGE_SETTLE_MS, waitForStorageEverywhere } from './phases/storage-switch.js'
import { narrowUnderStart } from './phases/stored-versions.js'
import { Phase, planCrd } from './plan.js'
import { RunReporter } from './reporter.js'

export async function migrateCrdUnfrozen(name: string, settings: MigrationSettings, caller: MigrationContext): Promise<MigrationResult> {
  const started = Date.now()
  const ctx = runContext(caller, settings)
  const report = new RunReporter(name, ctx, { crd: name, unmanaged: true })
  const { log } = report
  const crd = await getCrd(ctx.client, name)
  const plan = planCrd(crd)
  const result = startingResult(name, crd, plan)
  const finish = (r: MigrationResult) => report.ended({ ...r, durationMs: Date.now() - started })
  if (plan.blockedReason || !plan.storageVersion)
    return finish({ ...result, skipReason: 'blocked', reason: plan.blockedReason ?? 'no storage version' })
  const storageVersion = plan.storageVersion
  // Another KEP-2855 migration holds the CRD: wait for it rather than write under it.
  if (readCrdState(crd, settings.migratingAnnotation).frozen)
    return finish({
      ...result,
      skipReason: 'frozen-by-another',
      reason: `the CRD is frozen (${settings.migratingAnnotation}) by a migration in progress; waiting for it`,
    })

  const denied = await accessDenied(
    { group: crd.spec.group, plural: crd.spec.names.plural, version: storageVersion },
    settings.useStatusSubresource,
    ctx,
    ctx.client,
  )
  if (denied) {
    log.error({ reason: denied }, 'migration refused: the migrator may not migrate these objects')
    return finish({ ...result, outcome: 'Failed', errorCode: 'CRDM_FORBIDDEN', reason: `${denied}; nothing was written` })
  }

  log.info({ storageVersion, generation: plan.generation, storedVersions: plan.storedVersions }, 'rewriting every object, without a freeze')
  // Every API server stores `storageVersion` (a lagging one would write objects in the old one).
  const { group, names } = crd.spec
  const target = { group, plural: names.plural, kind: names.kind, generation: crd.metadata.generation }
  const { storageSettleTimeoutMs: timeoutMs, apiServerEndpoints: endpoints } = settings
  const storageEverywhere = (settleMs: number) =>
    waitForStorageEverywhere(ctx.http, target, storageVersion, { timeoutMs, settleMs, signal: ctx.signal, endpoints, logger: ctx.logger })
  return runWithoutFreeze(report, result, started, ctx.signal, async () => {
    result.apiServers = await storageEverywhere(settings.storageSettleMs ?? STORAGE_SETTLE_MS)
    // No freeze here, but the same promise: no object loses or gains content through its rewrite.
    result.lossless = await proveLossless(crd, storageVersion, settings, ctx).catch((err: unknown) => {
      if (err instanceof DataLossError) result.lossless = err.report
      throw err
    })
    const rewrite = conversionStrategy(crd) === 'Webhook' ? 'apply' : 'merge-patch'
    const how = `in ${storageVersion} without a freeze`
    const rewritten = await rewriteEveryObject({ kind: 'crd', crd, storageVersion }, settings, ctx, result, how, rewrite)
    result.apiServers = await storageEverywhere(0)
    const start = { uid: crd.metadata.uid, generation: plan.generation, storageVersion }
    const narrowed = await narrowUnderStart(ctx, name, start, ctx.client)
    result.storedVersionsAfter = narrowed.storedVersions
    return narrowed.kept !== undefined
      ? `${rewritten}; status.storedVersions left as ${JSON.stringify(narrowed.storedVersions)}: ${narrowed.kept}`
      : `${rewritten}, storedVersions ${JSON.stringify(narrowed.storedVersions)}`
  })
}

/** A run without a freeze: `work` does it and says what it did; a failure is classified, and the end counted and logged. */
export async function runWithoutFreeze(
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
export async function rewriteEveryObject(
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
