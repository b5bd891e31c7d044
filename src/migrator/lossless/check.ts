/**
 * The lossless check: before any object is rewritten, prove that the rewrite changes
 * nothing but the encoding. The API server re-stores an object by decoding it, converting
 * it to the storage version (through the CRD's webhook, if any), pruning it by that
 * version's schema and defaulting it; a narrowed schema or an unfaithful webhook would
 * make a loss or an injection permanent, under our name.
 *
 * Each object is read as it is stored, through each old version it may be stored in, and
 * compared (content-diff.ts, verdict.ts) with what its rewrite would keep:
 *
 * - conversion None: the same page listed through the storage version, at the same
 *   snapshot (a continue token from the same key and resourceVersion). The API server
 *   prunes a list by the version it serves, so the page shows what the write keeps, and
 *   a conversion None changes nothing else. Two lists a page: no request per object.
 * - conversion Webhook: a dry run of the object's rewrite addressed through the old
 *   version (dryRun=All). The API server converts it to the storage version, encodes and
 *   decodes it as it would store it, and converts the result back: the exact round trip,
 *   through the webhook the CRD names now.
 *
 * Objects stored in the storage version already come out of either unchanged.
 */
import { CrdMigratorError } from '../../errors.js'
import { isConflict, isGone, isNotFound } from '../../kube/api-errors.js'
import { conversionStrategy, isConversionRefusal } from '../../kube/conversion.js'
import { ContentType, type KubeHttp } from '../../kube/http.js'
import { collectionPath, listOrderKey, objectPath, resourceRef, type ResourceRef } from '../../kube/paths.js'
import type { CustomResourceDefinition, ObjectMeta } from '../../kube/types.js'
import { continueFrom } from '../../kube/unreadable.js'
import { pageRequest, type ListPage } from '../../kube/list-pages.js'
import type { ConversionGate } from '../conversion/gate.js'
import type { MigrationContext, MigrationSettings } from '../context.js'
import { requestRetry, withRetry, type RetryOptions } from '../engine/retry.js'
import { diffOwnedContent } from './content-diff.js'
import { defaultedFields, describeFindings, judgeChanges, type LosslessRules, type ObjectFinding } from './verdict.js'

type KubeObject = Record<string, unknown> & { metadata: ObjectMeta }

export type LosslessMethod = 'list' | 'dry-run'

export interface LosslessReport {
  method: LosslessMethod
  /** The old versions the objects were read through. */
  through: string[]
  /** Stored versions that are no longer served: objects stored in them cannot be read as stored. */
  unserved: string[]
  /** Object reads compared (an object is counted once per old version). */
  checked: number
  /** Objects whose rewrite would lose, change or add content. */
  lossy: number
  /** The first of them, with their changes. */
  findings: ObjectFinding[]
  /** Objects whose only losses are accepted removals. */
  acceptedRemovals: number
  /** Objects that gain fields their schema defaults (reported, not refused). */
  defaultsAdded: number
  /** Objects the conversion webhook refused to convert: the rewrite fails them by name. */
  refused: number
  /** Whether the whole collection was checked (false: the first pages only). */
  complete: boolean
  durationMs: number
}

export interface LosslessOptions {
  http: KubeHttp
  /** Field patterns whose removal the migrator's configuration accepts for this CRD. */
  acceptedRemovals: readonly string[]
  pageSize: number
  /** Dry runs in flight at once (conversion Webhook). */
  concurrency: number
  /** Write through the status subresource (the rewrite does; so does its dry run). */
  useStatusSubresource: boolean
  retry: RetryOptions
  /** Read through every other version of spec.versions, not only those status.storedVersions lists (`migrate --force`: it is not trusted). */
  everyVersion?: boolean
  /** Check only this many pages per version (before the freeze); default all. */
  maxPages?: number
  signal?: AbortSignal | undefined
}

const KEPT_FINDINGS = 20

