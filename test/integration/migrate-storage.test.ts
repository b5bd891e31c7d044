import t from 'tap'
import { pino } from 'pino'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { StateAnnotation } from '../../src/state/crd-state.js'
import { getCrd } from '../../src/kube/crds.js'
import { ContentType } from '../../src/kube/http.js'
import { crdPath } from '../../src/kube/paths.js'
import { migrateCrd } from '../../src/migrator/migrate.js'
import { settled as done } from '../../src/migrator/engine/walker.js'
import {
  createCrd,
  createObjects,
  crdEditor,
  crdManifest,
  defaultSettings,
  httpFor,
  refFor,
  setStorageVersion,
  setStorageVersionAs,
  startTestWebhook,
  storedVersionsInEtcd,
} from '../helpers/cluster.js'
import { getControlPlane, uniqueGroup, uniqueName } from '../helpers/controlplane.js'
import { crdWithObjects } from '../helpers/fixtures.js'

const logger = pino({ level: 'silent' })

t.test('2,000 namespaced objects move from v1 to v2 under the freeze, and storedVersions narrows', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const scope = uniqueName('svm')
  const webhook = await startTestWebhook(cp, scope)
  const operator = await crdEditor(cp, scope)
  const { group, crd } = await crdWithObjects(http, { prefix: 'svm', count: 2000, namespaces: 4, labels: webhook.labels, flipTo: false })
  t.same(
    Object.fromEntries(await storedVersionsInEtcd(cp, group, 'widgets')),
    { [`${group}/v1`]: 2000 },
    'etcd holds every object at v1 before',
  )

  const flipped = await setStorageVersion(http, crd.metadata.name, 'v2')
  t.same(flipped.status?.storedVersions, ['v1', 'v2'], 'the API server itself lists both versions after the flip')

  // Mid-run: the freeze must be on, and a storage flip back to v1 refused by our webhook.
  let midRun: Promise<{ frozen: boolean; refusal: string | undefined }> | undefined
  const result = await migrateCrd(crd.metadata.name, defaultSettings({ concurrency: 8, qps: 500 }), {
    http,
    logger,
    owner: 'test-owner',
    onProgress: (_phase, p) => {
      if (midRun || done(p) < 300) return
      midRun = (async () => {
        const now = await getCrd(http, crd.metadata.name)
        const flip = await setStorageVersionAs(cp, operator, now, 'v1')
        return {
          frozen: now.metadata.annotations?.[DEFAULT_MIGRATING_ANNOTATION] === 'true',
          refusal: flip.status >= 400 ? flip.body : undefined,
        }
      })()
    },
  })
  t.ok(midRun, 'progress was reported during the run')
  const seen = await midRun!
  t.equal(seen.frozen, true, 'the migrating annotation was present during the run')
  t.match(seen.refusal, /storage/i, 'a storage flip during the run was refused')
  t.match(seen.refusal, crd.metadata.name, 'the refusal names the CRD')

  t.equal(result.outcome, 'Succeeded', result.reason)
  t.comment(`migrated 2,000 objects (concurrency 8, qps 500) in ${(result.durationMs / 1000).toFixed(1)} s, freeze to unfreeze`)
  t.equal(result.storage?.counts.seen, 2000)
  t.equal(result.storage?.counts.failed, 0)
  t.equal(result.storage!.counts.rewritten + result.storage!.counts.conflict, 2000, 'every object was written anew')

  const after = await getCrd(http, crd.metadata.name)
  t.same(after.status?.storedVersions, ['v2'], 'status.storedVersions is [v2]')
  t.equal(after.spec.versions.find((v) => v.storage)?.name, 'v2', 'storage stayed v2')
  const a = after.metadata.annotations ?? {}
  t.notOk(DEFAULT_MIGRATING_ANNOTATION in a, 'the freeze is gone')
  t.equal(a[StateAnnotation.lastResult], 'Succeeded')
  t.equal(a[StateAnnotation.observedGeneration], String(after.metadata.generation))
  t.match(a[StateAnnotation.lastCounts], /^rewritten=2000 /, 'the compact record counts every object')
  t.strictSame(
    Object.keys(a)
      .filter((k) => k.startsWith('crd-migrator.io/'))
      .sort(),
    [
      StateAnnotation.finishedAt,
      StateAnnotation.lastCounts,
      StateAnnotation.lastDuration,
      StateAnnotation.lastResult,
      StateAnnotation.observedGeneration,
    ].sort(),
    'after a success only the compact record stays on the CRD',
  )
  t.same(
    Object.fromEntries(await storedVersionsInEtcd(cp, group, 'widgets')),
    { [`${group}/v2`]: 2000 },
    'etcd holds every object at v2 after',
  )

  const again = await migrateCrd(crd.metadata.name, defaultSettings(), { http, logger, owner: 'test-owner' })
  t.equal(again.outcome, 'Skipped', 'a second run has nothing to do')
  t.match(again.reason, /nothing to do/)
})

