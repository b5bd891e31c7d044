/**
 * The freeze's last gaps (issue #27, item 4), each tried end to end through the real API
 * server by the narrow-RBAC user who found it: a user who may only write CRD status, a
 * CRD editor who is not break-glass, a break-glass admin, kube-controller-manager's own
 * user, and the migrator with only the RBAC it needs. The webhook is the real one,
 * installed with the shipped configuration's rules and matchConditions (plus a label
 * scope, so it sees only this file's CRDs). Denials are told apart by the webhook's reason
 * in its log line and by the HTTP status, not only by their text.
 */
import t, { type Test } from 'tap'
import { DEFAULT_MIGRATING_ANNOTATION as KEY } from '../../src/config/annotations.js'
import { builtinMigrationApi, STORAGE_MIGRATING, storageMigratingCondition } from '../../src/kube/builtin-migrations.js'
import { getCrd } from '../../src/kube/crds.js'
import { ContentType, type KubeHttp } from '../../src/kube/http.js'
import { KubeApiError } from '../../src/kube/api-errors.js'
import { crdPath } from '../../src/kube/paths.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import { migrateCrd } from '../../src/migrator/migrate.js'
import type { WalkProgress } from '../../src/migrator/engine/walker.js'
import { StateAnnotation } from '../../src/state/crd-state.js'
import {
  createCrd,
  createNamespace,
  createObjects,
  crdManifest,
  defaultSettings,
  deleteCrd,
  httpFor,
  refFor,
  setStorageVersion,
  setStorageVersionAs,
  startTestWebhook,
  storedVersionsInEtcd,
} from '../helpers/cluster.js'
import { getControlPlane, uniqueGroup, uniqueName } from '../helpers/controlplane.js'
import { capturingLogger } from '../helpers/log-capture.js'
import { until } from '../helpers/until.js'
import { grantClusterRole } from '../helpers/rbac.js'

type Creds = { certPem: string; keyPem: string }

const cp = await getControlPlane()
const admin = httpFor(cp.kubeconfigPath)
const scope = uniqueName('gaps')
// debug: the checks read every review the webhook answered, plain allowances included.
const logs = capturingLogger('debug')
const hook = await startTestWebhook(cp, scope, { migratorUsers: ['migrator', 'migrator-nosvm'], logger: logs.logger })
const quiet = capturingLogger('warn')

/** A ClusterRole with `rules`, bound to `subjects` (helpers/rbac.ts). */
const grant = (name: string, rules: unknown[], subjects: unknown[]) => grantClusterRole(cp, name, rules, subjects)
const rule = (apiGroups: string[], resources: string[], verbs: string[]) => ({ apiGroups, resources, verbs })
const crdRules = (resources: string[], verbs: string[]) => [rule(['apiextensions.k8s.io'], resources, verbs)]
const user = (name: string) => ({ kind: 'User', apiGroup: 'rbac.authorization.k8s.io', name })

// A user who may only read CRDs and write their status.
const statusUserName = `status-user-${scope}`
await grant(
  statusUserName,
  [...crdRules(['customresourcedefinitions/status'], ['get', 'patch', 'update']), ...crdRules(['customresourcedefinitions'], ['get'])],
  [user(statusUserName)],
)
const statusUser = await cp.mintUser(statusUserName)
// A CRD editor who is not break-glass.
const editorName = `crd-editor-${scope}`
await grant(editorName, crdRules(['customresourcedefinitions'], ['get', 'list', 'update', 'patch']), [user(editorName)])
const editor = await cp.mintUser(editorName)
// kube-controller-manager as its own user (without --use-service-account-credentials).
await grant(
  `kcm-${scope}`,
  [...crdRules(['customresourcedefinitions/status'], ['patch', 'update']), ...crdRules(['customresourcedefinitions'], ['get'])],
  [user('system:kube-controller-manager')],
)
const kcm = await cp.mintUser('system:kube-controller-manager')
// The migrator with what a migration needs (migrator-nosvm: the same, but may not list StorageVersionMigrations).
const migratorRules = [
  ...crdRules(['customresourcedefinitions'], ['get', 'list', 'watch', 'patch']),
  ...crdRules(['customresourcedefinitions/status'], ['patch']),
  rule(['*'], ['widgets'], ['get', 'list', 'patch']),
  rule(['discovery.k8s.io'], ['endpointslices'], ['get', 'list']),
]
await grant(
  `migrator-${scope}`,
  [...migratorRules, rule(['storagemigration.k8s.io'], ['storageversionmigrations'], ['get', 'list'])],
  [user('migrator')],
)
await grant(`migrator-nosvm-${scope}`, migratorRules, [user('migrator-nosvm')])
const migratorHttp = httpFor((await cp.mintUser('migrator')).kubeconfigPath)
const noSvmHttp = httpFor((await cp.mintUser('migrator-nosvm')).kubeconfigPath)
const statusHttp = httpFor(statusUser.kubeconfigPath)
const kcmHttp = httpFor(kcm.kubeconfigPath)

