/**
 * The holes an attacker found in the freeze (issue: "Close the holes in the freeze"),
 * each tried again end to end through the real API server by the narrow-RBAC user that
 * exploited it: a user who may only write CRD status, a CRD editor who is not
 * break-glass, a break-glass admin, and a client certificate named like the migrator's
 * ServiceAccount. The webhook is the real one, installed with the shipped configuration's
 * rules and matchConditions (plus a label scope, so it sees only this file's CRDs).
 */
import { KubeConfig } from '@kubernetes/client-node'
import t, { type Test } from 'tap'
import { DEFAULT_MIGRATING_ANNOTATION as KEY } from '../../src/config/annotations.js'
import { StateAnnotation } from '../../src/state/crd-state.js'
import type { ControlPlane } from '../../dev/controlplane/controlplane.js'
import { getCrd } from '../../src/kube/crds.js'
import { ContentType, KubeHttp } from '../../src/kube/http.js'
import { CRD_API, crdPath } from '../../src/kube/paths.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import { createCrd, createNamespace, crdManifest, deleteCrd, httpFor, setStorageVersion, startTestWebhook } from '../helpers/cluster.js'
import { getControlPlane, uniqueGroup, uniqueName } from '../helpers/controlplane.js'
import { capturingLogger } from '../helpers/log-capture.js'
import { until } from '../helpers/until.js'
import { grantClusterRole } from '../helpers/rbac.js'

type Creds = { certPem: string; keyPem: string }

const cp = await getControlPlane()
const admin = httpFor(cp.kubeconfigPath)
const scope = uniqueName('holes')
const ns = uniqueName('holes')
const saName = 'crd-migrator'
const saUser = `system:serviceaccount:${ns}:${saName}`
// debug: these checks read every review the webhook answered, plain allowances included.
const logs = capturingLogger('debug')
await createNamespace(admin, ns)
const hook = await startTestWebhook(cp, scope, { migratorUsers: ['migrator', saUser], logger: logs.logger })

/** A ClusterRole with `rules`, bound to `subjects` (helpers/rbac.ts). */
const grant = (name: string, rules: unknown[], subjects: unknown[]) => grantClusterRole(cp, name, rules, subjects)
const crdRules = (resources: string[], verbs: string[]) => [{ apiGroups: ['apiextensions.k8s.io'], resources, verbs }]
const user = (name: string) => ({ kind: 'User', apiGroup: 'rbac.authorization.k8s.io', name })

// A user who may only read CRDs and write their status.
await grant(
  `status-patcher-${scope}`,
  crdRules(['customresourcedefinitions/status'], ['get', 'patch', 'update']).concat(crdRules(['customresourcedefinitions'], ['get'])),
  [user(`status-patcher-${scope}`)],
)
const statusPatcher = await cp.mintUser(`status-patcher-${scope}`)
// A CRD administrator who is not break-glass (no system:masters).
await grant(
  `crd-admin-${scope}`,
  crdRules(['customresourcedefinitions', 'customresourcedefinitions/status'], ['get', 'list', 'create', 'update', 'patch', 'delete']),
  [user(`crd-admin-${scope}`)],
)
const crdAdmin = await cp.mintUser(`crd-admin-${scope}`)
// The migrator identities: the x509 user `migrator`, the ServiceAccount, and a client
// certificate that merely carries the ServiceAccount's name.
await grant(
  `migrator-${scope}`,
  crdRules(['customresourcedefinitions', 'customresourcedefinitions/status'], ['get', 'list', 'update', 'patch']),
  [user('migrator'), user(saUser), { kind: 'ServiceAccount', name: saName, namespace: ns }],
)
const migrator = await cp.mintUser('migrator')
const certNamedLikeSa = await cp.mintUser(saUser, ['system:serviceaccounts', `system:serviceaccounts:${ns}`])

const merge = (as: Creds | undefined, path: string, body: unknown) =>
  cp.apiRequest(path, { method: 'PATCH', contentType: ContentType.mergePatch, body, ...(as ? { as } : {}) })

