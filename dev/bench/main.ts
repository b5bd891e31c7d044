#!/usr/bin/env node
/**
 * `npm run bench`: our migrator vs the API server's own ceiling vs kube-storage-version-
 * migrator, on one local control plane, each run from the same starting state (a fresh CRD
 * with N objects stored at v1, storage flipped to v2), each proved in etcd afterwards;
 * the same for ours and the ceiling with a CRD that converts through a conversion webhook
 * (the conversion case, ConversionReviews counted); plus a load test of the webhook.
 * Writes <out>/latest.json and <out>/latest.md.
 *
 * `--help` lists the flags.
 */
import { spawn } from 'node:child_process'
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { loadKubeConfig } from '../../src/kube/client.js'
import { KubeHttp, kubeConnection } from '../../src/kube/http.js'
import { attachControlPlane, startControlPlane, type ControlPlane } from '../controlplane/controlplane.js'
import { startConversionWebhook, type ConversionWebhook } from '../conversion/webhook.js'
import { ceilingConnection, type CeilingOptions } from './ceiling.js'
import type { CeilingChildOutput, OursChildInput, OursChildOutput } from './child.js'
import { reviewCount, reviewsSince, runConversionProbe, settleReviews } from './conversion.js'
import {
  createBenchCrd,
  createWidgets,
  deleteBenchCrd,
  ensureNamespaces,
  flipStorageToV2,
  kubeVersion,
  KIND,
  managedFieldsCensus,
  PLURAL,
  proveStoredAtV2,
} from './fixtures.js'
import { ensureKsvm, installKsvmCrd, KSVM_MODULE, runKsvm, type KsvmBuild } from './ksvm.js'
import {
  renderMarkdown,
  type BenchResult,
  type ConversionCase,
  type MigrationRun,
  type RunConversion,
  type Target,
  type Tool,
} from './report.js'
import { loadAverage, machineInfo, round } from './stats.js'
import { runWebhookBench } from './webhook-load.js'

const log = (s: string) => process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${s}\n`)
const CHILD_JS = fileURLToPath(new URL('./child.js', import.meta.url))
/** KSVM "unthrottled": its client-side rate limiter out of the way (it still writes one object at a time). */
const KSVM_UNTHROTTLED = { qps: 100_000, burst: 100_000 }
/** The flags of KSVM's own manifests/migrator.yaml Deployment. */
const KSVM_MANIFEST = { qps: 40, burst: 1000 }

const BENCH_OPTIONS = {
  sizes: { type: 'string' },
  out: { type: 'string', default: 'bench/results' },
  'skip-ksvm': { type: 'boolean', default: false },
  'skip-webhook': { type: 'boolean', default: false },
  smoke: { type: 'boolean', default: false },
  sweep: { type: 'string' },
  'controlplane-state': { type: 'string' },
  'ksvm-if-cached': { type: 'boolean', default: false },
  'ksvm-manifest-max': { type: 'string' },
  'ksvm-default-max': { type: 'string' },
  'webhook-seconds': { type: 'string' },
  'skip-migrations': { type: 'boolean', default: false },
  'skip-conversion': { type: 'boolean', default: false },
  'conversion-only': { type: 'boolean', default: false },
  'conversion-sizes': { type: 'string' },
  'conversion-delay': { type: 'string' },
  'skip-conversion-probe': { type: 'boolean', default: false },
  'child-node-options': { type: 'string' },
  help: { type: 'boolean', short: 'h', default: false },
} as const

function parseFlags() {
  try {
    return parseArgs({ options: BENCH_OPTIONS, strict: true }).values
  } catch (err) {
    process.stderr.write(`bench: ${(err as Error).message}\nSee: npm run bench -- --help\n`)
    process.exit(2)
  }
}
const flags = parseFlags()

const USAGE = `Usage: npm run bench -- [flags]   (or: node dist-dev/dev/bench/main.js [flags])

