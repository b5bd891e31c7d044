#!/usr/bin/env node
/**
 * `npm run bench:fleet`: an operator upgrade of many small CRDs against one big CRD of the
 * same total size (issue #29): `crd-migrator migrate` with 300 CRD names of 100 objects
 * each, and with 1 CRD of 30,000 objects, on one local control plane, each from the same
 * starting state (objects stored at v1, storage flipped to v2), each proved in etcd and by
 * status.storedVersions afterwards. A foreground tenant (another, non-exempt user) sends
 * steady reads and writes throughout, with the chart's API Priority and Fairness objects
 * installed, as a cluster running the chart has them: its p99 during each run is the
 * "good neighbour" figure. Writes <out>/fleet-latest.json and <out>/fleet-latest.md.
 *
 * Both runs are the product's executable (dist/cli/main.js with its shebang's node flags),
 * as an operator runs it, so the fleet's figure includes everything a fleet costs: one
 * process, its freeze, checks and state writes per CRD.
 *
 * `--help` lists the flags.
 */
import { spawn } from 'node:child_process'
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { parseArgs } from 'node:util'
import { loadKubeConfig } from '../../src/kube/client.js'
import { getCrd } from '../../src/kube/crds.js'
import { KubeHttp } from '../../src/kube/http.js'
import { attachControlPlane, startControlPlane, type ControlPlane } from '../controlplane/controlplane.js'
import { serviceAccountIdentity } from '../controlplane/service-account.js'
import { countRequests, renderRequestsPerCrd, requestsPerCrd, type RequestRow, type RequestsPerCrd } from './apiserver-requests.js'
import { classify, flowControlObjects, installFlowControl, levelNames, nominalSeats, removeFlowControl } from './apf.js'
import {
  BENCH_NAMESPACES,
  createBenchCrd,
  createWidgets,
  deleteBenchCrd,
  ensureNamespaces,
  flipStorageToV2,
  kubeVersion,
  PLURAL,
  pool,
  proveStoredAtV2,
} from './fixtures.js'
import { foregroundStats, type ForegroundStats } from './foreground.js'
import { foregroundTenant, withForeground } from './foreground-tenant.js'
import { productNodeFlags } from './product-flags.js'
import {
  loadAverage,
  machineInfo,
  memoryOf,
  round,
  sampleLoad,
  waitForQuietProcesses,
  type LoadSummary,
  type MachineInfo,
} from './stats.js'

const log = (s: string) => process.stderr.write(`[fleet ${new Date().toISOString().slice(11, 19)}] ${s}\n`)
const CLI_JS = fileURLToPath(new URL('../../../dist/cli/main.js', import.meta.url))