export async function checkLossless(
  crd: CustomResourceDefinition,
  storageVersion: string,
  options: LosslessOptions,
): Promise<LosslessReport> {
  const started = Date.now()
  const method: LosslessMethod = conversionStrategy(crd) === 'Webhook' ? 'dry-run' : 'list'
  const listed = options.everyVersion ? crd.spec.versions.map((v) => v.name) : (crd.status?.storedVersions ?? [])
  const old = listed.filter((v) => v !== storageVersion)
  const served = (v: string) => crd.spec.versions.some((d) => d.name === v && d.served)
  const report: LosslessReport = {
    method,
    through: old.filter(served),
    unserved: old.filter((v) => !served(v)),
    checked: 0,
    lossy: 0,
    findings: [],
    acceptedRemovals: 0,
    defaultsAdded: 0,
    refused: 0,
    complete: true,
    durationMs: 0,
  }
  const rules: LosslessRules = {
    judgeAdditions: method === 'dry-run',
    acceptedRemovals: options.acceptedRemovals,
    defaultedFields: defaultedFields(crd, [storageVersion, ...old]),
  }
  const judge = (before: KubeObject, after: KubeObject) => {
    report.checked++
    const verdict = judgeChanges(diffOwnedContent(before, after), rules)
    if (verdict.accepted.length > 0) report.acceptedRemovals++
    if (verdict.defaults.length > 0) report.defaultsAdded++
    if (verdict.blocking.length === 0) return
    report.lossy++
    if (report.findings.length < KEPT_FINDINGS)
      report.findings.push({ key: listOrderKey(before.metadata.namespace, before.metadata.name), changes: verdict.blocking })
  }
  const target = resourceRef(crd, storageVersion)
  for (const version of report.through) {
    const through = resourceRef(crd, version)
    const finished = await forEachPage(through, options, async (items, rv) => {
      if (method === 'list') await compareWithStorageView(items, rv, target, options, judge)
      else await compareWithDryRuns(items, through, options, judge, () => report.refused++)
    })
    if (!finished) report.complete = false
  }
  report.durationMs = Date.now() - started
  report.findings.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
  return report
}

/** What a check with findings ends the run with (nothing written; the freeze, if any, lifted), its report attached. */
export class DataLossError extends CrdMigratorError {
  override readonly name: string = 'DataLossError'

  constructor(
    message: string,
    readonly report: LosslessReport,
  ) {
    super('CRDM_DATA_LOSS', message)
  }
}

export function dataLossError(crdName: string, storageVersion: string, report: LosslessReport): DataLossError {
  return new DataLossError(
    `rewriting ${report.lossy} object(s) of ${crdName} in ${storageVersion} would not keep their content (checked through ${report.through.join(', ')}; ${report.method === 'list' ? "the storage version's schema prunes" : 'the round trip through the conversion webhook differs'}): ${describeFindings(report.findings, report.lossy)}. Nothing was written. Fix the CRD's schema or conversion webhook, or accept a removal on purpose (migrator.acceptRemovals / --accept-removals ${crdName}:<field path>)`,
    report,
  )
}

/** Walks the list through `ref` a page at a time; false when it stopped at maxPages. */
async function forEachPage(
  ref: ResourceRef,
  options: LosslessOptions,
  onPage: (items: KubeObject[], resourceVersion: string) => Promise<void>,
): Promise<boolean> {
  let token: string | undefined
  // After an expired continue token the list starts again; objects up to here are done.
  let lastKey: string | undefined
  let restarted = false
  for (let pages = 0; ;) {
    let page: ListPage<KubeObject>
    try {
      page = await withRetry(() => listPage(ref, options, options.pageSize, token), options.retry)
    } catch (err) {
      if (!isGone(err) || token === undefined) throw err
      token = undefined
      restarted = true
      continue
    }
    let items = page.items
    if (restarted && lastKey !== undefined) {
      const after = lastKey
      items = items.filter((i) => listOrderKey(i.metadata.namespace, i.metadata.name) > after)
    }
    if (items.length > 0) {
      try {
        await onPage(items, page.metadata.resourceVersion ?? '')
      } catch (err) {
        // The page's snapshot was compacted before its second view was read: list again
        // from after the last page judged, at a new snapshot.
        if (!isGone(err)) throw err
        token = undefined
        restarted = true
        continue
      }
      const tail = items[items.length - 1]!
      lastKey = listOrderKey(tail.metadata.namespace, tail.metadata.name)
    }
    token = page.metadata.continue || undefined
    if (!token) return true
    if (options.maxPages !== undefined && ++pages >= options.maxPages) return false
  }
}

/** A page of whole objects through `ref`'s version (list-pages.ts's request). */
function listPage(ref: ResourceRef, options: LosslessOptions, limit: number, token: string | undefined): Promise<ListPage<KubeObject>> {
  return pageRequest<KubeObject>(options.http, collectionPath(ref), { signal: options.signal })({ limit, continue: token })
}

