/**
 * The migrator does not trust what others can write on the CRD (issue: "Close the holes
 * in the freeze", 1b, 1c and 4): a checkpoint it cannot verify, storedVersions narrowed
 * under its freeze, and a forged "already done" each used to end in Succeeded and
 * storedVersions [v2] over objects etcd still held at v1. Each case sets the CRD up the
 * way the attacker left it (as an admin, which the webhook allows as break-glass or which
 * happens with the webhook gone) and proves the outcome in etcd.
 */
import { randomBytes } from 'node:crypto'
import t, { type Test } from 'tap'
import { pino } from 'pino'
import { DEFAULT_MIGRATING_ANNOTATION as KEY } from '../../src/config/annotations.js'
import { StateAnnotation } from '../../src/state/crd-state.js'
import { ConfigSchema } from '../../src/config/schema.js'
import { MigrationController } from '../../src/controller/controller.js'
import { getCrd, patchCrdAnnotations } from '../../src/kube/crds.js'
import { ContentType, type KubeHttp } from '../../src/kube/http.js'
import { crdPath, objectPath } from '../../src/kube/paths.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import { CheckpointSeal } from '../../src/migrator/checkpoint-seal.js'
import { migrateCrd } from '../../src/migrator/migrate.js'
import {
  createCrd,
  createNamespace,
  createObjects,
  crdManifest,
  defaultSettings,
  httpFor,
  refFor,
  setStorageVersion,
  storedVersionsInEtcd,
} from '../helpers/cluster.js'
import { getControlPlane, uniqueGroup, uniqueName } from '../helpers/controlplane.js'

const logger = pino({ level: 'silent' })
const cp = await getControlPlane()
const http = httpFor(cp.kubeconfigPath)

/** 300 objects created at v1, storage flipped to v2, the first 100 already rewritten. */
async function halfMigrated(prefix: string): Promise<{ crd: CustomResourceDefinition; group: string; ns: string }> {
  const group = uniqueGroup(prefix)
  const ns = uniqueName(prefix)
  await createNamespace(http, ns)
  const created = await createCrd(http, crdManifest({ group, versions: ['v1', 'v2'], storage: 'v1' }))
  await createObjects(http, refFor(created, 'v1'), [ns], 300)
  const crd = await setStorageVersion(http, created.metadata.name, 'v2')
  const v2 = refFor(crd, 'v2')
  for (let i = 0; i < 100; i++) {
    const name = `obj-${String(i).padStart(5, '0')}`
    await http.request({
      method: 'PATCH',
      path: objectPath(v2, ns, name),
      contentType: ContentType.mergePatch,
      body: { apiVersion: `${group}/v2`, kind: 'Widget' },
    })
  }
  return { crd, group, ns }
}

/** The freeze a crashed run leaves: owner gone quiet for an hour. */
function crashedFreeze(crd: CustomResourceDefinition, extra: Record<string, string> = {}): Record<string, string> {
  return {
    [KEY]: 'true',
    [StateAnnotation.owner]: 'crashed-replica',
    [StateAnnotation.heartbeat]: new Date(Date.now() - 3_600_000).toISOString(),
    [StateAnnotation.startedAt]: new Date(Date.now() - 3_700_000).toISOString(),
    [StateAnnotation.targetStorageVersion]: 'v2',
    [StateAnnotation.frozenGeneration]: String(crd.metadata.generation),
    [StateAnnotation.phase]: 'StorageVersionMigration',
    ...extra,
  }
}

async function expectAllV2(t: Test, group: string): Promise<void> {
  t.same(Object.fromEntries(await storedVersionsInEtcd(cp, group, 'widgets')), { [`${group}/v2`]: 300 }, 'etcd holds every object at v2')
}

t.test('1b: a forged checkpoint is not trusted: every object is looked at again', async (t) => {
  const { crd, group } = await halfMigrated('forged')
  // A checkpoint past every key, with a seal made by another key (or none): "all done".
  const other = CheckpointSeal.fromKey(randomBytes(32), 'an attacker')
  const annotations = crashedFreeze(crd, { [StateAnnotation.checkpoint]: 'zzzz/zzzz' })
  annotations[StateAnnotation.checkpointSeal] = other.seal(
    {
      crdUid: crd.metadata.uid!,
      targetStorageVersion: 'v2',
      frozenGeneration: crd.metadata.generation!,
      startedAt: annotations[StateAnnotation.startedAt]!,
    },
    'zzzz/zzzz',
  )
  await patchCrdAnnotations(http, crd.metadata.name, annotations)

  const ours = CheckpointSeal.fromKey(randomBytes(32), 'this test')
  const result = await migrateCrd(crd.metadata.name, defaultSettings(), { http, logger, owner: 'replica-b', checkpointSeal: ours })
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.equal(result.resumedFrom, undefined, 'the forged checkpoint was not used')
  t.equal(result.storage?.counts.resumed, 0, 'no object skipped')
  t.equal(result.storage?.counts.current, 100, 'the 100 already at v2 cost a no-op request each')
  t.equal(result.storage!.counts.rewritten + result.storage!.counts.conflict, 200, 'the 200 at v1 were rewritten')
  await expectAllV2(t, group)
  t.same((await getCrd(http, crd.metadata.name)).status?.storedVersions, ['v2'])
  t.notOk(
    StateAnnotation.checkpointSeal in ((await getCrd(http, crd.metadata.name)).metadata.annotations ?? {}),
    'the seal goes with the freeze',
  )
})

