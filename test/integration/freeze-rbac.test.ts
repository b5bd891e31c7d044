/**
 * Issue 43, item 3: who besides the migrator may freeze and unfreeze is decided by RBAC.
 * An admin bound to `cluster-admin` through RBAC, not in `system:masters` (the usual admin
 * on EKS access entries, GKE, AKS with Entra ID), used to get a 403 from our own webhook
 * when running `migrate`, and the CLI then said "grant it with RBAC". Through the real API
 * server (its authorizer answers the webhook configuration's matchConditions) and the real
 * webhook, with the built CLI:
 * - the RBAC cluster-admin runs `migrate`: Succeeded, every object at v2 in etcd, and the
 *   webhook's warning printed as kubectl prints it, once;
 * - a user with the migrator's own RBAC (CRD patch, the objects) but not `freeze`: refused
 *   before any write, the message naming the webhook rule and the permission to grant, and
 *   not "grant it with RBAC";
 * - the same user once bound to the chart's ClusterRole `<fullname>-freeze`: migrates.
 */
import t, { type Test } from 'tap'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { getCrd } from '../../src/kube/crds.js'
import { ContentType } from '../../src/kube/http.js'
import { crdPath } from '../../src/kube/paths.js'
import { freezeClusterRole, migratorClusterRole, rulesOf, template } from '../helpers/chart.js'
import { CliRun } from '../helpers/cli-run.js'
import { httpFor, startTestWebhook, storedVersionsInEtcd } from '../helpers/cluster.js'
import { getControlPlane, uniqueName } from '../helpers/controlplane.js'
import { crdWithObjects } from '../helpers/fixtures.js'
import { grantClusterRole } from '../helpers/rbac.js'

const cp = await getControlPlane()
const admin = httpFor(cp.kubeconfigPath)
const scope = uniqueName('rbac-freeze')
const hook = await startTestWebhook(cp, scope)
const N = 40

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
const subject = (name: string) => [{ kind: 'User', apiGroup: 'rbac.authorization.k8s.io', name }]

/** A cluster-wide binding of an existing ClusterRole (cluster-admin, the chart's freeze role). */
async function bind(t: Test, name: string, clusterRole: string, user: string): Promise<void> {
  const path = '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings'
  const res = await cp.apiRequest(path, {
    method: 'POST',
    body: {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: clusterRole },
      subjects: subject(user),
    },
  })
  if (res.status !== 201) throw new Error(`POST ${path}: ${res.status} ${res.body}`)
  t.teardown(() => cp.apiRequest(`${path}/${name}`, { method: 'DELETE' }).then(() => {}))
}

const migrate = (name: string, kubeconfig: string) => new CliRun(['migrate', name, '--kubeconfig', kubeconfig])

t.test('an RBAC cluster-admin outside system:masters runs migrate; the webhook warning is printed once', async (t) => {
  const { crd, group } = await crdWithObjects(admin, { prefix: 'rbacadmin', count: N, labels: hook.labels })
  const name = crd.metadata.name
  const user = uniqueName('eks-admin')
  await bind(t, user, 'cluster-admin', user)
  const creds = await cp.mintUser(user, ['admins'])
  t.notOk(creds.groups.includes('system:masters'), 'not in system:masters')
  const reviewsBefore = await hook.reviews()

  const run = migrate(name, creds.kubeconfigPath)
  const exit = await run.exited
  t.equal(exit.code, 0, 'exit 0', { stdout: run.stdout, stderr: run.stderr })
  t.match(run.stdout, new RegExp(`^${escape(name)}: Succeeded`, 'm'))
  t.same(Object.fromEntries(await storedVersionsInEtcd(cp, group, 'widgets')), { [`${group}/v2`]: N }, 'every object at v2 in etcd')
  const after = await getCrd(admin, name)
  t.equal(after.metadata.annotations?.[DEFAULT_MIGRATING_ANNOTATION], undefined, 'the freeze is lifted')
  t.same(after.status?.storedVersions, ['v2'], 'storedVersions narrowed')
  t.ok((await hook.reviews()) > reviewsBefore, 'its writes went through the webhook (the freeze-allowed entry)')

  const warnings = run.stderrLines.map((l) => l.text).filter((l) => l.startsWith('Warning: '))
  t.ok(
    warnings.some((w) =>
      new RegExp(
        `^Warning: break-glass override by user "${escape(user)}" \\(RBAC allows verb "freeze" on customresourcedefinitions\\.apiextensions\\.k8s\\.io "${escape(name)}"\\): ${escape(DEFAULT_MIGRATING_ANNOTATION)} set on CRD`,
      ).test(w),
    ),
    'the freeze: the webhook warning, as kubectl prints it',
    { warnings },
  )
  t.equal(new Set(warnings).size, warnings.length, `each warning once (${warnings.length} distinct)`, { warnings })
})