interface Answer {
  status: number
  message: string
}

/** A request that answers with its status and message instead of throwing. */
async function attempt(http: KubeHttp, request: Parameters<KubeHttp['request']>[0]): Promise<Answer> {
  try {
    const res = await http.request(request)
    return { status: res.status, message: '' }
  } catch (err) {
    if (err instanceof KubeApiError) return { status: err.status, message: err.message }
    throw err
  }
}

/** The StorageMigrating condition set as kube-controller-manager sets it: a server-side apply of status. */
function applyCondition(http: KubeHttp, name: string, status: 'True' | 'False', message: string): Promise<Answer> {
  return attempt(http, {
    method: 'PATCH',
    path: crdPath(name, 'status'),
    query: { fieldManager: 'migration-runner-controller', force: true },
    contentType: ContentType.applyPatch,
    body: {
      apiVersion: 'apiextensions.k8s.io/v1',
      kind: 'CustomResourceDefinition',
      metadata: { name },
      status: {
        conditions: [
          { type: STORAGE_MIGRATING, status, reason: 'MigrationRunning', message, lastTransitionTime: new Date().toISOString() },
        ],
      },
    },
  })
}

const merge = (as: Creds | undefined, path: string, body: unknown) =>
  cp.apiRequest(path, { method: 'PATCH', contentType: ContentType.mergePatch, body, ...(as ? { as } : {}) })

function deniedByWebhook(t: Test, res: Answer | { status: number; body: string }, reason: string, pattern: RegExp, what: string): void {
  const message = 'message' in res ? res.message : messageOf(res.body)
  t.equal(res.status, 403, `${what}: 403`)
  t.match(message, /admission webhook "storage-freeze(-rbac)?\.crd-migrator\.io" denied the request/, `${what}: by our webhook`)
  t.match(message, pattern, `${what}: saying why`)
  t.ok(
    logs.lines().some((l) => l['decision'] === 'denied' && l['reason'] === reason),
    `${what}: logged as ${reason}`,
  )
}

function messageOf(body: string): string {
  try {
    return (JSON.parse(body) as { message?: string }).message ?? body
  } catch {
    return body
  }
}

/** A CRD at storage v2 with storedVersions [v1, v2] (and an unstored v3), seen by the test webhook. */
async function crdAtV2(t: Test, versions = ['v1', 'v2', 'v3']): Promise<CustomResourceDefinition> {
  const group = uniqueGroup('gaps')
  const created = await createCrd(admin, crdManifest({ group, versions, storage: 'v1', labels: hook.labels }))
  t.teardown(async () => {
    await merge(undefined, crdPath(created.metadata.name), { metadata: { annotations: { [KEY]: null } } })
    await applyCondition(kcmHttp, created.metadata.name, 'False', 'test over')
    await deleteCrd(admin, created.metadata.name)
  })
  await setStorageVersion(admin, created.metadata.name, 'v2')
  return getCrd(admin, created.metadata.name)
}

async function freeze(crd: CustomResourceDefinition): Promise<void> {
  const res = await attempt(migratorHttp, {
    method: 'PATCH',
    path: crdPath(crd.metadata.name),
    contentType: ContentType.mergePatch,
    body: { metadata: { annotations: { [KEY]: 'true', [StateAnnotation.owner]: 'replica-a' } } },
  })
  if (res.status !== 200) throw new Error(`freezing failed: ${res.status} ${res.message}`)
}

const conditionOf = async (name: string) => storageMigratingCondition(await getCrd(admin, name))

