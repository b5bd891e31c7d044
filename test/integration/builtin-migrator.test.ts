/**
 * crd-migrator next to Kubernetes' own storage version migrator (KEP-4192): a real
 * kube-controller-manager running the storage-version-migrator-controller (as its own
 * ServiceAccount, as kubeadm runs it) on the real kube-apiserver + etcd.
 */
import { pino } from 'pino'
import t, { type Test } from 'tap'
import { ConfigSchema } from '../../src/config/schema.js'
import { MigrationController } from '../../src/controller/controller.js'
import {
  builtinMigrationApi,
  builtinMigrationState,
  getBuiltinMigration,
  listBuiltinMigrations,
  migrationsFor,
  storageMigratingCondition,
  type BuiltinMigration,
} from '../../src/kube/builtin-migrations.js'
import { getCrd } from '../../src/kube/crds.js'
import { ContentType, type KubeHttp } from '../../src/kube/http.js'
import { KubeApiError } from '../../src/kube/api-errors.js'
import { crdPath } from '../../src/kube/paths.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import { migrateCrd, type MigrationResult } from '../../src/migrator/migrate.js'
import type { ControlPlane } from '../../dev/controlplane/controlplane.js'
import {
  defaultSettings,
  httpFor,
  refFor,
  setStorageVersion,
  setStorageVersionAs,
  startTestWebhook,
  storedVersionsInEtcd,
  type TestWebhook,
  serverSideApply as apply,
} from '../helpers/cluster.js'
import { ensureBinaries } from '../../dev/controlplane/controlplane.js'
import { startPrivateControlPlane, uniqueName } from '../helpers/controlplane.js'
import { capturingLogger } from '../helpers/log-capture.js'
import { until } from '../helpers/until.js'
import { crdWithObjects } from '../helpers/fixtures.js'

const logger = pino({ level: 'silent' })
/** The webhook's review lines (debug: plain allowances too), to see who kube-controller-manager writes as. */
const reviews = capturingLogger('debug')
/** kube-controller-manager's storage version migrator with --use-service-account-credentials, as the harness runs it (and kubeadm). */
const KCM_SVM_USER = 'system:serviceaccount:kube-system:storage-version-migrator-controller'
const MIGRATING = 'ksvm.sigs.k8s.io/migrating'

type Prepared = Awaited<ReturnType<typeof appliedByAlice>>
interface Setup {
  cp: ControlPlane
  http: KubeHttp
  webhook: TestWebhook
  api: string
  /** Each test's CRD, made up front: kube-controller-manager's garbage collector, whose cache the built-in migrator reads, picks up new resources every 30 s, so all three in one go. */
  crds: { run: Prepared; hold: Prepared; engine: Prepared }
}
let shared: Promise<Setup | { skip: string }> | undefined
/** One control plane with kube-controller-manager for the whole file. */
function setupOnce() {
  shared ??= (async () => {
    // Asked of the binaries before anything starts: the built-in migrator's API differs by
    // version (v1alpha1 before 1.35), and an older control plane is not worth starting.
    const { kubeMinor } = await ensureBinaries()
    if (kubeMinor !== undefined && kubeMinor < 37) {
      return { skip: `kube-controller-manager 1.${kubeMinor} writes no StorageMigrating condition (it arrived in 1.37)` }
    }
    const cp = await startPrivateControlPlane({ controllerManager: true })
    const http = httpFor(cp.kubeconfigPath)
    const webhook = await startTestWebhook(cp, 'builtin', { migratorUsers: ['migrator'], logger: reviews.logger })
    const api = await builtinMigrationApi(http)
    if (!api) throw new Error('this kube-apiserver serves no storagemigration.k8s.io')
    const [run, hold, engine] = await Promise.all([
      appliedByAlice(http, webhook, 120, 'bi-run'),
      appliedByAlice(http, webhook, 150, 'bi-hold'),
      appliedByAlice(http, webhook, 100, 'bi-engine'),
    ])
    return { cp, http, webhook, api, crds: { run, hold, engine } }
  })()
  return shared
}

/** A CRD seen by the test webhook, `count` objects applied through v1 by `alice`, then storage on v2 with v1 unserved. */
async function appliedByAlice(http: KubeHttp, webhook: TestWebhook, count: number, prefix: string) {
  const { group, ns, crd } = await crdWithObjects(http, { prefix, count: 0, flipTo: false, labels: { ...webhook.labels } })
  const v1 = refFor(crd, 'v1')
  const names = Array.from({ length: count }, (_, i) => `w-${String(i).padStart(4, '0')}`)
  for (let i = 0; i < names.length; i += 20) {
    await Promise.all(names.slice(i, i + 20).map((name, j) => apply(http, v1, ns, name, 'alice', { color: 'red', index: i + j })))
  }
  await setStorageVersion(http, crd.metadata.name, 'v2', ['v1'])
  return { group, ns, crd: await getCrd(http, crd.metadata.name), names }
}

