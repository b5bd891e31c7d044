import t from 'tap'
import { pino } from 'pino'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { StateAnnotation } from '../../src/state/crd-state.js'
import { getCrd } from '../../src/kube/crds.js'
import { ContentType } from '../../src/kube/http.js'
import { isNotFound } from '../../src/kube/api-errors.js'
import { collectionPath, objectPath } from '../../src/kube/paths.js'
import type { PartialObjectMetadataList } from '../../src/kube/types.js'
import { dryRun } from '../../src/migrator/dry-run.js'
import { migrateCrd } from '../../src/migrator/migrate.js'
import { settled as done } from '../../src/migrator/engine/walker.js'
import { withRetry } from '../../src/migrator/engine/retry.js'
import { defaultSettings, httpFor, refFor, setStorageVersion, storedVersionsInEtcd } from '../helpers/cluster.js'
import { getControlPlane } from '../helpers/controlplane.js'
import { crdWithObjects } from '../helpers/fixtures.js'
import { until, Watermark } from '../helpers/until.js'

const logger = pino({ level: 'silent' })

async function resourceVersions(http: ReturnType<typeof httpFor>, ref: ReturnType<typeof refFor>): Promise<Map<string, string>> {
  const list = (
    await withRetry(() => http.request<PartialObjectMetadataList>({ method: 'GET', path: collectionPath(ref) }), { maxAttempts: 10 })
  ).body
  return new Map(list.items.map((i) => [`${i.metadata.namespace}/${i.metadata.name}`, i.metadata.resourceVersion!]))
}

t.test('dry run reports the work and writes nothing', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const { group, crd } = await crdWithObjects(http, { prefix: 'dry', count: 50 })
  const before = await resourceVersions(http, refFor(crd, 'v2'))
  const crdBefore = await getCrd(http, crd.metadata.name)
  const report = await dryRun(http, crd.metadata.name, defaultSettings(), logger)
  t.equal(report.objectsToRewrite, 50)
  t.same(report.storedVersions, ['v1', 'v2'])
  t.same(report.storedVersionsAfter, ['v2'])
  t.same(await resourceVersions(http, refFor(crd, 'v2')), before, 'no object changed')
  const crdAfter = await getCrd(http, crd.metadata.name)
  t.equal(crdAfter.metadata.resourceVersion, crdBefore.metadata.resourceVersion, 'the CRD did not change')
  t.same(Object.fromEntries(await storedVersionsInEtcd(cp, group, 'widgets')), { [`${group}/v1`]: 50 }, 'etcd still holds v1')
})

t.test('concurrent writers and deleters: every user write survives, deleted objects are no error', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const { group, ns, crd, ids } = await crdWithObjects(http, { prefix: 'busy', count: 800 })
  const v1 = refFor(crd, 'v1')

  const lastWritten = new Map<string, number>()
  const deleted = new Set<string>()
  let stop = false
  // Objects the migration has settled: the writer and the deleter start once it is under
  // way, and the deleter spreads its deletes over the walk (one per 5 objects settled), up
  // to the end of the run.
  const settledObjects = new Watermark()
  const started = settledObjects.reached(21)
  const writer = (async () => {
    await started
    for (let round = 1; !stop; round++) {
      const id = ids[(round * 37) % ids.length]!
      if (deleted.has(id.name)) continue
      // Writes go through v1 on purpose: the old version is still served, and users keep using it.
      await http.request({
        method: 'PATCH',
        path: objectPath(v1, ns, id.name),
        contentType: ContentType.mergePatch,
        body: { spec: { counter: round } },
      })
      lastWritten.set(id.name, round)
    }
  })()
  const deleter = (async () => {
    await started
    for (let i = 0; i < 40 && !stop; i++) {
      const id = ids[ids.length - 1 - i * 3]!
      deleted.add(id.name)
      await http.request({ method: 'DELETE', path: objectPath(v1, ns, id.name) }).catch((err) => {
        if (!isNotFound(err)) throw err
      })
      await settledObjects.reached(settledObjects.value + 5)
    }
  })()
  const result = await migrateCrd(crd.metadata.name, defaultSettings({ concurrency: 4, qps: 300 }), {
    http,
    logger,
    owner: 'test-owner',
    onProgress: (_phase, p) => settledObjects.set(Math.max(settledObjects.value, done(p))),
  })
  stop = true
  settledObjects.set(Number.POSITIVE_INFINITY) // the run is over: nothing more to wait for
  await Promise.all([writer, deleter])
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.equal(result.storage?.counts.failed, 0, 'no object failed')
  t.ok(lastWritten.size > 10, `writers really wrote during the run (${lastWritten.size} objects)`)
  const list = (
    await http.request<{ items: { metadata: { name: string }; spec: { counter?: number } }[] }>({
      method: 'GET',
      path: collectionPath(refFor(crd, 'v2')),
    })
  ).body
  const byName = new Map(list.items.map((i) => [i.metadata.name, i.spec.counter]))
  let lost = 0
  for (const [name, value] of lastWritten) if (!deleted.has(name) && byName.get(name) !== value) lost++
  t.equal(lost, 0, 'every last user write is what the object holds')
  for (const name of deleted) t.notOk(byName.has(name), `${name} stays deleted`)
  t.equal(list.items.length, 800 - deleted.size)
  t.same([...(await storedVersionsInEtcd(cp, group, 'widgets')).keys()], [`${group}/v2`], 'etcd holds only v2')
})