const OPTIONS = {
  crds: { type: 'string' },
  objects: { type: 'string' },
  single: { type: 'string' },
  'max-parallel-crds': { type: 'string' },
  'foreground-rate': { type: 'string' },
  'foreground-idle-seconds': { type: 'string' },
  out: { type: 'string', default: 'bench/results' },
  'controlplane-state': { type: 'string' },
  smoke: { type: 'boolean', default: false },
  keep: { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
} as const

const USAGE = `Usage: npm run bench:fleet -- [flags]   (or: node dist-dev/dev/bench/fleet.js [flags])

Migrates a fleet of small CRDs (crd-migrator migrate with every name) and one CRD holding
as many objects, on a local control plane, with a foreground tenant sending requests under
the chart's API Priority and Fairness objects; proves both in etcd; writes
<out>/fleet-latest.json and <out>/fleet-latest.md.

  --crds N                   CRDs in the fleet (default 300; --smoke: 6)
  --objects N                objects per fleet CRD (default 100; --smoke: 5)
  --single N                 objects of the single CRD (default: crds x objects)
  --max-parallel-crds N      passed to migrate (default: the product's default)
  --foreground-rate R        the foreground client's requests per second (default 40)
  --foreground-idle-seconds S  how long the foreground runs alone first (default 10; --smoke: 1)
  --out DIR                  where the results go (default bench/results)
  --controlplane-state FILE  use a running control plane (npm run cluster) instead of starting one
  --keep                     leave the CRDs behind (default: deleted at the end)
  --smoke                    the small sizes npm test runs
  -h, --help                 this text
`

function parseFlags() {
  try {
    return parseArgs({ options: OPTIONS, strict: true }).values
  } catch (err) {
    process.stderr.write(`bench:fleet: ${(err as Error).message}\nSee: npm run bench:fleet -- --help\n`)
    process.exit(2)
  }
}
const flags = parseFlags()
if (flags.help) {
  process.stdout.write(USAGE)
  process.exit(0)
}
function intFlag(name: keyof typeof OPTIONS, fallback: number, min = 1): number {
  const text = flags[name] as string | undefined
  if (text === undefined) return fallback
  const n = Number(text)
  if (!Number.isInteger(n) || n < min) {
    process.stderr.write(`bench:fleet: --${name} takes a whole number of at least ${min}, not ${text}\n`)
    process.exit(2)
  }
  return n
}
const smoke = flags.smoke
const crdCount = intFlag('crds', smoke ? 6 : 300)
const objectsPerCrd = intFlag('objects', smoke ? 5 : 100)
const singleObjects = intFlag('single', crdCount * objectsPerCrd)
const maxParallelCrds = flags['max-parallel-crds'] === undefined ? undefined : intFlag('max-parallel-crds', 1)
const foregroundRate = intFlag('foreground-rate', 40)
const foregroundIdleSeconds = intFlag('foreground-idle-seconds', smoke ? 1 : 10)
const outDir = path.resolve(flags.out)

/** One `crd-migrator migrate` process. */
export interface CliRun {
  what: 'single' | 'fleet'
  crds: number
  objects: number
  exitCode: number | null
  /** From spawn to exit: process start, every migration, exit. */
  wallMs: number
  objectsPerSecond: number
  /** The migrations' outcomes from its -o json output, counted. */
  outcomes: Record<string, number>
  /** The slowest and the median CRD (durationMs of its result). */
  crdDurationMs: { median: number | null; max: number | null }
  peakRssMb: number | null
  /** Every object at v2 in etcd, and every CRD's storedVersions ["v2"]. */
  provedInEtcd: boolean
  storedVersionsNarrowed: boolean
  foreground: ForegroundStats
  /** What the API server counted (apiserver_request_total) from spawn to exit, per CRD. */
  requests: RequestsPerCrd
}

/**
 * Requests the API server counts that are not the migrator's: the foreground tenant's
 * ConfigMaps, and the API server's own loops (its identity Leases, the endpoint reconciler
 * reading the kubernetes Endpoints and EndpointSlice by name; the migrator lists slices).
 */
function background(row: RequestRow): boolean {
  if (row.resource === 'configmaps' || row.resource === 'leases') return true
  return (row.resource === 'endpoints' || row.resource === 'endpointslices') && row.verb !== 'LIST'
}

export interface FleetResult {
  version: 1
  startedAt: string
  finishedAt: string
  command: string
  smoke: boolean
  machine: MachineInfo
  loadAverage: { before: number[]; after: number[] }
  loadDuring: LoadSummary
  migrator: { user: string; priorityLevel: string; maxParallelCrds: string }
  foreground: { user: string; priorityLevel: string; ratePerSecond: number; idle: ForegroundStats }
  flowControl: { priorityLevel: string; nominalSeats: number | null }
  setupSeconds: number
  single: CliRun
  fleet: CliRun
  /** The fleet's wall time over the single CRD's (target: at most 1.3). */
  wallRatio: number | null
  /** Foreground p99 during the fleet over during the single CRD (target: at most 1). */
  foregroundP99Ratio: number | null
  targets: Array<{ name: string; target: string; value: string; met: boolean | null }>
}

interface MigrationResultLine {
  crd?: string
  outcome?: string
  durationMs?: number
  error?: string
}

/** `crd-migrator migrate NAMES -o json` as the migrator's ServiceAccount; its outcomes and its peak RSS. */
function runMigrate(
  names: string[],
  kubeconfig: string,
  stateHome: string,
): Promise<{ exitCode: number | null; wallMs: number; results: MigrationResultLine[]; peakRssMb: number | null }> {
  const args = [...productNodeFlags(), CLI_JS, 'migrate', ...names, '--kubeconfig', kubeconfig, '-o', 'json']
  if (maxParallelCrds !== undefined) args.push('--max-parallel-crds', String(maxParallelCrds))
  return new Promise((resolve, reject) => {
    const started = performance.now()
    const child = spawn(process.execPath, args, {
      stdio: ['ignore', 'pipe', 'inherit'],
      env: { ...process.env, XDG_STATE_HOME: stateHome },
    })
    let out = ''
    let peakRssMb: number | null = null
    // VmHWM is the process's own peak; read until it exits (it is gone after).
    const sampler = setInterval(() => {
      const m = child.pid ? memoryOf(child.pid) : null
      if (m) peakRssMb = Math.max(peakRssMb ?? 0, m.peakRssMb)
    }, 250)
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d))
    child.on('error', (err) => {
      clearInterval(sampler)
      reject(err)
    })
    child.on('close', (code) => {
      clearInterval(sampler)
      const wallMs = performance.now() - started
      let results: MigrationResultLine[]
      try {
        results = JSON.parse(out) as MigrationResultLine[]
      } catch {
        return reject(new Error(`migrate exited ${code} without a JSON result: ${out.slice(0, 500)}`))
      }
      resolve({ exitCode: code, wallMs, results, peakRssMb })
    })
  })
}

