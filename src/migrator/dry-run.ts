/**
 * The dry runs of the pipeline (migrate.ts): `--dry-run` from reads only (dryRun); `--dry-run=server` runs the phases'
 * own writers with dryRun=All (serverDryRun), so the API server converts, admits and validates each rewrite, persisting
 * nothing: it tells which objects the real run's writes would be refused for. No freeze, storedVersions or state annotation.
 */
import type { Logger } from 'pino'
import { CrdMigratorError } from '../errors.js'
import type { KubeHttp } from '../kube/http.js'
import { runContext, type MigrationSettings, type RunContext } from './context.js'
import { phasesToRun, readRun, type ReadyStart } from './decide.js'
import type { ObjectFailure, WalkCounts } from './engine/walker.js'
import { checkLossless } from './lossless/check.js'
import type { LosslessReport } from './lossless/verdict.js'
import { scanManagedFields } from './phases/managed-fields-scan.js'
import { runPhase } from './phases/object-phase.js'
import { runStashPhase } from './phases/stashes/stash-phase.js'
import { Phase } from './plan.js'

export interface DryRunReport {
  crd: string
  storageVersion: string | undefined
  storedVersions: string[]
  blockedReason: string | undefined
  /** Objects the storage phase would rewrite (all of them), or 0 when it would not run. */
  objectsToRewrite: number
  storedVersionsAfter: string[]
  objectsToClean: number
  managedFieldsEntriesToRemove: number
  /** Entries of unserved versions relabelled to the storage version (conversion None) rather than removed. */
  managedFieldsEntriesToRelabel: number
  objectsToSeed: number
  /** Objects that would keep managedFields entries of a served old version (left by design), by version: the `next:` step. */
  servedKept: Record<string, { objects: number }>
  /** Phase StashedObjectMigration, when stash rules apply to the CRD. */
  stashes?: { planned: string[]; failed: number; failures: ObjectFailure[] }
  /** The lossless check over every object (reads and dry runs only), when the storage phase would run. */
  lossless?: LosslessReport
}

/** What the API server answered to one phase's dry-run writes. */
export interface ServerDryRunPhase {
  /** Objects listed. */
  objects: number
  /** Writes the API server accepted (converted, admitted, validated). */
  accepted: number
  /** Objects with nothing to write (cleanup: no managedFields entry to remove). */
  skipped: number
  /** Writes refused, or that failed after their retries. */
  failed: number
  failures: ObjectFailure[]
}

export interface ServerDryRunReport {
  crd: string
  dryRun: 'server'
  storageVersion?: string
  storedVersions: string[]
  /** Why nothing would be done (two storage versions, ...). */
  blockedReason?: string
  /** Phase StorageVersionMigration: present when the run would rewrite the objects. */
  storageVersionMigration?: ServerDryRunPhase
  /** The lossless check the real run makes before its first write (reads and dry runs only). */
  lossless?: LosslessReport
  /** Phase CleanupManagedFields, as the managedFields are now (before the storage phase ran). */
  cleanupManagedFields?: ServerDryRunPhase
}

/** Mode dry-run: what `migrate` would do to a CRD, from reads only. */
export async function dryRun(http: KubeHttp, name: string, settings: MigrationSettings, logger: Logger): Promise<DryRunReport> {
  const ctx = runContext({ http, logger, owner: 'dry-run' }, settings)
  const start = await readRun(name, ctx.client)
  const { crd, plan } = start
  const report: DryRunReport = {
    crd: name,
    storageVersion: plan.storageVersion,
    storedVersions: plan.storedVersions,
    blockedReason: plan.blockedReason,
    objectsToRewrite: 0,
    storedVersionsAfter: plan.storedVersions,
    objectsToClean: 0,
    managedFieldsEntriesToRemove: 0,
    managedFieldsEntriesToRelabel: 0,
    objectsToSeed: 0,
    servedKept: {},
  }
  if (start.blocked !== undefined) return report
  const { storageVersion } = start
  const scan = await scanManagedFields(ctx.client, crd, storageVersion, settings)
  const { runStorage, stashRules, runCleanup, lossless } = await phasesOfDryRun(start, settings, ctx)
  if (runStorage) {
    report.objectsToRewrite = scan.total
    report.storedVersionsAfter = [storageVersion]
    if (lossless) report.lossless = lossless
  }
  if (runCleanup) {
    report.objectsToClean = scan.objects
    report.managedFieldsEntriesToRemove = scan.entries
    report.managedFieldsEntriesToRelabel = scan.relabelled
    report.objectsToSeed = scan.seeded
    report.servedKept = Object.fromEntries(Object.entries(scan.servedKept).map(([v, objects]) => [v, { objects }]))
  }
  if (stashRules.length) {
    const stashes = await runStashPhase(crd, storageVersion, stashRules, ctx, { dryRun: true })
    report.stashes = { planned: stashes.planned, failed: stashes.counts.failed, failures: stashes.failures }
  }
  return report
}

/** Mode server-dry-run: the dry-run writes of a migration of `name`, through `http`, which must be a dry-run client. */
export async function serverDryRun(
  http: KubeHttp,
  name: string,
  settings: MigrationSettings,
  context: { logger: Logger; signal?: AbortSignal | undefined },
): Promise<ServerDryRunReport> {
  // A client that persists its writes would make this a real, unfrozen migration.
  if (!http.dryRun) throw new CrdMigratorError('CRDM_INTERNAL', 'a server dry run needs a client that sends dryRun=All')
  const ctx = runContext({ http, logger: context.logger, owner: 'dry-run', signal: context.signal }, settings)
  const start = await readRun(name, ctx.client)
  const { crd, plan } = start
  const report: ServerDryRunReport = { crd: name, dryRun: 'server', storedVersions: plan.storedVersions }
  if (plan.storageVersion) report.storageVersion = plan.storageVersion
  if (start.blocked !== undefined) {
    report.blockedReason = start.blocked
    return report
  }
  const target = { kind: 'crd' as const, crd, storageVersion: start.storageVersion }
  const run = { rewrite: start.rewrite }
  // The real run checks every object before its first write, whichever engine rewrites them.
  const { runStorage, runCleanup, lossless } = await phasesOfDryRun(start, settings, ctx)
  if (lossless) report.lossless = lossless
  if (runStorage && settings.engine !== 'builtin')
    report.storageVersionMigration = phaseReport(await runPhase(Phase.StorageVersionMigration, target, settings, ctx, run))
  if (runCleanup) report.cleanupManagedFields = phaseReport(await runPhase(Phase.CleanupManagedFields, target, settings, ctx, run))
  return report
}

/** The phases a dry run looks at (a run never resumed), and the lossless check over every object when the storage phase would run. */
async function phasesOfDryRun({ crd, plan, storageVersion }: ReadyStart, settings: MigrationSettings, ctx: RunContext) {
  const phases = phasesToRun(crd, plan, settings, false)
  const check = phases.runStorage && settings.losslessCheck !== false
  return { ...phases, lossless: check ? await checkLossless(crd, storageVersion, { ...settings, client: ctx.client }) : undefined }
}

function phaseReport(result: { counts: WalkCounts; failures: ObjectFailure[] }): ServerDryRunPhase {
  const c = result.counts
  return {
    objects: c.seen,
    // A dry-run write never moves resourceVersion: rewritten and current are one here.
    accepted: c.rewritten + c.current + c.conflict,
    skipped: c.skipped + c.gone,
    failed: c.failed,
    failures: result.failures,
  }
}
