/**
 * Load on the real HTTPS webhook (`/validate-crd`), running in its own process pinned to
 * one core, with AdmissionReviews as the API server sends them: an UPDATE of a frozen CRD
 * (object and oldObject), once allowed (a label change) and once denied (a storage flip),
 * for a CRD of about 10 KB and one of about 1 MB. The load comes from vegeta (built from
 * its Go module by scripts/build-vegeta.sh) on the other core:
 * - at a fixed rate (open loop: requests leave on schedule whatever the answers do);
 * - at saturation (a fixed number of connections, each sending as soon as it is answered).
 * The same load also goes to a floor: a bare node:https server that reads the body,
 * JSON.parses it and answers a constant AdmissionReview. It is what any Node webhook pays
 * on this machine (TLS, HTTP, parsing the review), so ours minus the floor is our own cost.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { request } from 'node:https'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { VALIDATE_PATH } from '../../src/webhook/plugins/validate.js'
import { round } from './stats.js'
import { ensureVegeta } from './vegeta.js'

export type WebhookServerKind = 'ours' | 'floor'

export interface WebhookCaseResult {
  /** ours = the real webhook; floor = bare node:https + JSON.parse, no decision. */
  server: WebhookServerKind
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
  non2xx: number
  /**
   * With --repeat N > 1: every repetition's figures, in order; the figures above are then
   * their medians (errors and non2xx: sums).
   */
  repeats?: LoadStats[]
}

export interface WebhookBenchOptions {
  durationSeconds: number
  fixedRate10k: number
  fixedRate1m: number
  pinned: boolean
  /** Attacks per case (default 1); ours and the floor take turns, so drift of the machine hits both alike. */
  repeat?: number
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
      versions: ['v1', 'v2'].map((name) => ({
        name,
        served: true,
        storage: name === 'v2',
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

/** An UPDATE review of `oldObject` (a frozen CRD, see sizedCrd) that the webhook allows or denies. */
export function admissionReview(oldObject: Record<string, unknown>, decision: 'allowed' | 'denied'): string {
  const object = structuredClone(oldObject) as {
    metadata: { labels: Record<string, string> }
    spec: { versions: Array<{ name: string; storage: boolean }> }
  }
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
    const req = request(
      `${url}${VALIDATE_PATH}`,
      {
        method: 'POST',
        rejectUnauthorized: false,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('end', () => {
          try {
            resolve({
              status: res.statusCode ?? 0,
              allowed: (JSON.parse(Buffer.concat(chunks).toString('utf8')) as { response?: { allowed?: boolean } }).response?.allowed,
            })
          } catch (err) {
            reject(err)
          }
        })
      },
    )
    req.on('error', reject)
    req.end(body)
  })
}

function hasTaskset(): boolean {
  return spawnSync('taskset', ['-V'], { stdio: 'ignore' }).status === 0
}

async function startServerChild(kind: WebhookServerKind, pinned: boolean): Promise<{ child: ChildProcess; url: string }> {
  const childJs = fileURLToPath(new URL('./child.js', import.meta.url))
  const mode = kind === 'ours' ? 'webhook' : 'webhook-floor'
  // Both with Node's defaults: the image runs `serve` without node flags (Dockerfile).
  const [cmd, args] = pinned ? ['taskset', ['-c', '1', process.execPath, childJs, mode]] : [process.execPath, [childJs, mode]]
  const child = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] })
  const url = await new Promise<string>((resolve, reject) => {
    child.once('message', (m) => resolve((m as { url: string }).url))
    child.once('exit', (code) => reject(new Error(`the ${mode} child exited (${code}) before listening`)))
  })
  return { child, url }
}

interface VegetaReport {
  latencies: { '50th': number; '90th': number; '99th': number; max: number }
  requests: number
  throughput: number
  status_codes: Record<string, number>
  errors: string[] | null
}

