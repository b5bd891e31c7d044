/**
 * The lossless check: prove a rewrite changes nothing but the encoding; why, and what each
 * conversion's view shows: docs/migrate-one-crd.md#lossless-or-refused-the-check-before-any-write.
 * Conversion None: the same page through the storage version at the same snapshot (a continue
 * token from the same key and resourceVersion). Webhook: a dry run (dryRun=All) of the rewrite
 * through the old version. Compared by content-diff.ts, judged by verdict.ts.
 */
import { CrdMigratorError } from '../../errors.js'
import { isConflict, isGone, isNotFound, unlessNotFound } from '../../kube/api-errors.js'
import { conversionStrategy, isConversionRefusal } from '../../kube/conversion.js'
import { ContentType } from '../../kube/http.js'
import { collectionPath, listOrderKey, objectPath, resourceRef, type ResourceRef } from '../../kube/paths.js'
import type { CustomResourceDefinition, ObjectMeta } from '../../kube/types.js'
import { continueFrom } from '../../kube/unreadable.js'
import { pageRequest } from '../../kube/list-pages.js'
import { resumableList } from '../../kube/list-metadata.js'
import { fieldPattern, hasOwnedPath, ownedContent, type FieldChange } from './content-diff.js'
import { readCrdConsent } from '../../state/crd-state.js'
import { invalidFieldPath } from '../../config/accept-entries.js'
import type { ConversionGate } from '../conversion/gate.js'
import type { MigrationResult, MigrationSettings, RunContext } from '../context.js'
import type { RunClient } from '../engine/run-client.js'
import { runInParallel } from '../parallel.js'
import { managedEntries, managedPaths } from './managed-paths.js'
import {
  describeChange,
  judgeRoundTrip,
  schemaDefaults,
  type ChangeCount,
  type ChangeVerdict,
  type LosslessMethod,
  type LosslessReport,
  type LosslessRules,
  type RoundTrip,
} from './verdict.js'

type KubeObject = Record<string, unknown> & { metadata: ObjectMeta }

/**
 * The migration's settings (`force`: read through every version in spec.versions, storedVersions not
 * trusted), the run's client (during a run, with the CRD's conversion gate), and how many pages per
 * version (before the freeze; default all).
 */
type LosslessOptions = MigrationSettings & { client: RunClient; maxPages?: number | undefined }

interface Check {
  options: LosslessOptions
  rules: LosslessRules
  report: LosslessReport
  /** Through the storage version: what a rewrite stores. */
  target: ResourceRef
  judge: (object: KubeObject, verdict: ChangeVerdict) => void
}

const KEPT_FINDINGS = 20
const KEPT_CHANGE_PATTERNS = 50

