import { getNamedCrd } from '../kube/crds.js'
import type { KubeHttp } from '../kube/http.js'
import { planCrd } from './plan.js'
import { phasesToRun } from './decide.js'
import { scanManagedFields } from './phases/managed-fields-scan.js'
import type { Logger } from 'pino'
import { runContext, type MigrationSettings } from './context.js'
import { runStashPhase } from './phases/stashes/stash-phase.js'
import type { ObjectFailure } from './engine/walker.js'
import { checkLossless, losslessOptions } from './lossless/check.js'
import type { LosslessReport } from './lossless/verdict.js'

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

/** What `migrate` would do to a CRD, from reads only. */
export async function dryRun(http: KubeHttp, name: string, settings: MigrationSettings, logger: Logger): Promise<DryRunReport> {
  const ctx = runContext({ http, logger, owner: 'dry-run' }, settings)
  const crd = await getNamedCrd(http, name)
  const plan = planCrd(crd)
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
  if (plan.blockedReason || !plan.storageVersion) return report
  const scan = await scanManagedFields(ctx.client, crd, plan.storageVersion, settings)
  const { runStorage, stashRules, runCleanup } = phasesToRun(crd, plan, settings, false)
  if (runStorage) {
    report.objectsToRewrite = scan.total
    report.storedVersionsAfter = [plan.storageVersion]
    if (settings.losslessCheck !== false)
      report.lossless = await checkLossless(crd, plan.storageVersion, losslessOptions(ctx.client, settings))
  }
  if (runCleanup) {
    report.objectsToClean = scan.objects
    report.managedFieldsEntriesToRemove = scan.entries
    report.managedFieldsEntriesToRelabel = scan.relabelled
    report.objectsToSeed = scan.seeded
    report.servedKept = Object.fromEntries(Object.entries(scan.servedKept).map(([v, objects]) => [v, { objects }]))
  }
  if (stashRules.length) {
    const stashes = await runStashPhase(crd, plan.storageVersion, stashRules, ctx, { dryRun: true })
    report.stashes = { planned: stashes.planned, failed: stashes.counts.failed, failures: stashes.failures }
  }
  return report
}
