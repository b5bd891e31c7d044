/**
 * The measured process of `npm run bench:client` (client-ceiling.ts): the product's own
 * storage phase (runPhase of src/migrator/phases/object-phase.ts, as migrateWithoutCrd
 * calls it: a resource without a CRD, merge patches) over the stub's resource, through the
 * product's KubeHttp built from a kubeconfig the way `crd-migrator migrate` builds it.
 * Input as JSON on stdin ({@link ClientInput}); one JSON line on stdout ({@link ClientOutput}).
 * Started with or without the product's node flags by the parent.
 */
import { PerformanceObserver } from 'node:perf_hooks'
import { Writable } from 'node:stream'
import { pino } from 'pino'
import { ConfigSchema } from '../../src/config/schema.js'
import { kubeHttp } from '../../src/kube/client.js'
import { runContext } from '../../src/migrator/context.js'
import { settingsFor } from '../../src/migrator/crd-settings.js'
import { runPhase } from '../../src/migrator/phases/object-phase.js'
import { Phase } from '../../src/migrator/plan.js'
import { STUB_GROUP, STUB_PLURAL, STUB_REF } from './client-ceiling-resource.js'
import { memoryOf } from './stats.js'

export interface ClientInput {
  kubeconfigPath: string
  /** The cap of the adaptive limit (migrator.concurrency); undefined: the product's default. */
  concurrency?: number
}

export interface ClientOutput {
  counts: Record<string, number>
  failures: number
  settings: { concurrency: number; qps: number; pageSize: number }
  nodeFlags: string[]
  /** The phase, first list request to last write. */
  wallMs: number
  /** CPU of this process during the phase (user + system), ms. */
  cpuMs: number
  userMs: number
  systemMs: number
  /** Garbage collection during the phase (PerformanceObserver 'gc' entries): total pause and count. */
  gcMs: number
  gcCount: number
  /** Event loop utilisation during the phase (0..1): near 1, the one JS thread is the bound. */
  eventLoopUtilization: number
  peakRssMb: number | null
  /** The adaptive limit at the phase's end and its decisions (from the phase's own debug line). */
  adaptive: { limit: number; decisions: unknown } | null
  retries: number
}

async function stdinJson<T>(): Promise<T> {
  const chunks: Buffer[] = []
  for await (const c of process.stdin) chunks.push(c as Buffer)
  return JSON.parse(Buffer.concat(chunks).toString('utf8')) as T
}

async function run(input: ClientInput): Promise<ClientOutput> {
  const base = settingsFor(ConfigSchema.parse({}), `${STUB_PLURAL}.${STUB_GROUP}`)
  const settings = {
    ...base,
    ...(input.concurrency !== undefined ? { concurrency: input.concurrency } : {}),
    useStatusSubresource: false,
  }
  // As `crd-migrator migrate` builds its client for one CRD (src/cli/migrate/run-migrate.ts).
  const http = kubeHttp(input.kubeconfigPath, { maxSockets: Math.max(settings.concurrency, 4) * 2 })
  // The phase logs its adaptive limit at debug once, at its end; retries at debug too.
  let adaptive: ClientOutput['adaptive'] = null
  let retries = 0
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n')) {
        if (!line) continue
        const entry = JSON.parse(line) as { msg?: string; level?: number; limit?: number; decisions?: unknown }
        if (entry.msg === 'adaptive concurrency') adaptive = { limit: entry.limit ?? Number.NaN, decisions: entry.decisions }
        else if (entry.msg === 'retrying write') retries++
        else if ((entry.level ?? 0) >= 40) process.stderr.write(`${line}\n`)
      }
      done()
    },
  })
  const logger = pino({ level: 'debug' }, sink)

  let gcMs = 0
  let gcCount = 0
  const gc = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      gcMs += entry.duration
      gcCount++
    }
  })
  gc.observe({ entryTypes: ['gc'] })
  const elu0 = performance.eventLoopUtilization()
  const cpu0 = process.cpuUsage()
  const started = performance.now()
  const result = await runPhase(
    Phase.StorageVersionMigration,
    { kind: 'resource', name: STUB_PLURAL, ref: STUB_REF },
    settings,
    runContext({ http, logger, owner: 'bench:client-ceiling' }, settings),
    {},
  )
  const wallMs = performance.now() - started
  const cpu = process.cpuUsage(cpu0)
  const elu = performance.eventLoopUtilization(elu0)
  // Entries of the last GCs are delivered asynchronously.
  await new Promise((resolve) => setImmediate(resolve))
  gc.disconnect()
  http.close()
  return {
    counts: { ...result.counts },
    failures: result.failures.length,
    settings: { concurrency: settings.concurrency, qps: settings.qps, pageSize: settings.pageSize },
    nodeFlags: process.execArgv,
    wallMs,
    cpuMs: (cpu.user + cpu.system) / 1000,
    userMs: cpu.user / 1000,
    systemMs: cpu.system / 1000,
    gcMs,
    gcCount,
    eventLoopUtilization: elu.utilization,
    peakRssMb: memoryOf('self')?.peakRssMb ?? null,
    adaptive,
    retries,
  }
}

try {
  process.stdout.write(`${JSON.stringify(await run(await stdinJson<ClientInput>()))}\n`)
} catch (err) {
  process.stderr.write(`client-ceiling client: ${err instanceof Error ? err.stack : String(err)}\n`)
  process.exit(1)
}
