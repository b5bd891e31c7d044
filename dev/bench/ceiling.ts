/**
 * The ceiling: the simplest client that does the same work as the migrator's storage
 * phase (metadata-only paged list, one no-op merge patch per object carrying uid and
 * resourceVersion, PartialObjectMetadata back) at high concurrency, with nothing else:
 * no freeze, no progress, no checkpoints, no metrics, no queue library, no logging.
 * Whatever rate this reaches is the API server's (and etcd's) own limit on this machine.
 * With `write: 'apply'` (the conversion case) each write is instead a server-side apply
 * of an empty configuration with the same preconditions, the write the product sends to a
 * CRD that converts through a webhook.
 *
 * Deliberately NOT the product's KubeHttp: raw node:https with one keep-alive agent, so
 * nothing of ours (or client-node, ~75 MB) weighs on its speed or its peak RSS. Only its
 * connection settings are shared: the bench resolves the kubeconfig with the product's
 * own setup code (loadKubeConfig in src/kube/client.ts, then kubeConnection in
 * src/kube/http.ts, as every KubeHttp does: client-node's KubeConfig decides server, CA,
 * client certificate or token), and hands the result to this process as plain JSON
 * ({@link ceilingConnection}).
 */
import https from 'node:https'
import type { KubeConnection } from '../../src/kube/http.js'
import { LatencyHistogram } from './stats.js'

/** A {@link KubeConnection} as JSON for the child process: the server as a string, PEMs as text. */
export interface CeilingConnection {
  server: string
  headers: Record<string, string>
  tls: { ca?: string; cert?: string; key?: string; rejectUnauthorized?: boolean; servername?: string }
}

function pemText(value: unknown, what: string): string | undefined {
  if (value === undefined || value === null) return undefined
  if (typeof value === 'string') return value
  if (Buffer.isBuffer(value)) return value.toString('utf8')
  if (Array.isArray(value)) return value.map((v) => pemText(v, what)).join('\n')
  throw new Error(`the ceiling takes PEM text for ${what}, not ${typeof value}`)
}

export function ceilingConnection(c: KubeConnection): CeilingConnection {
  const tls: CeilingConnection['tls'] = {}
  const ca = pemText(c.tls.ca, 'the CA')
  const cert = pemText(c.tls.cert, 'the client certificate')
  const key = pemText(c.tls.key, 'the client key')
  if (ca) tls.ca = ca
  if (cert) tls.cert = cert
  if (key) tls.key = key
  if (c.tls.rejectUnauthorized !== undefined) tls.rejectUnauthorized = c.tls.rejectUnauthorized
  if (c.tls.servername) tls.servername = c.tls.servername
  return { server: c.server.href, headers: { ...c.headers }, tls }
}

export interface CeilingOptions {
  connection: CeilingConnection
  group: string
  version: string
  plural: string
  kind: string
  concurrency: number
  pageSize: number
  /** The no-op write: an empty JSON merge patch (default) or a server-side apply of an empty configuration. */
  write?: 'merge-patch' | 'apply'
}

/** The field manager of the ceiling's applies (they own no field, so no entry stays behind). */
export const CEILING_FIELD_MANAGER = 'crd-migrator-bench-ceiling'

export interface CeilingResult {
  listed: number
  written: number
  failed: number
  retries: number
  wallMs: number
  latency: LatencyHistogram
}

interface Meta {
  name: string
  namespace?: string
  uid: string
  resourceVersion: string
}