Migrates N objects with the ceiling, ours (best concurrency and defaults) and
kube-storage-version-migrator on a local control plane, the same for ours and the
ceiling with a CRD converting through an HTTPS conversion webhook (ConversionReviews
counted), load-tests the webhook with vegeta, and writes <out>/latest.json and
<out>/latest.md.

  --sizes 1000,10000,50000   object counts (default; --smoke: 200)
  --sweep 16,32,64           concurrencies tried on the smallest size (--smoke: 16)
  --out DIR                  where the results go (default bench/results)
  --skip-ksvm                no kube-storage-version-migrator runs
  --ksvm-if-cached           run KSVM only if scripts/build-ksvm.sh already built it
  --ksvm-manifest-max N      largest size for KSVM at its manifest's QPS (default 10000)
  --ksvm-default-max N       largest size for KSVM at client-go's default QPS (default 1000)
  --skip-webhook             no webhook load test
  --webhook-seconds S        seconds per webhook case (default 10; --smoke: 1)
  --skip-migrations          only the webhook load test (no control plane)
  --skip-conversion          no conversion-webhook case
  --conversion-only          the conversion-webhook case alone: no sweeps, no plain-CRD
                             or KSVM runs (ours-best and the ceiling at the first --sweep value)
  --conversion-sizes 1000    object counts of the conversion case (default 1000; --smoke: 30)
  --conversion-delay MS      the slow webhook's delay per ConversionReview (default 50, --smoke: 0;
                             0 = no slow-webhook runs)
  --skip-conversion-probe    no per-request probe of ConversionReview costs
  --controlplane-state FILE  use a running control plane (npm run cluster) instead of starting one
  --child-node-options=FLAGS node flags for the ours and ceiling processes, e.g.
                             --child-node-options=--max-old-space-size=128 (note the =)
  --smoke                    the small sizes npm test runs
  -h, --help                 this text
