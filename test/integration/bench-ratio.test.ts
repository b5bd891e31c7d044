/**
 * The speed check the issue asked for after ours fell to 0.58× the ceiling unnoticed
 * (#37): `npm run bench` at 3,000 objects, ours at the defaults against the ceiling in the
 * same run, and a generous floor on the ratio. Not a timing assertion on a fixed figure:
 * both run on the same machine one after the other, so a slow machine slows both. A run
 * under the floor is run again, up to three runs: a regression fails them all.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t, { type Test } from 'tap'
import type { BenchResult } from '../../dev/bench/report.js'
import { ensureBinaries } from '../../dev/controlplane/controlplane.js'
import { buildDev, devBuildIsStale } from '../../scripts/dev-build.mjs'
import { CONTROLPLANE_ENV } from '../helpers/controlplane.js'
import { runProcess } from '../helpers/run-process.js'

const root = process.cwd()
const benchJs = path.join(root, 'dist-dev', 'dev', 'bench', 'main.js')
/**
 * Ours at the defaults against the ceiling: 0.90–1.13× in quiet runs at 10,000 objects
 * (0.58–0.81× with the adaptive rule of the regression). A full `npm test` runs this file
 * alone after the main pass (scripts/test.mjs SOLO_SUITES): beside another test file the
 * ratio at 3,000 objects swung 0.38–1.55×. Run with other files (`npm test -- a b`), a
 * slow run is run again; a regression is slow every time.
 */
const FLOOR = 0.7
const SIZE = 3000
/** A run that another test file slowed is run again; a regression is slow every time. */
const ATTEMPTS = 3

async function ratioOfOneRun(t: Test): Promise<{ ratio: number; line: string }> {
  const out = await mkdtemp(path.join(os.tmpdir(), 'crd-migrator-bench-ratio-'))
  t.teardown(() => rm(out, { recursive: true, force: true }))
  const stateFile = process.env[CONTROLPLANE_ENV]
  const r = await runProcess(
    process.execPath,
    [
      benchJs,
      ...['--sizes', String(SIZE), '--sweep', '32', '--out', out],
      ...['--skip-webhook', '--skip-conversion', '--skip-neighbour', '--skip-ksvm'],
      ...(stateFile ? ['--controlplane-state', stateFile] : []),
    ],
    { cwd: root },
  )
  t.equal(r.code, 0, 'the bench exits 0', { stderr: r.stderr.split('\n').slice(-40).join('\n') })
  const result = JSON.parse(await readFile(path.join(out, 'latest.json'), 'utf8')) as BenchResult
  for (const m of result.migrations) t.ok(m.etcd.allV2 && m.etcd.total === SIZE, `${m.tool}: all ${SIZE} objects at v2 in etcd`)
  const of = (tool: string) => result.migrations.find((m) => m.tool === tool)!
  const ratio = result.ratios[0]!.oursDefaultVsCeiling!
  const line = `ours-default ${Math.round(of('ours-default').objectsPerSecond)}/s vs ceiling ${Math.round(of('ceiling').objectsPerSecond)}/s = ${ratio.toFixed(2)}×`
  t.comment(line)
  return { ratio, line }
}

t.test(`npm run bench at ${SIZE} objects: ours at the defaults keeps at least ${FLOOR}× the ceiling`, async (t) => {
  t.setTimeout(15 * 60 * 1000)
  if (devBuildIsStale(root)) t.equal(buildDev(root, 'pipe').status, 0, 'tsc -p dev/tsconfig.json compiles')
  await ensureBinaries()
  const lines: string[] = []
  for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
    const run = await ratioOfOneRun(t)
    lines.push(run.line)
    if (run.ratio >= FLOOR) return void t.pass(`at least ${FLOOR}× (run ${attempt} of at most ${ATTEMPTS}): ${lines.join('; then ')}`)
  }
  t.fail(`under ${FLOOR}× in ${ATTEMPTS} runs: ${lines.join('; then ')}`)
})
