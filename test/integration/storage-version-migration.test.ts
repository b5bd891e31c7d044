/**
 * KEP-2855 as written: kube-storage-version-migrator's StorageVersionMigration objects
 * (its own CRD, from its Go module) drive crd-migrator, on the real API server.
 */
import { pino } from 'pino'
import t, { type Test } from 'tap'
import { ensureKsvm, installKsvmCrd } from '../../dev/bench/ksvm.js'
import { ConfigSchema } from '../../src/config/schema.js'
import { RunLock } from '../../src/controller/run-lock.js'
import { KSVM_API, storageVersionMigration, type StorageVersionMigration, type SvmConditionType } from '../../src/controller/ksvm-state.js'
import { KsvmMigrationController } from '../../src/controller/ksvm-controller.js'
import { getCrd } from '../../src/kube/crds.js'
import type { KubeHttp } from '../../src/kube/http.js'
import { httpFor, storedVersionsInEtcd } from '../helpers/cluster.js'
import { getControlPlane, uniqueName } from '../helpers/controlplane.js'
import { crdWithObjects } from '../helpers/fixtures.js'
import { grantClusterRole } from '../helpers/rbac.js'
import { consistently, until } from '../helpers/until.js'

const logger = pino({ level: 'silent' })
const MIGRATING = 'ksvm.sigs.k8s.io/migrating'

async function setup(t: Test, objects: number) {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const ksvm = await ensureKsvm()
  if (!ksvm) throw new Error('kube-storage-version-migrator is not built: bash scripts/build-ksvm.sh')
  await installKsvmCrd(http, ksvm.crd)
  // Managed (the default selector's label): only a managed CRD is frozen through these objects (ksvm-unmanaged.test.ts).
  const { crd, group } = await crdWithObjects(http, { prefix: 'svm', count: objects, labels: { 'crd-migrator.io/managed': 'true' } })
  return { cp, http, crd, group }
}

/**
 * Runs the controller in-process until the test ends; `qps` paces the migration. It takes
 * only the objects naming `group`: other test files (ksvm-trigger.test.ts) create theirs
 * on this API server.
 */
function startController(t: Test, http: KubeHttp, qps: number, group: string) {
  const config = ConfigSchema.parse({ migrator: { qps, concurrency: 4, storageVersionMigrations: true } })
  const stop = new AbortController()
  const controller = new KsvmMigrationController({
    http,
    config,
    logger,
    owner: 'svm-test',
    lock: new RunLock(),
    scope: (svm) => svm.spec?.resource?.group === group,
  })
  const running = controller.run(stop.signal)
  t.teardown(async () => {
    stop.abort()
    await running
  })
}

async function createSvm(http: KubeHttp, name: string, group: string, resource: string): Promise<void> {
  await http.request({
    method: 'POST',
    path: KSVM_API,
    body: storageVersionMigration({ name }, { group: group, version: 'v2', resource: resource }),
  })
}

async function getSvm(http: KubeHttp, name: string): Promise<StorageVersionMigration | undefined> {
  try {
    return (await http.request<StorageVersionMigration>({ method: 'GET', path: `${KSVM_API}/${name}` })).body
  } catch {
    return undefined
  }
}

const conditionOf = (svm: StorageVersionMigration | undefined, type: SvmConditionType) =>
  svm?.status?.conditions?.find((c) => c.type === type && c.status === 'True')

t.test('a StorageVersionMigration for a CRD: Running, then Succeeded; etcd all v2; storedVersions narrowed', async (t) => {
  const { cp, http, crd, group } = await setup(t, 400)
  startController(t, http, 100, group)
  const name = uniqueName('svm')
  await createSvm(http, name, group, 'widgets')
  let sawRunning = false
  let sawFrozen = false
  const done = await until(
    'Succeeded',
    60_000,
    async () => {
      const v = { svm: await getSvm(http, name), crd: await getCrd(http, crd.metadata.name) }
      if (conditionOf(v.svm, 'Running')) sawRunning = true
      if (v.crd.metadata.annotations?.[MIGRATING] === 'true') sawFrozen = true
      return v
    },
    (v) => conditionOf(v.svm, 'Succeeded') !== undefined || conditionOf(v.svm, 'Failed') !== undefined,
  )
  t.ok(sawRunning, 'the object showed Running while the migration ran')
  t.ok(sawFrozen, 'and the CRD carried the KEP-2855 annotation meanwhile')
  t.match(
    conditionOf(done.svm, 'Succeeded'),
    { reason: 'Succeeded', message: /^every object rewritten in v2, .*storedVersions \["v2"\]; how many objects is not said here/ },
    'then Succeeded',
  )
  t.same(
    done.svm?.status?.conditions?.map((c) => c.type),
    ['Succeeded'],
    'one current condition, as KSVM keeps it',
  )
  t.same(Object.fromEntries(await storedVersionsInEtcd(cp, group, 'widgets')), { [`${group}/v2`]: 400 }, 'etcd holds all 400 in v2')
  const after = await getCrd(http, crd.metadata.name)
  t.same(after.status?.storedVersions, ['v2'], 'storedVersions narrowed')
  t.notOk(MIGRATING in (after.metadata.annotations ?? {}), 'freeze lifted')
})

