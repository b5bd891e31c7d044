/** `plan [CRD...]`: which CRDs need work and roughly how long (check/fleet-plan.ts); reads only, --measure's writes being dry runs. */
import type { Config } from '../../config/schema.js'
import { unlessForbidden } from '../../kube/api-errors.js'
import { closing, commandHttp } from '../command-http.js'
import { namedOrManagedCrds } from '../../select/managed-crds.js'
import type { KubeHttp } from '../../kube/http.js'
import { pageRequest } from '../../kube/list-pages.js'
import { collectionPath, resourceRef } from '../../kube/paths.js'
import type { CustomResourceDefinition } from '../../kube/types.js'
import { Accept } from '../../kube/http.js'
import { settingsFor } from '../../migrator/crd-settings.js'
import { preflightLossless } from '../../migrator/lossless/preflight.js'
import { runClient, type RunClient } from '../../migrator/engine/run-client.js'
import { scanManagedFields } from '../../migrator/phases/managed-fields-scan.js'
import { Phase, planCrd } from '../../migrator/plan.js'
import { servedVersionToList } from '../../check/drop-evidence.js'
import { CONSTANT_BASIS, planRow, planSummary, type PlanInput } from '../../check/fleet-plan.js'
import { measureWrites, type MeasureOptions } from '../../check/measure-writes.js'
import { basisData, describeBasis, measuredBasis, type WriteSample } from '../../check/write-rate.js'
import { isData, renderData, renderNames, reportMissing } from '../output.js'
import type { ReadCommandOptions } from '../command-kit.js'
import { formatPlan, type PlanReport } from './plan-format.js'

export interface PlanCommandOptions extends ReadCommandOptions {
  /** CRDs to plan, managed or not; every managed one when empty. */
  names: readonly string[]
  /** Read every object's metadata for the managedFields to clean (default); off: counts only. */
  scan: boolean
  /** Measure the write rate with dry-run writes (--measure) instead of the bench's constant. */
  measure?: MeasureSettings | undefined
}

/** How many objects --measure writes (dryRun=All) at most, and for how long. */
export type MeasureSettings = Pick<MeasureOptions, 'samples' | 'budgetMs'>

/** `--measure`'s defaults: enough writes for a rate, few enough seconds not to matter. */
export const DEFAULT_MEASURE: MeasureSettings = { samples: 200, budgetMs: 5000 }

/** `crd-migrator plan [CRD...]`; exit code 1 when a named CRD does not exist. */
export async function runPlanCommand(config: Config, out: NodeJS.WritableStream, options: PlanCommandOptions): Promise<number> {
  const report = await closing(
    commandHttp(
      config,
      'plan',
      options.logger,
      options.client,
      // `plan --measure` writes (dry run) at the migrator's concurrency, and needs its sockets.
      options.measure ? { maxSockets: config.migrator.concurrency } : {},
    ),
    (http) => planFleet(http, config, options),
  )
  if (isData(options.format)) out.write(renderData(report, options.format))
  else if (options.format === 'name') out.write(renderNames(report.rows.map((r) => r.name)))
  else if (report.rows.length) out.write(formatPlan(report, options.scan, options.format === 'wide'))
  else if (!options.names.length) out.write('no managed CRDs (see -l/--selector, --crds)\n')
  return reportMissing(report.missing)
}

/** The plan of the named (or managed) CRDs, through the caller's client: the CLI's, or the bench's. */
export async function planFleet(
  http: KubeHttp,
  config: Config,
  options: Pick<PlanCommandOptions, 'names' | 'scan' | 'measure' | 'signal'>,
): Promise<PlanReport> {
  const { crds, missing } = await namedOrManagedCrds(http, config.migrator.selector, options.names)
  const inputs: PlanInput[] = []
  for (const crd of crds) inputs.push(await planOne(http, config, crd, options))
  let basis = CONSTANT_BASIS
  let sample: WriteSample | undefined
  let measureError: string | undefined
  if (options.measure) {
    // Only CRDs with work: their objects are the ones a migration writes.
    const working = new Set(
      inputs
        .map((i) => planRow(i))
        .filter((r) => r.work.length > 0 && !r.blockedReason)
        .map((r) => r.name),
    )
    if (working.size === 0) measureError = 'no CRD needs work: nothing to measure'
    else {
      sample = await measureWrites(
        runClient({ http, signal: options.signal }, config.migrator),
        crds.filter((c) => working.has(c.metadata.name)),
        {
          ...options.measure,
          concurrency: config.migrator.concurrency,
          statusSubresource: (name) => settingsFor(config, name).useStatusSubresource,
          signal: options.signal,
        },
      )
      const measured = measuredBasis(sample, config.migrator.qps)
      if ('basis' in measured) basis = measured.basis
      else measureError = measured.reason
    }
  }
  const rows = inputs.map((i) => planRow(i, basis))
  const summary = planSummary(rows, config.migrator.maxParallelCrds, basis)
  return {
    rows,
    summary: {
      ...summary,
      estimate: describeBasis(basis, measureError),
      basis: basisData(basis, sample, measureError),
    },
    missing,
  }
}

async function planOne(
  http: KubeHttp,
  config: Config,
  crd: CustomResourceDefinition,
  options: Pick<PlanCommandOptions, 'scan' | 'signal'>,
): Promise<PlanInput> {
  const plan = planCrd(crd)
  const settings = settingsFor(config, crd.metadata.name)
  const cleanup = settings.phases.includes(Phase.CleanupManagedFields)
  const scan =
    options.scan && cleanup && plan.storageVersion && !plan.blockedReason
      ? await unlessForbidden(scanManagedFields(runClient({ http, signal: options.signal }, settings), crd, plan.storageVersion, settings))
      : undefined
  const storageWork =
    plan.storageVersion !== undefined &&
    !plan.blockedReason &&
    plan.storageMigrationNeeded &&
    settings.phases.includes(Phase.StorageVersionMigration)
  const lossless =
    options.scan && storageWork ? await preflightLossless(http, crd, plan.storageVersion!, settings, options.signal) : undefined
  return {
    name: crd.metadata.name,
    storageVersion: plan.storageVersion,
    ...(lossless ? { lossless } : {}),
    storedVersions: plan.storedVersions,
    blockedReason: plan.blockedReason,
    objects: await countObjects(runClient({ http, signal: options.signal }, config.migrator), crd),
    managedFieldsObjects: scan?.objects,
    ...(scan?.servedKept ? { servedManagedFields: scan.servedKept } : {}),
  }
}

/** A CRD's object count, cheaply: a list of one whose remainingItemCount says how many follow; undefined when unsaid (or forbidden). */
export async function countObjects(client: RunClient, crd: CustomResourceDefinition): Promise<number | undefined> {
  const version = servedVersionToList(crd)
  if (version === undefined) return undefined
  const request = pageRequest(client, collectionPath(resourceRef(crd, version)), {
    accept: Accept.partialObjectMetadataList,
    signal: client.signal,
  })
  const page = await unlessForbidden(request({ limit: 1, continue: undefined }))
  if (!page?.metadata.continue) return page?.items.length
  return page.metadata.remainingItemCount === undefined ? undefined : page.items.length + page.metadata.remainingItemCount
}
