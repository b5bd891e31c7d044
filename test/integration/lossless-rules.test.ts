/**
 * The lossless check's rules on the real API server (issue: "only real loss is refused"):
 * round-trip bookkeeping that is never stored passes, reported; a move is named as a move
 * and runs only with consent for both ends; a field a schema prunes from every view, or
 * from the storage view of an unserved stored version, is still found (managedFields);
 * objects nothing can check are refused unless accepted; consent on the CRD itself counts
 * only from a user RBAC allows to give it. etcd is read to prove what was stored.
 */
import t from 'tap'
import { pino } from 'pino'
import { startConversionWebhook } from '../../dev/conversion/webhook.js'
import { getCrd } from '../../src/kube/crds.js'
import { ContentType } from '../../src/kube/http.js'
import { crdPath, objectPath } from '../../src/kube/paths.js'
import { dryRun } from '../../src/migrator/dry-run.js'
import { acceptHint } from '../../src/migrator/lossless/check.js'
import { migrateCrd, type MigrationSettings } from '../../src/migrator/migrate.js'
import { ConsentAnnotation } from '../../src/state/crd-state.js'
import { consentPolicy } from '../../src/webhook/consent-policy.js'
import { grantClusterRole } from '../helpers/rbac.js'
import { runProcess } from '../helpers/run-process.js'
import { defaultSettings, httpFor, refFor, setStorageVersion } from '../helpers/cluster.js'
import { getControlPlane, uniqueName } from '../helpers/controlplane.js'
import { etcdWidgets, OPEN_SCHEMA, specOf, specSchema, storedAt, twoVersions, type Obj, type TwoVersions } from '../helpers/two-versions.js'

const logger = pino({ level: 'silent' })
const cp = await getControlPlane()
const http = httpFor(cp.kubeconfigPath)

type Made = TwoVersions
const spec = specSchema
const open = OPEN_SCHEMA
const made = (prefix: string, schemas: { v1: Obj; v2: Obj }, count: number, body: (i: number) => Obj, conversion?: Obj) =>
  twoVersions(http, prefix, schemas, count, body, { conversion })
const etcdObjects = (m: Made) => etcdWidgets(cp, m.group)
const metaOf = (o: Obj | undefined) => (o?.['metadata'] ?? {}) as { annotations?: Record<string, string>; labels?: Record<string, string> }
const versionsIn = storedAt

const run = (m: Made, settings: MigrationSettings) => migrateCrd(m.name, settings, { http, logger, owner: 'lossless-rules' })

/** Replaces both versions' schemas (an operator narrowing every version at once). */
async function setSchemas(m: Made, schemas: { v1: Obj; v2: Obj }): Promise<void> {
  const crd = await getCrd(http, m.name)
  const versions = crd.spec.versions.map((v) => ({ ...v, schema: v.name === 'v1' ? schemas.v1 : schemas.v2 }))
  await http.request({ method: 'PATCH', path: crdPath(m.name), contentType: ContentType.mergePatch, body: { spec: { versions } } })
}

const withToken = spec({ a: { type: 'string' }, token: { type: 'string' } })
const withoutToken = spec({ a: { type: 'string' } })

t.test('round-trip bookkeeping that is never stored passes, reported; etcd holds no trace of it', async (t) => {
  const webhook = await startConversionWebhook()
  t.teardown(() => webhook.stop())
  // As Cluster API's conversion does: the way out to the old version writes the hub's
  // JSON into an annotation, the way in consumes it.
  const KEY = 'example.com/conversion-data'
  webhook.tamper((o, to) => {
    const metadata = { ...((o['metadata'] ?? {}) as Obj) }
    const annotations = { ...((metadata['annotations'] ?? {}) as Record<string, string>) }
    if (to.endsWith('/v1')) annotations[KEY] = JSON.stringify(o['spec'] ?? {})
    else delete annotations[KEY]
    metadata['annotations'] = annotations
    return { ...o, metadata }
  })
  const m = await made(
    'bookkeeping',
    { v1: open, v2: open },
    12,
    (i) => ({ spec: { image: `img-${i}`, replicas: i } }),
    webhook.conversion(),
  )
  await setStorageVersion(http, m.name, 'v2')
  const planned = await dryRun(http, m.name, defaultSettings(), logger)
  t.equal(planned.lossless?.lossy, 0, 'the dry run agrees: nothing refused')
  t.equal(planned.lossless?.bookkeeping, 12, 'bookkeeping counted')
  const result = await run(m, defaultSettings())
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.equal(result.lossless?.bookkeeping, 12, 'every object reported with bookkeeping')
  t.equal(result.lossless?.storageViews, 12, 'one storage-version read per object with an unexplained addition')
  t.match(result.lossless?.changes, [{ pattern: `metadata.annotations["${KEY}"]`, change: 'added', verdict: 'bookkeeping', objects: 12 }])
  const etcd = await etcdObjects(m)
  t.same(versionsIn(etcd), new Set(['v2']))
  const o = etcd.get('obj-00005')!
  t.notOk(metaOf(o).annotations?.[KEY], 'the bookkeeping annotation was not stored')
  t.same(specOf(o), { template: { replicas: 5, containers: [{ image: 'img-5' }] } }, 'the content, by value')
})