/** A CRD at storage v2 with storedVersions [v1, v2], frozen by the migrator with a checkpoint. */
async function frozenCrd(): Promise<CustomResourceDefinition> {
  const group = uniqueGroup('holes')
  const created = await createCrd(admin, crdManifest({ group, versions: ['v1', 'v2'], storage: 'v1', labels: hook.labels }))
  await setStorageVersion(admin, created.metadata.name, 'v2')
  const res = await merge(migrator, crdPath(created.metadata.name), {
    metadata: {
      annotations: {
        [KEY]: 'true',
        [StateAnnotation.owner]: 'replica-a',
        [StateAnnotation.checkpoint]: 'a/obj-00010',
        [StateAnnotation.targetStorageVersion]: 'v2',
      },
    },
  })
  if (res.status !== 200) throw new Error(`freezing failed: ${res.status} ${res.body}`)
  t.teardown(async () => {
    await merge(migrator, crdPath(created.metadata.name), { metadata: { annotations: { [KEY]: null } } })
    await deleteCrd(admin, created.metadata.name)
  })
  const crd = await getCrd(admin, created.metadata.name)
  if (JSON.stringify(crd.status?.storedVersions) !== '["v1","v2"]')
    throw new Error(`unexpected storedVersions ${JSON.stringify(crd.status?.storedVersions)}`)
  return crd
}

function deniedByWebhook(t: Test, res: { status: number; body: string }, pattern: RegExp, what: string): void {
  t.equal(res.status, 403, `${what}: 403`)
  const message = messageOf(res.body)
  t.match(message, /^admission webhook "storage-freeze(-rbac)?\.crd-migrator\.io" denied the request/, `${what}: by our webhook`)
  t.match(message, pattern, `${what}: saying why`)
}

function messageOf(body: string): string {
  try {
    return (JSON.parse(body) as { message?: string }).message ?? body
  } catch {
    return body
  }
}

t.test('hole 1: a user who may only write CRD status cannot touch the freeze through /status', async (t) => {
  const crd = await frozenCrd()
  const status = `${crdPath(crd.metadata.name)}/status`

  const unfreeze = await merge(statusPatcher, status, { metadata: { annotations: { [KEY]: null } } })
  deniedByWebhook(t, unfreeze, /may not remove it/, '(a) removing the migrating annotation')

  const forged = await merge(statusPatcher, status, { metadata: { annotations: { [StateAnnotation.checkpoint]: 'zzz/zzz' } } })
  deniedByWebhook(t, forged, /crd-migrator\.io\/checkpoint/, '(b) forging the checkpoint')

  const narrowed = await merge(statusPatcher, status, { status: { storedVersions: ['v2'] } })
  deniedByWebhook(
    t,
    narrowed,
    /may not change status\.storedVersions from v1, v2 to v2 \(through \/status\)/,
    '(c) narrowing storedVersions',
  )

  const after = await getCrd(admin, crd.metadata.name)
  t.equal(after.metadata.annotations?.[KEY], 'true', 'still frozen')
  t.equal(after.metadata.annotations?.[StateAnnotation.checkpoint], 'a/obj-00010', "the checkpoint is the migrator's")
  t.same(after.status?.storedVersions, ['v1', 'v2'], 'storedVersions untouched')

  // The same user may still write what status is for (conditions), and the migrator may narrow storedVersions.
  const ok = await merge(migrator, status, { status: { storedVersions: ['v2'] } })
  t.equal(ok.status, 200, 'the migrator narrows storedVersions of a frozen CRD')
})

t.test("hole 1: the API server's own status writes on a frozen CRD still pass, and who makes them", async (t) => {
  const crd = await frozenCrd()
  // A new short name makes the API server's naming controller write status.acceptedNames.
  const res = await merge(crdAdmin, crdPath(crd.metadata.name), { spec: { names: { shortNames: ['hw'] } } })
  t.equal(res.status, 200, 'a change that does not move storage is allowed on a frozen CRD')
  const accepted = await until(
    'the API server to accept the short name hw',
    15_000,
    async () => (await getCrd(admin, crd.metadata.name)).status?.acceptedNames?.shortNames,
    (names) => names?.includes('hw') === true,
  )
  t.same(accepted, ['hw'], 'the API server wrote the accepted names through /status')
  const statusReviews = logs.lines().filter((l) => l['crd'] === crd.metadata.name && l['subResource'] === 'status')
  t.ok(statusReviews.length > 0, 'that write went through the webhook')
  for (const review of statusReviews) {
    t.equal(review['decision'], 'allowed', `${String(review['user'])}: allowed`)
    t.equal(review['reason'], 'allowed', 'on its own merits, not as a break-glass override')
  }
  const users = [...new Set(statusReviews.map((l) => String(l['user'])))]
  t.same(users, ['system:apiserver'], "the API server's loopback identity makes them")
  t.comment(`status writes on a frozen CRD came from ${users.join(', ')} (groups ${JSON.stringify(statusReviews[0]?.['groups'])})`)
})

