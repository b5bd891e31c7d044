import t from 'tap'
import { pino } from 'pino'
import { conversionStrategy } from '../../src/kube/conversion.js'
import { getCrd } from '../../src/kube/crds.js'
import { ContentType, type KubeHttp } from '../../src/kube/http.js'
import { objectPath, type ResourceRef } from '../../src/kube/paths.js'
import type { ManagedFieldsEntry } from '../../src/kube/types.js'
import { cleanManagedFields, managedFieldsPatch, managedFieldsPolicy } from '../../src/migrator/phases/managed-fields.js'
import { migrateCrd } from '../../src/migrator/migrate.js'
import { defaultSettings, httpFor, refFor, setStorageVersion } from '../helpers/cluster.js'
import { getControlPlane } from '../helpers/controlplane.js'
import { crdWithObjects } from '../helpers/fixtures.js'

const logger = pino({ level: 'silent' })

interface Widget {
  metadata: { resourceVersion: string; managedFields?: ManagedFieldsEntry[] }
  spec: Record<string, unknown>
}

function apply(http: KubeHttp, ref: ResourceRef, ns: string, name: string, manager: string, spec: Record<string, unknown>) {
  return http.request<Widget>({
    method: 'PATCH',
    path: objectPath(ref, ns, name),
    // No force: the manager owns every field it sets, so there is nothing to conflict with.
    query: { fieldManager: manager },
    contentType: ContentType.applyPatch,
    body: { apiVersion: `${ref.group}/${ref.version}`, kind: ref.kind, metadata: { name, namespace: ns }, spec },
  })
}

async function read(http: KubeHttp, ref: ResourceRef, ns: string, name: string): Promise<Widget> {
  return (await http.request<Widget>({ method: 'GET', path: objectPath(ref, ns, name) })).body
}

// The field sets below hold `.` too: team-a also owns spec itself (the schema preserves unknown fields).
const teamAApply = (w: Widget, apiVersion: string) =>
  w.metadata.managedFields?.find((e) => e.manager === 'team-a' && e.operation === 'Apply' && e.apiVersion === apiVersion)

t.test('conversion None: entries of an unserved version are relabelled, and their manager can still prune', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  // The objects are applied below, each by its field manager.
  const { group, ns, crd } = await crdWithObjects(http, { prefix: 'own', count: 0, flipTo: false })
  t.equal(conversionStrategy(crd), 'None', 'the CRD converts with strategy None')
  const v1 = refFor(crd, 'v1')
  const v2 = refFor(crd, 'v2')

  // `kept` goes through the migration; `contrast` gets the remove + seed cleanup (what
  // strategy Webhook does) to show what relabelling saves.
  for (const name of ['kept', 'contrast']) {
    const applied = (await apply(http, v1, ns, name, 'team-a', { a: 1, b: 2 })).body
    t.same(applied.spec, { a: 1, b: 2 }, `${name}: applied at v1`)
    t.strictSame(
      teamAApply(applied, `${group}/v1`)?.fieldsV1?.['f:spec'],
      { '.': {}, 'f:a': {}, 'f:b': {} },
      `${name}: before, team-a's Apply entry at v1 owns spec.a and spec.b`,
    )
    t.equal(applied.metadata.managedFields?.length, 1, `${name}: and it is the only entry`)
  }

  await setStorageVersion(http, crd.metadata.name, 'v2', ['v1'])
  const flipped = await getCrd(http, crd.metadata.name)
  t.equal(flipped.spec.versions.find((v) => v.name === 'v1')?.served, false, 'v1 is no longer served')
  t.equal(flipped.spec.versions.find((v) => v.storage)?.name, 'v2', 'v2 is the storage version')

  // The contrast: remove + seed, as the cleanup does under strategy Webhook.
  const contrastBefore = await read(http, v2, ns, 'contrast')
  const removal = cleanManagedFields(contrastBefore.metadata.managedFields, {
    ...managedFieldsPolicy(flipped, 'v2', { rewriteServedManagedFields: false }),
    relabelUnserved: false,
  })
  t.equal(removal.removed.length, 1, 'contrast: remove + seed drops the v1 entry')
  t.equal(removal.seeded, true, 'contrast: and seeds one minimal entry')
  await http.request({
    method: 'PATCH',
    path: objectPath(v2, ns, 'contrast'),
    body: managedFieldsPatch(contrastBefore.metadata.resourceVersion, removal.managedFields),
    contentType: ContentType.jsonPatch,
  })

  const result = await migrateCrd(crd.metadata.name, defaultSettings(), { http, logger, owner: 'test-owner' })
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.same(result.storedVersionsAfter, ['v2'], 'storedVersions narrowed to [v2]')
  t.equal(result.cleanup?.counts.rewritten, 1, 'the cleanup patched the one object with a v1 entry')
  t.equal(result.cleanup?.entriesRemoved, 0, 'and removed no entry')

  const kept = await read(http, v2, ns, 'kept')
  t.notOk(
    kept.metadata.managedFields?.some((e) => e.apiVersion === `${group}/v1`),
    'no v1 entry is left',
  )
  t.equal(kept.metadata.managedFields?.length, 1, 'the one entry was relabelled, not duplicated')
  t.strictSame(
    teamAApply(kept, `${group}/v2`)?.fieldsV1?.['f:spec'],
    { '.': {}, 'f:a': {}, 'f:b': {} },
    "after, team-a's Apply entry is at v2 and still owns spec.a and spec.b",
  )
  t.same(kept.spec, { a: 1, b: 2 }, 'no field value changed')

  const again = await migrateCrd(crd.metadata.name, defaultSettings(), { http, logger, owner: 'test-owner' })
  t.equal(again.outcome, 'Skipped', 'the relabelled list settles: nothing left to do')

  // The point of relabelling: team-a drops spec.b from its configuration and it is pruned.
  const pruned = (await apply(http, v2, ns, 'kept', 'team-a', { a: 1 })).body
  t.same(pruned.spec, { a: 1 }, 'team-a re-applied without spec.b at v2: spec.b is gone')
  t.strictSame(teamAApply(pruned, `${group}/v2`)?.fieldsV1?.['f:spec'], { '.': {}, 'f:a': {} }, 'team-a now owns only spec.a')

  // Without it: ownership of spec.b was lost with the removed entry, so nothing prunes it.
  const orphaned = (await apply(http, v2, ns, 'contrast', 'team-a', { a: 1 })).body
  t.same(orphaned.spec, { a: 1, b: 2 }, 'contrast: after remove + seed the same apply leaves spec.b behind')
})
