/**
 * Counting requests as the API server counts them: `apiserver_request_total` from its
 * /metrics, scraped before and after a run, and the difference grouped by verb, API group,
 * resource and subresource (the code, version, scope and component labels summed). The
 * API server counts every client, so a bench names what is not the migrator's (the
 * foreground tenant, the API server's own loops) with `background` and leaves it out of
 * the per-CRD figures. Used by the fleet bench and the request-count integration test.
 */
import type { KubeHttp } from '../../src/kube/http.js'

/** Totals by `verb group/resource/subresource` (see requestKey). */
export type RequestTotals = Map<string, number>

export interface RequestRow {
  verb: string
  group: string
  resource: string
  subresource: string
  count: number
}

const METRIC = 'apiserver_request_total'

/** `PATCH apiextensions.k8s.io/customresourcedefinitions/status`; a non-resource request (discovery) is `GET -/(non-resource)`. */
export function requestKey(r: Pick<RequestRow, 'verb' | 'group' | 'resource' | 'subresource'>): string {
  const resource = r.resource === '' ? '(non-resource)' : r.resource
  return `${r.verb} ${r.group || (r.resource === '' ? '-' : 'core')}/${resource}${r.subresource ? `/${r.subresource}` : ''}`
}

/** The labels of one sample line (`{a="x",b="y\"z"}`), escapes undone; undefined when the line is not well formed. */
export function parseLabels(text: string): Record<string, string> | undefined {
  const labels: Record<string, string> = {}
  const re = /\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,|$)/y
  let at = 0
  while (at < text.length) {
    re.lastIndex = at
    const m = re.exec(text)
    if (!m) return undefined
    labels[m[1]!] = m[2]!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c))
    at = re.lastIndex
  }
  return labels
}

/** Sums `apiserver_request_total` of a /metrics text by verb, group, resource and subresource. */
export function parseRequestTotals(metricsText: string): RequestTotals {
  const totals: RequestTotals = new Map()
  for (const line of metricsText.split('\n')) {
    if (!line.startsWith(`${METRIC}{`)) continue
    const close = line.lastIndexOf('}')
    const labels = close > 0 ? parseLabels(line.slice(METRIC.length + 1, close)) : undefined
    const value = Number(
      line
        .slice(close + 1)
        .trim()
        .split(/\s+/)[0],
    )
    if (!labels || !Number.isFinite(value)) throw new Error(`${METRIC}: cannot read the line ${JSON.stringify(line.slice(0, 200))}`)
    const key = requestKey({
      verb: labels.verb ?? '',
      group: labels.group ?? '',
      resource: labels.resource ?? '',
      subresource: labels.subresource ?? '',
    })
    totals.set(key, (totals.get(key) ?? 0) + value)
  }
  return totals
}

/** Inverse of requestKey, for rows. */
function rowOf(key: string, count: number): RequestRow {
  const [verb, path] = key.split(' ') as [string, string]
  const [group, resource, subresource = ''] = path.split('/') as [string, string, string?]
  return {
    verb,
    group: group === 'core' || group === '-' ? '' : group,
    resource: resource === '(non-resource)' ? '' : resource,
    subresource,
    count,
  }
}

/**
 * What happened between two scrapes, biggest first (ties by key). A counter that went down
 * (the API server restarted) is an error, not a negative count.
 */
export function diffRequestTotals(before: RequestTotals, after: RequestTotals): RequestRow[] {
  const rows: RequestRow[] = []
  for (const [key, value] of after) {
    const count = value - (before.get(key) ?? 0)
    if (count < 0)
      throw new Error(`${METRIC} went down for ${key} (${before.get(key)} -> ${value}): the API server restarted between scrapes`)
    if (count > 0) rows.push(rowOf(key, count))
  }
  return rows.sort((a, b) => b.count - a.count || requestKey(a).localeCompare(requestKey(b)))
}

