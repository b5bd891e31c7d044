/**
 * `npm run bench:client` at smoke size, so it cannot rot: the product's storage phase must
 * rewrite every object of the stub exactly once, in the shapes the stub answers (a
 * product that lists or writes differently fails the run). No control plane: the stub is
 * the API server. Seconds, not minutes.
 */
import { spawnSync } from 'node:child_process'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import type { ClientCeilingReport } from '../../dev/bench/client-ceiling-report.js'
import { buildDev, devBuildIsStale } from '../../scripts/dev-build.mjs'
import { runProcess } from '../helpers/run-process.js'

const root = process.cwd()
const benchJs = path.join(root, 'dist-dev', 'dev', 'bench', 'client-ceiling.js')

t.before(() => {
  if (devBuildIsStale(root)) {
    const tsc = buildDev(root, 'pipe')
    if (tsc.status !== 0) throw new Error(`tsc -p dev/tsconfig.json failed: ${tsc.stdout}`)
  }
})

t.test('npm run bench:client --smoke: every object rewritten once, with and without the node flags', async (t) => {
  t.setTimeout(3 * 60 * 1000)
  const out = await mkdtemp(path.join(os.tmpdir(), 'crd-migrator-bench-client-'))
  t.teardown(() => rm(out, { recursive: true, force: true }))
  const r = await runProcess(process.execPath, [benchJs, '--smoke', '--objects', '600', '--out', out], { cwd: root })
  t.equal(r.code, 0, 'the bench exits 0', { stderr: r.stderr.split('\n').slice(-20).join('\n') })
  const report = JSON.parse(await readFile(path.join(out, 'smoke.json'), 'utf8')) as ClientCeilingReport
  t.equal(report.runs.length, 2, 'one run with the product node flags, one without')
  t.same(
    report.runs.map((run) => run.nodeFlags === 'none'),
    [false, true],
  )
  for (const run of report.runs) {
    t.notOk(run.error, `${run.nodeFlags}: no error`)
    t.equal(run.patches, 600, 'the stub answered one patch per object')
    t.ok(run.listPages >= 2, 'the list came in pages (page size 500)')
    t.ok(run.writesPerClientCoreSecond > 0 && run.clientCpuMsPer1000 > 0, 'client CPU measured')
    t.ok(run.stubCpuMsPer1000 > 0, 'stub CPU measured')
  }
  const md = await readFile(path.join(out, 'smoke.md'), 'utf8')
  t.match(md, /## What it means/)
  t.match(md, /writes\/s per core of the client/)
})

t.test('npm run bench:client -- --help lists its flags; a bad one is a clear error', async (t) => {
  const help = spawnSync(process.execPath, [benchJs, '--help'], { encoding: 'utf8' })
  t.equal(help.status, 0)
  for (const flag of ['--objects', '--concurrency', '--repeat', '--out', '--smoke']) t.match(help.stdout, flag)
  const bad = spawnSync(process.execPath, [benchJs, '--objects', 'many'], { encoding: 'utf8' })
  t.equal(bad.status, 2)
  t.match(bad.stderr, /--objects must be a positive integer/)
  t.notMatch(bad.stderr, /\n\s+at /, 'no stack trace')
})