async function createBuiltin(http: KubeHttp, api: string, crd: CustomResourceDefinition): Promise<string> {
  const name = uniqueName('svm')
  await http.request({
    method: 'POST',
    path: `/apis/storagemigration.k8s.io/${api}/storageversionmigrations`,
    body: {
      apiVersion: `storagemigration.k8s.io/${api}`,
      kind: 'StorageVersionMigration',
      metadata: { name },
      spec: { resource: { group: crd.spec.group, resource: crd.spec.names.plural } },
    },
  })
  return name
}

/** A user who may read CRDs and write their status, nothing else. */
async function statusWriter(cp: ControlPlane): Promise<{ certPem: string; keyPem: string }> {
  const name = uniqueName('status-writer')
  const rbac = '/apis/rbac.authorization.k8s.io/v1'
  for (const [path, body] of [
    [
      `${rbac}/clusterroles`,
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRole',
        metadata: { name },
        rules: [
          { apiGroups: ['apiextensions.k8s.io'], resources: ['customresourcedefinitions/status'], verbs: ['get', 'patch', 'update'] },
          { apiGroups: ['apiextensions.k8s.io'], resources: ['customresourcedefinitions'], verbs: ['get'] },
        ],
      },
    ],
    [
      `${rbac}/clusterrolebindings`,
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRoleBinding',
        metadata: { name },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name },
        subjects: [{ kind: 'User', apiGroup: 'rbac.authorization.k8s.io', name }],
      },
    ],
  ] as const) {
    const res = await cp.apiRequest(path, { method: 'POST', body })
    if (res.status !== 201) throw new Error(`POST ${path}: ${res.status} ${res.body}`)
  }
  return cp.mintUser(name)
}

const crdCondition = async (http: KubeHttp, name: string) => storageMigratingCondition(await getCrd(http, name))?.status

/** Runs the migration controller in-process for this test, collecting its results. */
function startController(t: Test, http: KubeHttp, crdName: string) {
  const config = ConfigSchema.parse({ migrator: { selector: { names: [crdName], labelSelector: '' }, takeoverAfterSeconds: 2 } })
  const results: MigrationResult[] = []
  const stop = new AbortController()
  const controller = new MigrationController({ http, config, logger, owner: 'builtin-test', onResult: (r) => results.push(r) })
  const running = controller.run(stop.signal)
  t.teardown(async () => {
    stop.abort()
    await running
  })
  return results
}