t.test('an object whose write is refused fails the migration: storedVersions untouched, freeze lifted', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const { group, ns, crd } = await crdWithObjects(http, { prefix: 'refuse', count: 30, flipTo: false })
  const v1 = refFor(crd, 'v1')
  await http.request({
    method: 'PATCH',
    path: objectPath(v1, ns, 'obj-00007'),
    contentType: ContentType.mergePatch,
    body: { metadata: { labels: { 'reject-writes': 'true' } } },
  })

  // A real admission policy of the API server refuses every update of the labelled object.
  const policy = `refuse-${group}`
  const vap = await cp.apiRequest('/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies', {
    method: 'POST',
    body: {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'ValidatingAdmissionPolicy',
      metadata: { name: policy },
      spec: {
        failurePolicy: 'Fail',
        matchConstraints: { resourceRules: [{ apiGroups: [group], apiVersions: ['*'], operations: ['UPDATE'], resources: ['widgets'] }] },
        validations: [
          {
            expression: "!has(oldObject.metadata.labels) || !('reject-writes' in oldObject.metadata.labels)",
            message: 'writes to this widget are refused by policy',
          },
        ],
      },
    },
  })
  t.equal(vap.status, 201, vap.body)
  const binding = await cp.apiRequest('/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings', {
    method: 'POST',
    body: {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'ValidatingAdmissionPolicyBinding',
      metadata: { name: policy },
      spec: { policyName: policy, validationActions: ['Deny'] },
    },
  })
  t.equal(binding.status, 201, binding.body)
  t.teardown(async () => {
    await cp.apiRequest(`/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/${policy}`, { method: 'DELETE' })
    await cp.apiRequest(`/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/${policy}`, { method: 'DELETE' })
  })
  let probes = 0
  await until(
    'the admission policy to refuse a write of obj-00007',
    15_000,
    () =>
      http
        .request({
          method: 'PATCH',
          path: objectPath(v1, ns, 'obj-00007'),
          contentType: ContentType.mergePatch,
          body: { spec: { probe: probes++ } },
        })
        .then(
          () => 'written',
          () => 'refused',
        ),
    (probe) => probe === 'refused',
  )

  await setStorageVersion(http, crd.metadata.name, 'v2')
  const result = await migrateCrd(crd.metadata.name, defaultSettings({ maxAttempts: 2 }), { http, logger, owner: 'test-owner' })
  t.equal(result.outcome, 'Failed')
  t.equal(result.storage?.counts.failed, 1, 'exactly the refused object failed')
  t.match(result.storage?.failures[0], { key: `${ns}/obj-00007`, error: /refused by policy/ })
  const after = await getCrd(http, crd.metadata.name)
  t.same(after.status?.storedVersions, ['v1', 'v2'], 'storedVersions was not narrowed')
  const a = after.metadata.annotations ?? {}
  t.notOk(DEFAULT_MIGRATING_ANNOTATION in a, 'the freeze was lifted')
  t.match(a[StateAnnotation.lastResult], /^Failed: CRDM_OBJECTS_FAILED: 1 object\(s\) could not be rewritten \(1 CRDM_KUBE_API;/)
  t.notMatch(
    a[StateAnnotation.lastResult],
    /obj-00007|refused by policy/,
    "the CRD's readers learn no object's name, nor the error that may quote it",
  )
  t.notOk(StateAnnotation.observedGeneration in a, 'a failed run does not mark the generation as handled')
})
