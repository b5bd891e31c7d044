/**
 * A second signal while `migrate` lifts its freeze (issue #36 item 2): it says the CRD may
 * stay frozen and how to lift it by hand, and still waits for the unfreeze (the third would
 * not: test/unit/cli-progress.test.ts). SIGINT then SIGTERM, sent back to back: two
 * different signals are both delivered (a second SIGINT may merge with a pending first),
 * in either order, and the second is handled before the run, which must still end its writes and patch the
 * CRD, can be done.
 */
import t from 'tap'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { getCrd } from '../../src/kube/crds.js'
import { CliRun } from '../helpers/cli-run.js'
import { httpFor } from '../helpers/cluster.js'
import { getControlPlane } from '../helpers/controlplane.js'
import { crdWithObjects } from '../helpers/fixtures.js'

const N = 1000
const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')

t.test('a second signal while the freeze is being lifted: a warning, and the unfreeze still happens', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const { name } = await crdWithObjects(http, { prefix: 'interrupt2', count: N })
  const run = new CliRun(['migrate', name, '--kubeconfig', cp.kubeconfigPath, '--progress-every', '1', '--qps', '100'])
  const progress = new RegExp(`^${escape(name)}: StorageVersionMigration (\\d+)/${N} `)
  await run.waitFor(
    () => run.stderrLines.find((l) => Number(progress.exec(l.text)?.[1] ?? 0) >= 50),
    'progress with 50 objects done',
    90_000,
  )
  run.child.kill('SIGINT')
  run.child.kill('SIGTERM')
  const exit = await run.exited
  const stderr = run.stderr
  // The two are sent back to back; which one node handles first is not ours to decide.
  const first = /crd-migrator: interrupted \((SIGINT|SIGTERM)\): /.exec(stderr)?.[1]
  t.ok(first, 'a first signal was handled')
  const second = first === 'SIGINT' ? 'SIGTERM' : 'SIGINT'
  t.match(stderr, `crd-migrator: interrupted (${first}): stopping writes, lifting the freeze of ${name}…\n`, 'the first: what it does')
  t.match(
    stderr,
    new RegExp(
      `crd-migrator: interrupted again \\(${second}\\): still lifting the freeze of ${escape(name)}\\. Interrupt once more to exit at once: the CRD may then stay frozen.*\\n  kubectl annotate crd ${escape(name)} ${escape(DEFAULT_MIGRATING_ANNOTATION)}-\\n`,
    ),
    'the second: the CRD may stay frozen, and the command that lifts it by hand',
  )
  t.match(
    stderr,
    new RegExp(`${escape(name)}: stopped in StorageVersionMigration at \\d+ of ${N} objects after \\S+; freeze lifted\\n`),
    'it still waited for the unfreeze',
  )
  t.equal(exit.code, first === 'SIGINT' ? 130 : 143, "exit 128 + the first signal's number")
  t.notMatch(stderr, /^\s+at .+:\d+:\d+\)?$/m, 'no stack trace')
  t.notOk(DEFAULT_MIGRATING_ANNOTATION in ((await getCrd(http, name)).metadata.annotations ?? {}), 'the CRD is not frozen')
})
