/**
 * "plan --measure estimate vs actual" (issue #36): before ours migrates the main case's
 * CRD at its defaults, `plan --measure`'s own function (src/cli/plan/run-plan.ts planFleet) plans
 * it against the bench's cluster, as the migrator's ServiceAccount, with the product's
 * default configuration; the run's whole time is then set beside the estimate.
 */
import { planFleet, DEFAULT_MEASURE } from '../../src/cli/plan/run-plan.js'
import { loadConfig } from '../../src/config/load.js'
import { KubeHttp } from '../../src/kube/http.js'
import { PLURAL } from './fixtures.js'
import type { MigrationContext } from './migration-context.js'
import type { MigrationRun, Target } from './report.js'
import { round } from './stats.js'

export type PlanEstimate = NonNullable<MigrationRun['planEstimate']>

/** Wanted: the run within this factor of the estimate, either way. */
export const PLAN_TARGET_FACTOR = 1.5

/** The plan of `group`'s CRD, measured (dry-run writes; nothing stored), before its run. */
export async function measurePlan(ctx: MigrationContext, group: string): Promise<Omit<PlanEstimate, 'actualMs' | 'ratio'>> {
  const config = loadConfig({ flags: { kubeconfig: ctx.sa.kubeconfigPath } })
  const http = new KubeHttp(ctx.migratorKc, { maxSockets: config.migrator.concurrency })
  try {
    const report = await planFleet(http, config, { names: [`${PLURAL}.${group}`], scan: true, measure: DEFAULT_MEASURE })
    const row = report.rows[0]
    if (row?.estimateMs === undefined) throw new Error(`plan gave no estimate for ${PLURAL}.${group}: ${JSON.stringify(report)}`)
    return {
      estimateMs: Math.round(row.estimateMs),
      estimateRangeMs: row.estimateRangeMs ?? null,
      source: report.summary.basis.source,
      objectsPerSecond: report.summary.basis.objectsPerSecond,
      samples: report.summary.basis.samples ?? 0,
      dryRunPerSecond: report.summary.basis.dryRunPerSecond ?? null,
    }
  } finally {
    http.close()
  }
}

/** The estimate beside the run's whole time (the actual over the estimate). */
export function withActual(estimate: Omit<PlanEstimate, 'actualMs' | 'ratio'>, actualMs: number): PlanEstimate {
  return { ...estimate, actualMs: Math.round(actualMs), ratio: round(actualMs / estimate.estimateMs, 2)! }
}

/** Within the factor either way: an estimate 1.5 times too long misleads as much as one too short. */
export const withinTarget = (ratio: number): boolean => ratio <= PLAN_TARGET_FACTOR && ratio >= 1 / PLAN_TARGET_FACTOR

/** The report's line, for each main-case run that has an estimate; none without. */
export function planVsActualLine(runs: readonly MigrationRun[]): string | undefined {
  const rows = runs.filter((r) => r.planEstimate)
  if (!rows.length) return undefined
  const each = rows.map((r) => {
    const p = r.planEstimate!
    const range = p.estimateRangeMs
      ? ` in ${round(p.estimateRangeMs[0] / 1000, 1)}–${round(p.estimateRangeMs[1] / 1000, 1)} s (${p.actualMs >= p.estimateRangeMs[0] && p.actualMs <= p.estimateRangeMs[1] ? 'the run inside it' : 'the run OUTSIDE it'})`
      : ''
    return `${r.size.toLocaleString('en-US')} objects: estimate ${round(p.estimateMs / 1000, 1)} s${range} (${p.source}, ${p.objectsPerSecond} objects/s from ${p.samples} dry-run writes at ${p.dryRunPerSecond ?? '?'}/s), actual ${round(p.actualMs / 1000, 1)} s = ${p.ratio}×`
  })
  return `plan --measure estimate vs actual (ours at the defaults, whole run): ${each.join('; ')}.`
}

/** The target: every main-case estimate within the factor of its run. */
export function planTarget(runs: readonly MigrationRun[]): Target {
  const ratios = runs.flatMap((r) => (r.planEstimate ? [r.planEstimate.ratio] : []))
  return {
    name: 'plan --measure estimate vs the run it estimated (ours at the defaults, whole run)',
    target: `within ${PLAN_TARGET_FACTOR}× either way`,
    value: ratios.length ? ratios.map((r) => `${r}×`).join(', ') : 'n/a',
    met: ratios.length ? ratios.every(withinTarget) : null,
  }
}