t.test('hole 2: the freeze holds for break-glass users too', async (t) => {
  const crd = await frozenCrd()
  const flip = (versions: Array<[string, boolean]>, annotations?: Record<string, null>) =>
    merge(undefined, crdPath(crd.metadata.name), {
      ...(annotations ? { metadata: { annotations } } : {}),
      spec: { versions: crd.spec.versions.map((v) => ({ ...v, storage: versions.find(([n]) => n === v.name)![1] })) },
    })
  const moved = await flip([
    ['v1', true],
    ['v2', false],
  ])
  deniedByWebhook(t, moved, /not allowed while the migration runs, for any user/, 'a storage flip by system:masters')
  t.match(moved.body, /first removes the annotation in a request of its own/, 'the refusal tells break-glass users the way')

  const both = await flip(
    [
      ['v1', true],
      ['v2', false],
    ],
    { [KEY]: null },
  )
  deniedByWebhook(t, both, /changing the storage version from v2 to v1/, 'removing the annotation and flipping storage in one request')
  t.equal((await getCrd(admin, crd.metadata.name)).metadata.annotations?.[KEY], 'true', 'still frozen')

  const lift = await merge(undefined, crdPath(crd.metadata.name), { metadata: { annotations: { [KEY]: null } } })
  t.equal(lift.status, 200, "removing the annotation alone is the break-glass user's deliberate first step")
  const audit = logs.lines().find((l) => l['crd'] === crd.metadata.name && l['reason'] === 'break-glass-override')
  t.ok(audit, 'logged as a break-glass override')
  const after = await flip([
    ['v1', true],
    ['v2', false],
  ])
  t.equal(after.status, 200, 'then storage may move')
})

t.test('hole 3: frozen CRDs cannot be deleted, forged state cannot be created', async (t) => {
  const crd = await frozenCrd()
  const del = await cp.apiRequest(crdPath(crd.metadata.name), { method: 'DELETE', as: crdAdmin })
  deniedByWebhook(t, del, /deleting it now would delete all of its custom resources mid-migration/, 'DELETE of a frozen CRD')
  const delAdmin = await cp.apiRequest(crdPath(crd.metadata.name), { method: 'DELETE' })
  deniedByWebhook(t, delAdmin, /nobody may/, 'DELETE of a frozen CRD by system:masters')
  const still = await getCrd(admin, crd.metadata.name)
  t.notOk(still.metadata.deletionTimestamp, 'the CRD is not being deleted')

  const forged = crdManifest({ group: uniqueGroup('holes'), versions: ['v1'], storage: 'v1', labels: hook.labels })
  forged.metadata.annotations = { [StateAnnotation.observedGeneration]: '1', [StateAnnotation.lastResult]: 'Succeeded' }
  const create = await cp.apiRequest(CRD_API, { method: 'POST', body: forged, as: crdAdmin })
  deniedByWebhook(t, create, /crd-migrator\.io\/last-result, crd-migrator\.io\/observed-generation/, 'CREATE with forged state')
  t.equal((await cp.apiRequest(crdPath(forged.metadata.name))).status, 404, 'not created')
})