/** The same objects at the same snapshot, through the storage version: what their rewrite keeps. */
async function compareWithStorageView(
  items: KubeObject[],
  resourceVersion: string,
  target: ResourceRef,
  options: LosslessOptions,
  judge: (before: KubeObject, after: KubeObject) => void,
): Promise<void> {
  const first = items[0]!
  const start = continueFrom(listOrderKey(first.metadata.namespace, first.metadata.name), resourceVersion)
  const same = await withRetry(() => listPage(target, options, items.length, start), options.retry)
  const byUid = new Map(same.items.map((o) => [o.metadata.uid, o]))
  for (const before of items) {
    const after = byUid.get(before.metadata.uid)
    // The same snapshot holds the same objects; one missing was not in it (never, but not judged).
    if (after) judge(before, after)
  }
}

/** A dry run of each object's rewrite, through the version it is read in: the round trip. */
async function compareWithDryRuns(
  items: KubeObject[],
  through: ResourceRef,
  options: LosslessOptions,
  judge: (before: KubeObject, after: KubeObject) => void,
  refused: () => void,
): Promise<void> {
  let next = 0
  const worker = async () => {
    while (next < items.length) {
      const item = items[next++]!
      const pair = await roundTrip(item, through, options)
      if (pair === 'refused') refused()
      else if (pair) judge(pair.before, pair.after)
    }
  }
  await Promise.all(Array.from({ length: Math.max(1, Math.min(options.concurrency, items.length)) }, worker))
}

async function roundTrip(
  item: KubeObject,
  through: ResourceRef,
  options: LosslessOptions,
): Promise<{ before: KubeObject; after: KubeObject } | 'refused' | undefined> {
  let before = item
  for (let attempt = 1; ; attempt++) {
    const { namespace, name, uid, resourceVersion } = before.metadata
    try {
      const { body } = await withRetry(
        () =>
          options.http.request<KubeObject>({
            method: 'PATCH',
            path: objectPath(through, namespace, name, options.useStatusSubresource ? 'status' : undefined),
            query: { dryRun: 'All' },
            contentType: ContentType.mergePatch,
            body: { metadata: { uid, resourceVersion } },
            signal: options.signal,
          }),
        options.retry,
      )
      return { before, after: body }
    } catch (err) {
      if (isNotFound(err)) return undefined
      if (isConversionRefusal(err)) return 'refused'
      // Written since the list: read it again (its new content is what the rewrite would see).
      if (!isConflict(err) || attempt >= 5) throw err
      try {
        before = (
          await withRetry(
            () => options.http.request<KubeObject>({ method: 'GET', path: objectPath(through, namespace, name), signal: options.signal }),
            options.retry,
          )
        ).body
      } catch (readErr) {
        if (isNotFound(readErr)) return undefined
        throw readErr
      }
    }
  }
}

/** The check's options from a migration's settings. */
export function losslessOptions(http: KubeHttp, settings: MigrationSettings, signal?: AbortSignal): LosslessOptions {
  return {
    http,
    acceptedRemovals: settings.acceptedRemovals ?? [],
    pageSize: settings.pageSize,
    concurrency: settings.concurrency,
    useStatusSubresource: settings.useStatusSubresource,
    retry: requestRetry(settings.maxAttempts, signal),
    ...(settings.force ? { everyVersion: true } : {}),
    signal,
  }
}

/**
 * The check as a run uses it: skipped when configured off, logged, and ended with
 * CRDM_DATA_LOSS when an object would not keep its content. `maxPages` checks the first
 * pages only (before the freeze: the common case, a field dropped from every object,
 * never freezes).
 */
export async function proveLossless(
  crd: CustomResourceDefinition,
  storageVersion: string,
  settings: MigrationSettings,
  ctx: Pick<MigrationContext, 'http' | 'logger' | 'signal'>,
  run: { maxPages?: number; conversion?: ConversionGate | undefined } = {},
): Promise<LosslessReport | undefined> {
  if (settings.losslessCheck === false) return undefined
  const options = losslessOptions(ctx.http, settings, ctx.signal)
  const report = await checkLossless(crd, storageVersion, {
    ...options,
    ...(run.conversion ? { retry: { ...options.retry, conversion: run.conversion } } : {}),
    ...(run.maxPages !== undefined ? { maxPages: run.maxPages } : {}),
  })
  const log = ctx.logger.child({ crd: crd.metadata.name })
  if (report.unserved.length > 0)
    log.warn(
      { versions: report.unserved },
      'objects stored in versions that are no longer served cannot be read as they are stored; their rewrite is not checked',
    )
  log.info(
    { ...report, findings: report.findings.slice(0, 5), firstPages: run.maxPages },
    report.lossy > 0 ? 'lossless check: rewrite would change data' : 'lossless check passed',
  )
  if (report.lossy > 0) throw dataLossError(crd.metadata.name, storageVersion, report)
  return report
}