export type LoadStats = Pick<
  WebhookCaseResult,
  'requestsPerSecond' | 'p50Ms' | 'p90Ms' | 'p99Ms' | 'maxMs' | 'requests' | 'errors' | 'non2xx'
>

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 ? sorted[mid]! : round((sorted[mid - 1]! + sorted[mid]!) / 2, 3)!
}

/** One attack's figures, or the medians of several (errors summed). */
export function medianStats(runs: LoadStats[]): LoadStats & { repeats?: LoadStats[] } {
  if (runs.length === 1) return runs[0]!
  const m = (k: keyof LoadStats) => median(runs.map((r) => r[k]))
  const sum = (k: keyof LoadStats) => runs.reduce((n, r) => n + r[k], 0)
  return {
    requestsPerSecond: m('requestsPerSecond'),
    p50Ms: m('p50Ms'),
    p90Ms: m('p90Ms'),
    p99Ms: m('p99Ms'),
    maxMs: m('maxMs'),
    requests: sum('requests'),
    errors: sum('errors'),
    non2xx: sum('non2xx'),
    repeats: runs,
  }
}

/**
 * One vegeta attack: `rate` requests/s (0 = as fast as `connections` connections allow)
 * for `seconds`, on keep-alive connections capped at `connections`. Workers are capped too:
 * an uncapped vegeta opens a new connection (a TLS handshake) whenever all are busy, which
 * measures handshakes rather than reviews.
 */
async function attack(
  vegeta: string,
  pinned: boolean,
  targetsFile: string,
  rate: number,
  seconds: number,
  connections: number,
): Promise<LoadStats> {
  const resultsFile = `${targetsFile}.${rate}.bin`
  const attackArgs = [
    'attack',
    '-insecure',
    `-rate=${rate}`,
    `-duration=${seconds}s`,
    '-timeout=10s',
    `-workers=${connections}`,
    `-max-workers=${connections}`,
    `-max-connections=${connections}`,
    `-targets=${targetsFile}`,
    `-output=${resultsFile}`,
  ]
  const run = (args: string[]) => {
    const [cmd, argv] = pinned ? ['taskset', ['-c', '0', vegeta, ...args]] : [vegeta, args]
    const r = spawnSync(cmd, argv, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 })
    if (r.status !== 0) throw new Error(`vegeta ${args[0]} failed (exit ${r.status}): ${r.stderr || r.error?.message}`)
    return r.stdout
  }
  run(attackArgs)
  const report = JSON.parse(run(['report', '-type=json', resultsFile])) as VegetaReport
  await rm(resultsFile, { force: true })
  const ms = (ns: number) => round(ns / 1e6, 3)!
  const ok = report.status_codes['200'] ?? 0
  const answered = Object.entries(report.status_codes)
    .filter(([code]) => code !== '0')
    .reduce((n, [, c]) => n + c, 0)
  return {
    requestsPerSecond: round(report.throughput, 1)!,
    p50Ms: ms(report.latencies['50th']),
    p90Ms: ms(report.latencies['90th']),
    p99Ms: ms(report.latencies['99th']),
    maxMs: ms(report.latencies.max),
    requests: report.requests,
    errors: report.requests - answered,
    non2xx: answered - ok,
  }
}