t.test('deleting a StorageVersionMigration mid-run stops the run and lifts the freeze; a second one waits its turn', async (t) => {
  const { http, crd, group } = await setup(t, 600)
  startController(t, http, 40, group)
  const first = uniqueName('svm')
  await createSvm(http, first, group, 'widgets')
  await until(
    'the freeze',
    30_000,
    () => getCrd(http, crd.metadata.name),
    (c) => c.metadata.annotations?.[MIGRATING] === 'true',
  )
  const second = uniqueName('svm')
  await createSvm(http, second, group, 'widgets')
  const waited = await consistently(
    'the second object to wait, not Running, while the first runs',
    1_000,
    () => getSvm(http, second),
    (s) => conditionOf(s, 'Running') === undefined,
  )
  t.notOk(conditionOf(waited, 'Running'), 'the second object waits while the first runs')

  await http.request({ method: 'DELETE', path: `${KSVM_API}/${first}` })
  const deletedAt = Date.now()
  // The stopped run lifts its freeze and records why; the second object then freezes anew.
  const lifted = await until(
    'the first freeze lifted',
    15_000,
    () => getCrd(http, crd.metadata.name),
    (c) => /^Failed/.test(c.metadata.annotations?.['crd-migrator.io/last-result'] ?? ''),
  )
  t.ok(Date.now() - deletedAt < 10_000, `the freeze was lifted within seconds of the delete (${Date.now() - deletedAt} ms)`)
  t.match(
    lifted.metadata.annotations?.['crd-migrator.io/last-result'],
    new RegExp(`^Failed: CRDM_ABORTED: StorageVersionMigration ${first} was deleted`),
    'the stopped run recorded why',
  )

  const done = await until(
    'the second Succeeded',
    90_000,
    () => getSvm(http, second),
    (s) => conditionOf(s, 'Succeeded') !== undefined || conditionOf(s, 'Failed') !== undefined,
  )
  t.ok(conditionOf(done, 'Succeeded'), 'the second object ran after the first was gone, to Succeeded')
  t.same((await getCrd(http, crd.metadata.name)).status?.storedVersions, ['v2'])
})

t.test('a StorageVersionMigration naming a resource that is not served fails with the reason', async (t) => {
  const { http } = await setup(t, 0)
  startController(t, http, 100, 'nothing.example.com')
  const name = uniqueName('svm')
  await createSvm(http, name, 'nothing.example.com', 'gadgets')
  const done = await until(
    'Failed',
    20_000,
    () => getSvm(http, name),
    (s) => conditionOf(s, 'Failed') !== undefined,
  )
  t.match(conditionOf(done, 'Failed'), { reason: 'CRDM_RESOURCE_NOT_FOUND', message: /nothing\.example\.com/ })
})

t.test('a StorageVersionMigration whose resource the migrator may not look up (403) fails for good, not retried forever', async (t) => {
  const { cp, http, crd, group } = await setup(t, 1)
  // A migrator that may work its StorageVersionMigrations but not read CRDs: finding the
  // resource's CRD is refused (discovery itself is open to every authenticated user).
  const user = uniqueName('svm-narrow')
  await grantClusterRole(
    cp,
    user,
    [
      { apiGroups: ['migration.k8s.io'], resources: ['storageversionmigrations'], verbs: ['get', 'list', 'watch'] },
      { apiGroups: ['migration.k8s.io'], resources: ['storageversionmigrations/status'], verbs: ['patch'] },
    ],
    [{ kind: 'User', apiGroup: 'rbac.authorization.k8s.io', name: user }],
  )
  const narrow = await cp.mintUser(user)
  startController(t, httpFor(narrow.kubeconfigPath), 100, group)
  const name = uniqueName('svm')
  await createSvm(http, name, group, crd.spec.names.plural)
  const done = await until(
    'Failed',
    30_000,
    () => getSvm(http, name),
    (s) => conditionOf(s, 'Failed') !== undefined,
  )
  t.match(conditionOf(done, 'Failed'), {
    reason: 'CRDM_FORBIDDEN',
    message: /403 .*customresourcedefinitions.*create a new StorageVersionMigration/,
  })
  t.notOk(conditionOf(done, 'Running'), 'not left Running, to be tried again')
  t.same((await getCrd(http, crd.metadata.name)).metadata.annotations?.[MIGRATING], undefined, 'nothing frozen')
})