export async function runCeiling(o: CeilingOptions): Promise<CeilingResult> {
  const server = new URL(o.connection.server)
  const auth = o.connection.headers
  const agent = new https.Agent({ keepAlive: true, maxSockets: o.concurrency + 1, ...o.connection.tls })

  const apply = o.write === 'apply'
  const call = (method: string, path: string, accept: string, body?: string): Promise<{ status: number; text: string }> =>
    new Promise((resolve, reject) => {
      const headers: Record<string, string | number> = { ...auth, Accept: accept }
      if (body !== undefined) {
        headers['Content-Type'] = apply ? 'application/apply-patch+yaml' : 'application/merge-patch+json'
        headers['Content-Length'] = Buffer.byteLength(body)
      }
      const req = https.request({ host: server.hostname, port: server.port, path, method, headers, agent }, (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('error', reject)
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }))
      })
      req.on('error', reject)
      req.end(body)
    })

  const base = `/apis/${o.group}/${o.version}`
  const apiVersion = `${o.group}/${o.version}`
  const latency = new LatencyHistogram()
  let listed = 0
  let written = 0
  let failed = 0
  let retries = 0
  const started = performance.now()

  // Producer: pages into a buffer of at most about two pages; workers drain it.
  const buffer: Meta[] = []
  let listing = true
  let listError: unknown
  const waiting: Array<() => void> = []
  const wakeAll = () => {
    for (const w of waiting.splice(0)) w()
  }
  let roomForMore: (() => void) | undefined
  const producer = (async () => {
    let token = ''
    try {
      do {
        while (buffer.length > o.pageSize) await new Promise<void>((r) => (roomForMore = r))
        const q = `?limit=${o.pageSize}${token ? `&continue=${encodeURIComponent(token)}` : ''}`
        const res = await call('GET', `${base}/${o.plural}${q}`, 'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1')
        if (res.status === 429 || res.status >= 500) {
          retries++
          await new Promise((r) => setTimeout(r, 50))
          continue
        }
        if (res.status !== 200) throw new Error(`list: HTTP ${res.status} ${res.text.slice(0, 200)}`)
        const page = JSON.parse(res.text) as { items: Array<{ metadata: Meta }>; metadata: { continue?: string } }
        for (const item of page.items) buffer.push(item.metadata)
        listed += page.items.length
        token = page.metadata.continue ?? ''
        wakeAll()
      } while (token)
    } catch (err) {
      listError = err
    } finally {
      listing = false
      wakeAll()
    }
  })()

  const worker = async () => {
    for (;;) {
      const m = buffer.shift()
      if (!m) {
        if (!listing) return
        await new Promise<void>((r) => waiting.push(r))
        continue
      }
      if (roomForMore && buffer.length <= o.pageSize) {
        const r = roomForMore
        roomForMore = undefined
        r()
      }
      const path = `${base}/namespaces/${m.namespace}/${o.plural}/${m.name}${apply ? `?fieldManager=${CEILING_FIELD_MANAGER}` : ''}`
      const body = apply
        ? `{"apiVersion":"${apiVersion}","kind":"${o.kind}","metadata":{"name":"${m.name}","namespace":"${m.namespace}","uid":"${m.uid}","resourceVersion":"${m.resourceVersion}"}}`
        : `{"apiVersion":"${apiVersion}","kind":"${o.kind}","metadata":{"uid":"${m.uid}","resourceVersion":"${m.resourceVersion}"}}`
      const t0 = performance.now()
      for (let attempt = 1; ; attempt++) {
        try {
          const res = await call('PATCH', path, 'application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1', body)
          if ((res.status === 429 || res.status >= 500) && attempt < 10) {
            retries++
            await new Promise((r) => setTimeout(r, 20 * attempt))
            continue
          }
          // 404 (deleted) and 409 (written since listed; for an apply also deleted: uid
          // mismatch) need nothing more, as for the migrator.
          if (res.status === 200 || res.status === 404 || res.status === 409) written++
          else failed++
        } catch {
          if (attempt < 10) {
            retries++
            continue
          }
          failed++
        }
        break
      }
      latency.record((performance.now() - t0) / 1000)
    }
  }
  try {
    await Promise.all([producer, ...Array.from({ length: o.concurrency }, worker)])
  } finally {
    agent.destroy()
  }
  // eslint-disable-next-line @typescript-eslint/only-throw-error -- the list's own error, passed on as it was
  if (listError) throw listError
  return { listed, written, failed, retries, wallMs: performance.now() - started, latency }
}
