import type { Logger } from 'pino'
/**
 * `crd-migrator plan [CRD...]`: which CRDs need a migration, how many objects that writes
 * and roughly how long it takes (src/check/fleet-plan.ts). Reads only: a list of one
 * object per CRD for its count, and a metadata list for its managedFields.
 */
import type { Config } from '../config/schema.js'
import { isForbidden } from '../kube/api-errors.js'
import { commandHttp } from './command-http.js'
import { crdsByName, managedCrds } from '../check/select.js'
import type { KubeHttp } from '../kube/http.js'
import { pageRequest } from '../kube/list-pages.js'
import { collectionPath, resourceRef } from '../kube/paths.js'
import type { CustomResourceDefinition } from '../kube/types.js'
import { Accept } from '../kube/http.js'
import { settingsFor } from '../migrator/crd-settings.js'
import { requestRetry, withRetry } from '../migrator/engine/retry.js'
import { scanManagedFields } from '../migrator/phases/managed-fields-scan.js'
import { Phase, planCrd } from '../migrator/plan.js'
import { servedVersionToList } from '../check/drop-evidence.js'
import { formatDuration, MS_PER_CRD, MS_PER_OBJECT, planRow, planSummary, type PlanRow, type PlanSummary } from '../check/fleet-plan.js'
import { isData, renderData, renderNames, type OutputFormat } from './output.js'
import type { ClientFlags } from './client-flags.js'

export interface PlanCommandOptions {
  /** Where the client says it retries a server that never answered (--connect-attempts). */
  logger?: Logger
  format: OutputFormat
  /** CRDs to plan, managed or not; every managed one when empty. */
  names: readonly string[]
  /** Read every object's metadata for the managedFields to clean (default); off: counts only. */
  scan: boolean
  /** --request-timeout, --as. */
  client?: ClientFlags
  signal?: AbortSignal
}

/** What `-o json|yaml` prints. */
export interface PlanReport {
  rows: PlanRow[]
  summary: PlanSummary & { estimate: string }
  missing: string[]
}

/** `crd-migrator plan [CRD...]`; exit code 1 when a named CRD does not exist. */
export async function runPlanCommand(config: Config, out: NodeJS.WritableStream, options: PlanCommandOptions): Promise<number> {
  const http = commandHttp(config, 'plan', options.logger, options.client)
  try {
    const { crds, missing } = await selectCrds(http, config, options.names)
    const rows: PlanRow[] = []
    for (const crd of crds) rows.push(await planOne(http, config, crd, options))
    const summary = planSummary(rows, config.migrator.maxParallelCrds)
    const report: PlanReport = { rows, summary: { ...summary, estimate: ESTIMATE_NOTE }, missing }
    if (isData(options.format)) out.write(renderData(report, options.format))
    else if (options.format === 'name') out.write(renderNames(rows.map((r) => r.name)))
    else
      out.write(
        rows.length
          ? formatPlan(report, options.scan, options.format === 'wide')
          : options.names.length
            ? ''
            : 'no managed CRDs (see -l/--selector, --crds)\n',
      )
    for (const name of missing) process.stderr.write(`crd-migrator: customresourcedefinition "${name}" not found\n`)
    return missing.length ? 1 : 0
  } finally {
    http.close()
  }
}

const ESTIMATE_NOTE = `an estimate from measured rates (${Math.round(1000 / MS_PER_OBJECT)} objects/s written, ${MS_PER_CRD / 1000} s per CRD), not a promise: the API server, etcd and conversion webhooks set the real pace`

async function selectCrds(
  http: KubeHttp,
  config: Config,
  names: readonly string[],
): Promise<{ crds: CustomResourceDefinition[]; missing: string[] }> {
  if (names.length === 0) return { crds: await managedCrds(http, config.migrator.selector), missing: [] }
  return crdsByName(http, names)
}