t.test('a built-in migration running: the storage flip is refused, our controller waits, then cleans managedFields', async (t) => {
  const setup = await setupOnce()
  if ('skip' in setup) return t.plan(0, setup.skip)
  const { cp, http, api } = setup
  const { crd, ns, names } = setup.crds.run
  const name = crd.metadata.name

  const svm = await createBuiltin(http, api, crd)
  // kube-controller-manager marks the CRD first, then runs; stop it right there.
  await until(
    'StorageMigrating=True',
    60_000,
    () => crdCondition(http, name),
    (s) => s === 'True',
  )
  await cp.pauseControllerManager()
  let resumed = false
  t.teardown(async () => {
    if (!resumed) await cp.resumeControllerManager()
  })
  t.not(builtinMigrationState((await getBuiltinMigration(http, api, svm))!), 'Succeeded', 'the built-in migration has not finished')

  const operator = await cp.mintUser('operator', ['system:masters'])
  const flip = await setStorageVersionAs(cp, operator, await getCrd(http, name), 'v1')
  t.equal(flip.status, 403, 'moving storage back is refused while the built-in migration runs, even to system:masters')
  t.match(flip.body, /StorageMigrating=True/)
  t.equal((await getCrd(http, name)).spec.versions.find((v) => v.storage)?.name, 'v2', 'storage stayed on v2')

  const direct = await migrateCrd(name, defaultSettings(), { http, logger, owner: 'test-direct' })
  t.equal(direct.outcome, 'Skipped', 'a direct run does not start')
  t.equal(direct.skipReason, 'builtin-migration')
  t.match(direct.reason, new RegExp(`${svm} (runs|waits to run) on this resource`), 'kept out by the StorageVersionMigration itself')

  // The condition is kube-controller-manager's: a user who may write CRD status cannot lift it.
  const statusOnly = await statusWriter(cp)
  const lift = await cp.apiRequest(`${crdPath(name)}/status`, {
    method: 'PATCH',
    as: statusOnly,
    contentType: ContentType.jsonPatch,
    body: [{ op: 'replace', path: '/status/conditions', value: [] }],
  })
  t.equal(lift.status, 403, 'a status-only user removing StorageMigrating=True is refused')
  t.match(lift.body, /admission webhook \\"storage-freeze\.crd-migrator\.io\\" denied the request/)
  t.ok(
    reviews.lines().some((l) => l['crd'] === name && l['reason'] === 'builtin-condition-guarded'),
    'by the condition guard',
  )
  t.equal(await crdCondition(http, name), 'True', 'the built-in freeze holds')

  const results = startController(t, http, name)
  await until(
    'the controller looked at the CRD',
    60_000,
    async () => results.length,
    (n) => n >= 1,
  )
  t.equal(results[0]!.skipReason, 'builtin-migration', 'the controller does not start a concurrent run')
  t.notOk((await getCrd(http, name)).metadata.annotations?.[MIGRATING], 'and never froze the CRD')

  await cp.resumeControllerManager()
  resumed = true
  const done = await until(
    'the built-in migration to finish',
    120_000,
    async () => ({ svm: await getBuiltinMigration(http, api, svm), crd: await getCrd(http, name) }),
    (v) =>
      v.svm !== undefined &&
      builtinMigrationState(v.svm) !== 'Running' &&
      builtinMigrationState(v.svm) !== 'Pending' &&
      storageMigratingCondition(v.crd)?.status === 'False',
  )
  t.equal(builtinMigrationState(done.svm!), 'Succeeded', 'the built-in migration succeeded')
  t.strictSame(done.crd.status?.storedVersions, ['v2'], 'and narrowed storedVersions itself')

  const cleaned = await until(
    'our cleanup after the built-in migration',
    120_000,
    async () => results.find((r) => r.outcome !== 'Skipped'),
    (r) => r !== undefined,
  )
  t.equal(cleaned!.outcome, 'Succeeded', cleaned!.reason)
  t.equal(cleaned!.storage, undefined, 'no storage phase of ours: the built-in one did it')
  t.equal(cleaned!.cleanup?.counts.rewritten, names.length, 'every object had its v1 managedFields entry moved to v2')
  const etcd = await storedVersionsInEtcd(cp, crd.spec.group, crd.spec.names.plural)
  t.strictSame(Object.fromEntries(etcd), { [`${crd.spec.group}/v2`]: names.length }, 'etcd: every object stored in v2')

  // Drop v1 entirely; server-side apply by the old manager still works (kubernetes#111937 without the cleanup).
  await http.request({
    method: 'PATCH',
    path: crdPath(name),
    contentType: ContentType.jsonPatch,
    body: [
      { op: 'test', path: '/spec/versions/0/name', value: 'v1' },
      { op: 'remove', path: '/spec/versions/0' },
    ],
  })
  await until(
    'v1 to be gone',
    30_000,
    () =>
      http.request({ method: 'GET', path: `/apis/${crd.spec.group}/v1/namespaces/${ns}/widgets` }).then(
        () => false,
        (err: unknown) => err instanceof KubeApiError && err.status === 404,
      ),
    (gone) => gone,
  )
  const v2 = refFor(crd, 'v2')
  const applied = await apply(http, v2, ns, names[0]!, 'alice', { color: 'blue', index: 0 })
  t.ok(
    (applied.body.metadata.managedFields ?? []).every((e) => e.apiVersion === `${crd.spec.group}/v2`),
    'server-side apply by the old manager works, every entry in v2',
  )
})

t.test('our freeze holds a built-in migration back until it is lifted', async (t) => {
  const setup = await setupOnce()
  if ('skip' in setup) return t.plan(0, setup.skip)
  const { http, api } = setup
  const { crd, names } = setup.crds.hold
  const name = crd.metadata.name
  let sawHeld = false
  const run = migrateCrd(name, defaultSettings({ qps: 30, concurrency: 2 }), {
    http,
    logger,
    owner: 'test-hold',
    onProgress: () => {},
  })
  // Once our freeze is on, someone asks the built-in migrator for the same resource.
  await until(
    'our freeze',
    60_000,
    async () => (await getCrd(http, name)).metadata.annotations?.[MIGRATING],
    (v) => v === 'true',
  )
  const svm = await createBuiltin(http, api, crd)
  // Checked all along until our freeze is lifted: the built-in migration held back.
  const watch = until(
    'our freeze to be lifted (or the built-in migration to start under it)',
    600_000,
    async () => {
      const c = await getCrd(http, name)
      if (c.metadata.annotations?.[MIGRATING] !== 'true') return { frozen: false, startedUnderFreeze: undefined }
      const m = await getBuiltinMigration(http, api, svm)
      if (storageMigratingCondition(c)?.status === 'True' || (m && builtinMigrationState(m) !== 'Pending'))
        return { frozen: true, startedUnderFreeze: JSON.stringify(m?.status) }
      sawHeld = true
      return { frozen: true, startedUnderFreeze: undefined }
    },
    (v) => !v.frozen || v.startedUnderFreeze !== undefined,
    { everyMs: 200 },
  ).then(({ startedUnderFreeze }) => {
    if (startedUnderFreeze !== undefined) throw new Error(`the built-in migration started under our freeze: ${startedUnderFreeze}`)
  })
  const result = await run
  await watch
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.equal(result.storage?.counts.seen, names.length)
  t.ok(sawHeld, 'while we were frozen, the built-in migration stayed Pending and the CRD never said StorageMigrating=True')
  const after = await until(
    'the built-in migration to run after our freeze',
    120_000,
    () => getBuiltinMigration(http, api, svm),
    (m) => m !== undefined && builtinMigrationState(m) === 'Succeeded',
  )
  t.ok(after, 'then kube-controller-manager ran it')
})