export async function checkLossless(
  crd: CustomResourceDefinition,
  storageVersion: string,
  options: LosslessOptions,
): Promise<LosslessReport> {
  const started = Date.now()
  const method: LosslessMethod = conversionStrategy(crd) === 'Webhook' ? 'dry-run' : 'list'
  const listed = options.force ? crd.spec.versions.map((v) => v.name) : (crd.status?.storedVersions ?? [])
  const old = listed.filter((v) => v !== storageVersion)
  const served = (v: string) => crd.spec.versions.some((d) => d.name === v && d.served)
  const crdConsent = options.consentFromCrd ? consentOf(crd) : undefined
  const report: LosslessReport = {
    method,
    through: old.filter(served),
    unserved: old.filter((v) => !served(v)),
    checked: 0,
    lossy: 0,
    findings: [],
    accepted: 0,
    defaultsAdded: 0,
    bookkeeping: 0,
    storageViews: 0,
    unchecked: 0,
    uncheckedAccepted: options.acceptUnchecked === true || crdConsent?.acceptUnchecked === true,
    changes: [],
    ...(crdConsent ? { crdConsent } : {}),
    refused: 0,
    complete: true,
    durationMs: 0,
  }
  const rules: LosslessRules = {
    judgeAdditions: method === 'dry-run',
    acceptedRemovals: options.acceptedRemovals ?? [],
    acceptedChanges: [...(options.acceptedChanges ?? []), ...(crdConsent?.acceptChanges ?? [])],
    defaults: schemaDefaults(crd, [storageVersion, ...old]),
  }
  const counts = new Map<string, ChangeCount>()
  const judge = (object: KubeObject, verdict: ChangeVerdict) => {
    report.checked++
    tally(counts, verdict)
    if (verdict.accepted.length > 0) report.accepted++
    if (verdict.defaults.length > 0) report.defaultsAdded++
    if (verdict.bookkeeping.length > 0) report.bookkeeping++
    if (verdict.blocking.length === 0) return
    report.lossy++
    if (report.findings.length < KEPT_FINDINGS)
      report.findings.push({ key: listOrderKey(object.metadata.namespace, object.metadata.name), changes: verdict.blocking })
  }
  const check: Check = { options, rules, report, target: resourceRef(crd, storageVersion), judge }
  for (const version of report.through) {
    const through = resourceRef(crd, version)
    const finished = await forEachPage(through, options, async (items, rv) => {
      if (method === 'list') await compareWithStorageView(items, rv, check)
      else await compareWithDryRuns(items, through, check)
    })
    if (!finished) report.complete = false
  }
  if (report.unserved.length > 0) await holdToManagedFields(check)
  report.changes = [...counts.values()]
    .sort((a, b) => verdictOrder(a) - verdictOrder(b) || b.objects - a.objects || (a.pattern < b.pattern ? -1 : 1))
    .slice(0, KEPT_CHANGE_PATTERNS)
  report.durationMs = Date.now() - started
  report.findings.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
  return report
}

/**
 * Objects stored in unserved versions have no old view: each is held to its managedFields (none:
 * unchecked). Through a webhook every object is unchecked too: any may be stored unserved, and what
 * the conversion adds cannot be seen without an old view.
 */
async function holdToManagedFields({ options, rules, report, target, judge }: Check): Promise<void> {
  const method = report.method
  let bare = 0
  // The last object judged, in list order: a fallback goes on after it.
  let lastKey: string | undefined
  // Through a webhook the old version's fields may be renamed in the storage version: a
  // field its managers set that the storage view lacks is renamed or removed, not told apart.
  const renamedOrRemoved = new Map<string, number>()
  const heldToManagedFields = (item: KubeObject) => {
    lastKey = listOrderKey(item.metadata.namespace, item.metadata.name)
    const managed = managedEntries(item).length > 0
    const lost = managed ? lostManagedFields(item, item) : []
    if (!managed) bare++
    else if (method === 'list') judge(item, judgeRoundTrip({ before: item, after: item, lostManaged: lost }, rules))
    for (const pattern of new Set(lost.map(fieldPattern))) renamedOrRemoved.set(pattern, (renamedOrRemoved.get(pattern) ?? 0) + 1)
    if (method === 'dry-run' || !managed) report.unchecked++
  }
  try {
    const finished = await forEachPage(target, options, async (items) => items.forEach(heldToManagedFields))
    if (!finished) report.complete = false
  } catch (err) {
    if (!isConversionRefusal(err)) throw err
    // The webhook refuses some object: no page holding it lists. Step past it (the
    // rewrite fails it by name too) and read the others one by one, after the last judged.
    report.refused += await eachReadableObject(target, options, lastKey, heldToManagedFields)
  }
  const unserved = report.unserved.join(', ')
  const named = [...renamedOrRemoved]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 6)
    .map(([p, n]) => `${elideKeys(p)} (${n})`)
  if (method === 'dry-run' && report.unchecked > 0)
    report.uncheckedReason = `${report.unchecked} object(s) may be stored in unserved ${unserved}, which a conversion webhook converts: with no old view, what the conversion adds, renames or drops cannot be told apart${named.length ? `; fields their managers set that the storage version does not show (renamed or removed): ${named.join(', ')}${renamedOrRemoved.size > named.length ? ', ...' : ''}` : ''}`
  else if (report.unchecked > 0)
    report.uncheckedReason = `${bare} object(s) have no managedFields, and objects stored in unserved ${unserved} cannot be read as stored`
}