t.test('hole 4: state annotations cannot be forged on a CRD that is not frozen; whole-object installers still work', async (t) => {
  const group = uniqueGroup('holes')
  const crd = await createCrd(admin, crdManifest({ group, versions: ['v1', 'v2'], storage: 'v1', labels: hook.labels }))
  t.teardown(() => deleteCrd(admin, crd.metadata.name))
  const forge = await merge(crdAdmin, crdPath(crd.metadata.name), {
    metadata: {
      annotations: {
        [StateAnnotation.observedGeneration]: String(crd.metadata.generation! + 1),
        [StateAnnotation.lastResult]: 'Succeeded',
      },
    },
  })
  deniedByWebhook(t, forge, /may not set or change crd-migrator\.io\/last-result/, 'forging "already done" before a storage flip')
  const viaStatus = await merge(statusPatcher, `${crdPath(crd.metadata.name)}/status`, {
    metadata: { annotations: { [StateAnnotation.lastResult]: 'Succeeded' } },
  })
  deniedByWebhook(t, viaStatus, /crd-migrator\.io\/last-result/, 'the same through /status')

  // The migrator records a result; an installer that PUTs its own CRD object drops it.
  t.equal(
    (await merge(migrator, crdPath(crd.metadata.name), { metadata: { annotations: { [StateAnnotation.lastResult]: 'Succeeded' } } }))
      .status,
    200,
  )
  const before = await hook.reviews()
  const current = await getCrd(admin, crd.metadata.name)
  const replaced = { ...current, metadata: { ...current.metadata, annotations: {} } }
  const put = await cp.apiRequest(crdPath(crd.metadata.name), { method: 'PUT', body: replaced, as: crdAdmin })
  t.equal(put.status, 200, 'a PUT that drops state annotations of an unfrozen CRD is allowed')
  t.equal(await hook.reviews(), before, 'and does not even depend on the webhook')
})

t.test('hole 7: a client certificate named like the migrator ServiceAccount is not the migrator; its token is', async (t) => {
  const crd = await frozenCrd()
  const fake = await merge(certNamedLikeSa, crdPath(crd.metadata.name), { metadata: { annotations: { [KEY]: null } } })
  deniedByWebhook(t, fake, new RegExp(`user "${saUser}" may not remove it`), `an x509 user named ${saUser} lifting the freeze`)

  const token = await serviceAccountToken(cp, ns, saName)
  const asSa = tokenClient(token)
  const who = (
    await asSa.request<{ status: { userInfo: { username: string; extra?: Record<string, string[]> } } }>({
      method: 'POST',
      path: '/apis/authentication.k8s.io/v1/selfsubjectreviews',
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' },
    })
  ).body.status.userInfo
  t.equal(who.username, saUser)
  t.match(who.extra?.['authentication.kubernetes.io/credential-id']?.[0], /^JTI=/, 'a ServiceAccount token carries a JTI credential id')
  const before = await hook.reviews()
  await asSa.request({
    method: 'PATCH',
    path: crdPath(crd.metadata.name),
    contentType: ContentType.mergePatch,
    body: { metadata: { annotations: { [KEY]: null } } },
  })
  t.notOk(KEY in ((await getCrd(admin, crd.metadata.name)).metadata.annotations ?? {}), 'the ServiceAccount lifted its freeze')
  t.equal(await hook.reviews(), before, 'without calling the webhook (matchCondition not-the-migrator)')
})

t.test('the status-only patcher is refused by RBAC for everything else, so the webhook is what stopped it', async (t) => {
  const crd = await frozenCrd()
  const res = await merge(statusPatcher, crdPath(crd.metadata.name), { metadata: { annotations: { [KEY]: null } } })
  t.equal(res.status, 403)
  t.match(messageOf(res.body), /cannot patch resource "customresourcedefinitions"/, 'RBAC, not the webhook')
  t.notMatch(messageOf(res.body), /admission webhook/)
})

async function serviceAccountToken(cp: ControlPlane, namespace: string, name: string): Promise<string> {
  const sa = await cp.apiRequest(`/api/v1/namespaces/${namespace}/serviceaccounts`, {
    method: 'POST',
    body: { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name } },
  })
  if (sa.status !== 201 && sa.status !== 409) throw new Error(`creating the ServiceAccount: ${sa.status} ${sa.body}`)
  const res = await cp.apiRequest(`/api/v1/namespaces/${namespace}/serviceaccounts/${name}/token`, {
    method: 'POST',
    body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: 600 } },
  })
  if (res.status !== 201) throw new Error(`TokenRequest: ${res.status} ${res.body}`)
  return (res.json as { status: { token: string } }).status.token
}

function tokenClient(token: string): KubeHttp {
  const base = new KubeConfig()
  base.loadFromFile(cp.kubeconfigPath)
  const cluster = base.getCurrentCluster()!
  const kc = new KubeConfig()
  kc.loadFromOptions({
    clusters: [cluster],
    users: [{ name: 'sa', token }],
    contexts: [{ name: 'sa', cluster: cluster.name, user: 'sa' }],
    currentContext: 'sa',
  })
  const http = new KubeHttp(kc)
  t.teardown(() => http.close())
  return http
}
