/**
 * The conversion-webhook case of the bench: counting the ConversionReviews the API server
 * sends to dev/conversion/webhook.ts, and a probe that sends each kind of request the
 * migrators make, one at a time on a quiet CRD, and counts what each one costs.
 *
 * The webhook runs in the bench's main process; the API server calls it. Its counters
 * see every review of every CRD pointing at it, so a count is only meaningful while one
 * thing at a time talks to such a CRD (the bench runs one migration at a time).
 */
import { Accept, ContentType, type KubeHttp } from '../../src/kube/http.js'
import { KubeApiError } from '../../src/kube/api-errors.js'
import { collectionPath, objectPath } from '../../src/kube/paths.js'
import type { PartialObjectMetadata, PartialObjectMetadataList } from '../../src/kube/types.js'
import type { ConversionStats, ConversionWebhook } from '../conversion/webhook.js'
import {
  createBenchCrd,
  createWidgets,
  deleteBenchCrd,
  flipStorageToV2,
  KIND,
  managedFieldsKey,
  refOf,
  retrying,
  widgetName,
  widgetSpec,
} from './fixtures.js'
import { poll } from '../wait.js'

/** What the webhook counted (a copy, or the difference of two copies). */
export interface ReviewCount {
  reviews: number
  objects: number
  byDirection: Record<string, number>
}

export function reviewCount(stats: ConversionStats): ReviewCount {
  return { reviews: stats.reviews, objects: stats.objects, byDirection: { ...stats.byDirection } }
}

export function reviewsSince(now: ReviewCount, before: ReviewCount): ReviewCount {
  const byDirection: Record<string, number> = {}
  for (const [k, v] of Object.entries(now.byDirection)) {
    const d = v - (before.byDirection[k] ?? 0)
    if (d) byDirection[k] = d
  }
  return { reviews: now.reviews - before.reviews, objects: now.objects - before.objects, byDirection }
}

/**
 * Waits until the webhook has received no review for `quietMs`: the API server converts
 * some objects after it answered the request that caused it (its watch caches decode
 * every write from etcd into the version each one serves).
 */
export async function settleReviews(webhook: ConversionWebhook, quietMs = 500, maxMs = 30_000): Promise<void> {
  let last = webhook.stats.reviews
  let quietSince = Date.now()
  const quiet = async () => {
    if (webhook.stats.reviews !== last) {
      last = webhook.stats.reviews
      quietSince = Date.now()
    } else if (Date.now() - quietSince >= quietMs) return true
    return undefined
  }
  await poll(maxMs, quiet, { everyMs: 50 })
}

export interface ProbeRow {
  /** Which kind of object: its managedFields before the request. */
  objects: string
  managedFields: string[]
  request: string
  /** HTTP status of the answer. */
  status: number
  /** For a write: whether the resourceVersion moved (the object was written to etcd). */
  rvMoved: boolean | null
  /** For a write: the object's managedFields in its answer. */
  managedFieldsAfter: string[] | null
  /** Reviews counted by the time the answer came back. */
  inRequest: number
  /** Reviews in all, once the webhook had been quiet for 0.5 s. */
  reviews: number
  byDirection: Record<string, number>
  /** Objects in those reviews. */
  objectsConverted: number
}

export interface ConversionProbe {
  group: string
  notes: string
  rows: ProbeRow[]
}

/** Objects of the probe (created at v1 before the flip), by what their managedFields hold. */
const PROBE_KINDS = [
  { label: 'creator Update@v1 only (as createWidgets makes)', prepare: 'none' },
  { label: 'creator Update@v1 + an Apply@v1 entry', prepare: 'apply-v1' },
  { label: 'no managedFields', prepare: 'strip' },
] as const
type Sent = { status: number; rvMoved: boolean | null; managedFieldsAfter?: string[] }
const APPLIER = 'bench-applier'
const PROBE_MANAGER = 'crd-migrator-bench-probe'

/**
 * On a fresh CRD converting through `webhook` (6 widgets created at v1, storage flipped to
 * v2, two of each {@link PROBE_KINDS}), sends each request once, alone, and counts the
 * reviews it causes: the metadata-only list page and the GETs the migrators read with,
 * and for each kind of object the no-op write twice (merge patch on one object, server-
 * side apply of an empty configuration on the other; the second time the object is
 * already stored at v2).
 */
