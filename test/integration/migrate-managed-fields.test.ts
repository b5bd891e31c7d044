import t from 'tap'
import { pino } from 'pino'
import { startConversionWebhook } from '../../dev/conversion/webhook.js'
import { getCrd } from '../../src/kube/crds.js'
import { ContentType } from '../../src/kube/http.js'
import { KubeApiError } from '../../src/kube/api-errors.js'
import { objectPath } from '../../src/kube/paths.js'
import type { ManagedFieldsEntry } from '../../src/kube/types.js'
import { migrateCrd } from '../../src/migrator/migrate.js'
import { defaultSettings, httpFor, refFor, setStorageVersion, serverSideApply as apply } from '../helpers/cluster.js'
import { getControlPlane } from '../helpers/controlplane.js'
import { until } from '../helpers/until.js'
import { crdWithObjects } from '../helpers/fixtures.js'

const logger = pino({ level: 'silent' })
/** What the API server says when an object's managedFields name a version the CRD no longer has. */
const V1_CONVERSION_ERROR = /invalid group\/version|convert/i

// A webhook-converted CRD: its entries of unserved versions are removed (and seeded when
// none would remain); under conversion None they are relabelled (migrate-ownership-none).
t.test('managedFields of an unserved version break server-side apply until the cleanup removes them', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const webhook = await startConversionWebhook()
  t.teardown(() => webhook.stop())
  // The objects are applied below, each by its field managers.
  const { group, ns, crd } = await crdWithObjects(http, { prefix: 'mf', count: 0, flipTo: false, conversion: webhook.conversion() })
  const v1 = refFor(crd, 'v1')
  const v2 = refFor(crd, 'v2')

  // shared: two managers applied through v1, a third through v2 (its entry must survive).
  await apply(http, v1, ns, 'shared', 'alice', { color: 'red' })
  await apply(http, v1, ns, 'shared', 'bob', { size: 3 })
  await apply(http, v2, ns, 'shared', 'carol', { shape: 'round' })
  // lonely: every entry is v1, so the cleanup leaves the seeding entry behind.
  await apply(http, v1, ns, 'lonely', 'alice', { color: 'blue' })
  for (let i = 0; i < 30; i++) await apply(http, v1, ns, `bulk-${i}`, 'alice', { index: i })

  await setStorageVersion(http, crd.metadata.name, 'v2', ['v1'])
  const unserved = await getCrd(http, crd.metadata.name)
  t.equal(unserved.spec.versions.find((v) => v.name === 'v1')?.served, false, 'v1 is no longer served')
  // Step one of dropping v1: storage version migration alone, so v1 may leave the CRD. v1 is
  // unserved and a webhook converts: no old view can check the objects, accepted here (the
  // lossless check's own tests refuse it: lossless-rules, conversion-webhook, real-upgrades).
  const storageOnly = await migrateCrd(crd.metadata.name, defaultSettings({ phases: ['StorageVersionMigration'], acceptUnchecked: true }), {
    http,
    logger,
    owner: 'test-owner',
  })
  t.equal(storageOnly.outcome, 'Succeeded', storageOnly.reason)
  await http.request({
    method: 'PATCH',
    path: `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${crd.metadata.name}`,
    contentType: ContentType.jsonPatch,
    body: [
      { op: 'test', path: '/spec/versions/0/name', value: 'v1' },
      { op: 'remove', path: '/spec/versions/0' },
    ],
  })
  t.same(
    (await getCrd(http, crd.metadata.name)).spec.versions.map((v) => v.name),
    ['v2'],
    'v1 is removed from the CRD',
  )
  // The API server's custom-resource handler picks up the CRD change asynchronously, and
  // in two steps: its CRD lister first (v1 answers 404), then the serving info of the
  // resource, whose field manager still converts through v1 until it is rebuilt. Evidence
  // of the second is an apply that no longer goes through: tried as a dry run, so the
  // objects and their managedFields stay as they are.
  await until(
    'a dry-run server-side apply refused with the conversion error after v1 left the CRD',
    30_000,
    () =>
      apply(http, v2, ns, 'shared', 'alice', { color: 'green' }, { dryRun: true }).then(
        () => 'accepted',
        (err: unknown) => (err instanceof KubeApiError && V1_CONVERSION_ERROR.test(err.message) ? 'refused' : String(err)),
      ),
    (outcome) => outcome === 'refused',
  )

  const broken = await apply(http, v2, ns, 'shared', 'alice', { color: 'green' }).then(
    () => undefined,
    (err: unknown) => err,
  )
  t.ok(broken instanceof KubeApiError, 'server-side apply fails while v1 entries remain')
  t.match((broken as KubeApiError).message, V1_CONVERSION_ERROR, "with the API server's conversion error (kubernetes/kubernetes#111937)")

  const result = await migrateCrd(crd.metadata.name, defaultSettings({ phases: ['CleanupManagedFields'] }), {
    http,
    logger,
    owner: 'test-owner',
  })
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.equal(result.cleanup?.counts.rewritten, 32, 'every object with v1 entries was cleaned')
  t.equal(result.cleanup?.entriesRemoved, 33, 'every v1 entry was removed: alice+bob on shared, alice on lonely and on 30 bulk objects')

  const fixed = await apply(http, v2, ns, 'shared', 'alice', { color: 'green' })
  t.ok(fixed.body.metadata.managedFields, 'server-side apply works again')
  const shared = (
    await http.request<{ metadata: { managedFields: ManagedFieldsEntry[] }; spec: Record<string, unknown> }>({
      method: 'GET',
      path: objectPath(v2, ns, 'shared'),
    })
  ).body
  t.notOk(
    shared.metadata.managedFields.some((e) => e.apiVersion === `${group}/v1`),
    'no v1 entry is left',
  )
  t.ok(
    shared.metadata.managedFields.some((e) => e.manager === 'carol' && e.apiVersion === `${group}/v2`),
    'the v2 entry survived',
  )
  t.same(shared.spec, { color: 'green', size: 3, shape: 'round' }, 'no field value was lost')

  const lonely = (
    await http.request<{ metadata: { managedFields: ManagedFieldsEntry[] } }>({ method: 'GET', path: objectPath(v2, ns, 'lonely') })
  ).body
  t.equal(lonely.metadata.managedFields.length, 1, 'the all-v1 object keeps exactly one entry')
  t.match(
    lonely.metadata.managedFields[0],
    { manager: 'alice', operation: 'Apply', apiVersion: `${group}/v2`, fieldsV1: { 'f:metadata': { 'f:name': {} } } },
    'the seeding entry of the CAPI design',
  )

  const again = await migrateCrd(crd.metadata.name, defaultSettings(), { http, logger, owner: 'test-owner' })
  t.equal(again.outcome, 'Skipped', 'nothing left to do')
})