t.test('1b: a checkpoint this migrator sealed is trusted', async (t) => {
  const { crd, group, ns } = await halfMigrated('sealed')
  const seal = CheckpointSeal.fromKey(randomBytes(32), 'shared key')
  const annotations = crashedFreeze(crd, { [StateAnnotation.checkpoint]: `${ns}/obj-00099` })
  annotations[StateAnnotation.checkpointSeal] = seal.seal(
    {
      crdUid: crd.metadata.uid!,
      targetStorageVersion: 'v2',
      frozenGeneration: crd.metadata.generation!,
      startedAt: annotations[StateAnnotation.startedAt]!,
    },
    `${ns}/obj-00099`,
  )
  await patchCrdAnnotations(http, crd.metadata.name, annotations)

  const result = await migrateCrd(crd.metadata.name, defaultSettings(), { http, logger, owner: 'replica-b', checkpointSeal: seal })
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.equal(result.resumedFrom, `${ns}/obj-00099`)
  t.equal(result.storage?.counts.resumed, 100, 'the 100 before the checkpoint were skipped')
  await expectAllV2(t, group)
})

t.test('1c: storedVersions narrowed under the freeze do not make a resumed run skip the storage phase', async (t) => {
  const { crd, group } = await halfMigrated('narrowed')
  await patchCrdAnnotations(http, crd.metadata.name, crashedFreeze(crd))
  const narrowed = await http.request<CustomResourceDefinition>({
    method: 'PATCH',
    path: `${crdPath(crd.metadata.name)}/status`,
    contentType: ContentType.mergePatch,
    body: { status: { storedVersions: ['v2'] } },
  })
  t.same(narrowed.body.status?.storedVersions, ['v2'], 'storedVersions say [v2] while etcd holds 200 objects at v1')

  const result = await migrateCrd(crd.metadata.name, defaultSettings(), { http, logger, owner: 'replica-b' })
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.ok(result.storage, 'the storage phase ran')
  t.equal(result.storage!.counts.rewritten + result.storage!.counts.conflict, 200, 'the 200 at v1 were rewritten')
  await expectAllV2(t, group)
})

t.test('4: a forged "already done" does not make the controller skip a CRD', async (t) => {
  const { crd, group } = await halfMigrated('done')
  await patchCrdAnnotations(http, crd.metadata.name, {
    [StateAnnotation.observedGeneration]: String(crd.metadata.generation),
    [StateAnnotation.lastResult]: 'Succeeded',
  })
  const controller = controllerFor(http, crd.metadata.name)
  const result = await controller.reconcile(crd.metadata.name, new AbortController().signal)
  t.equal(result?.outcome, 'Succeeded', 'the controller migrated the CRD')
  await expectAllV2(t, group)
  t.same((await getCrd(http, crd.metadata.name)).status?.storedVersions, ['v2'])

  // What the controller verified itself, it does not look at again...
  t.equal(await controller.reconcile(crd.metadata.name, new AbortController().signal), undefined, 'a CRD it found up to date is skipped')
  // ...but storedVersions others widen are seen from the plan, whatever the annotations say.
  await http.request({
    method: 'PATCH',
    path: `${crdPath(crd.metadata.name)}/status`,
    contentType: ContentType.mergePatch,
    body: { status: { storedVersions: ['v1', 'v2'] } },
  })
  const again = await controller.reconcile(crd.metadata.name, new AbortController().signal)
  t.equal(again?.outcome, 'Succeeded', 'storedVersions listing v1 again is migrated again')
  t.equal(again?.storage?.counts.current, 300, 'every object was already current')
})

function controllerFor(http: KubeHttp, name: string): MigrationController {
  const config = ConfigSchema.parse({ migrator: { selector: { labelSelector: '', names: [name] } } })
  return new MigrationController({ http, config, logger, owner: 'controller-test' })
}