export async function runConversionProbe(
  http: KubeHttp,
  etcdEndpoint: string,
  webhook: ConversionWebhook,
  group: string,
  log: (s: string) => void,
): Promise<ConversionProbe> {
  await createBenchCrd(http, group, { conversion: webhook.conversion() })
  await createWidgets(http, group, PROBE_KINDS.length * 2, 4)
  const v1 = refOf(group, 'v1')
  const v2 = refOf(group, 'v2')
  for (const [k, kind] of PROBE_KINDS.entries()) {
    for (const i of [2 * k, 2 * k + 1]) {
      const { namespace, name } = widgetName(i)
      if (kind.prepare === 'apply-v1') {
        // Another manager applies a field it agrees on: an Apply entry at v1, no conflict.
        await http.request({
          method: 'PATCH',
          path: objectPath(v1, namespace, name),
          query: { fieldManager: APPLIER },
          contentType: ContentType.applyPatch,
          body: {
            apiVersion: `${group}/v1`,
            kind: KIND,
            metadata: { name, namespace },
            spec: { tier: (widgetSpec(i).spec as { tier: string }).tier },
          },
        })
      } else if (kind.prepare === 'strip') {
        // A list of one empty entry clears managedFields (an empty list would change nothing).
        await http.request({
          method: 'PATCH',
          path: objectPath(v1, namespace, name),
          contentType: ContentType.jsonPatch,
          body: [{ op: 'replace', path: '/metadata/managedFields', value: [{}] }],
        })
      }
    }
  }
  await flipStorageToV2(http, etcdEndpoint, group)
  await settleReviews(webhook)

  const rows: ProbeRow[] = []
  const measure = async (objects: string, managedFields: string[], request: string, send: () => Promise<Sent>): Promise<Sent> => {
    await settleReviews(webhook, 300)
    webhook.resetStats()
    const r = await send()
    const inRequest = webhook.stats.reviews
    await settleReviews(webhook)
    const c = reviewCount(webhook.stats)
    rows.push({
      objects,
      managedFields,
      request,
      status: r.status,
      rvMoved: r.rvMoved,
      managedFieldsAfter: r.managedFieldsAfter ?? null,
      inRequest,
      reviews: c.reviews,
      byDirection: c.byDirection,
      objectsConverted: c.objects,
    })
    return r
  }
  const statusOf = async (f: () => Promise<{ status: number; body: unknown }>) => {
    try {
      return await f()
    } catch (err) {
      if (err instanceof KubeApiError) return { status: err.status, body: { error: err.message } }
      throw err
    }
  }

  let listed: PartialObjectMetadata[] = []
  await measure('all 6, stored at v1', [], 'LIST v2 metadata-only, limit=500 (the migrators\u2019 list page)', async () => {
    const r = await retrying('probe list', () =>
      http.request<PartialObjectMetadataList>({
        method: 'GET',
        path: collectionPath(v2),
        query: { limit: 500 },
        accept: Accept.partialObjectMetadataList,
      }),
    )
    listed = r.body.items
    return { status: r.status, rvMoved: null }
  })
  const metaOf = (i: number) => {
    const { namespace, name } = widgetName(i)
    const m = listed.find((x) => x.metadata.name === name && x.metadata.namespace === namespace)
    if (!m) throw new Error(`probe: ${namespace}/${name} not listed`)
    return m.metadata
  }
  const fieldsOf = (i: number) => (metaOf(i).managedFields ?? []).map((e) => managedFieldsKey(e, group))

  const first = widgetName(0)
  const read = (version: 'v1' | 'v2', accept: string) => async () => {
    const r = await statusOf(() =>
      http.request({ method: 'GET', path: objectPath(refOf(group, version), first.namespace, first.name), accept }),
    )
    return { status: r.status, rvMoved: null }
  }
  await measure(PROBE_KINDS[0].label, fieldsOf(0), 'GET v2 (full object)', read('v2', Accept.json))
  await measure(PROBE_KINDS[0].label, fieldsOf(0), 'GET v2 metadata-only', read('v2', Accept.partialObjectMetadata))
  await measure(PROBE_KINDS[0].label, fieldsOf(0), 'GET v1 (full object; stored at v1)', read('v1', Accept.json))

  const lastRv = new Map<number, string>()
  const write = (i: number, how: 'merge-patch' | 'apply', resourceVersion: string) => async () => {
    const { namespace, name } = widgetName(i)
    const { uid } = metaOf(i)
    const r = await statusOf(() =>
      http.request<PartialObjectMetadata>({
        method: 'PATCH',
        path: objectPath(v2, namespace, name),
        ...(how === 'apply' ? { query: { fieldManager: PROBE_MANAGER } } : {}),
        contentType: how === 'apply' ? ContentType.applyPatch : ContentType.mergePatch,
        accept: Accept.partialObjectMetadata,
        body: {
          apiVersion: `${group}/v2`,
          kind: KIND,
          metadata: how === 'apply' ? { name, namespace, uid, resourceVersion } : { uid, resourceVersion },
        },
      }),
    )
    const meta = (r.body as PartialObjectMetadata | undefined)?.metadata
    const after = meta?.resourceVersion
    lastRv.set(i, after ?? resourceVersion)
    return {
      status: r.status,
      rvMoved: after === undefined ? null : after !== resourceVersion,
      managedFieldsAfter: meta ? (meta.managedFields ?? []).map((e) => managedFieldsKey(e, group)) : undefined,
    }
  }
  for (const [k, kind] of PROBE_KINDS.entries()) {
    for (const [j, how] of (['merge-patch', 'apply'] as const).entries()) {
      const i = 2 * k + j
      const what = how === 'apply' ? 'server-side apply, empty configuration' : 'JSON merge patch, empty'
      await measure(kind.label, fieldsOf(i), `PATCH v2 ${what} (object stored at v1)`, write(i, how, metaOf(i).resourceVersion!))
      await measure(kind.label, fieldsOf(i), `PATCH v2 ${what} again (stored at v2 now)`, write(i, how, lastRv.get(i)!))
    }
  }
  await deleteBenchCrd(http, group)
  await settleReviews(webhook)
  log(`conversion probe: ${rows.map((r) => `${r.request} [${r.objects}]: ${r.reviews}`).join('; ')}`)
  return {
    group,
    notes:
      'Each request alone on a quiet CRD: the webhook\u2019s counters reset before it, read when its answer came back ("in request") and once the webhook had been quiet for 0.5 s (all). The objects were created at v1 (POST) before the storage flip; "again" writes carry the resourceVersion the first write returned.',
    rows,
  }
}