t.test('a cluster-scoped CRD migrates too', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const group = uniqueGroup('cluster')
  const crd = await createCrd(
    http,
    crdManifest({ group, versions: ['v1', 'v2'], storage: 'v1', scope: 'Cluster', plural: 'gadgets', kind: 'Gadget' }),
  )
  await createObjects(http, refFor(crd, 'v1'), [undefined], 120)
  await setStorageVersion(http, crd.metadata.name, 'v2')
  const result = await migrateCrd(crd.metadata.name, defaultSettings(), { http, logger, owner: 'test-owner' })
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.same((await getCrd(http, crd.metadata.name)).status?.storedVersions, ['v2'])
  t.same(Object.fromEntries(await storedVersionsInEtcd(cp, group, 'gadgets')), { [`${group}/v2`]: 120 })
})

t.test('three versions: objects stored at v1alpha1 and v1beta1 all end at v1', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const { group, ns, crd } = await crdWithObjects(http, {
    prefix: 'three',
    count: 60,
    versions: ['v1alpha1', 'v1beta1', 'v1'],
    flipTo: 'v1beta1',
  })
  await createObjects(http, refFor(crd, 'v1beta1'), [ns], 40, (i) => ({ spec: { index: 1000 + i } }), 'beta')
  const before = await storedVersionsInEtcd(cp, group, 'widgets')
  t.same(Object.fromEntries(before), { [`${group}/v1alpha1`]: 60, [`${group}/v1beta1`]: 40 }, 'objects are stored at both old versions')
  await setStorageVersion(http, crd.metadata.name, 'v1')
  t.same((await getCrd(http, crd.metadata.name)).status?.storedVersions, ['v1alpha1', 'v1beta1', 'v1'])
  const result = await migrateCrd(crd.metadata.name, defaultSettings(), { http, logger, owner: 'test-owner' })
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.same((await getCrd(http, crd.metadata.name)).status?.storedVersions, ['v1'])
  const after = await storedVersionsInEtcd(cp, group, 'widgets')
  t.same([...after.keys()], [`${group}/v1`], 'no object is left at an old version')
})

t.test('the freeze is refused to users who are neither the migrator nor break-glass', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const scope = uniqueName('guard')
  const webhook = await startTestWebhook(cp, scope, { migratorUsers: ['migrator'] })
  const crd = await createCrd(
    http,
    crdManifest({ group: uniqueGroup('guard'), versions: ['v1', 'v2'], storage: 'v1', labels: webhook.labels }),
  )
  const alice = await crdEditor(cp, scope, 'alice')
  const migrator = await crdEditor(cp, scope, 'migrator')
  const annotate = (as: { certPem: string; keyPem: string }, value: string | null) =>
    cp.apiRequest(crdPath(crd.metadata.name), {
      method: 'PATCH',
      as,
      contentType: ContentType.mergePatch,
      body: { metadata: { annotations: { [DEFAULT_MIGRATING_ANNOTATION]: value } } },
    })
  let res = await annotate(migrator, 'true')
  t.equal(res.status, 200, 'the migrator identity may freeze')
  res = await annotate(alice, null)
  t.equal(res.status, 403, 'alice may not lift the freeze')
  t.match(res.body, /migrat/i, 'and is told why')
  res = await annotate(migrator, null)
  t.equal(res.status, 200, 'the migrator identity may lift it')
})

t.test('with the webhook down, unannotated CRDs stay editable and frozen ones are refused', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const scope = uniqueName('down')
  const webhook = await startTestWebhook(cp, scope)
  const operator = await crdEditor(cp, scope)
  const free = await createCrd(
    http,
    crdManifest({ group: uniqueGroup('free'), versions: ['v1', 'v2'], storage: 'v1', labels: webhook.labels }),
  )
  const frozenManifest = crdManifest({ group: uniqueGroup('frozen'), versions: ['v1', 'v2'], storage: 'v1', labels: webhook.labels })
  frozenManifest.metadata.annotations = { [DEFAULT_MIGRATING_ANNOTATION]: 'true' }
  const frozen = await createCrd(http, frozenManifest)
  await webhook.stopServer()

  const freeFlip = await setStorageVersionAs(cp, operator, free, 'v2')
  t.equal(freeFlip.status, 200, 'an unannotated CRD is not sent to the webhook (matchConditions), so it stays editable')
  t.same(
    (await getCrd(http, free.metadata.name)).status?.storedVersions,
    ['v1', 'v2'],
    'and the API server lists both versions in storedVersions',
  )
  const frozenFlip = await setStorageVersionAs(cp, operator, frozen, 'v2')
  t.equal(frozenFlip.status, 500, 'a frozen CRD is refused while the webhook cannot answer (failurePolicy: Fail)')
  t.match(frozenFlip.body, /failed calling webhook/)
  const label = await cp.apiRequest(crdPath(frozen.metadata.name), {
    method: 'PATCH',
    as: operator,
    contentType: ContentType.mergePatch,
    body: { metadata: { labels: { touched: 'yes' } } },
  })
  t.equal(label.status, 500, 'any edit of a frozen CRD is refused then, not only storage ones')
})
