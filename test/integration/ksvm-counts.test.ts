/**
 * Issue 44, item 6: a StorageVersionMigration's creator used to learn how many objects of
 * the resource it names exist (`12 of 12 object(s) rewritten`), ConfigMaps of other
 * tenants included, without being allowed to list them. The API server records no creator
 * on the object, so nobody can be asked whether its creator may list them: no creator
 * gets counts. The attack's shape: users who may only create StorageVersionMigrations
 * (one of them also list ConfigMaps), each naming ConfigMaps, with another tenant's
 * namespace holding some; the controller as the migrator. Both read the same status,
 * without a number; the migrator's log keeps the counts.
 */
import t from 'tap'
import { ensureKsvm, installKsvmCrd } from '../../dev/bench/ksvm.js'
import { ConfigSchema } from '../../src/config/schema.js'
import { KsvmMigrationController } from '../../src/controller/ksvm-controller.js'
import { KSVM_API, storageVersionMigration, type StorageVersionMigration, type SvmConditionType } from '../../src/controller/ksvm-state.js'
import { RunLock } from '../../src/controller/run-lock.js'
import type { KubeHttp } from '../../src/kube/http.js'
import type { MigrationResult } from '../../src/migrator/context.js'
import { createNamespace, httpFor } from '../helpers/cluster.js'
import { getControlPlane, uniqueName } from '../helpers/controlplane.js'
import { capturingLogger } from '../helpers/log-capture.js'
import { grantClusterRole } from '../helpers/rbac.js'
import { until } from '../helpers/until.js'

const CONFIGMAPS = 12
const cp = await getControlPlane()
const admin = httpFor(cp.kubeconfigPath)
const ksvm = await ensureKsvm()
if (!ksvm) throw new Error('kube-storage-version-migrator is not built: bash scripts/build-ksvm.sh')
await installKsvmCrd(admin, ksvm.crd)

// Another tenant's ConfigMaps, named after what they hold.
const tenant = uniqueName('team-b')
await createNamespace(admin, tenant)
for (let i = 0; i < CONFIGMAPS; i++)
  await admin.request({
    method: 'POST',
    path: `/api/v1/namespaces/${tenant}/configmaps`,
    body: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: `payroll-ceo-salary-${i}` }, data: { salary: '1' } },
  })

/** A user who may create StorageVersionMigrations and read them back; with `listConfigMaps`, also list ConfigMaps everywhere. */
async function creator(listConfigMaps: boolean): Promise<{ name: string; http: KubeHttp }> {
  const name = uniqueName(listConfigMaps ? 'svm-lister' : 'svm-creator')
  await grantClusterRole(
    cp,
    name,
    [
      { apiGroups: ['migration.k8s.io'], resources: ['storageversionmigrations'], verbs: ['create', 'get', 'delete'] },
      ...(listConfigMaps ? [{ apiGroups: [''], resources: ['configmaps'], verbs: ['list'] }] : []),
    ],
    [{ kind: 'User', apiGroup: 'rbac.authorization.k8s.io', name }],
  )
  return { name, http: httpFor((await cp.mintUser(name)).kubeconfigPath) }
}

const conditionOf = (svm: StorageVersionMigration | undefined, type: SvmConditionType) =>
  svm?.status?.conditions?.find((c) => c.type === type && c.status === 'True')

/** The message without its version names (v1): what is left has no number when nothing is counted. */
const noVersions = (message: string | undefined) => (message ?? '').replace(/\bv\d+\w*/g, 'vN')

const ours = new Set<string>()
const results = new Map<string, MigrationResult>()
const { logger, lines } = capturingLogger('info')
const stop = new AbortController()
const controller = new KsvmMigrationController({
  http: admin,
  config: ConfigSchema.parse({}),
  logger,
  owner: 'ksvm-counts-test',
  lock: new RunLock(),
  scope: (svm) => ours.has(svm.metadata.name),
  onResult: (svm, result) => results.set(svm, result),
})
const running = controller.run(stop.signal)
t.teardown(async () => {
  stop.abort()
  await running
})

for (const mayList of [false, true]) {
  t.test(`a creator who ${mayList ? 'may' : 'may not'} list ConfigMaps reads no count of them`, async (t) => {
    const user = await creator(mayList)
    const listed = await user.http.request({ method: 'GET', path: `/api/v1/namespaces/${tenant}/configmaps` }).then(
      () => true,
      () => false,
    )
    t.equal(listed, mayList, `the creator ${mayList ? 'may' : 'may not'} list the tenant's ConfigMaps (RBAC)`)
    const name = uniqueName('svm-cm')
    ours.add(name)
    await user.http.request({
      method: 'POST',
      path: KSVM_API,
      body: storageVersionMigration({ name }, { group: '', version: 'v1', resource: 'configmaps' }),
    })
    const svm = await until(
      `StorageVersionMigration ${name} finished`,
      120_000,
      async () => (await user.http.request<StorageVersionMigration>({ method: 'GET', path: `${KSVM_API}/${name}` })).body,
      (s) => conditionOf(s, 'Succeeded') !== undefined || conditionOf(s, 'Failed') !== undefined,
    )
    const succeeded = conditionOf(svm, 'Succeeded')
    t.match(succeeded, { reason: 'Succeeded', message: /^every object rewritten in v1; how many objects is not said here/ }, 'Succeeded')
    t.notMatch(noVersions(succeeded?.message), /\d/, 'no number in the status the creator reads', { message: succeeded?.message })
    t.notMatch(succeeded?.message, new RegExp(tenant), "no other tenant's namespace or object named")
    t.comment(`the creator reads: ${succeeded?.message}`)

    // The run did count them: the result, and the migrator's log.
    const result = results.get(name)
    t.ok((result?.storage?.counts.seen ?? 0) >= CONFIGMAPS, `the run listed every ConfigMap (${result?.storage?.counts.seen})`)
    const finished = lines().find((l) => l['msg'] === 'migration finished' && l['resource'] === 'configmaps')
    t.match(finished, { reason: /^\d+ of \d+ object\(s\) rewritten through v1/ }, "the migrator's log keeps the counts")
  })
}
