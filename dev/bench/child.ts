/**
 * Child processes of the bench, one per measured run, so each run's peak RSS (VmHWM) is
 * its own (built into dist-dev/dev/bench/child.js):
 *   child.js ours    < json OursChildInput on stdin    -> one JSON line on stdout
 *   child.js ceiling < json CeilingOptions on stdin    -> one JSON line on stdout
 *   child.js webhook                                   -> sends {url} over IPC, serves until SIGTERM
 *   child.js webhook-floor                             -> the same, for a bare node:https floor
 *   child.js foreground < json ForegroundOptions       -> sends {ready} over IPC; on {stop} sends its ForegroundSamples, exits
 * The input comes on stdin, not in argv: the ceiling's carries a client key.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import type { KubeHttp, KubeRequest } from '../../src/kube/http.js'
import type { MigratorMetrics } from '../../src/migrator/metrics.js'
import type { CeilingOptions } from './ceiling.js'
import type { ForegroundOptions } from './foreground.js'
import { LatencyHistogram, memoryOf } from './stats.js'

// Each mode imports only what it runs, so a run's peak RSS is not inflated by modules of
// another (the ceiling must not carry the migrator, client-node or Fastify).

export interface OursChildInput {
  kubeconfigPath: string
  crd: string
  /** Overrides of the default settings (concurrency, qps); none = the defaults. */
  concurrency?: number
  qps?: number
  /** Count the requests by kind (the conversion case): off otherwise, it costs CPU on every write. */
  countRequests?: boolean
}

export interface OursChildOutput {
  outcome: string
  reason: string
  settings: { concurrency: number; qps: number; pageSize: number; phases: readonly string[] }
  counts: Record<string, number>
  /** migrateCrd from start to finish: freeze, storage phase, storedVersions, managedFields phase, unfreeze. */
  wallMs: number
  /** The StorageVersionMigration phase alone (list + writes), from crd_migrator_phase_duration_seconds. */
  storagePhaseMs: number | null
  /** When each phase ran (Date.now() at its start and end), and the run itself. */
  timeline: Array<{ what: string; from: number; to: number }>
  cleanupPhaseMs: number | null
  /** Per-write latency of the storage phase, from the observations of crd_migrator_write_duration_seconds. */
  latency: ReturnType<LatencyHistogram['summary']>
  throttled: number
  /** The storage phase's adaptive concurrency limit (crd_migrator_concurrency_limit): time-weighted mean, highest, last. */
  concurrencyLimit: { mean: number; max: number; final: number } | null
  baselineRssMb: number | null
  peakRssMb: number | null
  /** CPU time (user + system) the process spent in the migration. */
  cpuMs: number
  /** CPU time of the StorageVersionMigration phase alone (list + writes: the ceiling's work); null when it did not run. */
  storagePhaseCpuMs: number | null
  storedVersionsAfter: string[]
  /** The requests it sent, by kind ({@link requestKind}), retries included (with countRequests; else empty). */
  requests: Record<string, number>
  /** The migration result's `conversion` report, when the product gives one. */
  conversion: unknown
  /** The lossless check before the storage phase (its pre-freeze first page not included). */
  lossless: { method: string; checked: number; durationMs: number } | null
}

export interface CeilingChildOutput {
  listed: number
  written: number
  failed: number
  retries: number
  wallMs: number
  latency: ReturnType<LatencyHistogram['summary']>
  baselineRssMb: number | null
  peakRssMb: number | null
  cpuMs: number
}

/**
 * `METHOD target[ content type][ metadata-only]`, target being `CRD`, `<version> list` or
 * `<version> object[ status]` of the migrated resource, `discovery`, or another resource's plural.
 */