/** A user with what `migrate` needs of RBAC for `group` (the chart's migrator ClusterRole, Events), but not `freeze`. */
async function migratorRbacUser(t: Test, group: string): Promise<{ name: string; kubeconfig: string }> {
  const name = uniqueName('narrow-admin')
  const rules = rulesOf(migratorClusterRole(await template(name, 'narrow', { rbac: { managedGroups: [group] } })))
  t.notOk(
    rules.some((r) => r.verbs.includes('freeze') || r.verbs.includes('*')),
    "the migrator's own ClusterRole has no freeze (its identity skips the webhook)",
  )
  await grantClusterRole(
    cp,
    name,
    [
      ...rules,
      { apiGroups: ['events.k8s.io'], resources: ['events'], verbs: ['create', 'patch'] },
      { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['get', 'list'] },
    ],
    subject(name),
  )
  return { name, kubeconfig: (await cp.mintUser(name)).kubeconfigPath }
}

t.test(
  'without the freeze permission: refused by the webhook rule, told what to grant; with the chart ClusterRole: migrates',
  async (t) => {
    const { crd, group } = await crdWithObjects(admin, { prefix: 'rbacnarrow', count: N, labels: hook.labels })
    const name = crd.metadata.name
    const user = await migratorRbacUser(t, group)

    const refused = migrate(name, user.kubeconfig)
    const exit = await refused.exited
    const out = `${refused.stdout}\n${refused.stderr}`
    t.equal(exit.code, 1, 'exit 1', { stdout: refused.stdout, stderr: refused.stderr })
    t.match(out, /admission webhook "storage-freeze\.crd-migrator\.io" denied the request/, 'the plain entry judged it')
    t.match(out, /crd-migrator webhook rule annotation-guarded/, 'names the rule')
    t.match(
      out,
      new RegExp(`grant it verb "freeze" on customresourcedefinitions\\.apiextensions\\.k8s\\.io "${escape(name)}" with RBAC`),
      'names the permission',
    )
    t.match(out, new RegExp(`kubectl create clusterrolebinding <name> --clusterrole=<fullname>-freeze --user=${escape(user.name)}`))
    t.match(out, /refused by admission control \(a webhook or policy\), not by RBAC/, 'the CLI does not blame RBAC')
    t.notMatch(out, /grant it with RBAC/, 'no longer "grant it with RBAC"')
    t.notMatch(out, /Succeeded/)
    t.equal((await getCrd(admin, name)).metadata.annotations?.[DEFAULT_MIGRATING_ANNOTATION], undefined, 'never frozen')
    t.same(Object.fromEntries(await storedVersionsInEtcd(cp, group, 'widgets')), { [`${group}/v1`]: N }, 'no object rewritten')

    // The chart's ClusterRole, as `helm install` renders it, bound as the refusal says.
    const role = freezeClusterRole(await template('rbacfreeze', 'rbac-freeze', {}))
    t.equal(role.metadata.name, 'rbacfreeze-crd-migrator-freeze')
    const roleName = uniqueName('freeze-role')
    await grantClusterRole(cp, roleName, rulesOf(role), subject(user.name))

    const run = migrate(name, user.kubeconfig)
    const done = await run.exited
    t.equal(done.code, 0, 'exit 0 with the chart ClusterRole', { stdout: run.stdout, stderr: run.stderr })
    t.match(run.stdout, new RegExp(`^${escape(name)}: Succeeded`, 'm'))
    t.same(Object.fromEntries(await storedVersionsInEtcd(cp, group, 'widgets')), { [`${group}/v2`]: N }, 'every object at v2 in etcd')
    t.match(run.stderr, /^Warning: break-glass override by user .* \(RBAC allows verb "freeze"/m, 'warned')
  },
)

t.test('storage still frozen for an RBAC cluster-admin: the freeze-allowed entry never lets storage move', async (t) => {
  const { crd } = await crdWithObjects(admin, { prefix: 'rbacstorage', count: 1, labels: hook.labels })
  const name = crd.metadata.name
  const user = uniqueName('eks-admin')
  await bind(t, user, 'cluster-admin', user)
  const http = httpFor((await cp.mintUser(user)).kubeconfigPath)
  const patch = (body: unknown) => http.requestRaw({ method: 'PATCH', path: crdPath(name), body, contentType: ContentType.mergePatch })
  const frozen = await patch({ metadata: { annotations: { [DEFAULT_MIGRATING_ANNOTATION]: 'true' } } })
  t.equal(frozen.status, 200, 'may freeze', { body: frozen.body })
  t.match(String(frozen.headers.warning), /break-glass override by user/, 'with the warning header')
  const current = await getCrd(admin, name)
  const versions = current.spec.versions.map((v) => ({ ...v, storage: v.name === 'v1' }))
  const flip = await http.requestRaw({
    method: 'PATCH',
    path: crdPath(name),
    body: [{ op: 'replace', path: '/spec/versions', value: versions }],
    contentType: ContentType.jsonPatch,
  })
  t.equal(flip.status, 403, 'the storage flip is refused', { body: flip.body })
  t.match(flip.body, /admission webhook \\"storage-freeze-rbac\.crd-migrator\.io\\" denied the request.*for any user/)
  const lifted = await patch({ metadata: { annotations: { [DEFAULT_MIGRATING_ANNOTATION]: null } } })
  t.equal(lifted.status, 200, 'may lift the freeze', { body: lifted.body })
})