/** The CRD's consent annotations, each path checked as a config entry is (a bad one is ignored, and said). */
function consentOf(crd: CustomResourceDefinition): NonNullable<LosslessReport['crdConsent']> {
  const read = readCrdConsent(crd)
  const good = read.acceptChanges.filter((p) => invalidFieldPath(p) === undefined)
  return { acceptChanges: good, acceptUnchecked: read.acceptUnchecked, ignored: read.acceptChanges.filter((p) => !good.includes(p)) }
}

/** Content that would change, or objects nothing could check (and not accepted). */
export function refusesRewrite(report: LosslessReport): boolean {
  return report.lossy > 0 || (report.unchecked > 0 && !report.uncheckedAccepted)
}

const VERDICTS = ['refused', 'accepted', 'bookkeeping', 'default'] as const
const verdictOrder = (c: ChangeCount) => VERDICTS.indexOf(c.verdict)

/** Counts each field pattern once per object, by kind and verdict. */
function tally(counts: Map<string, ChangeCount>, verdict: ChangeVerdict): void {
  const seen = new Set<string>()
  const add = (list: FieldChange[], v: ChangeCount['verdict']) => {
    for (const c of list) {
      const pattern = fieldPattern(c.path)
      const from = c.from === undefined ? undefined : fieldPattern(c.from)
      const key = `${v}\u0000${c.change}\u0000${pattern}\u0000${from ?? ''}`
      if (seen.has(key)) continue
      seen.add(key)
      const count = counts.get(key)
      if (count) count.objects++
      else if (counts.size < 10 * KEPT_CHANGE_PATTERNS)
        counts.set(key, {
          pattern,
          change: c.change,
          ...(from !== undefined ? { from } : {}),
          ...(c.managedFields ? { managedFields: true as const } : {}),
          verdict: v,
          objects: 1,
        })
    }
  }
  add(verdict.blocking, 'refused')
  add(verdict.accepted, 'accepted')
  add(verdict.bookkeeping, 'bookkeeping')
  add(verdict.defaults, 'default')
}