`
if (flags.help) {
  process.stdout.write(USAGE)
  process.exit(0)
}

const smoke = flags.smoke
const sizeList = (text: string) =>
  text
    .split(',')
    .map((s) => Number(s.trim()))
    .filter((n) => n > 0)
    .sort((a, b) => a - b)
const conversionOnly = flags['conversion-only']
const sizes = flags['skip-migrations'] || conversionOnly ? [] : sizeList(flags.sizes ?? (smoke ? '200' : '1000,10000,50000'))
const conversionSizes =
  flags['skip-migrations'] || (flags['skip-conversion'] && !conversionOnly)
    ? []
    : sizeList(flags['conversion-sizes'] ?? (smoke ? '30' : '1000'))
const conversionDelayMs = Number(flags['conversion-delay'] ?? (smoke ? 0 : 50))
if (!Number.isFinite(conversionDelayMs) || conversionDelayMs < 0) {
  process.stderr.write(`bench: --conversion-delay takes milliseconds (0 or more), not ${flags['conversion-delay']}\n`)
  process.exit(2)
}
const sweep = (flags.sweep ?? (smoke ? '16' : '16,32,64')).split(',').map(Number)
const ksvmManifestMax = Number(flags['ksvm-manifest-max'] ?? (smoke ? 0 : 10_000))
const ksvmDefaultMax = Number(flags['ksvm-default-max'] ?? (smoke ? 0 : 1000))
const webhookSeconds = Number(flags['webhook-seconds'] ?? (smoke ? 1 : 10))
const outDir = path.resolve(flags.out)
const childNodeOptions = (flags['child-node-options'] ?? '').split(/\s+/).filter(Boolean)

function runChild<T>(mode: 'ours' | 'ceiling', input: unknown, timeoutMs: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...childNodeOptions, CHILD_JS, mode], { stdio: ['pipe', 'pipe', 'inherit'] })
    child.stdin.on('error', () => {}) // a child that dies early: its exit code says so below
    child.stdin.end(JSON.stringify(input))
    let out = ''
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d))
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
    child.on('error', reject)
    child.on('close', (code) => {
      clearTimeout(timer)
      if (code !== 0) return reject(new Error(`bench child ${mode} exited with ${code}`))
      try {
        resolve(JSON.parse(out.trim().split('\n').at(-1)!) as T)
      } catch (err) {
        reject(err)
      }
    })
  })
}

async function main(): Promise<void> {
  const startedAt = new Date().toISOString()
  const before = loadAverage()
  log(
    `sizes ${sizes.join(', ') || 'none'}; sweep ${sweep.join('/')}; conversion case ${conversionSizes.length ? `${conversionSizes.join(', ')} objects, webhook delay 0${conversionDelayMs ? ` and ${conversionDelayMs}` : ''} ms` : 'skipped'}; load average ${before.join(' ')}`,
  )
  // The results record process.version; say so when it is not the project's Node (.node-version).
  const projectNode = `v${(await readFile(fileURLToPath(new URL('../../../.node-version', import.meta.url)), 'utf8')).trim()}`
  log(`Node ${process.version}${process.version === projectNode ? '' : `, not the project's ${projectNode} (source scripts/use-node.sh)`}`)

  let ksvm: KsvmBuild | undefined
  let ksvmNote = ''
  if (!flags['skip-ksvm'] && !flags['skip-migrations'] && !conversionOnly) {
    ksvm = await ensureKsvm({ check: flags['ksvm-if-cached'], log })
    if (!ksvm) ksvmNote = 'KSVM skipped: not built yet (scripts/build-ksvm.sh) and --ksvm-if-cached was given.'
    else log(`KSVM ${ksvm.version}: ${ksvm.migrator} (${ksvm.builtNow ? `built in ${round(ksvm.scriptSeconds, 0)} s` : 'cached'})`)
  }

  const machine = machineInfo()
  let webhook: BenchResult['webhook'] = null
  if (!flags['skip-webhook']) {
    // First, while nothing else of ours runs: the server gets a core to itself.
    webhook = await runWebhookBench({ durationSeconds: webhookSeconds, fixedRate10k: 2000, fixedRate1m: 20, pinned: true, log })
  }

  const runs = flags['skip-migrations']
    ? { migrations: [], bestConcurrency: null, ceilingConcurrency: null, conversion: null }
    : await runMigrations(machine, ksvm)
  const result = summarize({ startedAt, before, machine, webhook, ksvm, ksvmNote, ...runs })
  await mkdir(outDir, { recursive: true })
  await writeFile(path.join(outDir, 'latest.json'), `${JSON.stringify(result, null, 2)}\n`)
  await writeFile(path.join(outDir, 'latest.md'), renderMarkdown(result))
  process.stdout.write(renderMarkdown(result))
  log(`wrote ${path.join(outDir, 'latest.json')} and latest.md; load average ${result.loadAverage.after.join(' ')}`)
  if (!result.allProvedInEtcd) process.exitCode = 1
}

/** Every migration run (sweeps, then each size with each migrator) on one control plane. */
async function runMigrations(
  machine: BenchResult['machine'],
  ksvm: KsvmBuild | undefined,
): Promise<{
  migrations: MigrationRun[]
  bestConcurrency: number | null
  ceilingConcurrency: number | null
  conversion: ConversionCase | null
}> {
  let cp: ControlPlane
  if (flags['controlplane-state']) {
    cp = await attachControlPlane(flags['controlplane-state'])
  } else {
    log('starting the local control plane')
    cp = await startControlPlane({ log })
  }
  const kc = loadKubeConfig(cp.kubeconfigPath)
  const http = new KubeHttp(kc, { maxSockets: 64 })
  const migrations: MigrationRun[] = []
  // The conversion case's webhook, in this process (the API server calls it); the
  // migrators' processes know nothing of it.
  let webhook: ConversionWebhook | undefined
  try {
    machine.kubeVersion = await kubeVersion(http)
    machine.etcdVersion = 'v3.6.5'
    await ensureNamespaces(http)
    if (ksvm) await installKsvmCrd(http, ksvm.crd)
    const runId = `${Date.now().toString(36)}`
    let seq = 0
    const logsDir = path.join(os.tmpdir(), `crd-migrator-bench-${runId}`)
    await mkdir(logsDir, { recursive: true })

    /**
     * A fresh CRD with `size` objects at v1, storage flipped to v2; with `conv`, the CRD
     * converts through the webhook, and the webhook is counted from here on.
     */
    const prepare = async (size: number, tool: Tool, conv?: Conv) => {
      const group = `${conv ? 'c' : 'r'}${++seq}-${tool}.b${runId}.bench.crd-migrator.io`
      await createBenchCrd(http, group, conv ? { conversion: conv.webhook.conversion() } : {})
      conv?.webhook.resetStats()
      const t0 = performance.now()
      await createWidgets(http, group, size, 64)
      const createMs = performance.now() - t0
      let setup: CaseSetup | undefined
      if (conv) {
        await settleReviews(conv.webhook)
        const create = conv.webhook.stats.reviews
        conv.webhook.resetStats()
        await flipStorageToV2(http, cp.etcdEndpoint, group)
        // Longer quiet: the rebuilt storage's watch caches start in the background.
        await settleReviews(conv.webhook, 1500)
        const flip = conv.webhook.stats.reviews
        setup = { setupReviews: { create, flip }, managedFieldsBefore: await managedFieldsCensus(http, group, 'v2') }
      } else {
        await flipStorageToV2(http, cp.etcdEndpoint, group)
      }
      log(
        `${tool} N=${size}: ${size} objects created at v1 in ${round(createMs / 1000, 1)} s (${Math.round(size / (createMs / 1000))}/s); storage flipped to v2${setup ? ` (conversion: ${setup.setupReviews.create} reviews for the creates, ${setup.setupReviews.flip} for the flip)` : ''}`,
      )
      return { group, createMs, setup }
    }
    const prove = async (group: string, size: number, conv?: Conv) => {
      const etcd = await proveStoredAtV2(cp.etcdEndpoint, group, size, { checkV2Shape: conv !== undefined })
      if (!etcd.allV2)
        log(`NOT all at v2 in etcd: ${JSON.stringify(etcd.byApiVersion)}${etcd.shape ? `; v2 shape ${JSON.stringify(etcd.shape)}` : ''}`)
      return etcd
    }
    const timeoutFor = (size: number, conv?: Conv) => 120_000 + size * 20 + (conv ? size * conv.delayMs * 2 : 0)
    /**
     * Runs the migrating process; with `conv`, at the webhook's delay, counting the reviews
     * from just before it starts until the webhook is quiet after it exits.
     */
    const counted = async <T>(size: number, run: () => Promise<T>, conv?: Conv) => {
      if (!conv) return { r: await run() }
      conv.webhook.setDelay(conv.delayMs)
      conv.webhook.resetStats()
      try {
        const r = await run()
        const exited = performance.now()
        const atExit = reviewCount(conv.webhook.stats)
        // The time of the last review after the exit: the webhook's counter polled.
        let lastAt = exited
        let seen = atExit.reviews
        const poll = setInterval(() => {
          if (conv.webhook.stats.reviews !== seen) {
            seen = conv.webhook.stats.reviews
            lastAt = performance.now()
          }
        }, 10)
        // The API server's watch cache of v1 converts the writes' events one at a time and
        // can be far behind: give it until every event could have been converted.
        await settleReviews(conv.webhook, 500, 30_000 + size * (conv.delayMs + 5) * 2).finally(() => clearInterval(poll))
        const all = reviewCount(conv.webhook.stats)
        return { r, atExit, all, after: reviewsSince(all, atExit).reviews, lastAfterMs: lastAt - exited }
      } finally {
        conv.webhook.setDelay(0)
      }
    }
    /** After a conversion run (proved, counted): its CRD goes, so nothing of it is counted in the next. */
    const dropConversionCrd = async (group: string, size: number, conv: Conv) => {
      await deleteBenchCrd(http, group)
      await settleReviews(conv.webhook, 500, 30_000 + size * 10)
    }
    const conversionOf = async (
      group: string,
      size: number,
      conv: Conv,
      setup: CaseSetup,
      c: { all?: ReturnType<typeof reviewCount>; after?: number; lastAfterMs?: number },
      write: string,
      extra: Pick<RunConversion, 'requests' | 'productReport'> = {},
    ): Promise<RunConversion> => {
      const all = c.all!
      return {
        webhookDelayMs: conv.delayMs,
        write,
        reviews: all.reviews,
        objects: all.objects,
        byDirection: all.byDirection,
        reviewsPerObject: round(all.reviews / size, 3)!,
        objectsPerReview: all.reviews ? round(all.objects / all.reviews, 3) : null,
        reviewsAfterExit: c.after ?? 0,
        lastReviewAfterExitMs: round(c.lastAfterMs ?? 0, 0)!,
        ...setup,
        managedFieldsAfter: await managedFieldsCensus(http, group, 'v2'),
        ...extra,
      }
    }

    const runOurs = async (size: number, tool: Tool, concurrency?: number, qps?: number, conv?: Conv): Promise<MigrationRun> => {
      const { group, createMs, setup } = await prepare(size, tool, conv)
      const input: OursChildInput = {
        kubeconfigPath: cp.kubeconfigPath,
        crd: `${PLURAL}.${group}`,
        ...(concurrency !== undefined ? { concurrency } : {}),
        ...(qps !== undefined ? { qps } : {}),
      }
      const c = await counted(size, () => runChild<OursChildOutput>('ours', input, timeoutFor(size, conv)), conv)
      const r = c.r
      const rewriteMs = r.storagePhaseMs ?? r.wallMs
      const run: MigrationRun = {
        size,
        tool,
        group,
        createMs,
        rewriteMs,
        wallMs: r.wallMs,
        settings: `concurrency ${r.settings.concurrency}, qps ${r.settings.qps}`,
        objectsPerSecond: size / (rewriteMs / 1000),
        p50Ms: r.latency.p50Ms,
        p99Ms: r.latency.p99Ms,
        peakRssMb: r.peakRssMb,
        baselineRssMb: r.baselineRssMb,
        cpuMsPer1000: round((r.cpuMs / size) * 1000, 0),
        failedWrites: r.counts['failed'] ?? null,
        outcome: r.outcome,
        etcd: await prove(group, size, conv),
        notes: `storedVersions after: ${JSON.stringify(r.storedVersionsAfter)}; counts ${JSON.stringify(r.counts)}; throttled ${r.throttled}; managedFields phase ${round((r.cleanupPhaseMs ?? 0) / 1000, 2)} s`,
      }
      if (conv && setup) {
        run.conversion = await conversionOf(group, size, conv, setup, c, writeOf(r.requests), {
          requests: r.requests,
          ...(r.conversion ? { productReport: r.conversion } : {}),
        })
        await dropConversionCrd(group, size, conv)
      }
      log(
        `${tool} N=${size}${conv ? ` (conversion, webhook delay ${conv.delayMs} ms)` : ''}: ${r.outcome}, storage phase ${round(rewriteMs / 1000, 2)} s = ${Math.round(run.objectsPerSecond)}/s, whole run ${round(r.wallMs / 1000, 2)} s, p50 ${r.latency.p50Ms} ms p99 ${r.latency.p99Ms} ms, peak RSS ${r.peakRssMb} MB, etcd v2 ${run.etcd.allV2}${reviewsText(run)}`,
      )
      return run
    }

    const runCeilingOnce = async (size: number, concurrency: number, tool: Tool = 'ceiling', conv?: Conv): Promise<MigrationRun> => {
      const { group, createMs, setup } = await prepare(size, tool, conv)
      const write = tool === 'ceiling-apply' ? 'apply' : 'merge-patch'
      // Resolved per run (a token may expire), the way every KubeHttp resolves it.
      const connection = ceilingConnection(await kubeConnection(kc))
      const input: CeilingOptions = { connection, group, version: 'v2', plural: PLURAL, kind: KIND, concurrency, pageSize: 500, write }
      const c = await counted(size, () => runChild<CeilingChildOutput>('ceiling', input, timeoutFor(size, conv)), conv)
      const r = c.r
      const run: MigrationRun = {
        size,
        tool,
        group,
        createMs,
        rewriteMs: r.wallMs,
        wallMs: r.wallMs,
        settings: `concurrency ${concurrency}, no limit`,
        objectsPerSecond: size / (r.wallMs / 1000),
        p50Ms: r.latency.p50Ms,
        p99Ms: r.latency.p99Ms,
        peakRssMb: r.peakRssMb,
        baselineRssMb: r.baselineRssMb,
        cpuMsPer1000: round((r.cpuMs / size) * 1000, 0),
        failedWrites: r.failed,
        outcome: r.failed ? 'Failed' : 'Succeeded',
        etcd: await prove(group, size, conv),
        notes: `listed ${r.listed}, retries ${r.retries}`,
      }
      if (conv && setup) {
        run.conversion = await conversionOf(group, size, conv, setup, c, write)
        await dropConversionCrd(group, size, conv)
      }
      log(
        `${tool} N=${size}${conv ? ` (conversion, webhook delay ${conv.delayMs} ms)` : ''} concurrency ${concurrency}: ${round(r.wallMs / 1000, 2)} s = ${Math.round(run.objectsPerSecond)}/s, p50 ${r.latency.p50Ms} ms p99 ${r.latency.p99Ms} ms, peak RSS ${r.peakRssMb} MB, etcd v2 ${run.etcd.allV2}${reviewsText(run)}`,
      )
      return run
    }

    const runKsvmOnce = async (size: number, tool: Tool, limits: { qps?: number; burst?: number }): Promise<MigrationRun> => {
      const { group, createMs } = await prepare(size, tool)
      const r = await runKsvm(http, {
        migrator: ksvm!.migrator,
        kubeconfigPath: cp.kubeconfigPath,
        group,
        version: 'v2',
        resource: PLURAL,
        ...limits,
        logFile: path.join(logsDir, `${group}.ksvm.log`),
        timeoutMs: timeoutFor(size) * 10,
      })
      const run: MigrationRun = {
        size,
        tool,
        group,
        createMs,
        rewriteMs: r.rewriteMs,
        wallMs: r.wallMs,
        settings:
          limits.qps === undefined
            ? 'binary defaults (qps 5, burst 10)'
            : limits.qps >= KSVM_UNTHROTTLED.qps
              ? `qps ${limits.qps}, burst ${limits.burst} (unthrottled)`
              : `qps ${limits.qps}, burst ${limits.burst} (its manifests)`,
        objectsPerSecond: size / (r.rewriteMs / 1000),
        p50Ms: null,
        p99Ms: null,
        peakRssMb: r.peakRssMb,
        baselineRssMb: r.baselineRssMb,
        cpuMsPer1000: r.cpuMs === null ? null : round((r.cpuMs / size) * 1000, 0),
        failedWrites: r.outcome === 'Succeeded' ? 0 : null,
        outcome: r.outcome,
        etcd: await prove(group, size),
        notes: `${r.message}; flags ${r.flags.join(' ')}`,
      }
      log(
        `${tool} N=${size}: ${r.outcome}, rewrite ${round(r.rewriteMs / 1000, 2)} s = ${Math.round(run.objectsPerSecond)}/s (created->Succeeded ${round(r.wallMs / 1000, 2)} s), peak RSS ${r.peakRssMb} MB, etcd v2 ${run.etcd.allV2}`,
      )
      return run
    }

    // 1. The concurrency sweep of ours, qps 0, on the smallest size (none with one value).
    let bestConcurrency = sweep[0]!
    let bestRate = 0
    const swept = sweep.length > 1 && sizes.length > 0
    for (const c of swept ? sweep : []) {
      const run = await runOurs(sizes[0]!, 'ours-sweep', c, 0)
      migrations.push(run)
      if (run.objectsPerSecond > bestRate) {
        bestRate = run.objectsPerSecond
        bestConcurrency = c
      }
    }
    log(`best concurrency of ours: ${bestConcurrency}`)
    // The same sweep for the ceiling: on 2 cores 64 writes in flight can overload the API
    // server (p99 near a second) and make the "ceiling" lower than it is.
    let ceilingConcurrency = sweep[0]!
    let ceilingRate = 0
    for (const c of swept ? sweep : []) {
      const run = await runCeilingOnce(sizes[0]!, c, 'ceiling-sweep')
      migrations.push(run)
      if (run.objectsPerSecond > ceilingRate) {
        ceilingRate = run.objectsPerSecond
        ceilingConcurrency = c
      }
    }
    log(`best concurrency of the ceiling: ${ceilingConcurrency}`)

    // 2. Every size: ceiling, ours best, ours default, KSVM.
    for (const size of sizes) {
      migrations.push(await runCeilingOnce(size, ceilingConcurrency))
      migrations.push(await runOurs(size, 'ours-best', bestConcurrency, 0))
      migrations.push(await runOurs(size, 'ours-default'))
      if (ksvm) {
        migrations.push(await runKsvmOnce(size, 'ksvm', KSVM_UNTHROTTLED))
        if (size <= ksvmManifestMax) migrations.push(await runKsvmOnce(size, 'ksvm-manifest', KSVM_MANIFEST))
        if (size <= ksvmDefaultMax) migrations.push(await runKsvmOnce(size, 'ksvm-default', {}))
      }
    }

    // 3. The conversion case: ceiling (merge patch and apply) and ours through the
    // webhook, answering at once and slowly.
    let conversion: ConversionCase | null = null
    if (conversionSizes.length) {
      webhook = await startConversionWebhook()
      log(`conversion webhook at ${webhook.url}`)
      const probe = flags['skip-conversion-probe']
        ? null
        : await runConversionProbe(http, cp.etcdEndpoint, webhook, `probe.b${runId}.bench.crd-migrator.io`, log)
      const delays = conversionDelayMs > 0 ? [0, conversionDelayMs] : [0]
      const runs: MigrationRun[] = []
      for (const size of conversionSizes) {
        for (const delayMs of delays) {
          const conv: Conv = { webhook, delayMs }
          // The ceiling at ours' best concurrency, not its own from the plain sweep: through a
          // webhook each write waits on ~8 reviews in a row, so the rate is latency-bound and
          // follows the writes in flight; ours-best / ceiling then compares equal concurrency.
          runs.push(await runCeilingOnce(size, bestConcurrency, 'ceiling', conv))
          runs.push(await runCeilingOnce(size, bestConcurrency, 'ceiling-apply', conv))
          runs.push(await runOurs(size, 'ours-best', bestConcurrency, 0, conv))
          runs.push(await runOurs(size, 'ours-default', undefined, undefined, conv))
        }
      }
      const find = (size: number, delayMs: number, tool: Tool) =>
        runs.find((m) => m.size === size && m.tool === tool && m.conversion?.webhookDelayMs === delayMs)
      const ratio = (a: MigrationRun | undefined, b: MigrationRun | undefined) =>
        a && b ? round(a.objectsPerSecond / b.objectsPerSecond, 2) : null
      conversion = {
        webhook:
          "a CRD whose v1 `spec: {replicas, image, ...}` and v2 `spec: {template: {replicas, containers: [{image}]}, ...}` (dev/conversion/shapes.ts) convert through the dev conversion webhook (dev/conversion/webhook.ts: HTTPS on 127.0.0.1, in the bench's main process, ConversionReview v1; the delay is slept before each answer).",
        sizes: conversionSizes,
        delaysMs: delays,
        runs,
        ratios: conversionSizes.flatMap((size) =>
          delays.map((delayMs) => {
            const ceiling = find(size, delayMs, 'ceiling')
            return {
              size,
              delayMs,
              oursBestVsCeiling: ratio(find(size, delayMs, 'ours-best'), ceiling),
              oursDefaultVsCeiling: ratio(find(size, delayMs, 'ours-default'), ceiling),
              ceilingApplyVsCeiling: ratio(find(size, delayMs, 'ceiling-apply'), ceiling),
            }
          }),
        ),
        probe,
      }
    }

    return {
      migrations,
      bestConcurrency: sizes.length || conversion ? bestConcurrency : null,
      ceilingConcurrency: sizes.length || conversion ? ceilingConcurrency : null,
      conversion,
    }
  } finally {
    await webhook?.stop()
    http.close()
    if (cp.owned) await cp.stop()
  }
}

/** The conversion case's webhook and its delay during a run. */
interface Conv {
  webhook: ConversionWebhook
  delayMs: number
}

/** What the conversion case measured while setting a run up. */
type CaseSetup = Pick<RunConversion, 'setupReviews' | 'managedFieldsBefore'>

/** The no-op write ours sent, from its requests ({@link OursChildOutput.requests}). */
function writeOf(requests: Record<string, number>): string {
  const writes = Object.keys(requests).filter((k) => /^PATCH \S+ object/.test(k))
  const kinds = new Set(
    writes.map((k) => (k.includes('apply-patch') ? 'apply' : k.includes('merge-patch') ? 'merge-patch' : null)).filter(Boolean),
  )
  return kinds.size ? [...kinds].join(' + ') : 'none seen'
}

function reviewsText(run: MigrationRun): string {
  const c = run.conversion
  return c
    ? `; ${c.reviews} ConversionReviews = ${c.reviewsPerObject}/object ${JSON.stringify(c.byDirection)}, ${c.objectsPerReview} objects/review`
    : ''
}

function summarize(x: {
  startedAt: string
  before: number[]
  machine: BenchResult['machine']
  webhook: BenchResult['webhook']
  conversion: ConversionCase | null
  migrations: MigrationRun[]
  bestConcurrency: number | null
  ceilingConcurrency: number | null
  ksvm: KsvmBuild | undefined
  ksvmNote: string
}): BenchResult {
  const find = (size: number, tool: Tool) => x.migrations.find((m) => m.size === size && m.tool === tool)
  const ratio = (a: MigrationRun | undefined, b: MigrationRun | undefined) =>
    a && b ? round(a.objectsPerSecond / b.objectsPerSecond, 2) : null
  const ratios = sizes.map((size) => {
    // Against KSVM's fastest configuration at this size (the hardest comparison for us).
    const ksvmRuns = x.migrations
      .filter((m) => m.size === size && m.tool.startsWith('ksvm'))
      .sort((a, b) => b.objectsPerSecond - a.objectsPerSecond)
    const k = ksvmRuns[0]
    return {
      size,
      oursBestVsCeiling: ratio(find(size, 'ours-best'), find(size, 'ceiling')),
      oursDefaultVsCeiling: ratio(find(size, 'ours-default'), find(size, 'ceiling')),
      oursBestVsKsvm: ratio(find(size, 'ours-best'), k),
      oursDefaultVsKsvm: ratio(find(size, 'ours-default'), k),
      // The most any client could show over KSVM here: the API server's own limit.
      ceilingVsKsvm: ratio(find(size, 'ceiling'), k),
      ksvmTool: k?.tool ?? null,
    }
  })
  const targets: Target[] = []
  const worst = (vals: Array<number | null>) => {
    const v = vals.filter((n): n is number => n !== null)
    return v.length ? Math.min(...v) : null
  }
  if (x.migrations.length) {
    const ceil = worst(ratios.map((r) => r.oursBestVsCeiling))
    targets.push({
      name: 'ours (best concurrency) vs ceiling',
      target: '>= 0.9x',
      value: ratios.map((r) => `${r.size}: ${r.oursBestVsCeiling ?? 'n/a'}x`).join(', '),
      met: ceil === null ? null : ceil >= 0.9,
    })
    const vsK = worst(ratios.map((r) => r.oursBestVsKsvm))
    if (x.migrations.some((m) => m.tool.startsWith('ksvm')))
      targets.push({
        name: 'ours (best) vs KSVM (its fastest config)',
        target: '>= 3x',
        value: ratios.map((r) => `${r.size}: ${r.oursBestVsKsvm ?? 'n/a'}x (ceiling: ${r.ceilingVsKsvm ?? 'n/a'}x)`).join(', '),
        met: vsK === null ? null : vsK >= 3,
      })
    const lo = sizes.includes(10_000) ? 10_000 : sizes[0]!
    const hi = sizes[sizes.length - 1]!
    for (const tool of ['ours-best', 'ours-default'] as const) {
      const a = find(lo, tool)?.peakRssMb
      const b = find(hi, tool)?.peakRssMb
      const growth = a && b && hi !== lo ? round((b / a - 1) * 100, 1) : null
      targets.push({
        name: hi > lo ? `peak RSS growth of ${tool}, ${lo} -> ${hi} objects` : `peak RSS growth of ${tool} (needs a size above ${lo})`,
        target: '< 20%',
        value: growth === null ? 'n/a' : `${a} -> ${b} MB (${growth >= 0 ? '+' : ''}${growth}%)`,
        met: growth === null ? null : growth < 20,
      })
    }
  }
  const hook = x.webhook?.cases.filter((c) => c.crd === '10KB' && c.mode === 'fixed' && c.server === 'ours') ?? []
  const floor = x.webhook?.cases.find((c) => c.crd === '10KB' && c.mode === 'fixed' && c.server === 'floor')
  const p99 = hook.length ? Math.max(...hook.map((c) => c.p99Ms)) : null
  const hookValue = hook.map((c) => `${c.decision}: ${c.p99Ms} ms at ${Math.round(c.requestsPerSecond)} req/s`).join(', ')
  if (x.webhook)
    targets.push({
      name: `webhook p99 at ${hook[0]?.targetRate ?? 2000} req/s, 10 KB CRD`,
      target: '< 2 ms',
      value: hookValue ? `${hookValue}${floor ? ` (floor: ${floor.p99Ms} ms)` : ''}` : 'n/a',
      met: p99 === null ? null : p99 < 2,
    })

  return {
    version: 1,
    startedAt: x.startedAt,
    finishedAt: new Date().toISOString(),
    command: `node dist-dev/dev/bench/main.js ${process.argv.slice(2).join(' ')}`.trim(),
    smoke,
    childNodeOptions,
    machine: x.machine,
    loadAverage: { before: x.before, after: loadAverage() },
    sizes,
    bestConcurrency: x.bestConcurrency,
    ceilingConcurrency: x.ceilingConcurrency,
    ksvm: x.ksvm
      ? {
          module: KSVM_MODULE,
          version: x.ksvm.version,
          buildSeconds: x.ksvm.builtNow ? round(x.ksvm.scriptSeconds, 0) : null,
          builtNow: x.ksvm.builtNow,
          defaults:
            "Its binary defaults are --kube-api-qps=5 --kube-api-burst=10 (client-go's); its own Deployment manifest sets 40/1000. It writes one object at a time (PUT of the full object, after full-object list pages of 500) whatever the QPS.",
          notes: `"ksvm" = rate limiter out of the way (${KSVM_UNTHROTTLED.qps}/${KSVM_UNTHROTTLED.burst}); "ksvm-manifest" = 40/1000 (run up to ${ksvmManifestMax} objects); "ksvm-default" = 5/10 (run up to ${ksvmDefaultMax} objects). Ratios use its fastest run. Rewrite time = Running seen -> Succeeded seen (it polls for work once a second).`,
        }
      : x.ksvmNote
        ? { module: KSVM_MODULE, version: 'n/a', buildSeconds: null, builtNow: false, defaults: '', notes: x.ksvmNote }
        : null,
    migrations: x.migrations,
    ratios,
    webhook: x.webhook,
    conversion: x.conversion,
    targets,
    allProvedInEtcd: [...x.migrations, ...(x.conversion?.runs ?? [])].every((m) => m.etcd.allV2),
  }
}

// Ctrl-C / SIGTERM: exit through process.exit so the 'exit' hooks (KSVM child, control
// plane) run.
for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => process.exit(130))

main().catch((err) => {
  log(`failed: ${err instanceof Error ? err.stack : String(err)}`)
  process.exit(1)
})