function requestKind(req: KubeRequest, own: RegExp): string {
  const path = req.path.replace(/\?.*$/, '')
  const match = own.exec(path)
  let target: string
  if (path.startsWith('/apis/apiextensions.k8s.io/')) target = `CRD${path.endsWith('/status') ? ' status' : ''}`
  else if (match) target = `${match[1]} ${match[2] ? 'object' : 'list'}${match[3] ? ' status' : ''}`
  else if (/^\/apis?(\/[^/]+){0,2}$/.test(path)) target = 'discovery'
  else {
    const segments = path.replace(/\/namespaces\/[^/]+\//, '/').split('/')
    target = segments[1] === 'api' ? (segments[3] ?? path) : (segments[4] ?? path)
  }
  const type = req.contentType ? ` ${req.contentType.replace(/^application\//, '').replace(/\+.*$/, '')}` : ''
  const meta = req.accept?.includes('as=PartialObjectMetadata') ? ' metadata-only' : ''
  return `${req.method} ${target}${type}${meta}`
}

/** Counts what `http` sends, by {@link requestKind}. */
function tapRequests(http: KubeHttp, plural: string): Record<string, number> {
  const counts: Record<string, number> = {}
  // Compiled once: the tap runs in the measured process, on every write.
  const own = new RegExp(`^/apis/[^/]+/([^/]+)/(?:namespaces/[^/]+/)?${plural}(/[^/]+)?(/status)?$`)
  const methods = http as unknown as Record<'request' | 'requestRaw', (req: KubeRequest) => Promise<unknown>>
  for (const name of ['request', 'requestRaw'] as const) {
    const send = methods[name].bind(http)
    methods[name] = (req: KubeRequest) => {
      const kind = requestKind(req, own)
      counts[kind] = (counts[kind] ?? 0) + 1
      return send(req)
    }
  }
  return counts
}

async function ours(input: OursChildInput): Promise<OursChildOutput> {
  const { pino } = await import('pino')
  const { ConfigSchema } = await import('../../src/config/schema.js')
  const { kubeHttp } = await import('../../src/kube/client.js')
  const { KubeEventRecorder } = await import('../../src/kube/events.js')
  const { migrateCrd } = await import('../../src/migrator/migrate.js')
  const { Phase } = await import('../../src/migrator/plan.js')
  const { settingsFor } = await import('../../src/migrator/crd-settings.js')
  const config = ConfigSchema.parse({})
  const base = settingsFor(config, input.crd)
  const settings = {
    ...base,
    ...(input.concurrency !== undefined ? { concurrency: input.concurrency } : {}),
    ...(input.qps !== undefined ? { qps: input.qps } : {}),
  }
  // As `crd-migrator migrate` does (src/cli/migrate/run-migrate.ts).
  const http = kubeHttp(input.kubeconfigPath, { maxSockets: Math.max(settings.concurrency, 4) * 2 })
  const requests = input.countRequests ? tapRequests(http, input.crd.slice(0, input.crd.indexOf('.'))) : {}
  const logger = pino({ level: 'warn' }, pino.destination(2))
  // `crd-migrator migrate` runs without a metrics registry (it serves none, and does not
  // load prom-client). The bench needs a few of the observations the migrator makes
  // anyway (exact write-latency quantiles: prom-client's buckets are too coarse for a 2 ms
  // p50; phase durations; the adaptive limit over time; 429s), so it hands the migrator
  // a tap in the registry's place that records those and ignores the rest.
  const latency = new LatencyHistogram()
  const phaseMs: Record<string, number> = {}
  const timeline: OursChildOutput['timeline'] = []
  const limitTrace: Array<[number, number]> = []
  let throttled = 0
  // CPU at the storage phase's start (its limit is first set) and end (its duration observed).
  let storageCpuStart: NodeJS.CpuUsage | undefined
  let storagePhaseCpuMs: number | null = null
  const metrics = metricsTap({
    writeDuration: (labels, value) => {
      if (labels.phase === Phase.StorageVersionMigration) latency.record(value)
    },
    phaseDuration: (labels, value) => {
      if (!labels.phase) return
      if (labels.phase === Phase.StorageVersionMigration && storageCpuStart) {
        const used = process.cpuUsage(storageCpuStart)
        storagePhaseCpuMs = (used.user + used.system) / 1000
      }
      phaseMs[labels.phase] = value * 1000
      timeline.push({ what: labels.phase, from: Math.round(Date.now() - value * 1000), to: Date.now() })
    },
    concurrencyLimit: (labels, value) => {
      if (labels.phase !== Phase.StorageVersionMigration) return
      storageCpuStart ??= process.cpuUsage()
      limitTrace.push([performance.now(), value])
    },
    throttled: () => throttled++,
  })

  const baseline = memoryOf('self')
  const owner = `bench:${os.hostname()}:${process.pid}`
  const startedAt = Date.now()
  const started = performance.now()
  const cpu0 = process.cpuUsage()
  const result = await migrateCrd(input.crd, settings, {
    http,
    logger,
    owner,
    metrics,
    events: new KubeEventRecorder(http, 'crd-migrator', owner),
  })
  const wallMs = performance.now() - started
  const cpu = process.cpuUsage(cpu0)
  const storageMs = phaseMs[Phase.StorageVersionMigration]
  const peak = memoryOf('self')
  http.close()
  // With --expose-gc (profiling only): what stays reachable after the run, to tell a leak
  // from V8 merely growing its heap under a long allocation-heavy run.
  const gc = (globalThis as { gc?: () => void }).gc
  if (gc) {
    gc()
    process.stderr.write(
      `bench child ours: heapUsed after gc ${(process.memoryUsage().heapUsed / 1048576).toFixed(1)} MB, rss ${(process.memoryUsage().rss / 1048576).toFixed(1)} MB\n`,
    )
  }
  return {
    outcome: result.outcome,
    reason: result.reason,
    settings: { concurrency: settings.concurrency, qps: settings.qps, pageSize: settings.pageSize, phases: settings.phases },
    counts: { ...(result.storage?.counts ?? {}) },
    wallMs,
    storagePhaseMs: phaseMs[Phase.StorageVersionMigration] ?? null,
    timeline: [{ what: 'migrateCrd', from: startedAt, to: Date.now() }, ...timeline],
    cleanupPhaseMs: phaseMs[Phase.CleanupManagedFields] ?? null,
    latency: latency.summary(),
    throttled,
    concurrencyLimit: limitSummary(limitTrace, storageMs === undefined ? undefined : limitTrace[0]![0] + storageMs),
    baselineRssMb: baseline?.rssMb ?? null,
    peakRssMb: peak?.peakRssMb ?? null,
    cpuMs: (cpu.user + cpu.system) / 1000,
    storagePhaseCpuMs,
    storedVersionsAfter: result.storedVersionsAfter,
    requests,
    // Read loosely: the product's result may or may not have it.
    conversion: (result as { conversion?: unknown }).conversion ?? null,
    lossless: result.lossless
      ? { method: result.lossless.method, checked: result.lossless.checked, durationMs: result.lossless.durationMs }
      : null,
  }
}

type Labels = Record<string, string | undefined>
type Observe = (labels: Labels, value: number) => void

/**
 * Something shaped like MigratorMetrics (src/migrator/metrics.ts) without prom-client:
 * every metric takes inc/dec/set/observe/remove, directly or through labels(...), and
 * passes the named ones to `taps` (value 1 for inc).
 */
function metricsTap(taps: Partial<Record<keyof MigratorMetrics, Observe>>): MigratorMetrics {
  const series = (name: keyof MigratorMetrics, bound: Labels) => {
    const tap = taps[name]
    const call = (value: number) => tap?.(bound, value)
    return {
      inc: (value = 1) => call(value),
      dec: () => {},
      set: (value: number) => call(value),
      observe: (value: number) => call(value),
    }
  }
  const metric = (name: keyof MigratorMetrics) => {
    const tap = taps[name]
    // set(labels, value) / observe(labels, value) / inc(labels?, value?) / inc(value?)
    const record = (a: unknown, b: unknown) => {
      if (!tap) return
      if (typeof a === 'object' && a !== null) tap(a as Labels, typeof b === 'number' ? b : 1)
      else tap({}, typeof a === 'number' ? a : 1)
    }
    return {
      labels: (labels: Labels) => series(name, labels),
      inc: record,
      dec: () => {},
      set: record,
      observe: record,
      remove: () => {},
    }
  }
  const cache: Record<string, ReturnType<typeof metric>> = {}
  const handler: ProxyHandler<object> = {
    get: (_target, name) => (typeof name === 'string' ? (cache[name] ??= metric(name as keyof MigratorMetrics)) : undefined),
  }
  return new Proxy({}, handler) as MigratorMetrics
}

/** Time-weighted mean, highest and last value of a limit set at the given times, until `end`. */
function limitSummary(trace: Array<[number, number]>, end: number | undefined): OursChildOutput['concurrencyLimit'] {
  if (!trace.length) return null
  const stop = end ?? trace.at(-1)![0]
  let weighted = 0
  for (let i = 0; i < trace.length; i++) {
    const [at, value] = trace[i]!
    const until = Math.min(stop, trace[i + 1]?.[0] ?? stop)
    weighted += value * Math.max(0, until - at)
  }
  const span = stop - trace[0]![0]
  const values = trace.map(([, v]) => v)
  return { mean: span > 0 ? Math.round((weighted / span) * 10) / 10 : values.at(-1)!, max: Math.max(...values), final: values.at(-1)! }
}

async function ceiling(input: CeilingOptions): Promise<CeilingChildOutput> {
  const { runCeiling } = await import('./ceiling.js')
  const baseline = memoryOf('self')
  const cpu0 = process.cpuUsage()
  const r = await runCeiling(input)
  const cpu = process.cpuUsage(cpu0)
  const peak = memoryOf('self')
  return {
    listed: r.listed,
    written: r.written,
    failed: r.failed,
    retries: r.retries,
    wallMs: r.wallMs,
    latency: r.latency.summary(),
    baselineRssMb: baseline?.rssMb ?? null,
    peakRssMb: peak?.peakRssMb ?? null,
    cpuMs: (cpu.user + cpu.system) / 1000,
  }
}

/** A development certificate pair for 127.0.0.1 in a fresh temporary directory. */
async function loopbackCertificates(prefix: string) {
  const { generateDevCertificates } = await import('../certs/devcerts.js')
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix))
  return { dir, ...(await generateDevCertificates(dir, { extraHosts: ['127.0.0.1'] })) }
}

