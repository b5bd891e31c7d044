/**
 * kube-storage-version-migrator's trigger, in crd-migrator, on the real API server: the
 * scenario of KSVM's own e2e test (test/e2e/tests/crd-migration.go), with etcd read at the
 * end. The trigger keeps the StorageState from discovery; the StorageVersionMigrations it
 * creates are run by crd-migrator's StorageVersionMigration controller. Both are scoped to
 * the test's group: other test files share this API server. The second test runs the
 * trigger with the chart's RBAC and nothing more.
 */
import { join } from 'node:path'
import { pino } from 'pino'
import t, { type Test } from 'tap'
import { ensureKsvm, installKsvmCrd } from '../../dev/bench/ksvm.js'
import { ConfigSchema } from '../../src/config/schema.js'
import { KsvmMigrationController } from '../../src/controller/ksvm-controller.js'
import { KSVM_API, type StorageVersionMigration } from '../../src/controller/ksvm-state.js'
import { KsvmTrigger } from '../../src/controller/ksvm-trigger.js'
import { STORAGE_STATE_API, type StorageState, type StorageStateStatus } from '../../src/controller/ksvm-trigger-state.js'
import { RunLock } from '../../src/controller/run-lock.js'
import { getCrd } from '../../src/kube/crds.js'
import { servedStorageVersionHash, storageVersionHash } from '../../src/kube/discovery.js'
import type { KubeHttp } from '../../src/kube/http.js'
import { listAndWatch } from '../../src/kube/watch.js'
import { httpFor, setStorageVersion, storedVersionsInEtcd } from '../helpers/cluster.js'
import { rulesOf, template, migratorClusterRole } from '../helpers/chart.js'
import { getControlPlane, uniqueName } from '../helpers/controlplane.js'
import { grantClusterRole } from '../helpers/rbac.js'
import { crdWithObjects } from '../helpers/fixtures.js'
import { until } from '../helpers/until.js'

const logger = pino({ level: 'silent' })
const STATE_CRD = join(import.meta.dirname, '..', '..', 'charts', 'crd-migrator', 'files', 'storagestates.migration.k8s.io.yaml')
/** KSVM's period: the test passes only if the CRD watch, not the poll, notices the flip. */
const POLL_SECONDS = 600

async function setup(t: Test, objects: number) {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const ksvm = await ensureKsvm()
  if (!ksvm) throw new Error('kube-storage-version-migrator is not built: bash scripts/build-ksvm.sh')
  await installKsvmCrd(http, ksvm.crd)
  await installKsvmCrd(http, STATE_CRD) // the chart's copy, checked against the module's by chart-values.test.ts
  await until(
    'the StorageState API',
    30_000,
    () => http.request({ method: 'GET', path: STORAGE_STATE_API, query: { limit: 1 } }),
    () => true,
  )
  const fixture = await crdWithObjects(http, { prefix: 'trigger', count: objects, flipTo: false })
  const stateName = `widgets.${fixture.group}`
  return { cp, http, ...fixture, stateName, history: watchStatuses(t, http, stateName) }
}

/** Every status the StorageState is written with, in order (a watch sees each write). */
function watchStatuses(t: Test, http: KubeHttp, name: string): StorageStateStatus[] {
  const seen: StorageStateStatus[] = []
  const stop = new AbortController()
  const watching = listAndWatch<StorageState>(
    http,
    STORAGE_STATE_API,
    { onObject: (s) => seen.push(s.status ?? {}), onError: () => {} },
    stop.signal,
    { fieldSelector: `metadata.name=${name}` },
  )
  t.teardown(async () => {
    stop.abort()
    await watching
  })
  return seen
}

/** The trigger, and (unless `runMigrations` is false) the StorageVersionMigration controller, for `group` only. */
function start(t: Test, http: KubeHttp, group: string, runMigrations = true) {
  const stop = new AbortController()
  const trigger = new KsvmTrigger({ http, logger, pollSeconds: POLL_SECONDS, scope: (r) => r.group === group })
  const running = [trigger.run(stop.signal)]
  if (runMigrations) {
    const config = ConfigSchema.parse({ migrator: { concurrency: 4, storageVersionMigrations: true } })
    const controller = new KsvmMigrationController({
      http,
      config,
      logger,
      owner: 'trigger-test',
      lock: new RunLock(),
      scope: (svm) => svm.spec?.resource?.group === group,
    })
    running.push(controller.run(stop.signal))
  }
  t.teardown(async () => {
    stop.abort()
    await Promise.all(running)
  })
}