t.test('an annotation the webhook stores is injected content: refused, even named like bookkeeping', async (t) => {
  const webhook = await startConversionWebhook()
  t.teardown(() => webhook.stop())
  webhook.tamper((o) => {
    const metadata = { ...((o['metadata'] ?? {}) as Obj) }
    metadata['annotations'] = { ...((metadata['annotations'] ?? {}) as Obj), 'example.com/conversion-data': 'stored' }
    return { ...o, metadata }
  })
  const m = await made('stored-note', { v1: open, v2: open }, 5, (i) => ({ spec: { image: `img-${i}` } }), webhook.conversion())
  await setStorageVersion(http, m.name, 'v2')
  const result = await run(m, defaultSettings())
  t.equal(result.outcome, 'Blocked', result.reason)
  t.equal(result.errorCode, 'CRDM_DATA_LOSS')
  t.match(result.reason, 'metadata.annotations[…] added (5 objects)', 'the key elided in the public reason')
  t.match(result.lossless?.changes, [{ pattern: 'metadata.annotations["example.com/conversion-data"]', verdict: 'refused' }])
  t.same(versionsIn(await etcdObjects(m)), new Set(['v1']), 'nothing rewritten')
})

t.test('a move is named as a move, refused without consent for both ends, and runs with it', async (t) => {
  const webhook = await startConversionWebhook()
  t.teardown(() => webhook.stop())
  // Tekton v0.49's pipelineruns: spec.timeout becomes spec.timeouts.pipeline.
  webhook.tamper((o) => {
    const s = { ...specOf(o) }
    if (s['timeout'] !== undefined) {
      s['timeouts'] = { pipeline: s['timeout'] }
      delete s['timeout']
    }
    return { ...o, spec: s }
  })
  const m = await made(
    'move',
    { v1: open, v2: open },
    6,
    (i) => ({ spec: { image: `img-${i}`, timeout: `${i + 1}h0m0s` } }),
    webhook.conversion(),
  )
  await setStorageVersion(http, m.name, 'v2')
  const blocked = await run(m, defaultSettings({ acceptedChanges: ['spec.timeout'] }))
  t.equal(blocked.outcome, 'Blocked', blocked.reason)
  t.match(blocked.reason, 'spec.timeouts.pipeline moved from spec.timeout')
  t.equal(
    acceptHint(m.name, blocked.lossless!.changes),
    `--accept-changes '${m.name}:spec.timeout' --accept-changes '${m.name}:spec.timeouts.pipeline'`,
    'the exact flags',
  )
  t.match(blocked.reason, `crd-migrator plan ${m.name}`, 'the public reason points at plan for them')
  const result = await run(m, defaultSettings({ acceptedChanges: ['spec.timeout', 'spec.timeouts'] }))
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.match(result.lossless?.changes, [
    { pattern: 'spec.timeouts.pipeline', from: 'spec.timeout', change: 'moved', verdict: 'accepted', objects: 6 },
  ])
  const o = (await etcdObjects(m)).get('obj-00002')!
  t.same(specOf(o)['timeouts'], { pipeline: '3h0m0s' }, 'stored where it moved, with its value')
  t.notOk(specOf(o)['timeout'])
})

t.test('a field every version prunes is found through managedFields; etcd keeps it', async (t) => {
  const m = await made('everywhere', { v1: withToken, v2: withToken }, 8, (i) => ({ spec: { a: `a${i}`, token: `secret-${i}` } }))
  await setSchemas(m, { v1: withoutToken, v2: withoutToken })
  await setStorageVersion(http, m.name, 'v2')
  const result = await run(m, defaultSettings())
  t.equal(result.outcome, 'Blocked', result.reason)
  t.equal(result.errorCode, 'CRDM_DATA_LOSS')
  t.match(result.reason, 'spec.token removed (set by a manager, not in what the rewrite keeps)')
  t.equal(result.lossless?.lossy, 8)
  const etcd = await etcdObjects(m)
  t.same(versionsIn(etcd), new Set(['v1']))
  t.equal(specOf(etcd.get('obj-00003'))['token'], 'secret-3', 'the token is still in etcd')
})

