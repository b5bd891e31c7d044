/**
 * Lossless or refused (issue: "Nothing lost, nothing beyond its authority"): a rewrite
 * that would drop a field (a narrowed storage schema) or gain one (an unfaithful
 * conversion webhook) is refused before it writes, on the real API server, and etcd is
 * read to prove nothing moved. An accepted removal runs; defaults the new schema adds do
 * not block.
 */
import t, { type Test } from 'tap'
import { pino } from 'pino'
import { startConversionWebhook } from '../../dev/conversion/webhook.js'
import { ConfigSchema } from '../../src/config/schema.js'
import { getCrd } from '../../src/kube/crds.js'
import { settingsFor } from '../../src/migrator/crd-settings.js'
import { dryRun } from '../../src/migrator/dry-run.js'
import { formatDryRun } from '../../src/cli/migrate/run-migrate.js'
import { describeFindings } from '../../src/migrator/lossless/verdict.js'
import { migrateCrd, migrateCrdUnfrozen, type MigrationSettings } from '../../src/migrator/migrate.js'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { StateAnnotation } from '../../src/state/crd-state.js'
import { defaultSettings, httpFor } from '../helpers/cluster.js'
import { getControlPlane } from '../helpers/controlplane.js'
import { etcdWidgets, OPEN_SCHEMA, specOf, specSchema, storedAt, twoVersions, type Obj, type TwoVersions } from '../helpers/two-versions.js'

const logger = pino({ level: 'silent' })
const cp = await getControlPlane()
const http = httpFor(cp.kubeconfigPath)

type Made = TwoVersions
const spec = specSchema
const open = OPEN_SCHEMA
/** A CRD whose v1 and v2 have these schemas, `count` objects created at v1 (etcd holds them at v1), storage flipped to v2. */
const made = (prefix: string, schemas: { v1: Obj; v2: Obj }, count: number, body: (i: number) => Obj, conversion?: Obj) =>
  twoVersions(http, prefix, schemas, count, body, { conversion, flip: true })
const etcdObjects = (m: Made) => etcdWidgets(cp, m.group)
const apiVersions = storedAt

/** The run left nothing behind: no freeze, storedVersions as they were, the result on the CRD. */
async function expectUntouched(t: Test, m: Made, result: Awaited<ReturnType<typeof migrateCrd>>): Promise<void> {
  const crd = await getCrd(http, m.crd.metadata.name)
  t.notOk(crd.metadata.annotations?.[DEFAULT_MIGRATING_ANNOTATION], 'no freeze left')
  t.same(crd.status?.storedVersions, ['v1', 'v2'], 'status.storedVersions untouched')
  t.match(crd.metadata.annotations?.[StateAnnotation.lastResult], /^Blocked: CRDM_DATA_LOSS: /, 'last-result says Blocked, with the code')
  t.same(result.storedVersionsAfter, ['v1', 'v2'])
}

function run(m: Made, settings: MigrationSettings) {
  return migrateCrd(m.crd.metadata.name, settings, { http, logger, owner: 'lossless-test' })
}

const withToken = spec({ a: { type: 'string' }, token: { type: 'string' } })
const withoutToken = spec({ a: { type: 'string' } })

t.test('a storage schema that drops spec.token: Blocked before the freeze, objects and path named, etcd unchanged', async (t) => {
  const m = await made('narrowed', { v1: withToken, v2: withoutToken }, 10, (i) => ({ spec: { a: `a${i}`, token: `secret-${i}` } }))
  const planned = await dryRun(http, m.crd.metadata.name, defaultSettings(), logger)
  t.equal(planned.lossless?.lossy, 10, 'migrate --dry-run says so first')
  const text = formatDryRun(planned)
  t.match(text, 'lossless check (storage-version list view through v1): 10 checked, 10 would change')
  t.match(text, /spec\.token removed +10 object\(s\) +refused/, 'each changing field, its count and verdict')
  t.match(text, `accept on purpose with: --accept-changes '${m.crd.metadata.name}:spec.token'`, 'the exact line that accepts it')
  t.match(text, `objects: ${m.ns}/obj-00000: spec.token removed`, 'the objects, named to whoever ran it')
  t.match(text, 'the run would stop Blocked (CRDM_DATA_LOSS)')
  const result = await run(m, defaultSettings())
  t.equal(result.outcome, 'Blocked', result.reason)
  t.equal(result.errorCode, 'CRDM_DATA_LOSS')
  t.match(result.reason, 'spec.token removed (10 objects)', 'names the field and counts the objects')
  t.notMatch(result.reason, m.ns, 'no object name in what every reader of the CRD sees')
  t.match(describeFindings(result.lossless!.findings, 10), `${m.ns}/obj-00000: spec.token removed`, 'the report names them')
  t.match(result.reason, 'rewriting 10 object(s)', 'counts every object of the first page')
  t.notOk(result.storage, 'no object was rewritten')
  await expectUntouched(t, m, result)
  const etcd = await etcdObjects(m)
  t.same(apiVersions(etcd), new Set(['v1']), 'etcd holds every object at v1 still')
  t.equal(specOf(etcd.get('obj-00007'))['token'], 'secret-7', 'the token is still in etcd')
})

