/**
 * Ctrl-C during a real `migrate` of thousands of objects (issue #36 item 2): the CLI says at
 * once what it does, stops, lifts the freeze (read from the CRD), says how far the CRD got
 * and how to resume, exits 130 without a stack trace, and leaves last-counts with the real
 * counts. Run again, it completes, and what the first run rewrote stays done.
 */
import t from 'tap'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { getCrd } from '../../src/kube/crds.js'
import { StateAnnotation } from '../../src/state/crd-state.js'
import { CliRun } from '../helpers/cli-run.js'
import { httpFor, storedVersionsInEtcd } from '../helpers/cluster.js'
import { getControlPlane } from '../helpers/controlplane.js'
import { crdWithObjects } from '../helpers/fixtures.js'

const N = 2000
const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')

t.test(`SIGINT to migrate at a few hundred of ${N} objects, then migrate again`, async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const { name, group } = await crdWithObjects(http, { prefix: 'interrupt', count: N })
  const migrate = () =>
    new CliRun([
      'migrate',
      name,
      '--kubeconfig',
      cp.kubeconfigPath,
      '--progress-every',
      '1',
      '--progress-interval-seconds',
      '1',
      // Paced: thousands of objects take long enough to be interrupted mid-way on any machine.
      '--qps',
      '100',
    ])

  const run = migrate()
  const progress = new RegExp(`^${escape(name)}: StorageVersionMigration (\\d+)/${N} `)
  await run.waitFor(
    () => run.stderrLines.find((l) => Number(progress.exec(l.text)?.[1] ?? 0) >= 200),
    'progress with 200 objects done',
    90_000,
  )
  const frozenMidRun = (await getCrd(http, name)).metadata.annotations?.[DEFAULT_MIGRATING_ANNOTATION]
  t.equal(frozenMidRun, 'true', 'the CRD is frozen mid-run')
  run.child.kill('SIGINT')
  const exit = await run.exited
  const stderr = run.stderr
  const said = (re: RegExp) => run.stderrLines.find((l) => re.test(l.text))

  const notice = said(new RegExp(`^crd-migrator: interrupted \\(SIGINT\\): stopping writes, lifting the freeze of ${escape(name)}…$`))
  const howFar = new RegExp(`^${escape(name)}: stopped in StorageVersionMigration at (\\d+) of ${N} objects after \\S+; freeze lifted$`)
  const stopped = said(howFar)
  t.ok(notice, 'at once: what it is doing', { stderr })
  t.ok(stopped, 'then how far the CRD got, and that its freeze is lifted', { stderr })
  t.ok(notice && stopped && notice.at <= stopped.at, 'the notice comes first')
  const doneAtStop = Number(howFar.exec(stopped?.text ?? '')?.[1])
  t.ok(doneAtStop >= 200 && doneAtStop < N, `stopped mid-way (${doneAtStop} of ${N})`)
  t.match(stderr, new RegExp(`run \`crd-migrator migrate ${escape(name)}\` again \\(with the same flags\\) to resume`), 'and how to resume')
  t.equal(exit.code, 130, 'exit 130', { stderr, stdout: run.stdout })
  t.notMatch(`${stderr}\n${run.stdout}`, /^\s+at .+:\d+:\d+\)?$/m, 'no stack trace')
  t.notMatch(stderr, /ERROR|Error: /, 'no error log line')
  t.match(
    run.stdout,
    new RegExp(`${escape(name)}: Failed \\(CRDM_ABORTED\\) in \\S+ — interrupted by SIGINT`),
    'the summary says it was interrupted',
  )

  const a = (await getCrd(http, name)).metadata.annotations ?? {}
  t.notOk(DEFAULT_MIGRATING_ANNOTATION in a, 'the freeze is lifted on the CRD')
  t.match(a[StateAnnotation.lastResult], /CRDM_ABORTED/, 'last-result says it was stopped')
  const counts = /^rewritten=(\d+) alreadyCurrent=(\d+) /.exec(a[StateAnnotation.lastCounts] ?? '')
  t.ok(counts, 'last-counts holds the counts', { lastCounts: a[StateAnnotation.lastCounts] })
  t.equal(Number(counts?.[1]) + Number(counts?.[2]), doneAtStop, 'the same counts as printed')

  const again = migrate()
  const exit2 = await again.exited
  t.equal(exit2.code, 0, 'run again: it completes', { stderr: again.stderr })
  t.match(again.stdout, new RegExp(`${escape(name)}: Succeeded`))
  // The freeze (and its checkpoint) went with the stop: the objects the first run rewrote are no-op writes now.
  const current = new RegExp(`(\\d+) of ${N} object\\(s\\) rewritten in v2, (\\d+) already current`).exec(again.stdout)
  t.ok(current && Number(current[2]) >= Number(counts?.[1]), 'what the first run rewrote stays done (already current)', {
    stdout: again.stdout,
    first: counts?.[0],
  })
  t.same((await getCrd(http, name)).status?.storedVersions, ['v2'])
  t.same(Object.fromEntries(await storedVersionsInEtcd(cp, group, 'widgets')), { [`${group}/v2`]: N }, 'every object at v2 in etcd')
})