t.test('--engine builtin: kube-controller-manager rewrites the objects inside our freeze and checks', async (t) => {
  const setup = await setupOnce()
  if ('skip' in setup) return t.plan(0, setup.skip)
  const { cp, http, api } = setup
  const { crd, names } = setup.crds.engine
  const name = crd.metadata.name
  const before = await storedVersionsInEtcd(cp, crd.spec.group, crd.spec.names.plural)
  t.strictSame(Object.fromEntries(before), { [`${crd.spec.group}/v1`]: names.length }, 'etcd: every object stored in v1 before')

  let sawDelegated = false
  const polling = { on: true }
  // Watches the CRD until the run returns.
  const poll = until(
    'the run to return, watching the CRD',
    600_000,
    async () => {
      const on = polling.on
      const c = await getCrd(http, name)
      if (c.metadata.annotations?.[MIGRATING] === 'true' && storageMigratingCondition(c)?.status === 'True') sawDelegated = true
      return on
    },
    (on) => !on,
  )
  const result = await migrateCrd(name, defaultSettings({ engine: 'builtin' }), { http, logger, owner: 'test-engine' })
  polling.on = false
  await poll
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.ok(result.builtin?.name.startsWith('crd-migrator-'), 'a built-in StorageVersionMigration did the storage phase')
  t.equal(result.storage, undefined, 'not our writer')
  t.strictSame(result.storedVersionsAfter, ['v2'])
  t.equal(result.cleanup?.counts.rewritten, names.length, 'our cleanup ran after it')
  t.ok(sawDelegated, 'kube-controller-manager marked the CRD StorageMigrating while our freeze held')
  // Under our freeze its condition writes reach the webhook: who makes them, and that they pass.
  const kcmReviews = reviews.lines().filter((l) => l['crd'] === name && l['subResource'] === 'status' && l['user'] === KCM_SVM_USER)
  t.ok(kcmReviews.length > 0, `kube-controller-manager writes the condition as ${KCM_SVM_USER} (--use-service-account-credentials)`)
  t.ok(
    kcmReviews.some((l) => l['decision'] === 'allowed' && l['reason'] === 'allowed'),
    'with a ServiceAccount token, so it counts as kube-controller-manager (identities.builtinMigratorUsers): marking the CRD passes',
  )
  t.notOk(
    kcmReviews.some((l) => l['reason'] === 'builtin-condition-guarded'),
    'never refused as someone else writing the condition',
  )
  t.ok(
    kcmReviews.every((l) => l['decision'] === 'allowed' || l['reason'] === 'stored-versions-frozen'),
    'only its narrowing of storedVersions under our freeze is refused (we narrow them ourselves, after our checks)',
  )
  t.comment(`kube-controller-manager's status writes: ${JSON.stringify(kcmReviews.map((l) => [l['user'], l['decision'], l['reason']]))}`)
  const etcd = await storedVersionsInEtcd(cp, crd.spec.group, crd.spec.names.plural)
  t.strictSame(Object.fromEntries(etcd), { [`${crd.spec.group}/v2`]: names.length }, 'etcd: every object stored in v2')
  const ours = migrationsFor(await listBuiltinMigrations(http, api), crd.spec.group, crd.spec.names.plural)
  t.strictSame(
    ours.map((m: BuiltinMigration) => [m.metadata.name, builtinMigrationState(m)]),
    [[result.builtin!.name, 'Succeeded']],
    'one built-in StorageVersionMigration, Succeeded (kept, as a record)',
  )
  const after = await getCrd(http, name)
  t.notOk(after.metadata.annotations?.[MIGRATING], 'freeze lifted')
  t.notOk(after.metadata.annotations?.['crd-migrator.io/builtin-migration'], 'the delegation note removed')
  await until(
    'StorageMigrating=False',
    120_000,
    () => crdCondition(http, name),
    (s) => s === 'False',
  )
  t.strictSame((await getCrd(http, name)).status?.storedVersions, ['v2'], 'storedVersions stay [v2]')
})