t.test('gap 1: a status-only user can neither forge StorageMigrating=True nor lift a real one', async (t) => {
  const crd = await crdAtV2(t)
  const name = crd.metadata.name

  const forged = await applyCondition(statusHttp, name, 'True', 'forged by statususer')
  deniedByWebhook(t, forged, 'builtin-condition-guarded', /may not add it/, 'adding StorageMigrating=True through /status')
  t.equal(await conditionOf(name), undefined, 'no condition on the CRD')

  // kube-controller-manager's own user: allowed, and not even sent to the webhook.
  const before = await hook.reviews()
  const real = await applyCondition(kcmHttp, name, 'True', 'Migration svm-real is running')
  t.equal(real.status, 200, 'kube-controller-manager marks the CRD')
  t.equal(await hook.reviews(), before, 'without calling the webhook (its condition writes skip it on a CRD we do not freeze)')
  t.equal((await conditionOf(name))?.status, 'True')

  const lifted = await applyCondition(statusHttp, name, 'False', 'lifted by statususer')
  deniedByWebhook(t, lifted, 'builtin-condition-guarded', /change its status from "True" to "False"/, 'setting it to False through /status')
  t.equal((await conditionOf(name))?.status, 'True', 'the built-in freeze holds')
  const flip = await setStorageVersionAs(cp, editor, await getCrd(admin, name), 'v1')
  deniedByWebhook(
    t,
    flip,
    'storage-version-frozen',
    /StorageMigrating=True/,
    "so a CRD editor still cannot move storage under the built-in migrator's freeze",
  )

  // A break-glass user clears one left behind (a deleted StorageVersionMigration): allowed, audited.
  const cleared = await applyCondition(admin, name, 'False', 'cleared by hand')
  t.equal(cleared.status, 200, 'break-glass clears the condition')
  t.ok(
    logs.lines().some((l) => l['crd'] === name && l['reason'] === 'break-glass-override'),
    'logged as a break-glass override',
  )
})

