/**
 * Many CRDs at once under one budget (issue #29, item 1): `migrate CRD...` with
 * migrator.maxParallelCrds > 1 over 60 CRDs of 20 objects each. Every object ends in the
 * storage version in etcd, every CRD unfrozen with storedVersions narrowed, one summary
 * per CRD; the runs overlapped (read from the CRDs' own state annotations, not from how
 * long it took); a second run skips every CRD as up to date.
 */
import { randomBytes } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import t from 'tap'
import { pino } from 'pino'
import { runMigrateCommand } from '../../src/cli/migrate/run-migrate.js'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { loadConfig } from '../../src/config/load.js'
import { getCrd } from '../../src/kube/crds.js'
import { runInParallel } from '../../src/migrator/parallel.js'
import { StateAnnotation } from '../../src/state/crd-state.js'
import { httpFor, storedVersionsInEtcd } from '../helpers/cluster.js'
import { getControlPlane } from '../helpers/controlplane.js'
import { crdWithObjects } from '../helpers/fixtures.js'

const logger = pino({ level: 'silent' })
const CRDS = 60
const OBJECTS = 20
const PARALLEL = 8

/** A stream keeping each write as it came: one write per summary is what keeps lines whole. */
function collector() {
  const writes: string[] = []
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      writes.push(chunk.toString())
      done()
    },
  })
  return { stream, writes }
}

/** The most runs in flight at any one time, from [start, end] intervals. */
function maxOverlap(intervals: Array<[number, number]>): number {
  const edges = intervals.flatMap(([s, e]): Array<[number, number]> => [
    [s, 1],
    [e, -1],
  ])
  // At equal times an end comes before a start: touching runs did not overlap.
  edges.sort((a, b) => a[0] - b[0] || a[1] - b[1])
  let now = 0
  let most = 0
  for (const [, d] of edges) most = Math.max(most, (now += d))
  return most
}

t.test(`${CRDS} CRDs × ${OBJECTS} objects, ${PARALLEL} at once under one budget`, async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const fleet = await runInParallel(
    Array.from({ length: CRDS }, (_, i) => i),
    6,
    () => crdWithObjects(http, { prefix: 'fleet', count: OBJECTS }),
  )
  const names = fleet.map((f) => f.name)
  const keyFile = join(t.testdir(), 'state.key')
  writeFileSync(keyFile, randomBytes(32).toString('base64'), { mode: 0o600 })
  const config = loadConfig({
    flags: {
      kubeconfig: cp.kubeconfigPath,
      'migrator.maxParallelCrds': PARALLEL,
      'migrator.concurrency': 16,
      'migrator.stateKeyFile': keyFile,
    },
  })

  const out = collector()
  const code = await runMigrateCommand(names, config, logger, { dryRun: false, out: out.stream, format: 'text' })
  t.equal(code, 0, 'exit 0', { output: out.writes.join('') })

  // One summary per CRD, each one whole write starting with its name and ending the line.
  t.equal(out.writes.length, CRDS, 'one write per CRD')
  const headers = out.writes.map((w) => w.split('\n')[0]!)
  t.same(headers.map((h) => h.split(':')[0]).sort(), [...names].sort(), 'every CRD has its summary, once')
  t.ok(
    out.writes.every(
      (w) =>
        w.endsWith('\n') &&
        /^\S+: Succeeded in /.test(w) &&
        w
          .split('\n')
          .slice(1, -1)
          .every((l) => l.startsWith('  ')),
    ),
    'every summary is whole: its header, then its own indented lines',
  )

  const intervals: Array<[number, number]> = []
  let verified = 0
  for (const f of fleet) {
    const crd = await getCrd(http, f.name)
    const a = crd.metadata.annotations ?? {}
    const ok =
      !(DEFAULT_MIGRATING_ANNOTATION in a) &&
      a[StateAnnotation.lastResult] === 'Succeeded' &&
      JSON.stringify(crd.status?.storedVersions) === '["v2"]'
    if (!ok) t.fail(`${f.name}: unfrozen, Succeeded, storedVersions [v2]`, { annotations: a, storedVersions: crd.status?.storedVersions })
    const etcd = Object.fromEntries(await storedVersionsInEtcd(cp, f.group, 'widgets'))
    if (JSON.stringify(etcd) !== JSON.stringify({ [`${f.group}/v2`]: OBJECTS }))
      t.fail(`${f.name}: etcd holds every object at v2`, { etcd })
    else if (ok) verified++
    const end = Date.parse(a[StateAnnotation.finishedAt]!)
    const seconds = Number.parseFloat(a[StateAnnotation.lastDuration]!)
    intervals.push([end - seconds * 1000, end])
  }
  t.equal(verified, CRDS, `all ${CRDS} CRDs: freeze lifted, storedVersions [v2], ${OBJECTS} objects at v2 in etcd`)
  const overlap = maxOverlap(intervals)
  t.ok(overlap >= 2, `the runs overlapped: up to ${overlap} CRDs in flight at once (from their finished-at and last-duration)`)
  t.comment(
    `most CRDs in flight at once, from their annotations (0.1 s durations, measured from before the freeze): ${overlap}; cap ${PARALLEL}`,
  )

  // Run again, as after a restart mid-fleet: nothing is redone.
  const again = collector()
  const code2 = await runMigrateCommand(names, config, logger, { dryRun: false, out: again.stream, format: 'json' })
  t.equal(code2, 0)
  const results = JSON.parse(again.writes.join('')) as Array<{ crd: string; outcome: string; skipReason?: string }>
  t.same(
    results.map((r) => r.crd),
    names,
    '-o json lists the results in the order the CRDs were named',
  )
  t.ok(
    results.every((r) => r.outcome === 'Skipped' && r.skipReason === 'up-to-date'),
    'a second migrate skips every CRD as up to date',
    { results: results.filter((r) => r.skipReason !== 'up-to-date') },
  )
})