/** Tells the parent where we listen, and on SIGTERM or a lost parent closes, cleans up and exits. */
function serveUntilTold(url: string, caCertFile: string, dir: string, close: () => Promise<void> | void): void {
  const stop = async () => {
    await close()
    await rm(dir, { recursive: true, force: true })
    process.exit(0)
  }
  process.on('SIGTERM', () => void stop())
  process.on('disconnect', () => void stop())
  process.send?.({ url, caCertFile })
}

/** The real webhook server, at the production log level, on a free loopback port. */
async function webhook(): Promise<void> {
  const { startWebhookServer } = await import('../../src/webhook/server.js')
  const certs = await loopbackCertificates('crd-migrator-bench-webhook-')
  const server = await startWebhookServer({
    certFile: certs.certFile,
    keyFile: certs.keyFile,
    host: '127.0.0.1',
    port: 0,
    logLevel: 'info',
  })
  serveUntilTold(server.url, certs.caCertFile, certs.dir, () => server.close())
}

/**
 * The floor of the webhook bench: node:https with the same kind of certificate and a
 * handler that does only what any webhook must (read the body, JSON.parse it, answer an
 * AdmissionReview), without Fastify, validation, a decision, metrics or a log line.
 */
async function webhookFloor(): Promise<void> {
  const { createServer } = await import('node:https')
  const { readFile } = await import('node:fs/promises')
  const certs = await loopbackCertificates('crd-migrator-bench-floor-')
  const server = createServer(
    { cert: await readFile(certs.certFile), key: await readFile(certs.keyFile), minVersion: 'TLSv1.2' },
    (req, res) => {
      const chunks: Buffer[] = []
      req.on('data', (c: Buffer) => chunks.push(c))
      req.on('end', () => {
        let uid: string
        try {
          const given = (JSON.parse(Buffer.concat(chunks).toString('utf8')) as { request?: { uid?: unknown } }).request?.uid
          uid = typeof given === 'string' ? given : ''
        } catch {
          res.writeHead(400).end()
          return
        }
        const body = JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: { uid, allowed: true } })
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body)
      })
    },
  )
  server.keepAliveTimeout = 120_000
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as { port: number }
  serveUntilTold(`https://127.0.0.1:${port}`, certs.caCertFile, certs.dir, () => {
    server.close()
    server.closeAllConnections()
  })
}

