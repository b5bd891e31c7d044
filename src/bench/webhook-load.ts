/**
 * Load on the real HTTPS webhook (`/validate-crd`), running in its own process pinned to
 * one core, with AdmissionReviews as the API server sends them: an UPDATE of a frozen CRD
 * (object and oldObject), once allowed (a label change) and once denied (a storage flip),
 * for a CRD of about 10 KB and one of about 1 MB, from the other core:
 * - at a fixed rate with an open-loop pacer of our own (requests issued every millisecond
 *   as they fall due, latency from the scheduled send time, 2% precision): autocannon's
 *   `overallRate` sends each connection's quota back to back at the start of every second
 *   and then idles, which is a burst of saturation each second, and its latency histogram
 *   has 1 ms resolution, too coarse for a 2 ms target;
 * - at saturation with autocannon (closed loop, N connections, as fast as answers come).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { Agent, request } from 'node:https'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'
import { DEFAULT_MIGRATING_ANNOTATION } from '../config/annotations.js'
import { VALIDATE_PATH } from '../webhook/server.js'
import { LatencyHistogram, round, sleep } from './stats.js'

export interface WebhookCaseResult {
  crd: '10KB' | '1MB'
  crdBytes: number
  bodyBytes: number
  decision: 'allowed' | 'denied'
  mode: 'fixed' | 'saturation'
  /** Requests per second asked for (fixed) or null (saturation). */
  targetRate: number | null
  connections: number
  durationSeconds: number
  requestsPerSecond: number
  p50Ms: number
  p90Ms: number
  p99Ms: number
  maxMs: number
  requests: number
  errors: number
  timeouts: number
  non2xx: number
}

export interface WebhookBenchOptions {
  durationSeconds: number
  fixedRate10k: number
  fixedRate1m: number
  pinned: boolean
  log: (s: string) => void
}

/** A CRD whose schema has `properties` leaf fields: roughly 115 bytes of JSON each. */
export function sizedCrd(targetBytes: number, frozen: boolean): Record<string, unknown> {
  const props: Record<string, unknown> = {}
  const crd = (p: Record<string, unknown>) => ({
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: {
      name: 'widgets.example.com',
      uid: '6f0c6bde-4f43-4a36-9d5b-3d8f7f1c2a10',
      resourceVersion: '123456',
      generation: 7,
      creationTimestamp: '2025-01-01T00:00:00Z',
      labels: { 'app.kubernetes.io/part-of': 'widgets-operator' },
      annotations: frozen ? { [DEFAULT_MIGRATING_ANNOTATION]: 'true', 'crd-migrator.io/owner': 'crd-migrator-7d9f-abcde' } : {},
    },
    spec: {
      group: 'example.com',
      scope: 'Namespaced',
      names: { plural: 'widgets', singular: 'widget', kind: 'Widget', listKind: 'WidgetList' },
      versions: ['v1', 'v2'].map(name => ({
        name, served: true, storage: name === 'v2',
        schema: { openAPIV3Schema: { type: 'object', properties: { spec: { type: 'object', properties: p } } } },
        subresources: { status: {} },
      })),
    },
    status: { storedVersions: ['v1', 'v2'], acceptedNames: { plural: 'widgets', kind: 'Widget' } },
  })
  let i = 0
  // Two versions carry the schema: grow it until the whole CRD reaches the target.
  while (JSON.stringify(crd(props)).length < targetBytes) {
    for (let k = 0; k < 16; k++, i++) {
      props[`field${String(i).padStart(6, '0')}`] = { type: 'string', description: `Field number ${i} of the widget spec.`, maxLength: 253 }
    }
  }
  return crd(props)
}