const getState = async (http: KubeHttp, name: string) =>
  (await http.request<StorageState>({ method: 'GET', path: `${STORAGE_STATE_API}/${name}` })).body

const migrationsOf = async (http: KubeHttp, group: string) =>
  (await http.request<{ items: StorageVersionMigration[] }>({ method: 'GET', path: KSVM_API })).body.items.filter(
    (m) => m.spec?.resource?.group === group,
  )

const succeeded = (m: StorageVersionMigration) => m.status?.conditions?.some((c) => c.type === 'Succeeded' && c.status === 'True')

t.test("KSVM's e2e: the state follows a CRD storage flip, a migration runs to Succeeded, etcd holds the new version", async (t) => {
  const { cp, http, crd, group, stateName, history } = await setup(t, 200)
  const v1Hash = await until(
    'the CRD in the discovery document',
    30_000,
    () => servedStorageVersionHash(http, group, 'v1', 'widgets'),
    (h) => !!h,
  )
  t.equal(v1Hash, storageVersionHash(group, 'v1', 'Widget'))
  start(t, http, group)

  const first = await until(
    'the storage state of the CRD, migrated once',
    60_000,
    () => getState(http, stateName),
    (s) => s.status?.persistedStorageVersionHashes?.length === 1 && s.status.persistedStorageVersionHashes[0] === v1Hash,
  )
  t.equal(first.status?.currentStorageVersionHash, v1Hash, 'the state shows the current hash')
  t.same(first.spec, { resource: { group, resource: 'widgets' } })
  t.same(history[0], {}, 'created without a status (the API server drops it on create)')
  t.same(
    history.find((s) => s.currentStorageVersionHash)?.persistedStorageVersionHashes,
    ['Unknown'],
    'then its first status: Unknown persisted',
  )
  const [initial] = await migrationsOf(http, group)
  t.ok(initial && succeeded(initial), 'a new state launched a migration of the resource, which Succeeded')
  t.match(initial?.metadata.name, new RegExp(`^widgets\\.${group.replace(/\./g, '\\.')}-[a-z0-9]{5}$`), 'named <resource>.<group>-<random>')

  // Change the storage version of the CRD; setStorageVersion waits for discovery's hash to change.
  await setStorageVersion(http, crd.metadata.name, 'v2')
  const v2Hash = await servedStorageVersionHash(http, group, 'v1', 'widgets')
  t.equal(v2Hash, storageVersionHash(group, 'v2', 'Widget'), 'the discovery document shows the new hash')
  t.not(v2Hash, v1Hash)

  const converged = await until(
    'the storage state to follow the new hash and converge',
    90_000,
    () => getState(http, stateName),
    (s) =>
      s.status?.currentStorageVersionHash === v2Hash &&
      s.status?.persistedStorageVersionHashes?.length === 1 &&
      s.status?.persistedStorageVersionHashes[0] === v2Hash,
  )
  t.ok(converged, 'current and persisted: the new hash alone')
  t.ok(
    history.some(
      (s) => s.currentStorageVersionHash === v2Hash && JSON.stringify(s.persistedStorageVersionHashes) === JSON.stringify([v1Hash, v2Hash]),
    ),
    'the new hash was appended to the persisted ones before the migration narrowed them',
  )

  const migrations = await migrationsOf(http, group)
  t.equal(migrations.length, 1, 'the earlier migration was deleted when the new one was launched')
  t.not(migrations[0]?.metadata.name, initial?.metadata.name)
  t.ok(migrations[0] && succeeded(migrations[0]), 'the new migration Succeeded (run by the StorageVersionMigration controller)')
  t.same(migrations[0]?.spec?.resource, { group, version: 'v2', resource: 'widgets' }, 'for the resource at its preferred version')

  t.same((await getCrd(http, crd.metadata.name)).status?.storedVersions, ['v2'], 'storedVersions narrowed')
  t.same(Object.fromEntries(await storedVersionsInEtcd(cp, group, 'widgets')), { [`${group}/v2`]: 200 }, 'etcd holds all 200 in v2')
})