t.test('a field removed by a later update is not a loss: managedFields follow the object', async (t) => {
  const m = await made('updated', { v1: withToken, v2: withToken }, 3, (i) => ({ spec: { a: `a${i}`, token: `secret-${i}` } }))
  // Another manager removes the token (a JSON merge patch): nobody owns it any more.
  await http.request({
    method: 'PATCH',
    path: objectPath(refFor(m.crd, 'v1'), m.ns, 'obj-00001'),
    contentType: ContentType.mergePatch,
    query: { fieldManager: 'someone-else' },
    body: { spec: { token: null } },
  })
  await setSchemas(m, { v1: withToken, v2: withoutToken })
  await setStorageVersion(http, m.name, 'v2')
  const result = await run(m, defaultSettings({ acceptedRemovals: [] }))
  t.equal(result.outcome, 'Blocked', 'the two objects that still hold a token are refused')
  t.equal(result.lossless?.lossy, 2, 'and only those: obj-00001 lost nothing')
  t.notOk(
    result.lossless?.findings.some((f) => f.key.endsWith('/obj-00001')),
    'obj-00001 is not among the findings',
  )
})

t.test('an unserved stored version: objects held to their managedFields; unchecked ones refused unless accepted', async (t) => {
  const m = await made('unserved', { v1: withToken, v2: withoutToken }, 6, (i) => ({ spec: { a: `a${i}`, token: `secret-${i}` } }))
  await setStorageVersion(http, m.name, 'v2', ['v1'])
  const planned = await dryRun(http, m.name, defaultSettings(), logger)
  t.equal(planned.lossless?.lossy, 6, 'the dry run sees it too')
  const blocked = await run(m, defaultSettings())
  t.equal(blocked.outcome, 'Blocked', blocked.reason)
  t.match(blocked.reason, 'managedFields of objects stored in unserved v1')
  t.match(blocked.reason, 'spec.token removed (set by a manager, not in what the rewrite keeps)')
  t.equal(specOf((await etcdObjects(m)).get('obj-00000'))['token'], 'secret-0', 'the token is still in etcd')

  // Objects without managedFields (an empty entry clears them) cannot be checked at all.
  const bare = await made('bare', { v1: withToken, v2: withToken }, 4, (i) => ({ spec: { a: `a${i}` } }))
  for (let i = 0; i < 4; i++)
    await http.request({
      method: 'PATCH',
      path: objectPath(refFor(bare.crd, 'v1'), bare.ns, `obj-0000${i}`),
      contentType: ContentType.mergePatch,
      body: { metadata: { managedFields: [{}] } },
    })
  await setStorageVersion(http, bare.name, 'v2', ['v1'])
  const refused = await run(bare, defaultSettings())
  t.equal(refused.outcome, 'Blocked', refused.reason)
  t.equal(refused.lossless?.unchecked, 4)
  t.match(refused.reason, `--accept-unchecked ${bare.name}`)
  const accepted = await run(bare, defaultSettings({ acceptUnchecked: true }))
  t.equal(accepted.outcome, 'Succeeded', accepted.reason)
  t.equal(accepted.lossless?.unchecked, 4, 'still counted')
  t.same(versionsIn(await etcdObjects(bare)), new Set(['v2']))
})