async function planOne(http: KubeHttp, config: Config, crd: CustomResourceDefinition, options: PlanCommandOptions): Promise<PlanRow> {
  const plan = planCrd(crd)
  const settings = settingsFor(config, crd.metadata.name)
  const cleanup = settings.phases.includes(Phase.CleanupManagedFields)
  let managedFieldsObjects: number | undefined
  if (options.scan && cleanup && plan.storageVersion && !plan.blockedReason) {
    try {
      managedFieldsObjects = (await scanManagedFields(http, crd, plan.storageVersion, settings, options.signal)).objects
    } catch (err) {
      if (!isForbidden(err)) throw err
    }
  }
  return planRow({
    name: crd.metadata.name,
    storageVersion: plan.storageVersion,
    storedVersions: plan.storedVersions,
    blockedReason: plan.blockedReason,
    objects: await countObjects(http, crd, config.migrator.maxAttempts, options.signal),
    managedFieldsObjects,
  })
}

/**
 * How many objects a CRD has, cheaply: a list of one object, whose remainingItemCount
 * says how many follow. Undefined when the API server does not say (or RBAC forbids).
 */
export async function countObjects(
  http: KubeHttp,
  crd: CustomResourceDefinition,
  maxAttempts: number,
  signal?: AbortSignal,
): Promise<number | undefined> {
  const version = servedVersionToList(crd)
  if (version === undefined) return undefined
  const request = pageRequest(http, collectionPath(resourceRef(crd, version)), { accept: Accept.partialObjectMetadataList, signal })
  try {
    const page = await withRetry(() => request({ limit: 1, continue: undefined }), requestRetry(maxAttempts, signal))
    if (!page.metadata.continue) return page.items.length
    return page.metadata.remainingItemCount === undefined ? undefined : page.items.length + page.metadata.remainingItemCount
  } catch (err) {
    if (isForbidden(err)) return undefined
    throw err
  }
}

/** The table; wide: with the writes each CRD's migration sends (objects to rewrite plus objects to clean). */
export function formatPlan(report: PlanReport, scanned: boolean, wide = false): string {
  const header = ['NAME', 'STORAGE', 'STORED', 'OBJECTS', 'MANAGEDFIELDS', ...(wide ? ['WRITES'] : []), 'WORK', 'ESTIMATE']
  const count = (n: number | undefined, known = true) => (!known ? '-' : n === undefined ? '?' : String(n))
  const lines = report.rows.map((r) => [
    r.name,
    r.storageVersion ?? '-',
    r.storedVersions.join(',') || '-',
    count(r.objects),
    count(r.managedFieldsObjects, scanned),
    ...(wide ? [count(r.writes)] : []),
    r.blockedReason ? `blocked: ${r.blockedReason}` : r.work.length ? r.work.join('+') : 'none',
    r.blockedReason || r.work.length === 0 ? '-' : r.estimateMs === undefined ? '?' : formatDuration(r.estimateMs),
  ])
  const all = [header, ...lines]
  const widths = header.map((_, i) => Math.max(...all.map((l) => l[i]!.length)))
  const table = all
    .map((l) =>
      l
        .map((c, i) => (i === l.length - 1 ? c : c.padEnd(widths[i]!)))
        .join('  ')
        .trimEnd(),
    )
    .join('\n')
  const s = report.summary
  const unknown = s.unknownSize ? ` (${s.unknownSize} of unknown size left out)` : ''
  return [
    table,
    '',
    `${s.needingWork} of ${s.crds} CRDs need work${s.blocked ? `, ${s.blocked} blocked` : ''}; ${s.writes} objects to write${unknown}${scanned ? '' : '; managedFields not scanned (--no-scan)'}.`,
    `Estimate: ${formatDuration(s.parallelMs)} at --max-parallel-crds ${s.maxParallelCrds}, ${formatDuration(s.serialMs)} one CRD after another.`,
    `(${s.estimate})`,
    '',
  ].join('\n')
}
