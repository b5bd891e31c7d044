/**
 * The webhook goes down in the middle of a migration. With failurePolicy: Fail every
 * update of the frozen CRD that reaches the webhook is refused, so before the
 * `not-the-migrator` matchCondition the migrator's own progress writes and, worse, its
 * final unfreeze were refused too, leaving the CRD frozen while nobody could lift it. Now
 * the API server does not send the migrator's requests to the webhook: the migration
 * finishes and unfreezes, while an operator is still refused (storage flip and unfreeze).
 *
 * (Webhook down with unannotated CRDs staying editable: migrate-storage.test.ts.)
 */
import { pino } from 'pino'
import t from 'tap'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { StateAnnotation } from '../../src/state/crd-state.js'
import { getCrd } from '../../src/kube/crds.js'
import { ContentType } from '../../src/kube/http.js'
import { crdPath } from '../../src/kube/paths.js'
import { migrateCrd } from '../../src/migrator/migrate.js'
import { settled as done } from '../../src/migrator/engine/walker.js'
import { crdEditor, defaultSettings, httpFor, setStorageVersionAs, startTestWebhook } from '../helpers/cluster.js'
import { getControlPlane, uniqueName } from '../helpers/controlplane.js'
import { countVersions, etcdVersionsByKey, migratorIdentity } from '../helpers/faults.js'
import { crdWithObjects } from '../helpers/fixtures.js'
import { until } from '../helpers/until.js'

t.test('webhook down mid-migration: the migrator still writes progress and lifts its freeze; operators stay refused', async (t) => {
  const cp = await getControlPlane()
  const admin = httpFor(cp.kubeconfigPath)
  const scope = uniqueName('wdown')
  const migratorName = `crd-migrator-test-${scope}`
  const webhook = await startTestWebhook(cp, scope, { migratorUsers: [migratorName] })
  const operator = await crdEditor(cp, scope)
  const N = 400
  const { group, crd } = await crdWithObjects(admin, { prefix: 'wdown', count: N, labels: webhook.labels })
  const { http } = await migratorIdentity(cp, migratorName, group)
  t.teardown(() => http.close())
  const name = crd.metadata.name

  let outage:
    | Promise<{
        progressAfterStop: string | undefined
        doneAtStop: number
        unfreeze: { status: number; body: string }
        flip: { status: number; body: string }
        frozen: boolean
      }>
    | undefined
  const result = await migrateCrd(name, defaultSettings({ concurrency: 4, qps: 100, progressIntervalMs: 200 }), {
    http,
    logger: pino({ level: 'silent' }),
    owner: 'faults-webhook-down',
    onProgress: (_phase, p) => {
      if (outage || done(p) < 100) return
      const doneAtStop = done(p)
      outage = (async () => {
        await webhook.stopServer()
        const now = await getCrd(admin, name)
        const unfreeze = await cp.apiRequest(crdPath(name), {
          method: 'PATCH',
          as: operator,
          contentType: ContentType.mergePatch,
          body: { metadata: { annotations: { [DEFAULT_MIGRATING_ANNOTATION]: null } } },
        })
        const flip = await setStorageVersionAs(cp, operator, now, 'v1')
        // Progress goes on being written with the webhook down (the run takes 3 s more at 100 qps).
        const before = now.metadata.annotations?.[StateAnnotation.progress]
        // Not there in time: undefined, and the assertion on it below says what is missing.
        const progressAfterStop = await until(
          'a new progress annotation after the webhook went down',
          10_000,
          async () => (await getCrd(admin, name)).metadata.annotations?.[StateAnnotation.progress],
          (p) => p !== undefined && p !== before,
        ).catch(() => undefined)
        return {
          progressAfterStop,
          doneAtStop,
          unfreeze: { status: unfreeze.status, body: unfreeze.body },
          flip,
          frozen: now.metadata.annotations?.[DEFAULT_MIGRATING_ANNOTATION] === 'true',
        }
      })()
    },
  })
  t.ok(outage, 'the webhook was stopped during the run')
  const o = await outage!
  t.ok(o.doneAtStop < N, `mid-run (after ${o.doneAtStop} of ${N} objects)`)
  t.equal(o.frozen, true, 'the CRD was frozen when the webhook went down')
  t.equal(o.unfreeze.status, 500, 'an operator cannot lift the freeze while the webhook is down')
  t.match(o.unfreeze.body, /failed calling webhook/)
  t.equal(o.flip.status, 500, 'nor move storage')

  t.equal(result.outcome, 'Succeeded', result.reason)
  t.equal(result.leftFrozen, false, 'the migrator lifted its own freeze with the webhook down')
  const after = await getCrd(admin, name)
  const a = after.metadata.annotations ?? {}
  t.notOk(DEFAULT_MIGRATING_ANNOTATION in a, 'the migrating annotation is gone')
  t.equal(a[StateAnnotation.lastResult], 'Succeeded')
  t.match((await outage)?.progressAfterStop, /^\d+\/(400|\?)$/, 'progress was still written after the webhook went down')
  // A success leaves only the compact record (no progress): the counts say every object was written.
  t.match(a[StateAnnotation.lastCounts], new RegExp(`rewritten=${N} `), 'and its record at the end')
  t.same(after.status?.storedVersions, ['v2'])
  t.equal(after.spec.versions.find((v) => v.storage)?.name, 'v2', 'storage never moved')
  t.same(countVersions(await etcdVersionsByKey(cp, group, 'widgets')), { [`${group}/v2`]: N })

  const label = await cp.apiRequest(crdPath(name), {
    method: 'PATCH',
    as: operator,
    contentType: ContentType.mergePatch,
    body: { metadata: { labels: { touched: 'yes' } } },
  })
  t.equal(label.status, 200, 'once unfrozen the CRD is editable again, webhook or not')
})
