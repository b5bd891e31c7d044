/**
 * `npm run bench` at smoke size, so the bench cannot rot: 200 objects per run, 1 s of
 * webhook load per case, on the test run's shared control plane when there is one.
 *
 * KSVM: its first build takes over a minute (module downloads + compile), too long for
 * this test's budget, so the smoke run uses it only when scripts/build-ksvm.sh has already
 * built it (`--ksvm-if-cached`); the script itself is still exercised here (`--check`).
 */
import { spawnSync } from 'node:child_process'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import type { FleetResult } from '../../dev/bench/fleet.js'
import type { BenchResult } from '../../dev/bench/report.js'
import { ensureBinaries } from '../../dev/controlplane/controlplane.js'
import { buildDev, devBuildIsStale } from '../../scripts/dev-build.mjs'
import { CONTROLPLANE_ENV } from '../helpers/controlplane.js'
import { runProcess } from '../helpers/run-process.js'

const root = process.cwd()
/** The bench runs compiled (dist-dev/, the tooling build), with child processes. */
const benchJs = path.join(root, 'dist-dev', 'dev', 'bench', 'main.js')
const fleetJs = path.join(root, 'dist-dev', 'dev', 'bench', 'fleet.js')

const run = (cmd: string, args: string[]) => runProcess(cmd, args, { cwd: root })

t.test('scripts/build-ksvm.sh --check answers without building', async (t) => {
  const r = spawnSync('bash', [path.join(root, 'scripts', 'build-ksvm.sh'), '--check'], { encoding: 'utf8' })
  t.ok(r.status === 0 || r.status === 4, `exit 0 (cached) or 4 (not built), got ${r.status}: ${r.stderr}`)
  if (r.status === 0)
    t.match(
      r.stdout,
      /^migrator=.*\/migrator\ncrd=.*storage_migration_crd\.yaml\nstate_crd=.*storage_state_crd\.yaml\n$/,
      'prints the binary and the two CRDs',
    )
})