t.test('a field only a few objects past the first page hold: found in the run, those objects not written, freeze lifted', async (t) => {
  const rare = new Set([45, 58])
  const m = await made('far', { v1: spec({ a: { type: 'string' }, rare: { type: 'string' } }), v2: withoutToken }, 60, (i) => ({
    spec: { a: `a${i}`, ...(rare.has(i) ? { rare: `only-${i}` } : {}) },
  }))
  const result = await run(m, defaultSettings({ pageSize: 20 }))
  t.equal(result.outcome, 'Blocked', result.reason)
  t.equal(result.errorCode, 'CRDM_DATA_LOSS')
  const named = describeFindings(result.lossless!.findings, 2)
  t.match(named, `${m.ns}/obj-00045: spec.rare removed`)
  t.match(named, `${m.ns}/obj-00058: spec.rare removed`)
  t.match(result.reason, 'spec.rare removed (2 objects)')
  t.equal(result.lossless?.lossy, 2, 'exactly the two objects')
  t.equal(result.lossless?.checked, 60, 'every object was checked')
  t.notOk(result.storage, 'the check runs before the first write')
  await expectUntouched(t, m, result)
  const etcd = await etcdObjects(m)
  t.same(apiVersions(etcd), new Set(['v1']), 'no object was rewritten')
  t.equal(specOf(etcd.get('obj-00045'))['rare'], 'only-45')
  t.equal(specOf(etcd.get('obj-00058'))['rare'], 'only-58')
})

t.test("an accepted removal (the migrator's own configuration) runs, and drops exactly that field", async (t) => {
  const m = await made('accepted', { v1: withToken, v2: withoutToken }, 10, (i) => ({ spec: { a: `a${i}`, token: `secret-${i}` } }))
  const name = m.crd.metadata.name
  const config = ConfigSchema.parse({ migrator: { acceptRemovals: [`${name}:spec.token`] } })
  const result = await run(m, defaultSettings({ acceptedRemovals: settingsFor(config, name).acceptedRemovals ?? [] }))
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.equal(result.lossless?.accepted, 10, 'reported as accepted')
  const etcd = await etcdObjects(m)
  t.same(apiVersions(etcd), new Set(['v2']))
  t.same(specOf(etcd.get('obj-00003')), { a: 'a3' }, 'the token is gone, the rest kept')
  t.same((await getCrd(http, name)).status?.storedVersions, ['v2'])
})

t.test('defaults the new schema adds do not block: the run succeeds and etcd holds them', async (t) => {
  const v2 = spec({ a: { type: 'string' }, size: { type: 'string', default: 'medium' } })
  const m = await made('defaults', { v1: spec({ a: { type: 'string' } }), v2 }, 10, (i) => ({ spec: { a: `a${i}` } }))
  const result = await run(m, defaultSettings())
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.equal(result.lossless?.lossy, 0)
  const etcd = await etcdObjects(m)
  t.same(apiVersions(etcd), new Set(['v2']))
  t.same(specOf(etcd.get('obj-00004')), { a: 'a4', size: 'medium' }, 'the default was added by the write')
})

t.test('a conversion webhook that injects fields and a label: Blocked, the injections named, etcd unchanged', async (t) => {
  const webhook = await startConversionWebhook()
  t.teardown(() => webhook.stop())
  const m = await made(
    'inject',
    { v1: open, v2: open },
    20,
    (i) => ({ spec: { image: `img-${i}`, replicas: 1, token: `secret-${i}` } }),
    webhook.conversion(),
  )
  webhook.tamper((o) => {
    const metadata = (o['metadata'] ?? {}) as Obj
    const labels = { ...((metadata['labels'] ?? {}) as Obj), pwned: 'true' }
    const s = specOf(o)
    return { ...o, metadata: { ...metadata, labels }, spec: { ...s, owner: 'attacker', secretCopy: s['token'] } }
  })
  const result = await run(m, defaultSettings())
  t.equal(result.outcome, 'Blocked', result.reason)
  t.equal(result.errorCode, 'CRDM_DATA_LOSS')
  t.match(result.reason, 'metadata.labels[…] added', 'a label key is elided in the public reason')
  t.match(describeFindings(result.lossless!.findings, 20), 'metadata.labels.pwned added', 'and named in the report')
  t.match(result.reason, 'spec.owner added')
  t.match(result.reason, 'spec.secretCopy added')
  await expectUntouched(t, m, result)
  const etcd = await etcdObjects(m)
  t.same(apiVersions(etcd), new Set(['v1']), 'no object was rewritten')
  const first = etcd.get('obj-00000')!
  t.notOk(specOf(first)['owner'], 'nothing injected in etcd')
  t.notOk(((first['metadata'] as Obj)['labels'] as Obj | undefined)?.['pwned'])

  // The faithful webhook again: the same CRD migrates, every object reshaped by value.
  webhook.tamper()
  const again = await run(m, defaultSettings())
  t.equal(again.outcome, 'Succeeded', again.reason)
  t.equal(again.lossless?.method, 'dry-run')
  t.equal(again.lossless?.checked, 20)
  const after = await etcdObjects(m)
  t.same(apiVersions(after), new Set(['v2']))
  t.same(specOf(after.get('obj-00002')), { token: 'secret-2', template: { replicas: 1, containers: [{ image: 'img-2' }] } })
})

t.test("an unmanaged CRD's rewrite without a freeze (a StorageVersionMigration's) is refused the same way", async (t) => {
  const m = await made('unfrozen', { v1: withToken, v2: withoutToken }, 5, (i) => ({ spec: { a: `a${i}`, token: `secret-${i}` } }))
  const result = await migrateCrdUnfrozen(m.crd.metadata.name, defaultSettings(), { http, logger, owner: 'lossless-test' })
  t.equal(result.outcome, 'Blocked', result.reason)
  t.equal(result.errorCode, 'CRDM_DATA_LOSS')
  t.equal(result.lossless?.lossy, 5)
  t.notOk(result.storage, 'nothing rewritten')
  t.same((await getCrd(http, m.crd.metadata.name)).status?.storedVersions, ['v1', 'v2'])
  const etcd = await etcdObjects(m)
  t.same(apiVersions(etcd), new Set(['v1']))
  t.equal(specOf(etcd.get('obj-00001'))['token'], 'secret-1')
})
