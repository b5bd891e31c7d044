/**
 * A controller restarted mid-fleet (issue #29, item 1): the controller migrating 50
 * labelled CRDs, 4 at once, is stopped after some have finished, and a new one (another
 * replica) takes over. It keeps no record of the first one's work (upToDate lives in
 * memory on purpose), so "not redone" has to come from the API server: storedVersions
 * already [storage] and no managedFields entry to clean. Proven on the objects
 * themselves: the resourceVersions of a finished CRD's objects do not move, and the new
 * controller reports those CRDs skipped as up to date. The rest finish: storedVersions
 * [v2], etcd holds no v1 object, every freeze lifted.
 */
import t from 'tap'
import { pino } from 'pino'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { ConfigSchema } from '../../src/config/schema.js'
import { MigrationController } from '../../src/controller/controller.js'
import { getCrd } from '../../src/kube/crds.js'
import type { KubeHttp } from '../../src/kube/http.js'
import type { MigrationResult } from '../../src/migrator/migrate.js'
import { runInParallel } from '../../src/migrator/parallel.js'
import { StateAnnotation } from '../../src/state/crd-state.js'
import { httpFor, storedVersionsInEtcd } from '../helpers/cluster.js'
import { getControlPlane, uniqueName } from '../helpers/controlplane.js'
import { crdWithObjects, type CrdWithObjects } from '../helpers/fixtures.js'
import { until, Watermark } from '../helpers/until.js'

const logger = pino({ level: 'silent' })
const CRDS = 50
const OBJECTS = 20
const PARALLEL = 4
/** Succeeded CRDs after which the first controller is stopped: well before the end. */
const STOP_AFTER = 12

/** name -> resourceVersion of every object of a CRD, read through the API at v2. */
async function objectVersions(http: KubeHttp, f: CrdWithObjects): Promise<Record<string, string>> {
  const list = (
    await http.request<{ items: Array<{ metadata: { name: string; resourceVersion: string } }> }>({
      method: 'GET',
      path: `/apis/${f.group}/v2/namespaces/${f.ns}/widgets`,
    })
  ).body
  return Object.fromEntries(list.items.map((o) => [o.metadata.name, o.metadata.resourceVersion]))
}

