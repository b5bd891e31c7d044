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
import { StateAnnotation } from '../../src/state/crd-state.js'
import { ConfigSchema } from '../../src/config/schema.js'
import { MigrationController } from '../../src/controller/controller.js'
import { getCrd, patchCrdAnnotations } from '../../src/kube/crds.js'
import { ContentType, type KubeHttp } from '../../src/kube/http.js'
import { crdPath } from '../../src/kube/paths.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import { CheckpointSeal } from '../../src/migrator/freeze/checkpoint-seal.js'
import { migrateCrd } from '../../src/migrator/migrate.js'
import { defaultSettings, httpFor, storedVersionsInEtcd } from '../helpers/cluster.js'
import { getControlPlane } from '../helpers/controlplane.js'
import { crashedFreeze, crdWithObjects, rewriteObjects } from '../helpers/fixtures.js'
import { capturingLogger } from '../helpers/log-capture.js'

const logger = pino({ level: 'silent' })
const cp = await getControlPlane()
const http = httpFor(cp.kubeconfigPath)

/** 300 objects created at v1, storage flipped to v2, the first 100 already rewritten. */
async function halfMigrated(prefix: string): Promise<{ crd: CustomResourceDefinition; group: string; ns: string }> {
  const { crd, group, ns } = await crdWithObjects(http, { prefix, count: 300 })
  await rewriteObjects(http, crd, ns, 100)
  return { crd, group, ns }
}

async function expectAllV2(t: Test, group: string): Promise<void> {
  t.same(Object.fromEntries(await storedVersionsInEtcd(cp, group, 'widgets')), { [`${group}/v2`]: 300 }, 'etcd holds every object at v2')
}

t.test('1b: a forged checkpoint is not trusted: every object is looked at again', async (t) => {
  const { crd, group } = await halfMigrated('forged')
  // A checkpoint past every key, with a seal made by another key (or none): "all done".
  const other = CheckpointSeal.fromKey(randomBytes(32), 'an attacker')
  const annotations = crashedFreeze(crd, { checkpoint: 'zzzz/zzzz', seal: other })
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
  const annotations = crashedFreeze(crd, { checkpoint: `${ns}/obj-00099`, seal })
  await patchCrdAnnotations(http, crd.metadata.name, annotations)

  const capture = capturingLogger('warn')
  const result = await migrateCrd(crd.metadata.name, defaultSettings(), { http, logger: capture.logger, owner: 'replica-b', checkpointSeal: seal })
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.equal(result.resumedFrom, `${ns}/obj-00099`)
  const said = capture.lines().find((l) => String(l['msg']).startsWith('taking over'))
  t.match(said, { level: 40, previousOwner: 'crashed-replica', checkpoint: `${ns}/obj-00099`, trusted: true }, 'the takeover is said, as a warning')
  t.match(String(said?.['msg']), /^taking over the freeze of crashed-replica: no heartbeat for 36\d\ds \(its run stopped\)$/)
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