t.test('npm run bench --smoke: every migrator moves every object to v2, proved in etcd', async (t) => {
  t.setTimeout(10 * 60 * 1000) // first run: compile and maybe build the control plane
  if (devBuildIsStale(root)) {
    const tsc = buildDev(root, 'pipe')
    t.equal(tsc.status, 0, 'tsc -p dev/tsconfig.json compiles', { stdout: tsc.stdout })
  }
  await ensureBinaries()
  const out = await mkdtemp(path.join(os.tmpdir(), 'crd-migrator-bench-smoke-'))
  t.teardown(() => rm(out, { recursive: true, force: true }))
  const ksvmCached = spawnSync('bash', [path.join(root, 'scripts', 'build-ksvm.sh'), '--check'], { stdio: 'ignore' }).status === 0
  const stateFile = process.env[CONTROLPLANE_ENV]
  const started = Date.now()
  const r = await run(process.execPath, [
    benchJs,
    '--smoke',
    '--out',
    out,
    '--ksvm-if-cached',
    ...(stateFile ? ['--controlplane-state', stateFile] : []),
  ])
  t.equal(r.code, 0, 'the bench exits 0', { stderr: r.stderr.split('\n').slice(-40).join('\n') })
  t.comment(
    `smoke bench took ${Math.round((Date.now() - started) / 1000)} s; KSVM ${ksvmCached ? 'included (cached build)' : 'skipped (not built yet)'}`,
  )

  const result = JSON.parse(await readFile(path.join(out, 'latest.json'), 'utf8')) as BenchResult
  t.equal(result.version, 1)
  t.equal(result.smoke, true)
  t.same(result.childNodeOptions, [], 'the children ran with plain node')
  t.same(result.sizes, [200])
  t.match(result.machine, { cpuModel: String, cores: Number, memoryGb: Number, node: process.version, kubeVersion: /^v1\.\d+\.\d+/ })
  t.equal(result.loadAverage.before.length, 3)

  const tools = new Set(result.migrations.map((m) => m.tool))
  for (const tool of ['ceiling', 'ours-best', 'ours-default'] as const) t.ok(tools.has(tool), `ran ${tool}`)
  t.equal(tools.has('ksvm'), ksvmCached, ksvmCached ? 'ran KSVM (its build is cached)' : 'skipped KSVM (not built)')
  for (const m of result.migrations) {
    t.equal(m.outcome, 'Succeeded', `${m.tool}: succeeded`)
    t.ok(m.etcd.allV2, `${m.tool}: etcd holds all ${m.size} objects at v2: ${JSON.stringify(m.etcd.byApiVersion)}`)
    t.equal(m.etcd.total, m.size, `${m.tool}: no object more or less in etcd`)
    t.ok(m.objectsPerSecond > 0 && m.rewriteMs > 0, `${m.tool}: timed`)
    t.ok((m.peakRssMb ?? 0) > 0, `${m.tool}: peak RSS measured`)
    if (!m.tool.startsWith('ksvm')) {
      t.equal(m.failedWrites, 0, `${m.tool}: no failed write`)
      t.ok((m.p50Ms ?? 0) > 0 && (m.p99Ms ?? 0) >= (m.p50Ms ?? 0), `${m.tool}: p50 <= p99`)
    }
  }
  t.ok(result.allProvedInEtcd)
  t.equal(result.ratios.length, 1)
  t.type(result.ratios[0]!.oursBestVsCeiling, 'number')
  t.equal(result.bestConcurrency, 16, 'smoke: no sweep, concurrency 16')

  const cases = result.webhook?.cases ?? []
  t.equal(cases.filter((c) => c.server === 'ours').length, 8, 'ours: 2 CRD sizes x allowed/denied x fixed/saturation')
  t.equal(cases.filter((c) => c.server === 'floor').length, 4, 'floor: 2 CRD sizes x fixed/saturation')
  for (const c of cases) {
    t.ok(c.requests > 0 && c.requestsPerSecond > 0, `webhook ${c.server} ${c.crd} ${c.decision} ${c.mode}: answered`)
    t.equal(c.non2xx + c.errors, 0, `webhook ${c.server} ${c.crd} ${c.decision} ${c.mode}: no errors`)
    t.ok(c.p50Ms > 0 && c.p50Ms <= c.p99Ms && c.p99Ms <= c.maxMs, `webhook ${c.server} ${c.crd} ${c.decision} ${c.mode}: p50 <= p99 <= max`)
  }
  t.equal(result.webhook?.repeat, 1, 'smoke: one attack per webhook case')
  for (const crd of ['10 KB', '1 MB'])
    t.ok(
      result.targets.some(
        (x) => x.name.startsWith('webhook p99') && x.name.includes(crd) && /allowed .* ms, denied .* ms vs floor .* ms/.test(x.value),
      ),
      `the webhook target of the ${crd} CRD names ours and the floor`,
    )
  t.same(
    result.targets.map((x) => x.target),
    ['≤ 2.5×', '< 10%', '< 10%', '≥ 0.95×', '≤ 1.5×', '≤ 1.1×', 'none', '≤ 2×', '≤ 15%', '≤ 1.2×', '≤ 1.5×', 'within 1.5× either way'],
    "issue #19's targets: memory vs KSVM and growth, speed, tail and CPU vs the ceiling (and the whole run's CPU for reference), the good neighbour, the webhook; issue #36's plan --measure estimate vs the run",
  )
  // Issue #36: ours at the defaults was planned with plan --measure first (dry-run writes), its estimate kept beside the run.
  const planned = result.migrations.find((r) => r.tool === 'ours-default')?.planEstimate
  t.match(
    planned,
    { source: 'measured', samples: Number, estimateMs: Number, estimateRangeMs: [Number, Number], actualMs: Number, ratio: Number },
    'the main case has its plan estimate',
  )
  for (const run of result.migrations.filter((r) => r.tool === 'ours-default' || r.tool === 'ours-best'))
    t.ok(
      typeof run.rewriteCpuMsPer1000 === 'number' && run.rewriteCpuMsPer1000 > 0 && run.rewriteCpuMsPer1000 <= run.cpuMsPer1000!,
      `${run.tool}: the storage phase's CPU (${run.rewriteCpuMsPer1000} ms per 1,000) is measured, and within the whole run's (${run.cpuMsPer1000})`,
    )
  t.match(result.loadDuring, { samples: Number, min: Number, max: Number }, 'the machine load during the run')
  t.match(
    result.identity,
    { migrator: 'system:serviceaccount:crd-migrator-bench:crd-migrator', priorityLevel: 'workload-low' },
    'not exempt from APF',
  )

  // The good neighbour: the foreground alone, then with a migration without and with the chart's FlowSchema.
  const n = result.neighbour!
  t.ok(n, 'the good-neighbour case ran')
  t.equal(n.size, 100)
  t.equal(n.foreground.priorityLevel, 'global-default', 'the foreground is an ordinary authenticated user')
  t.equal(n.migrator.priorityLevelWithout, 'workload-low')
  t.equal(n.migrator.priorityLevelWith, n.flowControl.priorityLevel, "with the FlowSchema, the migrator's requests are in its level")
  t.ok((n.flowControl.nominalSeats ?? 0) >= 1, `the level has seats (${n.flowControl.nominalSeats})`)
  for (const [phase, stats] of [
    ['idle', n.idle],
    ['without', n.without.foreground],
    ['with', n.with.foreground],
  ] as const) {
    t.ok(stats.requests > 0 && stats.errors === 0, `foreground ${phase}: ${stats.requests} requests, no errors`)
    t.ok((stats.p50Ms ?? 0) > 0 && (stats.p99Ms ?? 0) >= (stats.p50Ms ?? 0), `foreground ${phase}: p50 <= p99`)
  }
  for (const m of [n.without.migration, n.with.migration]) {
    t.equal(m.outcome, 'Succeeded', `${m.tool}: succeeded`)
    t.ok(m.etcd.allV2 && m.etcd.total === 100, `${m.tool}: all 100 at v2 in etcd`)
  }
  t.type(n.throughputLoss, 'number')

  const md = await readFile(path.join(out, 'latest.md'), 'utf8')
  t.match(md, /\| objects \| migrator \| settings \| rewrite s \| objects\/s \|/)
  t.match(md, /\| 200 \| ceiling \|/)
  t.match(
    md,
    /plan --measure estimate vs actual \(ours at the defaults, whole run\): 200 objects: estimate [\d.]+ s in [\d.]+–[\d.]+ s \(the run (inside|OUTSIDE) it\) \(measured, /,
    'the estimate, its range, and whether the run fell inside it',
  )
})

t.test('npm run bench:fleet --smoke: a fleet of CRDs and one CRD of as many objects, both proved in etcd', async (t) => {
  t.setTimeout(10 * 60 * 1000)
  if (devBuildIsStale(root)) {
    const tsc = buildDev(root, 'pipe')
    t.equal(tsc.status, 0, 'tsc -p dev/tsconfig.json compiles', { stdout: tsc.stdout })
  }
  await ensureBinaries()
  const out = await mkdtemp(path.join(os.tmpdir(), 'crd-migrator-bench-fleet-smoke-'))
  t.teardown(() => rm(out, { recursive: true, force: true }))
  const stateFile = process.env[CONTROLPLANE_ENV]
  const r = await run(process.execPath, [fleetJs, '--smoke', '--out', out, ...(stateFile ? ['--controlplane-state', stateFile] : [])])
  t.equal(r.code, 0, 'the fleet bench exits 0', { stderr: r.stderr.split('\n').slice(-40).join('\n') })
  const result = JSON.parse(await readFile(path.join(out, 'fleet-latest.json'), 'utf8')) as FleetResult
  t.equal(result.smoke, true)
  for (const run of [result.single, result.fleet]) {
    t.equal(run.exitCode, 0, `${run.what}: migrate exits 0`)
    t.same(run.outcomes, { Succeeded: run.crds }, `${run.what}: every CRD Succeeded`)
    t.ok(run.provedInEtcd, `${run.what}: every object at v2 in etcd`)
    t.ok(run.storedVersionsNarrowed, `${run.what}: every CRD's storedVersions is [v2]`)
    t.ok(run.foreground.requests > 0, `${run.what}: the foreground client sent requests during the run`)
    // The API server counts every client (other tests share it): at least, never fewer.
    const writes = run.requests.rows.filter((x) => x.kind === 'object-write').reduce((n, x) => n + x.count, 0)
    t.ok(writes >= run.objects, `${run.what}: the API server counted a write per object at least (${writes} of ${run.objects})`)
    t.ok(run.requests.totals.overhead > 0, `${run.what}: and the requests around them, per CRD (${run.requests.totals.overhead})`)
  }
  t.equal(result.single.crds, 1)
  t.ok(result.fleet.crds > 1)
  t.equal(result.fleet.objects, result.single.objects, 'the fleet holds as many objects as the single CRD')
  t.notOk(result.migrator.priorityLevel === 'exempt', 'the migrator ran under APF')
  const md = await readFile(path.join(out, 'fleet-latest.md'), 'utf8')
  t.match(md, /\| fleet time vs one CRD of the same objects \| <= 1\.3x \|/)
  t.match(md, /## Requests per CRD/)
})

t.test('npm run bench:fleet -- --help lists its flags; a bad one is a clear error', async (t) => {
  const help = spawnSync(process.execPath, [fleetJs, '--help'], { encoding: 'utf8' })
  t.equal(help.status, 0)
  for (const flag of ['--crds', '--objects', '--single', '--max-parallel-crds', '--smoke', '--controlplane-state'])
    t.match(help.stdout, flag)
  const bad = spawnSync(process.execPath, [fleetJs, '--crds', 'many'], { encoding: 'utf8' })
  t.equal(bad.status, 2)
  t.match(bad.stderr, /--crds takes a whole number/)
})

t.test('npm run bench -- --help lists the flags', async (t) => {
  const r = spawnSync(process.execPath, [benchJs, '--help'], { encoding: 'utf8' })
  t.equal(r.status, 0)
  for (const flag of [
    '--sizes',
    '--skip-ksvm',
    '--skip-webhook',
    '--skip-migrations',
    '--smoke',
    '--controlplane-state',
    '--child-node-options',
  ])
    t.match(r.stdout, flag)
})

t.test('an unknown bench flag is a clear error, not a stack trace', async (t) => {
  const r = spawnSync(process.execPath, [benchJs, '--sizez', '10'], { encoding: 'utf8' })
  t.equal(r.status, 2)
  t.match(r.stderr, /bench: Unknown option '--sizez'/)
  t.match(r.stderr, /--help/)
  t.notMatch(r.stderr, /at parseArgs/, 'no stack trace')
})