t.test(`a controller restarted mid-fleet (${CRDS} CRDs, ${PARALLEL} at once) redoes nothing finished`, async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const label = { 'crd-migrator-test/fleet': uniqueName('restart') }
  const fleet = await runInParallel(
    Array.from({ length: CRDS }, (_, i) => i),
    6,
    () => crdWithObjects(http, { prefix: 'restart', count: OBJECTS, labels: label }),
  )
  const byName = new Map(fleet.map((f) => [f.name, f]))
  const config = ConfigSchema.parse({
    kubeconfig: cp.kubeconfigPath,
    migrator: {
      selector: { labelSelector: Object.entries(label).map(([k, v]) => `${k}=${v}`)[0] },
      maxParallelCrds: PARALLEL,
      takeoverAfterSeconds: 1,
    },
  })

  // The first controller, stopped once STOP_AFTER CRDs have succeeded.
  const first: MigrationResult[] = []
  const succeeded = new Watermark()
  const stop1 = new AbortController()
  const controller1 = new MigrationController({
    http,
    config,
    logger,
    owner: 'replica-a',
    onResult: (r) => {
      first.push(r)
      if (r.outcome === 'Succeeded') succeeded.add(1)
    },
  })
  const running1 = controller1.run(stop1.signal)
  t.teardown(() => {
    stop1.abort()
    return running1
  })
  await succeeded.reached(STOP_AFTER)
  stop1.abort(new Error('replica-a shutting down'))
  await running1

  const finished = first.filter((r) => r.outcome === 'Succeeded').map((r) => r.crd)
  t.ok(finished.length >= STOP_AFTER && finished.length < CRDS, `stopped mid-fleet: ${finished.length} of ${CRDS} CRDs finished`)
  const interrupted = first.filter((r) => r.outcome !== 'Succeeded')
  t.comment(`interrupted in flight: ${interrupted.map((r) => `${r.crd} ${r.outcome} ${r.errorCode ?? ''}`).join(', ') || 'none'}`)
  const before = new Map<string, { objects: Record<string, string>; finishedAt: string | undefined }>()
  for (const name of finished) {
    const crd = await getCrd(http, name)
    if (JSON.stringify(crd.status?.storedVersions) !== '["v2"]')
      t.fail(`${name}: finished by replica-a`, { storedVersions: crd.status?.storedVersions })
    before.set(name, {
      objects: await objectVersions(http, byName.get(name)!),
      finishedAt: crd.metadata.annotations?.[StateAnnotation.finishedAt],
    })
  }

  // A new controller: another replica, knowing nothing of the first one's work.
  const second = new Map<string, MigrationResult[]>()
  const stop2 = new AbortController()
  const controller2 = new MigrationController({
    http,
    config,
    logger,
    owner: 'replica-b',
    onResult: (r) => second.set(r.crd, [...(second.get(r.crd) ?? []), r]),
  })
  const running2 = controller2.run(stop2.signal)
  t.teardown(() => {
    stop2.abort()
    return running2
  })
  const done = await until(
    `all ${CRDS} CRDs migrated, unfrozen`,
    300_000,
    async () => Promise.all(fleet.map((f) => getCrd(http, f.name))),
    (crds) =>
      crds.every(
        (c) =>
          JSON.stringify(c.status?.storedVersions) === '["v2"]' &&
          !(DEFAULT_MIGRATING_ANNOTATION in (c.metadata.annotations ?? {})) &&
          second.has(c.metadata.name),
      ),
    { everyMs: 500 },
  )
  stop2.abort()
  await running2
  t.equal(done.length, CRDS, `all ${CRDS} CRDs read back`)

  // Finished CRDs: looked at once, skipped on the API server's evidence, no object written.
  let untouched = 0
  for (const name of finished) {
    const results = second.get(name) ?? []
    const now = await objectVersions(http, byName.get(name)!)
    const crd = await getCrd(http, name)
    const was = before.get(name)!
    const ok =
      results.every((r) => r.outcome === 'Skipped' && r.skipReason === 'up-to-date') &&
      JSON.stringify(now) === JSON.stringify(was.objects) &&
      crd.metadata.annotations?.[StateAnnotation.finishedAt] === was.finishedAt
    if (ok) untouched++
    else t.fail(`${name}: not redone`, { results: results.map((r) => [r.outcome, r.skipReason, r.reason]), was, now })
  }
  t.equal(
    untouched,
    finished.length,
    `the ${finished.length} finished CRDs were skipped as up to date, every object's resourceVersion unchanged`,
  )

  // The rest were migrated by the new controller. One replica-a was stopped in may have
  // narrowed storedVersions before the stop reached it (in its cleanup, or its unfreeze):
  // then it needs nothing, and replica-b finds that out the same way, up to date.
  const stoppedLate = new Set(interrupted.map((r) => r.crd))
  const rest = fleet.filter((f) => !before.has(f.name))
  const migratedOrDone = (name: string) =>
    (second.get(name) ?? []).some(
      (r) => r.outcome === 'Succeeded' || (stoppedLate.has(name) && r.outcome === 'Skipped' && r.skipReason === 'up-to-date'),
    )
  t.ok(
    rest.every((f) => migratedOrDone(f.name)),
    `the other ${rest.length} CRDs were migrated by replica-b (or, stopped late in replica-a, found up to date)`,
    { results: rest.map((f) => [f.name, (second.get(f.name) ?? []).map((r) => r.outcome)]) },
  )

  // Storage: every object of every CRD at v2 in etcd, every freeze lifted.
  let stored = 0
  for (const f of fleet) {
    const etcd = Object.fromEntries(await storedVersionsInEtcd(cp, f.group, 'widgets'))
    if (JSON.stringify(etcd) === JSON.stringify({ [`${f.group}/v2`]: OBJECTS })) stored++
    else t.fail(`${f.name}: etcd holds every object at v2`, { etcd })
  }
  t.equal(stored, CRDS, `etcd: all ${CRDS * OBJECTS} objects at v2, none at v1`)
  t.ok(
    done.every(
      (c) => !Object.keys(c.metadata.annotations ?? {}).some((k) => k === DEFAULT_MIGRATING_ANNOTATION || k === StateAnnotation.owner),
    ),
    'no freeze annotation (nor owner) left on any CRD',
  )
})