export function admissionReview(crdBytes: number, decision: 'allowed' | 'denied'): string {
  const oldObject = sizedCrd(crdBytes, true)
  const object = structuredClone(oldObject) as { metadata: { labels: Record<string, string> }; spec: { versions: Array<{ name: string; storage: boolean }> } }
  if (decision === 'allowed') {
    object.metadata.labels['team'] = 'payments' // any change but the storage version
  } else {
    for (const v of object.spec.versions) v.storage = v.name === 'v1' // a storage flip back, mid-migration
  }
  return JSON.stringify({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid: '705ab4f5-6393-11e8-b7cc-42010a800002',
      kind: { group: 'apiextensions.k8s.io', version: 'v1', kind: 'CustomResourceDefinition' },
      resource: { group: 'apiextensions.k8s.io', version: 'v1', resource: 'customresourcedefinitions' },
      requestKind: { group: 'apiextensions.k8s.io', version: 'v1', kind: 'CustomResourceDefinition' },
      requestResource: { group: 'apiextensions.k8s.io', version: 'v1', resource: 'customresourcedefinitions' },
      name: 'widgets.example.com',
      operation: 'UPDATE',
      userInfo: { username: 'alice', uid: 'a1', groups: ['platform-operators', 'system:authenticated'] },
      object,
      oldObject,
      dryRun: false,
      options: { apiVersion: 'meta.k8s.io/v1', kind: 'UpdateOptions' },
    },
  })
}