t.test('consent on the CRD: only a user RBAC allows to accept-changes may give it, and the run takes it', async (t) => {
  const policyName = uniqueName('consent')
  const [policy, binding] = consentPolicy(policyName)
  for (const [path, body] of [
    ['/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies', policy],
    ['/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings', binding],
  ] as const) {
    const res = await cp.apiRequest(path, { method: 'POST', body })
    t.equal(res.status, 201, `${path}: ${res.body}`)
    t.teardown(() => cp.apiRequest(`${path}/${policyName}`, { method: 'DELETE' }).then(() => undefined))
  }
  const m = await made('consent', { v1: withToken, v2: withoutToken }, 4, (i) => ({ spec: { a: `a${i}`, token: `secret-${i}` } }))
  await setStorageVersion(http, m.name, 'v2')
  const editRules = [{ apiGroups: ['apiextensions.k8s.io'], resources: ['customresourcedefinitions'], verbs: ['get', 'patch'] }]
  const editor = await cp.mintUser(uniqueName('editor'), [])
  const admin = await cp.mintUser(uniqueName('admin'), [])
  const group = 'rbac.authorization.k8s.io'
  await grantClusterRole(cp, uniqueName('edit'), editRules, [{ kind: 'User', apiGroup: group, name: editor.name }])
  await grantClusterRole(
    cp,
    uniqueName('accept'),
    [{ ...editRules[0], verbs: ['get', 'patch', 'accept-changes'] }],
    [{ kind: 'User', apiGroup: group, name: admin.name }],
  )
  const annotate = (as: { certPem: string; keyPem: string }, value: string) =>
    cp.apiRequest(crdPath(m.name), {
      method: 'PATCH',
      as,
      contentType: ContentType.mergePatch,
      body: { metadata: { annotations: { [ConsentAnnotation.acceptChanges]: value } } },
    })
  // The policy is in force once the API server has loaded it: wait on its answer, not a sleep.
  let denied = await annotate(editor, 'spec.token')
  for (let i = 0; denied.status === 200 && i < 50; i++) {
    await annotate(admin, '') // undo, as someone allowed
    await new Promise((r) => setTimeout(r, 200))
    denied = await annotate(editor, 'spec.token')
  }
  t.equal(denied.status, 403, denied.body)
  t.match(denied.body, 'only a user allowed to accept-changes customresourcedefinitions/')
  t.match(denied.body, `${policyName}-accept-changes`, 'names the ClusterRole to grant')
  t.notOk((await getCrd(http, m.name)).metadata.annotations?.[ConsentAnnotation.acceptChanges], 'nothing set')
  const allowed = await annotate(admin, 'spec.token')
  t.equal(allowed.status, 200, allowed.body)

  const without = await run(m, defaultSettings())
  t.equal(without.outcome, 'Blocked', 'the annotation counts only where consentFromCrd says the policy guards it')
  const result = await run(m, defaultSettings({ consentFromCrd: true }))
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.same(result.lossless?.crdConsent?.acceptChanges, ['spec.token'])
  t.same(specOf((await etcdObjects(m)).get('obj-00001')), { a: 'a1' }, 'exactly the accepted field went')
})

t.test('the CLI: plan marks the CRD blocked, both dry runs exit 4, migrate with the printed flags succeeds', async (t) => {
  const m = await made('cli', { v1: withToken, v2: withoutToken }, 5, (i) => ({ spec: { a: `a${i}`, token: `secret-${i}` } }))
  await setStorageVersion(http, m.name, 'v2')
  const cli = (...args: string[]) => runProcess(process.execPath, ['dist/cli/main.js', ...args, '--kubeconfig', cp.kubeconfigPath])
  const plan = await cli('plan', m.name)
  t.equal(plan.code, 0, plan.stderr)
  t.match(plan.stdout, /blocked: CRDM_DATA_LOSS \(below\)/, 'marked in the table')
  t.match(plan.stdout, '0 of 1 CRDs need work, 1 blocked')
  t.match(plan.stdout, /spec\.token removed +5 object\(s\) +refused/)
  const accept = `--accept-changes '${m.name}:spec.token'`
  t.match(plan.stdout, accept, 'the line that accepts it')
  const dry = await cli('migrate', m.name, '--dry-run')
  t.equal(dry.code, 4, `--dry-run exits 4: ${dry.stdout}${dry.stderr}`)
  t.match(dry.stdout, 'the run would stop Blocked (CRDM_DATA_LOSS)')
  const server = await cli('migrate', m.name, '--dry-run=server')
  t.equal(server.code, 4, `--dry-run=server exits 4: ${server.stdout}${server.stderr}`)
  t.match(server.stdout, 'the run would stop Blocked (CRDM_DATA_LOSS) before its first write')
  const check = await cli('check', m.name, '--drop', 'v1')
  t.equal(check.code, 3, 'check --drop: not safe')
  t.match(
    check.stdout,
    /no\s+lossless\s+the migration would stop Blocked \(CRDM_DATA_LOSS\): 5 object\(s\) would change: spec\.token removed \(5 objects\)/,
  )
  t.match(check.stdout, accept, 'and what accepts it')
  const checkAccepted = await cli('check', m.name, '--drop', 'v1', '--accept-changes', `${m.name}:spec.token`)
  t.match(
    checkAccepted.stdout,
    /ok\s+lossless\s+the migration's lossless check passes \(5 object read\(s\) checked\)/,
    'consent counts there too',
  )
  const accepted = await cli('plan', m.name, '--accept-changes', `${m.name}:spec.token`)
  t.match(accepted.stdout, '1 of 1 CRDs need work', 'plan agrees once accepted')
  const run = await cli('migrate', m.name, '--accept-changes', `${m.name}:spec.token`)
  t.equal(run.code, 0, run.stdout + run.stderr)
  t.match(run.stdout, /spec\.token removed +5 object\(s\) +accepted/)
  t.same(versionsIn(await etcdObjects(m)), new Set(['v2']))
  t.same((await getCrd(http, m.name)).status?.storedVersions, ['v2'])
})