export async function scrapeRequestTotals(http: KubeHttp): Promise<RequestTotals> {
  const res = await http.requestRaw({ method: 'GET', path: '/metrics', accept: 'text/plain' })
  if (res.status !== 200) throw new Error(`GET /metrics answered ${res.status}: ${res.body.slice(0, 200)}`)
  return parseRequestTotals(res.body)
}

/** Counts requests between `start()` and `stop()`. */
export async function countRequests(http: KubeHttp): Promise<{ stop(): Promise<RequestRow[]> }> {
  const before = await scrapeRequestTotals(http)
  return { stop: async () => diffRequestTotals(before, await scrapeRequestTotals(http)) }
}

export type RequestKind = 'object-write' | 'object-read' | 'overhead' | 'background'

export interface RequestClassifier {
  /** The resource (plural) whose objects are migrated: its writes are the rewrites, per object. */
  objects: string
  /** Requests that are not the migrator's (another client, the API server's own loops). */
  background: (row: RequestRow) => boolean
}

/** A rewrite is a write of the object or of its status subresource (useStatusSubresource). */
const WRITES = new Set(['PATCH', 'PUT', 'APPLY', 'POST'])

export function classifyRequest(row: RequestRow, c: RequestClassifier): RequestKind {
  if (c.background(row)) return 'background'
  if (row.resource === c.objects && WRITES.has(row.verb)) return 'object-write'
  if (row.resource === c.objects) return 'object-read'
  return 'overhead'
}

export interface PerCrdRow extends RequestRow {
  kind: RequestKind
  perCrd: number
}

export interface RequestsPerCrd {
  crds: number
  rows: PerCrdRow[]
  /** Sums per CRD by kind. */
  totals: Record<RequestKind, number>
}

/** Stands for the group of each CRD's objects (a fleet has one group per CRD): their rows are summed. */
export const EACH_GROUP = '(each)'

/**
 * The rows divided by the number of CRDs, each with its kind; totals per kind. The rows of
 * the migrated objects are summed over their groups (one row per verb and subresource).
 */
export function requestsPerCrd(rows: readonly RequestRow[], crds: number, c: RequestClassifier): RequestsPerCrd {
  const totals: Record<RequestKind, number> = { 'object-write': 0, 'object-read': 0, overhead: 0, background: 0 }
  const merged = new Map<string, PerCrdRow>()
  for (const row of rows) {
    const kind = classifyRequest(row, c)
    totals[kind] += row.count / crds
    const r = kind === 'object-write' || kind === 'object-read' ? { ...row, group: EACH_GROUP } : row
    const key = requestKey(r)
    const sum = merged.get(key)
    if (sum) sum.count += row.count
    else merged.set(key, { ...r, kind, perCrd: 0 })
  }
  const out = [...merged.values()].map((r) => ({ ...r, perCrd: round2(r.count / crds) }))
  for (const k of Object.keys(totals) as RequestKind[]) totals[k] = round2(totals[k])
  return { crds, rows: out, totals }
}

const round2 = (n: number) => Math.round(n * 100) / 100

/** A markdown table of per-CRD requests, the migrator's overhead first. */
export function renderRequestsPerCrd(title: string, r: RequestsPerCrd): string {
  const order: RequestKind[] = ['overhead', 'object-read', 'object-write', 'background']
  const rows = [...r.rows].sort((a, b) => order.indexOf(a.kind) - order.indexOf(b.kind) || b.count - a.count)
  return [
    title,
    '',
    `${r.crds} CRD(s); per CRD: overhead ${r.totals.overhead}, object reads ${r.totals['object-read']}, object writes ${r.totals['object-write']} (background, not the migrator's: ${r.totals.background})`,
    '',
    '| kind | verb | resource | total | per CRD |',
    '|---|---|---|---|---|',
    ...rows.map((x) => `| ${x.kind} | ${x.verb} | ${requestKey(x).split(' ')[1]} | ${x.count} | ${x.perCrd} |`),
    '',
  ].join('\n')
}
