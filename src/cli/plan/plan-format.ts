/** `plan`'s table and summary for people (pure). */
import { type PlanRow, type PlanSummary } from '../../check/fleet-plan.js'
import type { basisData } from '../../check/write-rate.js'
import { estimateDuration } from '../../duration.js'
import { columnWidths, tableLine } from '../output.js'

/** What -o json|yaml prints. */
export interface PlanReport {
  rows: PlanRow[]
  summary: PlanSummary & {
    /** What the estimate stands on, in words. */
    estimate: string
    basis: ReturnType<typeof basisData>
  }
  missing: string[]
}

/** `0`, `0 (40 at served v1)` (entries a migration leaves, which `check --drop` counts), `-` (not scanned), `?` (not known). */
export function managedFieldsCell(row: Pick<PlanRow, 'managedFieldsObjects' | 'servedManagedFields'>, scanned: boolean): string {
  if (!scanned) return '-'
  if (row.managedFieldsObjects === undefined) return '?'
  const served = Object.entries(row.servedManagedFields ?? {}).map(([v, n]) => `${n} at served ${v}`)
  return served.length ? `${row.managedFieldsObjects} (${served.join(', ')})` : String(row.managedFieldsObjects)
}

/** One line per CRD and version whose managedFields entries stay after a migration because the version is served. */
export function servedNextSteps(rows: readonly PlanRow[]): string[] {
  return rows.flatMap((r) =>
    Object.entries(r.servedManagedFields ?? {}).map(
      ([v, n]) =>
        `${r.name}: ${n} object${n === 1 ? ' keeps' : 's keep'} managedFields entries of ${v}, which is still served: a migration leaves them by design, and check --drop ${v} counts them. To drop ${v}: set served: false on ${v}, then run migrate again.`,
    ),
  )
}

/** `1 min 3 s`, or with a measured range `40 s – 1 min 40 s`: a range is what a measurement can honestly say. */
export function formatEstimate(ms: number, range?: readonly [number, number]): string {
  if (!range) return estimateDuration(ms)
  const [fast, slow] = range.map(estimateDuration)
  return fast === slow ? fast! : `${fast} – ${slow}`
}

/** The table; wide: with the writes each CRD's migration sends (objects to rewrite plus objects to clean). */
export function formatPlan(report: PlanReport, scanned: boolean, wide = false): string {
  const header = ['NAME', 'STORAGE', 'STORED', 'OBJECTS', 'MANAGEDFIELDS', ...(wide ? ['WRITES'] : []), 'WORK', 'ESTIMATE']
  const lines = report.rows.map((r) => [
    r.name,
    r.storageVersion ?? '-',
    r.storedVersions.join(',') || '-',
    r.objects === undefined ? '?' : String(r.objects),
    managedFieldsCell(r, scanned),
    ...(wide ? [r.writes === undefined ? '?' : String(r.writes)] : []),
    r.blockedReason
      ? `blocked: ${r.blockedReason}`
      : r.lossless?.refuses
        ? 'blocked: CRDM_DATA_LOSS (below)'
        : r.work.length
          ? r.work.join('+')
          : 'none',
    r.blockedReason || r.lossless?.refuses || r.work.length === 0
      ? '-'
      : r.estimateMs === undefined
        ? '?'
        : formatEstimate(r.estimateMs, r.estimateRangeMs),
  ])
  const all = [header, ...lines]
  const widths = columnWidths(all)
  const table = all.map((l) => tableLine(l, widths)).join('\n')
  const s = report.summary
  const unknown = s.unknownSize ? ` (${s.unknownSize} of unknown size left out)` : ''
  const next = servedNextSteps(report.rows)
  // Every CRD whose check saw changes: what changes, and the flags that accept it.
  const lossless = report.rows.flatMap((r) =>
    r.lossless && r.lossless.lines.length > 1
      ? [`${r.name}${r.lossless.refuses ? ': the run would stop Blocked (CRDM_DATA_LOSS)' : ''}`, ...r.lossless.lines]
      : [],
  )
  return [
    table,
    '',
    `${s.needingWork} of ${s.crds} CRDs need work${s.blocked ? `, ${s.blocked} blocked` : ''}; ${s.writes} objects to write${unknown}${scanned ? '' : '; managedFields not scanned (--no-scan)'}.`,
    `Estimate: ${formatEstimate(s.parallelMs, s.parallelRangeMs)} at --max-parallel-crds ${s.maxParallelCrds}, ${formatEstimate(s.serialMs, s.serialRangeMs)} one CRD after another.`,
    `(${s.estimate})`,
    ...(lossless.length ? ['', ...lossless] : []),
    ...(next.length ? ['', ...next.map((l) => `Next: ${l}`)] : []),
    '',
  ].join('\n')
}