/** Fields `object`'s managedFields name that `kept` lacks: pruned from every view (a schema narrowed in all). */
function lostManagedFields(object: KubeObject, kept: KubeObject, select?: (entry: { apiVersion?: string }) => boolean): string[] {
  const owned = ownedContent(kept)
  return managedPaths(object, select).filter((p) => !hasOwnedPath(owned, p))
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

/**
 * The refusal as every reader of the CRD sees it (annotation, Event, SVM status): no object names,
 * map keys elided (docs/migrate-one-crd.md#lossless-or-refused-the-check-before-any-write).
 */
function dataLossError(crdName: string, storageVersion: string, report: LosslessReport): DataLossError {
  if (report.lossy === 0)
    return new DataLossError(
      `${report.uncheckedReason ?? `${report.unchecked} object(s) of ${crdName} cannot be checked`}: rewriting them in ${storageVersion} is not proven to keep their content. Nothing was written. Serve the old version again so the check can read them, or accept them unchecked on purpose (${acceptUncheckedHint(crdName)})`,
      report,
    )
  const through = [...report.through, ...report.unserved.map((v) => `managedFields of objects stored in unserved ${v}`)]
  return new DataLossError(
    `rewriting ${report.lossy} object(s) of ${crdName} in ${storageVersion} would not keep their content (checked through ${through.join(', ')}; ${report.method === 'list' ? "the storage version's schema prunes" : 'the round trip through the conversion webhook differs'}): ${describeRefusedChanges(report.changes)}. Nothing was written. Fix the CRD's schema or conversion webhook, or accept the changes on purpose: \`crd-migrator plan ${crdName}\` lists each change and the --accept-changes flags that accept it`,
    report,
  )
}

/** "spec.token removed (10 objects), metadata.labels[…] added (3 objects)": the refused patterns, map keys elided. */
export function describeRefusedChanges(changes: readonly ChangeCount[], shown = 6): string {
  const counts = new Map<string, number>()
  for (const c of changes) {
    if (c.verdict !== 'refused') continue
    const text = describeChange(c.pattern, c, elideKeys)
    counts.set(text, Math.max(counts.get(text) ?? 0, c.objects))
  }
  const parts = [...counts].slice(0, shown).map(([text, n]) => `${text} (${n} object${n === 1 ? '' : 's'})`)
  if (counts.size > shown) parts.push(`${counts.size - shown} more field(s)`)
  return parts.join(', ')
}

/**
 * A field pattern with its map keys elided: `spec.data[…]`, `metadata.labels[…]`. A key can
 * carry what its reader may not see (`spec.data["db-password=…"]`, a team's label).
 */
export function elideKeys(pattern: string): string {
  return pattern.replace(/\["(?:[^"\\]|\\.)*"\]/g, '[…]').replace(/^metadata\.(labels|annotations)\.[A-Za-z_$][\w$-]*/, 'metadata.$1[…]')
}

/** The flags that accept exactly the refused changes (moves: both ends). */
export function acceptHint(crdName: string, changes: readonly ChangeCount[]): string {
  const patterns = new Set<string>()
  for (const c of changes) {
    if (c.verdict !== 'refused') continue
    if (c.from !== undefined) patterns.add(c.from)
    patterns.add(c.pattern)
  }
  if (patterns.size === 0) return `--accept-changes ${crdName}:<field path>`
  return [...patterns].map((p) => `--accept-changes '${crdName}:${p}'`).join(' ')
}

export function acceptUncheckedHint(crdName: string): string {
  return `--accept-unchecked ${crdName}`
}

/**
 * Every object of `ref` the API server can convert, read one by one (a metadata list that
 * steps past the ones its conversion webhook refuses); returns how many it refused.
 */
async function eachReadableObject(
  ref: ResourceRef,
  options: LosslessOptions,
  after: string | undefined,
  onObject: (o: KubeObject) => void,
): Promise<number> {
  let refused = 0
  const pages = options.client.listMetadata(ref, { pageSize: options.pageSize, unreadable: isConversionRefusal })
  const later = (key: string) => after === undefined || key > after
  for await (const page of pages) {
    refused += (page.unreadable ?? []).filter((u) => later(u.key)).length
    for (const item of page.items) {
      if (!later(listOrderKey(item.metadata.namespace, item.metadata.name))) continue
      try {
        const object = await readThrough(item as KubeObject, ref, options)
        if (object) onObject(object)
      } catch (err) {
        if (!isConversionRefusal(err)) throw err
        refused++
      }
    }
  }
  return refused
}

/** Walks the list through `ref` a page at a time (list-metadata.ts's resumableList); false when it stopped at maxPages. */
async function forEachPage(
  ref: ResourceRef,
  options: LosslessOptions,
  onPage: (items: KubeObject[], resourceVersion: string) => Promise<void>,
): Promise<boolean> {
  // The last object judged: a list started again goes on after it.
  let judged: string | undefined
  let pages = 0
  listing: for (;;) {
    for await (const page of resumableList(objectPages(ref, options), { pageSize: options.pageSize, after: judged })) {
      const tail = page.items.at(-1)
      try {
        if (tail) await onPage(page.items, page.resourceVersion ?? '')
      } catch (err) {
        // The page's snapshot was compacted before its second view was read: list again
        // from after the last page judged, at a new snapshot.
        if (!isGone(err)) throw err
        continue listing
      }
      if (tail) judged = listOrderKey(tail.metadata.namespace, tail.metadata.name)
      if (!page.more) return true
      if (options.maxPages !== undefined && ++pages >= options.maxPages) return false
    }
    return true
  }
}

/** Pages of whole objects through `ref`'s version (list-pages.ts's request). */
const objectPages = (ref: ResourceRef, options: LosslessOptions) =>
  pageRequest<KubeObject>(options.client, collectionPath(ref), { signal: options.client.signal })

/** The same objects at the same snapshot, through the storage version: what their rewrite keeps. */
async function compareWithStorageView(items: KubeObject[], resourceVersion: string, check: Check): Promise<void> {
  const { options, rules, target, judge } = check
  const first = items[0]!
  const start = continueFrom(listOrderKey(first.metadata.namespace, first.metadata.name), resourceVersion)
  const same = await objectPages(target, options)({ limit: items.length, continue: start })
  const byUid = new Map(same.items.map((o) => [o.metadata.uid, o]))
  for (const before of items) {
    const after = byUid.get(before.metadata.uid)
    // The same snapshot holds the same objects; one missing was not in it (never, but not judged).
    if (after) judge(before, judgeRoundTrip({ before, after, lostManaged: lostManagedFields(before, after) }, rules))
  }
}

/** A dry run of each object's rewrite, through the version it is read in: the round trip. */
async function compareWithDryRuns(items: KubeObject[], through: ResourceRef, check: Check): Promise<void> {
  const { options, rules, report, judge } = check
  // managedFields entries of this version name fields in its shape: the round trip's view holds them.
  const sameVersion = (entry: { apiVersion?: string }) => entry.apiVersion === `${through.group}/${through.version}`
  await runInParallel(items, options.concurrency, async (item) => {
    const pair = await roundTrip(item, through, options)
    if (pair === 'refused') report.refused++
    else if (pair) {
      const trip: RoundTrip = { ...pair, lostManaged: lostManagedFields(pair.before, pair.after, sameVersion) }
      let verdict = judgeRoundTrip(trip, rules)
      if (verdict.needsStorageView) {
        report.storageViews++
        const view = await readThrough(pair.before, check.target, options)
        if (view) verdict = judgeRoundTrip({ ...trip, stored: view }, rules)
      }
      judge(pair.before, verdict)
    }
  })
}

/** The object as `ref`'s version shows it now (through the storage version: what its rewrite stores); undefined: gone since. */
async function readThrough(object: KubeObject, ref: ResourceRef, options: LosslessOptions): Promise<KubeObject | undefined> {
  const path = objectPath(ref, object.metadata.namespace, object.metadata.name)
  return (await unlessNotFound(options.client.request<KubeObject>({ method: 'GET', path, signal: options.client.signal })))?.body
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
      const { body } = await options.client.request<KubeObject>({
        method: 'PATCH',
        path: objectPath(through, namespace, name, options.useStatusSubresource ? 'status' : undefined),
        query: { dryRun: 'All' },
        contentType: ContentType.mergePatch,
        body: { metadata: { uid, resourceVersion } },
        signal: options.client.signal,
      })
      return { before, after: body }
    } catch (err) {
      if (isNotFound(err)) return undefined
      if (isConversionRefusal(err)) return 'refused'
      // Written since the list: read it again (its new content is what the rewrite would see).
      if (!isConflict(err) || attempt >= 5) throw err
      const again = await readThrough(before, through, options)
      if (!again) return undefined
      before = again
    }
  }
}

