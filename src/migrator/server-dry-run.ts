/**
 * `migrate --dry-run=server`: the writes of a migration, each sent with dryRun=All. The
 * API server decodes every object, converts it (through the CRD's conversion webhook,
 * when it has one), runs admission and validation on the rewrite, and persists nothing.
 * No freeze is set, status.storedVersions is not touched, no state annotation is written:
 * what it tells is which objects the real run's writes would be refused for.
 *
 * The phases' own writers run (object-phase.ts), through a client whose every write is a
 * dry run (kube/request-options.ts dryRun). A dry-run write never moves resourceVersion,
 * so it cannot tell an object already stored in the storage version from one that is
 * not: every object the storage phase would write counts as `accepted`.
 */
import type { Logger } from 'pino'
import { CrdMigratorError } from '../errors.js'
import { plainText } from '../sanitize.js'
import { conversionStrategy } from '../kube/conversion.js'
import { getCrd } from '../kube/crds.js'
import type { KubeHttp } from '../kube/http.js'
import { runContext, type MigrationSettings } from './context.js'
import type { ObjectFailure, WalkCounts } from './engine/walker.js'
import { runPhase } from './phases/object-phase.js'
import { Phase, planCrd } from './plan.js'
import { phasesToRun } from './decide.js'
import { checkLossless, losslessOptions, refusesRewrite } from './lossless/check.js'
import type { LosslessReport } from './lossless/verdict.js'
import { losslessLines } from './lossless/report-text.js'

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

/** The dry-run writes of a migration of `name`, through `http`, which must be a dry-run client. */
export async function serverDryRun(
  http: KubeHttp,
  name: string,
  settings: MigrationSettings,
  context: { logger: Logger; signal?: AbortSignal | undefined },
): Promise<ServerDryRunReport> {
  // A client that persists its writes would make this a real, unfrozen migration.
  if (!http.dryRun) throw new CrdMigratorError('CRDM_INTERNAL', 'a server dry run needs a client that sends dryRun=All')
  const crd = await getCrd(http, name)
  const plan = planCrd(crd)
  const report: ServerDryRunReport = { crd: name, dryRun: 'server', storedVersions: plan.storedVersions }
  if (plan.storageVersion) report.storageVersion = plan.storageVersion
  if (plan.blockedReason || !plan.storageVersion) {
    report.blockedReason = plan.blockedReason ?? 'no storage version'
    return report
  }
  const target = { kind: 'crd' as const, crd, storageVersion: plan.storageVersion }
  const ctx = runContext(
    { http, logger: context.logger, owner: 'dry-run', ...(context.signal ? { signal: context.signal } : {}) },
    settings,
  )
  const run = { rewrite: conversionStrategy(crd) === 'Webhook' ? ('apply' as const) : ('merge-patch' as const) }
  const { runStorage: storage, runCleanup } = phasesToRun(crd, plan, settings, false)
  // The real run checks every object before its first write, whichever engine rewrites them.
  if (storage && settings.losslessCheck !== false)
    report.lossless = await checkLossless(crd, plan.storageVersion, losslessOptions(ctx.client, settings))
  if (storage && settings.engine !== 'builtin')
    report.storageVersionMigration = phaseReport(await runPhase(Phase.StorageVersionMigration, target, settings, ctx, run))
  if (runCleanup) report.cleanupManagedFields = phaseReport(await runPhase(Phase.CleanupManagedFields, target, settings, ctx, run))
  return report
}

function phaseReport(result: { counts: WalkCounts; failures: ObjectFailure[] }): ServerDryRunPhase {
  const c = result.counts
  return {
    objects: c.seen,
    // A dry run answers with the object as it would be: rewritten and current are one here.
    accepted: c.rewritten + c.current + c.conflict,
    skipped: c.skipped + c.gone,
    failed: c.failed,
    failures: result.failures,
  }
}

/** The text `migrate --dry-run=server` prints for one CRD. */
export function formatServerDryRun(r: ServerDryRunReport): string {
  if (r.blockedReason) return `${plainText(`${r.crd}: nothing can be done: ${r.blockedReason}`)}\n`
  const lines = [`${r.crd}: server dry run (dryRun=All: checked by the API server, nothing persisted, no freeze)`]
  const phase = (label: string, p: ServerDryRunPhase | undefined, none: string) => {
    if (!p) return lines.push(`  ${label}: ${none}`)
    lines.push(
      `  ${label}: ${p.accepted} of ${p.objects} object(s) would be written${p.skipped ? `, ${p.skipped} need nothing` : ''}, ${p.failed} refused`,
    )
    for (const f of p.failures.slice(0, 5)) lines.push(`    refused ${f.key}: ${f.error}`)
  }
  phase('StorageVersionMigration', r.storageVersionMigration, `nothing to do (status.storedVersions ${JSON.stringify(r.storedVersions)})`)
  if (r.lossless) {
    lines.push(...losslessLines(r.crd, r.lossless))
    if (refusesRewrite(r.lossless)) lines.push('  the run would stop Blocked (CRDM_DATA_LOSS) before its first write')
  }
  phase('CleanupManagedFields', r.cleanupManagedFields, 'skipped')
  // Failures may quote a webhook or the API server: one line each, no escapes.
  return `${lines.map(plainText).join('\n')}\n`
}