const median = (xs: number[]) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]! : null)

async function main(): Promise<void> {
  const startedAt = new Date().toISOString()
  const before = loadAverage()
  const load = sampleLoad()
  const runId = Date.now().toString(36)
  log(`fleet ${crdCount} CRDs x ${objectsPerCrd} objects vs 1 CRD x ${singleObjects}; load average ${before.join(' ')}`)
  const cp: ControlPlane = flags['controlplane-state']
    ? await attachControlPlane(flags['controlplane-state'])
    : (log('starting the local control plane'), await startControlPlane({ log }))
  const http = new KubeHttp(loadKubeConfig(cp.kubeconfigPath), { maxSockets: 64 })
  const work = await mkdtemp(path.join(os.tmpdir(), `crd-migrator-fleet-${runId}-`))
  const singleGroup = `single.f${runId}.bench.crd-migrator.io`
  const fleetGroups = Array.from({ length: crdCount }, (_, i) => `f${i}.f${runId}.bench.crd-migrator.io`)
  const created: string[] = []
  let migratorHttp: KubeHttp | undefined
  let apf: Awaited<ReturnType<typeof installFlowControl>> | undefined
  const bulkProbe = `/api/v1/namespaces/${BENCH_NAMESPACES[0]}/configmaps?limit=1`
  try {
    const machine = machineInfo()
    machine.kubeVersion = await kubeVersion(http)
    await ensureNamespaces(http)
    // The migrator runs as a ServiceAccount, as the chart's pod does: system:masters is exempt from APF.
    const sa = await serviceAccountIdentity(cp, 'crd-migrator-bench', 'crd-migrator', path.join(work, 'migrator.kubeconfig'), {
      clusterRole: 'cluster-admin',
    })
    migratorHttp = new KubeHttp(loadKubeConfig(sa.kubeconfigPath))
    const levelOf = levelNames(http)
    const objects = await flowControlObjects({
      name: `crd-migrator-fleet-${runId}`,
      serviceAccount: { namespace: sa.namespace, name: sa.name },
    })
    apf = await installFlowControl(http, migratorHttp, objects, bulkProbe)
    const level = apf.find((o) => o.kind === 'PriorityLevelConfiguration')!.metadata.name
    const migratorLevel = await levelOf((await classify(migratorHttp, bulkProbe)).priorityLevelUid)
    const tenant = await foregroundTenant(cp, http, levelOf, foregroundRate)
    log(`migrator ${sa.username} in priority level ${migratorLevel}; foreground ${tenant.user} in ${tenant.priorityLevel}`)

    // The starting state: every CRD's objects stored at v1, storage flipped to v2.
    const setupStarted = performance.now()
    await createBenchCrd(http, singleGroup)
    created.push(singleGroup)
    await createWidgets(http, singleGroup, singleObjects, 64)
    await flipStorageToV2(http, cp.etcdEndpoint, singleGroup)
    log(`single CRD: ${singleObjects} objects at v1, storage flipped (${round((performance.now() - setupStarted) / 1000, 1)} s)`)
    await pool(fleetGroups.length, 8, async (i) => {
      const group = fleetGroups[i]!
      await createBenchCrd(http, group)
      created.push(group)
      await createWidgets(http, group, objectsPerCrd, 8)
      await flipStorageToV2(http, cp.etcdEndpoint, group)
      if ((i + 1) % 50 === 0) log(`fleet: ${i + 1} of ${crdCount} CRDs ready`)
    })
    const setupSeconds = round((performance.now() - setupStarted) / 1000, 1)!
    log(`set up in ${setupSeconds} s`)

    const quiet = async (what: string) => {
      const q = await waitForQuietProcesses(path.join(cp.dir, 'run'), smoke ? { timeoutMs: 2000 } : { timeoutMs: 180_000 })
      log(
        `control plane quiet before ${what} after ${round(q.waitedMs / 1000, 1)} s (${round(q.cpuPercent, 0)}% of a core${q.timedOut ? ', gave up waiting' : ''})`,
      )
    }
    await quiet('the idle foreground')
    const idle = foregroundStats((await withForeground(tenant.input, () => sleep(foregroundIdleSeconds * 1000))).samples)
    log(`foreground idle: p50 ${idle.p50Ms} ms, p99 ${idle.p99Ms} ms (${idle.requests} requests, ${idle.errors} errors)`)

    const measure = async (what: 'single' | 'fleet', groups: string[], objectsEach: number): Promise<CliRun> => {
      await quiet(`the ${what} run`)
      const names = groups.map((g) => `${PLURAL}.${g}`)
      const stateHome = await mkdtemp(path.join(work, `${what}-state-`))
      let from = 0
      let to = 0
      let requestRows: RequestRow[] = []
      const { result: run, samples } = await withForeground(tenant.input, async () => {
        const counter = await countRequests(http)
        from = Date.now()
        const r = await runMigrate(names, sa.kubeconfigPath, stateHome)
        to = Date.now()
        requestRows = await counter.stop()
        return r
      })
      const outcomes: Record<string, number> = {}
      for (const r of run.results)
        outcomes[r.outcome ?? `error: ${r.error ?? '?'}`] = (outcomes[r.outcome ?? `error: ${r.error ?? '?'}`] ?? 0) + 1
      let proved = true
      await pool(groups.length, 8, async (i) => {
        const etcd = await proveStoredAtV2(cp.etcdEndpoint, groups[i]!, objectsEach)
        if (!etcd.allV2) {
          proved = false
          log(`${groups[i]}: NOT all at v2 in etcd: ${JSON.stringify(etcd.byApiVersion)}`)
        }
      })
      const stored = await Promise.all(names.map(async (n) => (await getCrd(http, n)).status?.storedVersions?.join(',') ?? ''))
      const objects = groups.length * objectsEach
      const fg = foregroundStats(samples, from, to)
      const r: CliRun = {
        what,
        crds: groups.length,
        objects,
        exitCode: run.exitCode,
        wallMs: Math.round(run.wallMs),
        objectsPerSecond: Math.round(objects / (run.wallMs / 1000)),
        outcomes,
        crdDurationMs: {
          median: median(run.results.map((x) => x.durationMs ?? 0)),
          max: run.results.length ? Math.max(...run.results.map((x) => x.durationMs ?? 0)) : null,
        },
        peakRssMb: run.peakRssMb === null ? null : round(run.peakRssMb, 1),
        provedInEtcd: proved,
        storedVersionsNarrowed: stored.every((s) => s === 'v2'),
        foreground: fg,
        requests: requestsPerCrd(requestRows, groups.length, { objects: PLURAL, background }),
      }
      log(
        `${what}: ${groups.length} CRD(s), ${objects} objects in ${round(run.wallMs / 1000, 1)} s (${r.objectsPerSecond}/s), exit ${run.exitCode}, ${JSON.stringify(outcomes)}; foreground p99 ${fg.p99Ms} ms; etcd ${proved ? 'all v2' : 'NOT all v2'}`,
      )
      return r
    }
    const single = await measure('single', [singleGroup], singleObjects)
    const fleet = await measure('fleet', fleetGroups, objectsPerCrd)

    const wallRatio = round(fleet.wallMs / single.wallMs, 2)
    const p99 = (s: ForegroundStats) => s.p99Ms
    const foregroundP99Ratio =
      p99(fleet.foreground) !== null && p99(single.foreground) ? round(p99(fleet.foreground)! / p99(single.foreground)!, 2) : null
    const after = loadAverage()
    const result: FleetResult = {
      version: 1,
      startedAt,
      finishedAt: new Date().toISOString(),
      command: `npm run bench:fleet -- ${process.argv.slice(2).join(' ')}`.trim(),
      smoke,
      machine,
      loadAverage: { before, after },
      loadDuring: load.stop(),
      migrator: {
        user: sa.username,
        priorityLevel: migratorLevel,
        maxParallelCrds: maxParallelCrds === undefined ? 'default' : String(maxParallelCrds),
      },
      foreground: { user: tenant.user, priorityLevel: tenant.priorityLevel, ratePerSecond: foregroundRate, idle },
      flowControl: { priorityLevel: level, nominalSeats: await nominalSeats(http, level) },
      setupSeconds,
      single,
      fleet,
      wallRatio,
      foregroundP99Ratio,
      targets: [
        {
          name: 'fleet time vs one CRD of the same objects',
          target: '<= 1.3x',
          value: `${wallRatio}x`,
          met: wallRatio === null ? null : wallRatio <= 1.3,
        },
        {
          name: 'foreground p99 during the fleet vs during the single CRD',
          target: '<= 1x',
          value: `${p99(fleet.foreground)} vs ${p99(single.foreground)} ms (${foregroundP99Ratio}x)`,
          met: foregroundP99Ratio === null ? null : foregroundP99Ratio <= 1,
        },
      ],
    }
    await mkdir(outDir, { recursive: true })
    await writeFile(path.join(outDir, 'fleet-latest.json'), `${JSON.stringify(result, null, 2)}\n`)
    await writeFile(path.join(outDir, 'fleet-latest.md'), renderFleet(result))
    process.stdout.write(renderFleet(result))
    if (!(single.provedInEtcd && fleet.provedInEtcd && single.storedVersionsNarrowed && fleet.storedVersionsNarrowed)) process.exitCode = 1
    if (single.exitCode !== 0 || fleet.exitCode !== 0) process.exitCode = 1
  } finally {
    if (apf && migratorHttp)
      await removeFlowControl(http, migratorHttp, apf, bulkProbe).catch((err: unknown) => log(`APF objects left: ${String(err)}`))
    if (!flags.keep) {
      log(`deleting ${created.length} bench CRDs`)
      await pool(created.length, 8, (i) => deleteBenchCrd(http, created[i]!)).catch((err: unknown) => log(`CRDs left: ${String(err)}`))
    }
    migratorHttp?.close()
    http.close()
    await rm(work, { recursive: true, force: true })
    if (!flags['controlplane-state']) await cp.stop()
  }
}