export async function runWebhookBench(o: WebhookBenchOptions): Promise<{ pinned: boolean; repeat: number; cases: WebhookCaseResult[] }> {
  const pinned = o.pinned && hasTaskset()
  const repeat = Math.max(1, o.repeat ?? 1)
  const vegeta = await ensureVegeta({ log: o.log })
  const dir = await mkdtemp(path.join(os.tmpdir(), 'crd-migrator-bench-vegeta-'))
  const cases: WebhookCaseResult[] = []
  // Both servers at once, on the same core: the idle one costs nothing, and taking turns
  // case by case (and repetition by repetition) keeps a drifting machine from favouring either.
  const servers = new Map<WebhookServerKind, { child: ChildProcess; url: string; warmedUp: boolean }>()
  try {
    // Each CRD and its two reviews are built once (the 1 MB one takes ~0.6 s) and sent to
    // both servers.
    const reviews: Array<{
      crd: '10KB' | '1MB'
      crdBytes: number
      fixedRate: number
      decision: 'allowed' | 'denied'
      body: string
      bodyFile: string
    }> = []
    for (const [crd, targetBytes, fixedRate] of [
      ['10KB', 10 * 1024, o.fixedRate10k],
      ['1MB', 1024 * 1024, o.fixedRate1m],
    ] as const) {
      const oldObject = sizedCrd(targetBytes, true)
      const crdBytes = JSON.stringify(oldObject).length
      for (const decision of ['allowed', 'denied'] as const) {
        const body = admissionReview(oldObject, decision)
        const bodyFile = path.join(dir, `${crd}-${decision}.json`)
        await writeFile(bodyFile, body)
        reviews.push({ crd, crdBytes, fixedRate, decision, body, bodyFile })
      }
    }
    for (const kind of ['ours', 'floor'] as const) servers.set(kind, { ...(await startServerChild(kind, pinned)), warmedUp: false })
    for (const { crd, crdBytes, fixedRate, decision, body, bodyFile } of reviews) {
      // The floor decides nothing: the allowed review of each size prices transport and parsing.
      const kinds = decision === 'allowed' ? (['ours', 'floor'] as const) : (['ours'] as const)
      const connections = crd === '1MB' ? 4 : 16
      const targets = new Map<WebhookServerKind, string>()
      for (const server of kinds) {
        const { url } = servers.get(server)!
        const check = await post(url, body)
        if (check.status !== 200 || (server === 'ours' && check.allowed !== (decision === 'allowed'))) {
          throw new Error(`${server} webhook answered ${check.status} allowed=${String(check.allowed)} to the ${crd} ${decision} review`)
        }
        const targetsFile = path.join(dir, `${server}-${crd}-${decision}.targets`)
        await writeFile(targetsFile, `POST ${url}${VALIDATE_PATH}\nContent-Type: application/json\n@${bodyFile}\n`)
        targets.set(server, targetsFile)
        // Warm-up, not recorded: JIT, connections, TLS sessions, Fastify's caches. The
        // first case of a fresh process gets a longer one at saturation, or its tail
        // would carry the optimizing compiler's work and the others' would not.
        const s = servers.get(server)!
        if (!s.warmedUp) await attack(vegeta, pinned, targetsFile, 0, Math.min(3, o.durationSeconds), connections)
        s.warmedUp = true
        await attack(vegeta, pinned, targetsFile, fixedRate, Math.min(2, o.durationSeconds), connections)
      }
      for (const mode of ['fixed', 'saturation'] as const) {
        const rate = mode === 'fixed' ? fixedRate : 0
        const runs = new Map<WebhookServerKind, LoadStats[]>(kinds.map((k) => [k, []]))
        for (let r = 1; r <= repeat; r++) {
          for (const server of kinds) {
            o.log(
              `webhook ${server} ${crd} ${decision}: ${mode === 'fixed' ? `fixed rate ${fixedRate} req/s` : `saturation, ${connections} connections`} for ${o.durationSeconds}s${repeat > 1 ? ` (${r}/${repeat})` : ''}`,
            )
            runs.get(server)!.push(await attack(vegeta, pinned, targets.get(server)!, rate, o.durationSeconds, connections))
          }
        }
        for (const server of kinds) {
          cases.push({
            server,
            crd,
            crdBytes,
            bodyBytes: Buffer.byteLength(body),
            decision,
            connections,
            durationSeconds: o.durationSeconds,
            mode,
            targetRate: mode === 'fixed' ? fixedRate : null,
            ...medianStats(runs.get(server)!),
          })
        }
      }
    }
  } finally {
    for (const { child } of servers.values()) child.kill('SIGTERM')
    await rm(dir, { recursive: true, force: true })
  }
  return { pinned, repeat, cases }
}