t.test("a storage flip while the migration is pending: it is deleted and a new one launched (as the chart's RBAC)", async (t) => {
  const { cp, http, crd, group, stateName, history } = await setup(t, 5)
  // The trigger runs as a user holding exactly the ClusterRole the chart renders for it.
  const user = uniqueName('trigger')
  const manifests = await template(user, 'trigger-ns', { storageVersionMigrations: { trigger: { enabled: true } } })
  await grantClusterRole(cp, user, rulesOf(migratorClusterRole(manifests)), [
    { kind: 'User', apiGroup: 'rbac.authorization.k8s.io', name: user },
  ])
  const asChart = httpFor((await cp.mintUser(user)).kubeconfigPath)
  start(t, asChart, group, false) // nobody runs the migrations: they stay pending
  await until(
    'the storage state',
    60_000,
    () => getState(http, stateName),
    (s) => !!s.status?.currentStorageVersionHash,
  )
  const [pending] = await until(
    'the pending migration',
    30_000,
    () => migrationsOf(http, group),
    (ms) => ms.length === 1,
  )
  await setStorageVersion(http, crd.metadata.name, 'v2')
  const v2Hash = storageVersionHash(group, 'v2', 'Widget')
  const [relaunched] = await until(
    'a new migration in place of the pending one',
    60_000,
    () => migrationsOf(http, group),
    (ms) => ms.length === 1 && ms[0]?.metadata.name !== pending?.metadata.name,
  )
  t.same(relaunched?.spec?.resource, { group, version: 'v2', resource: 'widgets' })
  const state = await until(
    'the state to show the new hash',
    30_000,
    () => getState(http, stateName),
    (s) => s.status?.currentStorageVersionHash === v2Hash,
  )
  t.same(state.status?.persistedStorageVersionHashes, ['Unknown', v2Hash], 'never migrated: Unknown, then the new hash appended')
  t.ok(history.length >= 2, 'the watch saw the writes')
})

t.test('a stale StorageState (no heartbeat for two polls) is made anew and the resource migrated again', async (t) => {
  const { http, group, stateName, history } = await setup(t, 5)
  const hash = storageVersionHash(group, 'v1', 'Widget')
  const created = (
    await http.request<StorageState>({
      method: 'POST',
      path: STORAGE_STATE_API,
      body: {
        apiVersion: 'migration.k8s.io/v1alpha1',
        kind: 'StorageState',
        metadata: { name: stateName },
        spec: { resource: { group, resource: 'widgets' } },
      },
    })
  ).body
  // Migrated, by all it says, but last seen an hour ago: nobody knows what was written since.
  const hourAgo = new Date(Date.now() - 3600_000).toISOString().replace(/\.\d{3}Z$/, 'Z')
  await http.request({
    method: 'PUT',
    path: `${STORAGE_STATE_API}/${stateName}/status`,
    body: { ...created, status: { currentStorageVersionHash: hash, persistedStorageVersionHashes: [hash], lastHeartbeatTime: hourAgo } },
  })
  start(t, http, group, false)
  const renewed = await until(
    'the state made anew',
    60_000,
    () => getState(http, stateName),
    (s) => s.metadata.uid !== created.metadata.uid && !!s.status?.currentStorageVersionHash,
  )
  t.same(renewed.status?.persistedStorageVersionHashes, ['Unknown'], 'persisted: Unknown again')
  t.equal(renewed.status?.currentStorageVersionHash, hash)
  t.ok(Date.parse(renewed.status?.lastHeartbeatTime ?? '') > Date.parse(hourAgo), 'a fresh heartbeat')
  const migrations = await until(
    'a migration of the resource',
    30_000,
    () => migrationsOf(http, group),
    (ms) => ms.length === 1,
  )
  t.same(migrations[0]?.spec?.resource, { group, version: 'v2', resource: 'widgets' })
  t.ok(history.length >= 2)
})