export function renderFleet(r: FleetResult): string {
  const row = (c: CliRun) =>
    `| ${c.what} | ${c.crds} | ${c.objects.toLocaleString('en-US')} | ${(c.wallMs / 1000).toFixed(1)} | ${c.objectsPerSecond} | ${c.crdDurationMs.median === null ? 'n/a' : (c.crdDurationMs.median / 1000).toFixed(1)} / ${c.crdDurationMs.max === null ? 'n/a' : (c.crdDurationMs.max / 1000).toFixed(1)} | ${c.peakRssMb ?? 'n/a'} | ${c.foreground.p50Ms} / ${c.foreground.p99Ms} / ${c.foreground.maxMs} (${c.foreground.errors} errors) | ${JSON.stringify(c.outcomes)} | ${c.provedInEtcd && c.storedVersionsNarrowed ? 'yes' : 'NO'} |`
  return [
    `# Fleet bench: ${r.fleet.crds} CRDs x ${r.fleet.crds ? r.fleet.objects / r.fleet.crds : 0} objects vs 1 CRD x ${r.single.objects}`,
    '',
    `\`${r.command}\`, ${r.startedAt} to ${r.finishedAt}${r.smoke ? ' (smoke: sizes too small to mean anything)' : ''}.`,
    `Kubernetes ${r.machine.kubeVersion ?? '?'}, ${r.machine.cores} cores (${r.machine.cpuModel}), Node ${r.machine.node}; 1-minute load ${r.loadAverage.before[0]} before, ${r.loadAverage.after[0]} after, mean ${r.loadDuring.mean} during.`,
    `Both runs: \`crd-migrator migrate NAME... -o json\` (dist/cli/main.js, its shebang's node flags, max-parallel-crds ${r.migrator.maxParallelCrds}) as ${r.migrator.user}, priority level ${r.migrator.priorityLevel} (the chart's APF objects, ${r.flowControl.nominalSeats ?? '?'} seats). Foreground: ${r.foreground.user} (${r.foreground.priorityLevel}) at ${r.foreground.ratePerSecond}/s, idle p50 ${r.foreground.idle.p50Ms} ms, p99 ${r.foreground.idle.p99Ms} ms. Setup (not measured): ${r.setupSeconds} s.`,
    '',
    '| run | CRDs | objects | wall s | objects/s | CRD median / max s | peak RSS MB | foreground p50 / p99 / max ms | outcomes | etcd all v2, storedVersions [v2] |',
    '|---|---|---|---|---|---|---|---|---|---|',
    row(r.single),
    row(r.fleet),
    '',
    '| target | wanted | this run | met |',
    '|---|---|---|---|',
    ...r.targets.map((t) => `| ${t.name} | ${t.target} | ${t.value} | ${t.met === null ? 'n/a' : t.met ? 'yes' : 'no'} |`),
    '',
    '## Requests per CRD (apiserver_request_total, from the spawn of migrate to its exit)',
    '',
    "Object writes are the rewrites (per object); overhead is everything else the migrator sent, per CRD (the process's own start-up requests divided among the CRDs of the run).",
    '',
    ...[r.single, r.fleet].filter((c) => c.requests).map((c) => renderRequestsPerCrd(`### ${c.what}`, c.requests)),
  ].join('\n')
}

await main()
