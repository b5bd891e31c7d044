/**
 * The harness's control plane on the run's shared one. Several API servers on one etcd are
 * in controlplane-apiservers.test.ts (in a network namespace of their own).
 */
import { CoreV1Api, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node'
import t from 'tap'
import {
  clientsFor,
  getControlPlane,
  statusOf,
  twoVersionCrd,
  uniqueGroup,
  uniqueName,
  waitForCrdEstablished,
  waitForCrdReady,
} from '../helpers/controlplane.js'
import { until } from '../helpers/until.js'

const cp = await getControlPlane()
const admin = clientsFor(cp.kubeconfigPath)

t.test('the API server is the pinned release (CRD_MIGRATOR_KUBE_VERSION, default the newest we test)', async (t) => {
  const want = process.env['CRD_MIGRATOR_KUBE_VERSION'] ?? 'v1.37.2'
  const res = await cp.apiRequest('/version')
  t.equal(res.status, 200)
  t.match(res.json, { gitVersion: want, major: '1', minor: want.split('.')[1] })
})

t.test('storage version is visible in etcd and follows the CRD storage flag', async (t) => {
  const { group, plural, kind, name, crd } = twoVersionCrd(uniqueGroup('cptest'))
  const ns = uniqueName('cptest')
  await admin.kc.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: ns } } })
  await admin.apiext.createCustomResourceDefinition({ body: crd })
  const established = await waitForCrdEstablished(admin.apiext, name)
  t.equal(established.status?.conditions?.find((c) => c.type === 'Established')?.status, 'True')
  await waitForCrdReady(cp, admin.apiext, name)

  await admin.custom.createNamespacedCustomObject({
    group,
    version: 'v1',
    namespace: ns,
    plural,
    body: { apiVersion: `${group}/v1`, kind, metadata: { name: 'one' }, spec: { size: 1 } },
  })
  const key = `/registry/${group}/${plural}/${ns}/one`
  const raw = await cp.readEtcdKey(key)
  t.ok(raw, `etcd has ${key}`)
  t.equal((JSON.parse(raw!.toString('utf8')) as { apiVersion: string }).apiVersion, `${group}/v1`)
  t.equal(await cp.storedApiVersion(group, plural, ns, 'one'), `${group}/v1`)
  t.same(await cp.listEtcdKeys(`/registry/${group}/`), [key])
  t.equal(await cp.storedApiVersion(group, plural, ns, 'absent'), null)

  // Flip storage to v2 (JSON patch, client-node's default for patch).
  const flipped = await admin.apiext.patchCustomResourceDefinition({
    name,
    body: [
      { op: 'test', path: '/spec/versions/0/name', value: 'v1' },
      { op: 'replace', path: '/spec/versions/0/storage', value: false },
      { op: 'replace', path: '/spec/versions/1/storage', value: true },
    ],
  })
  t.same(flipped.status?.storedVersions, ['v1', 'v2'], 'the API server appends, never prunes, storedVersions')
  // Untouched objects stay in the old version until rewritten.
  t.equal(await cp.storedApiVersion(group, plural, ns, 'one'), `${group}/v1`)

  // Any real change rewrites the object in the current storage version. The storage switch
  // reaches the CR handler asynchronously, so retry briefly.
  let size = 1
  const stored = await until(
    'a change of the object to store it at v2',
    10_000,
    async () => {
      await admin.custom.patchNamespacedCustomObject(
        { group, version: 'v1', namespace: ns, plural, name: 'one', body: { spec: { size: ++size } } },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      )
      return cp.storedApiVersion(group, plural, ns, 'one')
    },
    (version) => version === `${group}/v2`,
  )
  t.equal(stored, `${group}/v2`, 'rewritten object is stored as v2')

  await admin.apiext.deleteCustomResourceDefinition({ name })
})

t.test('client-certificate users are subject to RBAC', async (t) => {
  const alice = await cp.mintUser('alice', ['devs'])
  t.same(alice.groups, ['devs'])
  const asAlice = clientsFor(alice.kubeconfigPath)
  const err = await asAlice.apiext.listCustomResourceDefinition().then(
    () => undefined,
    (e: unknown) => e,
  )
  t.equal(statusOf(err), 403, 'alice (group devs) may not list CRDs')
  const body = (err as { body?: unknown }).body
  const status = (typeof body === 'string' ? JSON.parse(body) : body) as { reason?: string; message?: string }
  t.equal(status.reason, 'Forbidden')
  t.match(status.message, /User "alice" cannot list resource "customresourcedefinitions"/)

  const list = await admin.apiext.listCustomResourceDefinition()
  t.ok(Array.isArray(list.items), 'admin (system:masters) may')

  const whoami = await cp.apiRequest('/apis/authentication.k8s.io/v1/selfsubjectreviews', {
    method: 'POST',
    body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' },
    as: alice,
  })
  t.match(whoami.json, { status: { userInfo: { username: 'alice', groups: ['devs', 'system:authenticated'] } } })
})