/**
 * The check as a run uses it: skipped when configured off, logged, and ended with
 * CRDM_DATA_LOSS when an object would not keep its content. `maxPages`: the first pages only
 * (before the freeze, migrate.ts).
 */
export async function proveLossless(
  crd: CustomResourceDefinition,
  storageVersion: string,
  settings: MigrationSettings,
  ctx: Pick<RunContext, 'client' | 'logger'>,
  run: { maxPages?: number; conversion?: ConversionGate | undefined; result?: Pick<MigrationResult, 'lossless'> } = {},
): Promise<LosslessReport | undefined> {
  if (settings.losslessCheck === false) return undefined
  const client = run.conversion ? ctx.client.with({ conversion: run.conversion }) : ctx.client
  const report = await checkLossless(crd, storageVersion, { ...settings, client, maxPages: run.maxPages })
  // Kept on the run's result whatever it found, a refusal's too.
  if (run.result) run.result.lossless = report
  const log = ctx.logger.child({ crd: crd.metadata.name })
  if (report.unserved.length > 0)
    log.warn(
      { versions: report.unserved, unchecked: report.unchecked },
      'objects stored in versions that are no longer served cannot be read as they are stored; they are held to their managedFields',
    )
  const refuses = refusesRewrite(report)
  log.info(
    { ...report, findings: report.findings.slice(0, 5), changes: report.changes.slice(0, 10), firstPages: run.maxPages },
    refuses ? 'lossless check: rewrite would change data' : 'lossless check passed',
  )
  if (refuses) throw dataLossError(crd.metadata.name, storageVersion, report)
  return report
}
