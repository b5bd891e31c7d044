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
  BENCH_NAMESPACES,
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
import { serviceAccountIdentity } from '../controlplane/service-account.js'
import { classify, flowControlObjects, installFlowControl, levelNames, nominalSeats, removeFlowControl } from './apf.js'
import { FOREGROUND_CONFIGMAPS, foregroundStats, type ForegroundSamples, type ForegroundStats } from './foreground.js'
import {
  renderMarkdown,
  type BenchResult,
  type ConversionCase,
  type MigrationRun,
  type NeighbourCase,
  type RunConversion,
  type Target,
  type Tool,
} from './report.js'
import { loadAverage, machineInfo, round, sampleLoad, sleep, waitForQuietProcesses } from './stats.js'
import { runWebhookBench } from './webhook-load.js'
import { productNodeFlags } from './product-flags.js'
import { foregroundTenant, startForegroundChild } from './foreground-tenant.js'

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
  'ours-only-above': { type: 'string' },
  'webhook-seconds': { type: 'string' },
  'skip-migrations': { type: 'boolean', default: false },
  'skip-conversion': { type: 'boolean', default: false },
  'conversion-only': { type: 'boolean', default: false },
  'conversion-sizes': { type: 'string' },
  'conversion-delay': { type: 'string' },
  'skip-conversion-probe': { type: 'boolean', default: false },
  'child-node-options': { type: 'string' },
  repeat: { type: 'string' },
  'skip-neighbour': { type: 'boolean', default: false },
  'neighbour-size': { type: 'string' },
  'foreground-rate': { type: 'string' },
  'foreground-idle-seconds': { type: 'string' },
  'apf-shares': { type: 'string' },
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

  --sizes 1000,10000,50000,100000  object counts (default; --smoke: 200)
  --sweep 16,32,64           concurrencies tried on the smallest size (--smoke: 16)
  --out DIR                  where the results go (default bench/results)
  --skip-ksvm                no kube-storage-version-migrator runs
  --ksvm-if-cached           run KSVM only if scripts/build-ksvm.sh already built it
  --ksvm-manifest-max N      largest size for KSVM at its manifest's QPS (default 10000)
  --ksvm-default-max N       largest size for KSVM at client-go's default QPS (default 1000)
  --ours-only-above N        sizes above N run ours at its defaults alone (its peak-RSS
                             growth), without the ceiling, ours-best or KSVM (default: none)
  --skip-webhook             no webhook load test
  --webhook-seconds S        seconds per webhook case (default 10; --smoke: 1)
  --repeat N                 attacks per webhook case, ours and the floor taking turns; the
                             results are the medians (default 3; --smoke: 1)
  --skip-migrations          only the webhook load test (no control plane)
  --skip-conversion          no conversion-webhook case
  --conversion-only          the conversion-webhook case alone: no sweeps, no plain-CRD
                             or KSVM runs (ours-best and the ceiling at the first --sweep value)
  --conversion-sizes 1000    object counts of the conversion case (default 1000; --smoke: 30)
  --conversion-delay MS      the slow webhook's delay per ConversionReview (default 50, --smoke: 0;
                             0 = no slow-webhook runs)
  --skip-conversion-probe    no per-request probe of ConversionReview costs
  --skip-neighbour           no good-neighbour case (foreground client, with and without
                             the chart's API Priority and Fairness objects)
  --neighbour-size N         objects migrated in the good-neighbour case (default 10000; --smoke: 100)
  --foreground-rate R        the foreground client's requests per second (default 40)
  --foreground-idle-seconds S  how long the foreground runs alone first (default 20; --smoke: 2)
  --apf-shares N             nominalConcurrencyShares of the migrator's priority level
                             (default: the chart's values.yaml)
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
const sizes = flags['skip-migrations'] || conversionOnly ? [] : sizeList(flags.sizes ?? (smoke ? '200' : '1000,10000,50000,100000'))
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
/** A flag's whole number >= `min`, or the default; anything else stops the bench with a message. */
function intFlag(name: keyof typeof BENCH_OPTIONS, fallback: number, min = 1): number {
  const text = flags[name] as string | undefined
  if (text === undefined) return fallback
  const n = Number(text)
  if (!Number.isInteger(n) || n < min) {
    process.stderr.write(`bench: --${name} takes a whole number of at least ${min}, not ${text}\n`)
    process.exit(2)
  }
  return n
}
const repeat = intFlag('repeat', smoke ? 1 : 3)
const neighbourSize =
  flags['skip-neighbour'] || flags['skip-migrations'] || conversionOnly ? 0 : intFlag('neighbour-size', smoke ? 100 : 10_000)
const foregroundRate = intFlag('foreground-rate', 40)
const foregroundIdleSeconds = intFlag('foreground-idle-seconds', smoke ? 2 : 20)
const apfShares = flags['apf-shares'] === undefined ? undefined : intFlag('apf-shares', 0)
const oursOnlyAbove = flags['ours-only-above'] === undefined ? Infinity : intFlag('ours-only-above', 0)
const childNodeOptions = (flags['child-node-options'] ?? '').split(/\s+/).filter(Boolean)
/** Ours runs with the flags the product's executable sets (productNodeFlags), then any given; the ceiling with Node's defaults. */
const oursNodeFlags = productNodeFlags()

function runChild<T>(mode: 'ours' | 'ceiling', input: unknown, timeoutMs: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const nodeFlags = mode === 'ours' ? [...oursNodeFlags, ...childNodeOptions] : childNodeOptions
    const child = spawn(process.execPath, [...nodeFlags, CHILD_JS, mode], { stdio: ['pipe', 'pipe', 'inherit'] })
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
  const load = sampleLoad()
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
    webhook = await runWebhookBench({ durationSeconds: webhookSeconds, fixedRate10k: 2000, fixedRate1m: 20, pinned: true, repeat, log })
  }

  const runs = flags['skip-migrations']
    ? { migrations: [], bestConcurrency: null, ceilingConcurrency: null, conversion: null, neighbour: null, identity: null }
    : await runMigrations(machine, ksvm)
  const result = summarize({ startedAt, before, loadDuring: load.stop(), machine, webhook, ksvm, ksvmNote, ...runs })
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
  neighbour: NeighbourCase | null
  identity: BenchResult['identity']
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
  let migratorHttp: KubeHttp | undefined
  try {
    machine.kubeVersion = await kubeVersion(http)
    machine.etcdVersion = await etcdVersion(cp.etcdEndpoint)
    await ensureNamespaces(http)
    if (ksvm) await installKsvmCrd(http, ksvm.crd)
    const runId = `${Date.now().toString(36)}`
    let seq = 0
    const logsDir = path.join(os.tmpdir(), `crd-migrator-bench-${runId}`)
    await mkdir(logsDir, { recursive: true })
    // The migrating processes run as a ServiceAccount, as the chart's pods do: the admin
    // kubeconfig is system:masters, which API Priority and Fairness exempts from
    // everything, so neither the good-neighbour case nor the speeds would be what a
    // cluster sees.
    const sa = await serviceAccountIdentity(cp, 'crd-migrator-bench', 'crd-migrator', path.join(logsDir, 'migrator.kubeconfig'), {
      clusterRole: 'cluster-admin',
    })
    const migratorKc = loadKubeConfig(sa.kubeconfigPath)
    migratorHttp = new KubeHttp(migratorKc)
    // A bulk request (any resource but the chart's "control" ones), to see its priority level.
    const bulkProbe = `/api/v1/namespaces/${BENCH_NAMESPACES[0]}/configmaps?limit=1`
    const levelOf = levelNames(http)
    const identity = { migrator: sa.username, priorityLevel: await levelOf((await classify(migratorHttp, bulkProbe)).priorityLevelUid) }
    if (identity.priorityLevel === 'exempt')
      throw new Error(`${sa.username} is exempt from API Priority and Fairness: the bench would not measure what a cluster sees`)
    log(`migrators run as ${sa.username}, APF priority level ${identity.priorityLevel}`)

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
      // Every run starts on a quiet API server: the flip's storage rebuild (its watch cache
      // decodes every object again) is the operator's upgrade, not the run's work. The
      // smoke run shares its control plane with other tests: it never gets quiet there,
      // and a smoke run's figures are not results.
      const quiet = await waitForQuietProcesses(path.join(cp.dir, 'run'), smoke ? { timeoutMs: 2000 } : {})
      log(
        `${tool} N=${size}: ${size} objects created at v1 in ${round(createMs / 1000, 1)} s (${Math.round(size / (createMs / 1000))}/s); storage flipped to v2${setup ? ` (conversion: ${setup.setupReviews.create} reviews for the creates, ${setup.setupReviews.flip} for the flip)` : ''}; control plane quiet after ${round(quiet.waitedMs / 1000, 1)} s (${round(quiet.cpuPercent, 0)}% of a core${quiet.timedOut ? ', gave up waiting' : ''})`,
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
    /**
     * After a plain run (proved): its CRD and objects go, so the API server's watch caches
     * and etcd do not carry every earlier run's objects into the next (100,000 objects per
     * run add up). Waited for: the deletion is work of the API server.
     */
    const dropCrd = (group: string, size: number) => deleteBenchCrd(http, group, 180_000 + size * 10)
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

    const runOurs = async (
      size: number,
      tool: Tool,
      concurrency?: number,
      qps?: number,
      conv?: Conv,
      around: Around = (run) => run(),
    ): Promise<MigrationRun> => {
      const { group, createMs, setup } = await prepare(size, tool, conv)
      const input: OursChildInput = {
        kubeconfigPath: sa.kubeconfigPath,
        crd: `${PLURAL}.${group}`,
        ...(concurrency !== undefined ? { concurrency } : {}),
        ...(qps !== undefined ? { qps } : {}),
        ...(conv ? { countRequests: true } : {}),
      }
      const loadStart = os.loadavg()[0]!
      const c = await counted(size, () => around(() => runChild<OursChildOutput>('ours', input, timeoutFor(size, conv))), conv)
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
        rewriteCpuMsPer1000: r.storagePhaseCpuMs === null ? null : round((r.storagePhaseCpuMs / size) * 1000, 0),
        failedWrites: r.counts['failed'] ?? null,
        outcome: r.outcome,
        load: { start: round(loadStart)!, end: round(os.loadavg()[0]!)! },
        concurrencyLimit: r.concurrencyLimit,
        throttled: r.throttled,
        timeline: r.timeline,
        ...(r.lossless ? { lossless: r.lossless } : {}),
        etcd: await prove(group, size, conv),
        notes: `storedVersions after: ${JSON.stringify(r.storedVersionsAfter)}; counts ${JSON.stringify(r.counts)}; throttled ${r.throttled}; managedFields phase ${round((r.cleanupPhaseMs ?? 0) / 1000, 2)} s`,
      }
      if (conv && setup) {
        run.conversion = await conversionOf(group, size, conv, setup, c, writeOf(r.requests), {
          requests: r.requests,
          ...(r.conversion ? { productReport: r.conversion } : {}),
        })
        await dropConversionCrd(group, size, conv)
      } else {
        await dropCrd(group, size)
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
      const connection = ceilingConnection(await kubeConnection(migratorKc))
      const input: CeilingOptions = { connection, group, version: 'v2', plural: PLURAL, kind: KIND, concurrency, pageSize: 500, write }
      const loadStart = os.loadavg()[0]!
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
        rewriteCpuMsPer1000: round((r.cpuMs / size) * 1000, 0),
        failedWrites: r.failed,
        outcome: r.failed ? 'Failed' : 'Succeeded',
        load: { start: round(loadStart)!, end: round(os.loadavg()[0]!)! },
        etcd: await prove(group, size, conv),
        notes: `listed ${r.listed}, retries ${r.retries}`,
      }
      if (conv && setup) {
        run.conversion = await conversionOf(group, size, conv, setup, c, write)
        await dropConversionCrd(group, size, conv)
      } else {
        await dropCrd(group, size)
      }
      log(
        `${tool} N=${size}${conv ? ` (conversion, webhook delay ${conv.delayMs} ms)` : ''} concurrency ${concurrency}: ${round(r.wallMs / 1000, 2)} s = ${Math.round(run.objectsPerSecond)}/s, p50 ${r.latency.p50Ms} ms p99 ${r.latency.p99Ms} ms, peak RSS ${r.peakRssMb} MB, etcd v2 ${run.etcd.allV2}${reviewsText(run)}`,
      )
      return run
    }

    const runKsvmOnce = async (size: number, tool: Tool, limits: { qps?: number; burst?: number }): Promise<MigrationRun> => {
      const { group, createMs } = await prepare(size, tool)
      const loadStart = os.loadavg()[0]!
      const r = await runKsvm(http, {
        migrator: ksvm!.migrator,
        kubeconfigPath: sa.kubeconfigPath,
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
        load: { start: round(loadStart)!, end: round(os.loadavg()[0]!)! },
        etcd: await prove(group, size),
        notes: `${r.message}; flags ${r.flags.join(' ')}`,
      }
      await dropCrd(group, size)
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
      if (size > oursOnlyAbove) {
        migrations.push(await runOurs(size, 'ours-default'))
        continue
      }
      migrations.push(await runCeilingOnce(size, ceilingConcurrency))
      migrations.push(await runOurs(size, 'ours-best', bestConcurrency, 0))
      migrations.push(await runOurs(size, 'ours-default'))
      if (ksvm) {
        migrations.push(await runKsvmOnce(size, 'ksvm', KSVM_UNTHROTTLED))
        if (size <= ksvmManifestMax) migrations.push(await runKsvmOnce(size, 'ksvm-manifest', KSVM_MANIFEST))
        if (size <= ksvmDefaultMax) migrations.push(await runKsvmOnce(size, 'ksvm-default', {}))
      }
    }

    // 3. The good-neighbour case: a foreground tenant alone, then during a migration by ours
    // at its defaults without and with the chart's API Priority and Fairness objects.
    const neighbour = neighbourSize > 0 ? await runNeighbour(neighbourSize) : null

    // 4. The conversion case: ceiling (merge patch and apply) and ours through the
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
      neighbour,
      identity,
    }

    async function runNeighbour(size: number): Promise<NeighbourCase> {
      const tenant = await foregroundTenant(cp, http, levelOf, foregroundRate)
      const { input, namespace, configMap } = tenant
      const user = { name: tenant.user }
      const foregroundLevel = tenant.priorityLevel
      let fg: ForegroundSamples | undefined
      const withForeground: Around = async (run) => {
        const child = await startForegroundChild(input)
        try {
          return await run()
        } finally {
          fg = await child.stop()
        }
      }
      // The requests sent while the migration ran (migrateCrd, freeze to unfreeze), not
      // while its process loaded its modules: on this machine that is CPU taken from the
      // API server, in a cluster it happens on another node.
      const during = (run: MigrationRun) => {
        const span = run.timeline?.find((x) => x.what === 'migrateCrd')
        return foregroundStats(fg!, span?.from, span?.to)
      }
      // Every foreground request and the migration's timeline, for a closer look than p99
      // (when the slow requests came, against the phases): <out>/neighbour-<run>.json.
      const keepSamples = async (name: string, run: MigrationRun) => {
        await mkdir(outDir, { recursive: true })
        await writeFile(path.join(outDir, `neighbour-${name}.json`), JSON.stringify({ timeline: run.timeline ?? [], foreground: fg }))
      }

      log(`good neighbour: the foreground (${user.name}, ${foregroundLevel}) alone for ${foregroundIdleSeconds} s at ${foregroundRate}/s`)
      const idle = await withForeground(() => sleep(foregroundIdleSeconds * 1000)).then(() => foregroundStats(fg!))
      log(`good neighbour: idle p50 ${idle.p50Ms} ms, p99 ${idle.p99Ms} ms (${idle.requests} requests, ${idle.errors} errors)`)
      if (idle.errors > 0)
        throw new Error(`the foreground client's requests fail (${idle.errors} of ${idle.requests}) with nothing else running`)
      const withoutLevel = await levelOf((await classify(migratorHttp!, bulkProbe)).priorityLevelUid)
      const without = await runOurs(size, 'ours-neighbour', undefined, undefined, undefined, withForeground)
      const fgWithout = during(without)
      await keepSamples('without', without)
      log(
        `good neighbour: without the FlowSchema, foreground p99 ${fgWithout.p99Ms} ms; migration ${Math.round(without.objectsPerSecond)}/s`,
      )

      const objects = await flowControlObjects({
        name: `crd-migrator-bench-${runId}`,
        serviceAccount: { namespace: sa.namespace, name: sa.name },
        ...(apfShares !== undefined ? { nominalConcurrencyShares: apfShares } : {}),
      })
      const created = await installFlowControl(http, migratorHttp!, objects, bulkProbe)
      const level = created.find((o) => o.kind === 'PriorityLevelConfiguration')!
      let withRun: MigrationRun
      let fgWith: ForegroundStats
      let seats: number | null
      let withLevel: string
      try {
        seats = await nominalSeats(http, level.metadata.name)
        withLevel = await levelOf((await classify(migratorHttp!, bulkProbe)).priorityLevelUid)
        withRun = await runOurs(size, 'ours-neighbour-apf', undefined, undefined, undefined, withForeground)
        fgWith = during(withRun)
        await keepSamples('with', withRun)
      } finally {
        await removeFlowControl(http, migratorHttp!, created, bulkProbe)
      }
      log(
        `good neighbour: with the FlowSchema (${seats ?? '?'} seats), foreground p99 ${fgWith.p99Ms} ms; migration ${Math.round(withRun.objectsPerSecond)}/s`,
      )
      const ratio = (a: number | null, b: number | null) => (a !== null && b !== null && b > 0 ? round(a / b, 2) : null)
      return {
        size,
        foreground: {
          user: user.name,
          priorityLevel: foregroundLevel,
          ratePerSecond: foregroundRate,
          what: `reads (GET) and writes (merge PATCH) ${FOREGROUND_CONFIGMAPS} ConfigMaps ${namespace}/${configMap}-N in turn, alternately, open loop,`,
        },
        migrator: { user: sa.username, priorityLevelWithout: withoutLevel, priorityLevelWith: withLevel },
        flowControl: {
          priorityLevel: level.metadata.name,
          nominalConcurrencyShares: (level.spec['limited'] as { nominalConcurrencyShares: number }).nominalConcurrencyShares,
          nominalSeats: seats,
          flowSchemas: created.filter((o) => o.kind === 'FlowSchema').map((o) => o.metadata.name),
        },
        idle,
        without: { foreground: fgWithout, migration: without },
        with: { foreground: fgWith, migration: withRun },
        p99RatioWithout: ratio(fgWithout.p99Ms, idle.p99Ms),
        p99RatioWith: ratio(fgWith.p99Ms, idle.p99Ms),
        throughputLoss: without.objectsPerSecond > 0 ? round(1 - withRun.objectsPerSecond / without.objectsPerSecond, 3) : null,
      }
    }
  } finally {
    await webhook?.stop()
    migratorHttp?.close()
    http.close()
    if (cp.owned) await cp.stop()
  }
}

/** Runs a migrating process, possibly with something around it (the foreground client). */
type Around = <T>(run: () => Promise<T>) => Promise<T>

/** etcd's own version, from its /version endpoint. */
async function etcdVersion(endpoint: string): Promise<string> {
  const res = await fetch(`${endpoint}/version`)
  return `v${((await res.json()) as { etcdserver?: string }).etcdserver ?? '?'}`
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
  loadDuring: BenchResult['loadDuring']
  machine: BenchResult['machine']
  webhook: BenchResult['webhook']
  conversion: ConversionCase | null
  neighbour: NeighbourCase | null
  identity: BenchResult['identity']
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
  const targets = issueTargets(x, find)
  return {
    version: 1,
    startedAt: x.startedAt,
    finishedAt: new Date().toISOString(),
    command: `node dist-dev/dev/bench/main.js ${process.argv.slice(2).join(' ')}`.trim(),
    smoke,
    childNodeOptions,
    oursNodeFlags,
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
    neighbour: x.neighbour,
    identity: x.identity,
    loadDuring: x.loadDuring,
    targets,
    allProvedInEtcd: [
      ...x.migrations,
      ...(x.conversion?.runs ?? []),
      ...(x.neighbour ? [x.neighbour.without.migration, x.neighbour.with.migration] : []),
    ].every((m) => m.etcd.allV2),
  }
}

/**
 * The targets of issue #19, each a ratio inside this run: memory (vs KSVM, growth with
 * size), speed, tail latency and client CPU at the defaults (vs the ceiling), the good
 * neighbour (foreground p99 vs idle, throughput lost to the FlowSchema), the webhook (p99
 * vs the floor). Sizes of 10,000 and more count when the run has them, else every size.
 */
function issueTargets(
  x: { migrations: MigrationRun[]; neighbour: NeighbourCase | null; webhook: BenchResult['webhook'] },
  find: (size: number, tool: Tool) => MigrationRun | undefined,
): Target[] {
  const targets: Target[] = []
  const big = sizes.filter((n) => n >= 10_000)
  const counted = big.length ? big : sizes
  const each = (f: (size: number) => { value: string; ratio: number | null } | null) => {
    const rows = counted
      .map((size) => ({ size, r: f(size) }))
      .filter((row): row is { size: number; r: { value: string; ratio: number | null } } => row.r !== null)
    const ratios = rows.map((row) => row.r.ratio).filter((n): n is number => n !== null)
    return { value: rows.map((row) => `${int(row.size)}: ${row.r.value}`).join('; ') || 'n/a', ratios }
  }
  const x2 = (n: number | null) => (n === null ? 'n/a' : `${n}×`)
  if (x.migrations.length) {
    // Memory.
    const memSize = sizes.includes(10_000) ? 10_000 : sizes[0]!
    const od = find(memSize, 'ours-default')
    const ks = find(memSize, 'ksvm')
    const memRatio = od?.peakRssMb && ks?.peakRssMb ? round(od.peakRssMb / ks.peakRssMb, 2) : null
    targets.push({
      name: `peak RSS of ours at the defaults vs KSVM, ${int(memSize)} objects`,
      target: '≤ 2.5×',
      value: od && ks ? `${od.peakRssMb} MB vs ${ks.peakRssMb} MB = ${x2(memRatio)}` : 'n/a (needs KSVM)',
      met: memRatio === null ? null : memRatio <= 2.5,
    })
    const hi = sizes[sizes.length - 1]!
    for (const tool of ['ours-default', 'ours-best'] as const) {
      const a = find(memSize, tool)?.peakRssMb
      const b = find(hi, tool)?.peakRssMb
      const growth = a && b && hi > memSize ? round((b / a - 1) * 100, 1) : null
      targets.push({
        name: `peak RSS growth of ${tool}, ${int(memSize)} -> ${int(hi)} objects`,
        target: '< 10%',
        value: growth === null ? `n/a (needs a size above ${int(memSize)})` : `${a} -> ${b} MB (${growth >= 0 ? '+' : ''}${growth}%)`,
        met: growth === null ? null : growth < 10,
      })
    }
    // Speed, tail and CPU at the defaults, against the ceiling of the same size.
    // `metric` gives undefined where a run did not measure it (that size is left out).
    const againstCeiling = (
      name: string,
      target: string,
      metric: (run: MigrationRun) => number | undefined,
      show: (ours: number, ceiling: number) => string,
      /** None: a figure shown for reference, with no target. */
      met?: (ratios: number[]) => boolean,
    ) => {
      const rows = each((size) => {
        const o = find(size, 'ours-default')
        const c = find(size, 'ceiling')
        const ours = o && metric(o)
        const ceiling = c && metric(c)
        if (ours === undefined || ceiling === undefined) return null
        const r = round(ours / ceiling, 2)
        return { value: `${show(ours, ceiling)} = ${x2(r)}`, ratio: r }
      })
      targets.push({ name, target, value: rows.value, met: met && rows.ratios.length ? met(rows.ratios) : null })
    }
    againstCeiling(
      'objects/s of ours at the defaults vs the ceiling',
      '≥ 0.95×',
      (run) => run.objectsPerSecond,
      (ours, ceiling) => `${Math.round(ours)} vs ${Math.round(ceiling)}/s`,
      (ratios) => Math.min(...ratios) >= 0.95,
    )
    againstCeiling(
      'p99 write latency of ours at the defaults vs the ceiling',
      '≤ 1.5×',
      (run) => run.p99Ms || undefined,
      (ours, ceiling) => `${ours} vs ${ceiling} ms`,
      (ratios) => Math.max(...ratios) <= 1.5,
    )
    // The same work on both sides: ours' storage phase (list + writes) is all the ceiling
    // does. The whole run (freeze, checks, the managedFields pass's second list, unfreeze)
    // is shown beside it.
    againstCeiling(
      'client CPU per 1,000 objects rewritten (list + writes), ours at the defaults vs the ceiling',
      '≤ 1.1×',
      (run) => run.rewriteCpuMsPer1000 ?? undefined,
      (ours, ceiling) => `${ours} vs ${ceiling} ms`,
      (ratios) => Math.max(...ratios) <= 1.1,
    )
    againstCeiling(
      'for reference: client CPU per 1,000 objects of the whole run (freeze to unfreeze, both passes) vs the ceiling',
      'none',
      (run) => run.cpuMsPer1000 || undefined,
      (ours, ceiling) => `${ours} vs ${ceiling} ms`,
    )
  }
  const n = x.neighbour
  if (n) {
    targets.push({
      name: `foreground p99 during a migration with the FlowSchema vs idle (${int(n.size)} objects)`,
      target: '≤ 2×',
      value: `${n.with.foreground.p99Ms} vs ${n.idle.p99Ms} ms = ${x2(n.p99RatioWith)} (without the FlowSchema: ${n.without.foreground.p99Ms} ms = ${x2(n.p99RatioWithout)})`,
      met: n.p99RatioWith === null ? null : n.p99RatioWith <= 2,
    })
    targets.push({
      name: 'migration throughput lost to the FlowSchema',
      target: '≤ 15%',
      value:
        n.throughputLoss === null
          ? 'n/a'
          : `${Math.round(n.with.migration.objectsPerSecond)} vs ${Math.round(n.without.migration.objectsPerSecond)}/s = ${round(n.throughputLoss * 100, 1)}%`,
      met: n.throughputLoss === null ? null : n.throughputLoss <= 0.15,
    })
  }
  if (x.webhook) {
    for (const [crd, wanted] of [
      ['10KB', 1.2],
      ['1MB', 1.5],
    ] as const) {
      const ours = x.webhook.cases.filter((c) => c.crd === crd && c.mode === 'fixed' && c.server === 'ours')
      const floor = x.webhook.cases.find((c) => c.crd === crd && c.mode === 'fixed' && c.server === 'floor')
      const worst = ours.length ? Math.max(...ours.map((c) => c.p99Ms)) : null
      const r = worst !== null && floor ? round(worst / floor.p99Ms, 2) : null
      targets.push({
        name: `webhook p99 at ${ours[0]?.targetRate ?? '?'} req/s, ${crd === '10KB' ? '10 KB' : '1 MB'} CRD, vs the bare node:https floor${x.webhook.repeat > 1 ? ` (medians of ${x.webhook.repeat})` : ''}`,
        target: `≤ ${wanted}×`,
        value:
          ours.length && floor
            ? `${ours.map((c) => `${c.decision} ${c.p99Ms} ms`).join(', ')} vs floor ${floor.p99Ms} ms = ${x2(r)}`
            : 'n/a',
        met: r === null ? null : r <= wanted,
      })
    }
  }
  return targets
}

const int = (n: number) => n.toLocaleString('en-US')

// Ctrl-C / SIGTERM: exit through process.exit so the 'exit' hooks (KSVM child, control
// plane) run.
for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => process.exit(130))

main().catch((err) => {
  log(`failed: ${err instanceof Error ? err.stack : String(err)}`)
  process.exit(1)
})