/** The good-neighbour case's foreground client (foreground.ts), until the parent says stop. */
async function foreground(input: ForegroundOptions): Promise<void> {
  const { startForeground } = await import('./foreground.js')
  const run = startForeground(input)
  process.once('message', (m) => {
    if ((m as { stop?: boolean }).stop) void run.stop().then((samples) => process.send?.({ samples }, () => process.exit(0)))
  })
  process.once('disconnect', () => process.exit(0))
  process.send?.({ ready: true })
}

async function stdinJson<T>(): Promise<T> {
  const chunks: Buffer[] = []
  for await (const c of process.stdin) chunks.push(c as Buffer)
  return JSON.parse(Buffer.concat(chunks).toString('utf8')) as T
}

const [mode] = process.argv.slice(2)
try {
  if (mode === 'ours') process.stdout.write(`${JSON.stringify(await ours(await stdinJson<OursChildInput>()))}\n`)
  else if (mode === 'ceiling') process.stdout.write(`${JSON.stringify(await ceiling(await stdinJson<CeilingOptions>()))}\n`)
  else if (mode === 'webhook') await webhook()
  else if (mode === 'webhook-floor') await webhookFloor()
  else if (mode === 'foreground') await foreground(await stdinJson<ForegroundOptions>())
  else throw new Error(`unknown mode ${String(mode)}: ours, ceiling, webhook, webhook-floor or foreground`)
} catch (err) {
  process.stderr.write(`bench child ${String(mode)}: ${err instanceof Error ? err.stack : String(err)}\n`)
  process.exit(1)
}