function post(url: string, body: string): Promise<{ status: number; allowed: boolean | undefined }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}${VALIDATE_PATH}`, {
      method: 'POST', rejectUnauthorized: false, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    }, res => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => {
        try {
          resolve({ status: res.statusCode ?? 0, allowed: (JSON.parse(Buffer.concat(chunks).toString('utf8')) as { response?: { allowed?: boolean } }).response?.allowed })
        } catch (err) { reject(err) }
      })
    })
    req.on('error', reject)
    req.end(body)
  })
}

function hasTaskset(): boolean {
  return spawnSync('taskset', ['-V'], { stdio: 'ignore' }).status === 0
}

async function startWebhookChild(pinned: boolean): Promise<{ child: ChildProcess; url: string }> {
  const childJs = fileURLToPath(new URL('./child.js', import.meta.url))
  const [cmd, args] = pinned ? ['taskset', ['-c', '1', process.execPath, childJs, 'webhook']] : [process.execPath, [childJs, 'webhook']]
  const child = spawn(cmd, args as string[], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] })
  const url = await new Promise<string>((resolve, reject) => {
    child.once('message', m => resolve((m as { url: string }).url))
    child.once('exit', code => reject(new Error(`the webhook child exited (${code}) before listening`)))
  })
  return { child, url }
}

function cannon(opts: autocannon.Options): Promise<autocannon.Result> {
  return new Promise((resolve, reject) => {
    autocannon(opts, (err, result) => (err ? reject(err) : resolve(result)))
  })
}

export async function runWebhookBench(o: WebhookBenchOptions): Promise<{ pinned: boolean; cases: WebhookCaseResult[] }> {
  const pinned = o.pinned && hasTaskset()
  // The load generator goes to core 0 for the duration, the server to core 1.
  if (pinned) spawnSync('taskset', ['-a', '-p', '-c', '0', String(process.pid)], { stdio: 'ignore' })
  const { child, url } = await startWebhookChild(pinned)
  const cases: WebhookCaseResult[] = []
  try {
    for (const [crd, crdBytes, fixedRate] of [['10KB', 10 * 1024, o.fixedRate10k], ['1MB', 1024 * 1024, o.fixedRate1m]] as const) {
      for (const decision of ['allowed', 'denied'] as const) {
        const body = admissionReview(crdBytes, decision)
        const check = await post(url, body)
        if (check.status !== 200 || check.allowed !== (decision === 'allowed')) {
          throw new Error(`webhook answered ${check.status} allowed=${String(check.allowed)} to the ${crd} ${decision} review`)
        }
        const base: autocannon.Options = {
          url: `${url}${VALIDATE_PATH}`,
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body,
          timeout: 10,
        }
        // Warm-up: JIT, TLS sessions, Fastify's caches.
        await cannon({ ...base, connections: 4, duration: Math.min(2, o.durationSeconds) })
        const big = crd === '1MB'
        const common = { crd, crdBytes: JSON.stringify(sizedCrd(crdBytes, true)).length, bodyBytes: Buffer.byteLength(body), decision, durationSeconds: o.durationSeconds }
        o.log(`webhook ${crd} ${decision}: fixed rate ${fixedRate} req/s for ${o.durationSeconds}s`)
        const p = await paced(`${url}${VALIDATE_PATH}`, body, fixedRate, o.durationSeconds, big ? 8 : 32)
        cases.push({ ...common, mode: 'fixed', targetRate: fixedRate, connections: p.connections, ...p.stats })
        const connections = big ? 4 : 16
        o.log(`webhook ${crd} ${decision}: saturation, ${connections} connections, for ${o.durationSeconds}s`)
        const r = await cannon({ ...base, connections, duration: o.durationSeconds })
        cases.push({
          ...common, mode: 'saturation', targetRate: null, connections,
          requestsPerSecond: round(r.requests.average, 1)!,
          p50Ms: round(r.latency.p50, 3)!, p90Ms: round(r.latency.p90, 3)!, p99Ms: round(r.latency.p99, 3)!, maxMs: round(r.latency.max, 3)!,
          requests: r.requests.total, errors: r.errors, timeouts: r.timeouts, non2xx: r.non2xx,
        })
      }
    }
  } finally {
    child.kill('SIGTERM')
    if (pinned) spawnSync('taskset', ['-a', '-p', '-c', `0-${Math.max(1, (await import('node:os')).cpus().length - 1)}`, String(process.pid)], { stdio: 'ignore' })
  }
  return { pinned, cases }
}

type PacedStats = Pick<WebhookCaseResult, 'requestsPerSecond' | 'p50Ms' | 'p90Ms' | 'p99Ms' | 'maxMs' | 'requests' | 'errors' | 'timeouts' | 'non2xx'>

/**
 * Open-loop constant rate: every millisecond, issue the requests that have fallen due
 * (request k is due at start + k/rate), over up to `connections` keep-alive connections.
 * Latency runs from the due time, so a stalled server is not hidden by requests the
 * generator failed to send (no coordinated omission).
 */
async function paced(url: string, body: string, rate: number, seconds: number, connections: number): Promise<{ connections: number; stats: PacedStats }> {
  const agent = new Agent({ keepAlive: true, maxSockets: connections, rejectUnauthorized: false })
  const payload = Buffer.from(body)
  const headers = { 'content-type': 'application/json', 'content-length': payload.length }
  interface Tally { latency: LatencyHistogram; errors: number; non2xx: number; done: number }
  const one = (due: number, t: Tally) => new Promise<void>(resolve => {
    const req = request(url, { method: 'POST', agent, headers, timeout: 10_000 }, res => {
      res.on('data', () => {})
      res.on('end', () => {
        if ((res.statusCode ?? 0) >= 300) t.non2xx++
        t.latency.record((performance.now() - due) / 1000)
        t.done++
        resolve()
      })
    })
    req.on('timeout', () => req.destroy(new Error('timeout')))
    req.on('error', () => { t.errors++; resolve() })
    req.end(payload)
  })
  const run = async (durationS: number): Promise<Tally & { elapsedMs: number }> => {
    const t: Tally = { latency: new LatencyHistogram(), errors: 0, non2xx: 0, done: 0 }
    const pending: Promise<void>[] = []
    const start = performance.now()
    const total = Math.round(rate * durationS)
    let issued = 0
    while (issued < total) {
      const due = Math.min(total, Math.floor(((performance.now() - start) / 1000) * rate) + 1)
      for (; issued < due; issued++) pending.push(one(start + (issued / rate) * 1000, t))
      await sleep(1)
    }
    await Promise.all(pending)
    return { ...t, elapsedMs: performance.now() - start }
  }
  // One second of warm-up at the same rate, not recorded: sockets, TLS sessions, JIT.
  await run(Math.min(1, seconds))
  const { latency, errors, non2xx, done, elapsedMs } = await run(seconds)
  agent.destroy()
  const s = latency.summary()
  return {
    connections,
    stats: {
      requestsPerSecond: round(done / (elapsedMs / 1000), 1)!,
      p50Ms: round(s.p50Ms, 3)!, p90Ms: round(latency.quantileMs(0.9), 3)!, p99Ms: round(s.p99Ms, 3)!, maxMs: round(s.maxMs, 3)!,
      requests: done, errors, timeouts: 0, non2xx,
    },
  }
}