t.test('gap 1: migrate waits only for a built-in StorageVersionMigration that exists, and quotes condition text cleaned', async (t) => {
  const crd = await crdAtV2(t, ['v1', 'v2'])
  const name = crd.metadata.name
  const ns = uniqueName('gaps')
  await createNamespace(admin, ns)
  await createObjects(admin, refFor(crd, 'v1'), [ns], 5)
  // A condition no StorageVersionMigration stands behind, with a hostile message.
  const hostile = `forged by statususer\n\u001b[2J${'x'.repeat(1000)}`
  t.equal((await applyCondition(kcmHttp, name, 'True', hostile)).status, 200)

  if ((await builtinMigrationApi(admin)) === undefined) {
    // No built-in migrator on this server (off by default before 1.35): the condition means nothing.
    const result = await migrateCrd(name, defaultSettings(), { http: noSvmHttp, logger: quiet.logger, owner: 'gaps-nosvm' })
    t.equal(result.outcome, 'Succeeded', `storagemigration.k8s.io is not served, so nothing keeps the run out: ${result.reason}`)
    return
  }
  const blind = await migrateCrd(name, defaultSettings(), { http: noSvmHttp, logger: quiet.logger, owner: 'gaps-nosvm' })
  t.equal(blind.outcome, 'Skipped', 'a migrator that cannot list StorageVersionMigrations goes by the condition')
  t.equal(blind.skipReason, 'builtin-migration')
  t.match(
    blind.reason,
    // The newline a space, the escape sequence dropped whole (not only its ESC), the rest cut.
    /StorageMigrating=True \(forged by statususer x+…\(1021 characters\)\) and its built-in StorageVersionMigrations cannot be listed/,
  )
  t.notMatch(blind.reason, /\[2J/, 'no remnant of the escape sequence')
  t.notMatch(blind.reason, /\p{Cc}/u, 'no newline or control character from the condition')
  t.ok(blind.reason.length < 400, `the quoted text is cut (${blind.reason.length} characters)`)

  const result = await migrateCrd(name, defaultSettings(), { http: migratorHttp, logger: quiet.logger, owner: 'gaps-svm' })
  t.equal(result.outcome, 'Succeeded', `not kept out by a condition no migration stands behind: ${result.reason}`)
  t.strictSame(result.storedVersionsAfter, ['v2'])
  const warning = quiet.lines().find((l) => typeof l['msg'] === 'string' && /no built-in StorageVersionMigration/.test(l['msg']))
  t.ok(warning, 'the unbacked condition is said in the log')
  t.notMatch(String(warning?.['condition']), /\p{Cc}/u, 'cleaned there too')
  t.ok(String(warning?.['condition']).length < 240, 'and cut')
})

t.test('gap 2: while frozen, the versions that hold objects stay served and the conversion stays, for everyone', async (t) => {
  const crd = await crdAtV2(t)
  const name = crd.metadata.name
  await freeze(crd)
  const unserve = (as: Creds | undefined, version: string) =>
    merge(as, crdPath(name), { spec: { versions: crd.spec.versions.map((v) => ({ ...v, served: v.name !== version })) } })
  const convert = (as: Creds | undefined) =>
    merge(as, crdPath(name), {
      spec: {
        conversion: {
          strategy: 'Webhook',
          webhook: { conversionReviewVersions: ['v1'], clientConfig: { url: 'https://attacker.example.com/convert' } },
        },
      },
    })

  deniedByWebhook(
    t,
    await unserve(editor, 'v1'),
    'served-versions-frozen',
    /version v1 holds its objects/,
    'a CRD editor un-serving a stored version',
  )
  deniedByWebhook(
    t,
    await unserve(editor, 'v2'),
    'served-versions-frozen',
    /version v2 holds its objects/,
    'un-serving the storage version',
  )
  const adminUnserve = await unserve(undefined, 'v1')
  deniedByWebhook(t, adminUnserve, 'served-versions-frozen', /for any user/, 'system:masters un-serving a stored version')
  t.match(
    messageOf(adminUnserve.body),
    /first removes the annotation in a request of its own/,
    'the refusal says how break-glass lifts the freeze first',
  )
  deniedByWebhook(
    t,
    await convert(editor),
    'conversion-frozen',
    /spec\.conversion \(strategy "None" -> "Webhook"/,
    'a CRD editor pointing conversion at a webhook',
  )
  deniedByWebhook(t, await convert(undefined), 'conversion-frozen', /for any user/, 'system:masters too')
  const after = await getCrd(admin, name)
  t.ok(
    after.spec.versions.every((v) => v.served),
    'every version still served',
  )
  t.strictSame(after.spec.conversion, crd.spec.conversion, 'conversion unchanged')

  t.equal((await unserve(editor, 'v3')).status, 200, 'a version holding no object may stop being served')

  t.equal(
    (await merge(undefined, crdPath(name), { metadata: { annotations: { [KEY]: null } } })).status,
    200,
    'break-glass lifts the freeze',
  )
  t.equal((await unserve(editor, 'v1')).status, 200, 'then the editor may un-serve v1 (the API server keeps its own rules)')
})

t.test("gap 2: under the built-in migrator's freeze (StorageMigrating=True) too", async (t) => {
  const crd = await crdAtV2(t)
  const name = crd.metadata.name
  t.equal((await applyCondition(kcmHttp, name, 'True', 'Migration svm-x is running')).status, 200)
  const res = await merge(editor, crdPath(name), {
    spec: { versions: crd.spec.versions.map((v) => ({ ...v, served: v.name !== 'v1' })) },
  })
  deniedByWebhook(t, res, 'served-versions-frozen', /StorageMigrating=True/, 'un-serving a stored version while the built-in migrator runs')
})

/** A CRD with `count` objects stored in v1, storage flipped to v2 and frozen by nobody yet. */
async function crdWithObjects(t: Test, count: number) {
  const group = uniqueGroup('gaps')
  const ns = uniqueName('gaps')
  await createNamespace(admin, ns)
  const created = await createCrd(admin, crdManifest({ group, versions: ['v1', 'v2'], storage: 'v1', labels: hook.labels }))
  t.teardown(async () => {
    await merge(undefined, crdPath(created.metadata.name), { metadata: { annotations: { [KEY]: null } } })
    await deleteCrd(admin, created.metadata.name)
  })
  await createObjects(admin, refFor(created, 'v1'), [ns], count)
  await setStorageVersion(admin, created.metadata.name, 'v2')
  return { group, crd: await getCrd(admin, created.metadata.name) }
}

/** Starts a migration as the migrator; `latest()` is its last progress. */
function startRun(name: string) {
  let latest: WalkProgress['counts'] | undefined
  // A fixed pace, so the run would take ~30 s: what it does after the freeze goes is what is measured.
  const running = migrateCrd(name, defaultSettings({ concurrency: 4, qps: 100, progressIntervalMs: 1000 }), {
    http: migratorHttp,
    logger: quiet.logger,
    owner: 'gaps-run',
    onProgress: (_phase, p) => {
      latest = { ...p.counts }
    },
  })
  return { running, rewritten: () => latest?.rewritten ?? 0 }
}

t.test('gap 3: a break-glass user lifting the freeze mid-run stops the run at once', async (t) => {
  const total = 3000
  const { group, crd } = await crdWithObjects(t, total)
  const name = crd.metadata.name
  const run = startRun(name)
  await until(
    '300 objects rewritten',
    60_000,
    async () => run.rewritten(),
    (n) => n >= 300,
  )
  const atLift = run.rewritten()
  const lift = await merge(undefined, crdPath(name), { metadata: { annotations: { [KEY]: null } } })
  t.equal(lift.status, 200, 'break-glass removes the annotation mid-run')
  const result = await run.running

  t.equal(result.outcome, 'Failed')
  t.equal(result.errorCode, 'CRDM_FREEZE_LIFTED', result.reason)
  t.match(result.reason, /was removed by someone else during the migration; stopped at once/)
  const etcd = await storedVersionsInEtcd(cp, group, 'widgets')
  const inV2 = etcd.get(`${group}/v2`) ?? 0
  const inV1 = etcd.get(`${group}/v1`) ?? 0
  t.comment(`rewritten when the freeze was lifted: ${atLift}; in v2 in etcd after the run: ${inV2}; still in v1: ${inV1}`)
  t.ok(
    inV2 - atLift <= total / 20,
    `few objects written after the lift (${inV2 - atLift}; the run used to write all ${total - atLift} left)`,
  )
  t.ok(inV1 >= total / 2, `the run ended long before every object was written (${inV1} of ${total} still in v1)`)
  const after = await getCrd(admin, name)
  t.strictSame(after.status?.storedVersions, ['v1', 'v2'], 'storedVersions untouched')
  t.notOk(KEY in (after.metadata.annotations ?? {}), 'not frozen again by the ending run')
  t.match(after.metadata.annotations?.[StateAnnotation.lastResult], /^Failed: CRDM_FREEZE_LIFTED: /, 'the CRD records why it stopped')
})

t.test("gap 3: the CRD's generation moving under the freeze stops the run at once", async (t) => {
  const total = 2000
  const { group, crd } = await crdWithObjects(t, total)
  const name = crd.metadata.name
  const run = startRun(name)
  await until(
    '200 objects rewritten',
    60_000,
    async () => run.rewritten(),
    (n) => n >= 200,
  )
  const atChange = run.rewritten()
  // Allowed under the freeze (it moves no storage), but a new generation all the same.
  const change = await merge(editor, crdPath(name), { spec: { names: { shortNames: ['gw'] } } })
  t.equal(change.status, 200, 'a CRD editor adds a short name to the frozen CRD')
  const result = await run.running

  t.equal(result.errorCode, 'CRDM_CRD_CHANGED', result.reason)
  t.match(result.reason, /CRD generation changed during the migration \(\d+ -> \d+\); stopped at once/)
  const etcd = await storedVersionsInEtcd(cp, group, 'widgets')
  const inV2 = etcd.get(`${group}/v2`) ?? 0
  t.comment(`rewritten at the change: ${atChange}; in v2 after the run: ${inV2}`)
  t.ok(inV2 - atChange <= total / 20, `few objects written after the change (${inV2 - atChange})`)
  t.ok((etcd.get(`${group}/v1`) ?? 0) >= total / 2, 'the run ended long before every object was written')
  const after = await getCrd(admin, name)
  t.strictSame(after.status?.storedVersions, ['v1', 'v2'], 'storedVersions untouched')
  t.notOk(KEY in (after.metadata.annotations ?? {}), 'the run lifted its freeze')
})
