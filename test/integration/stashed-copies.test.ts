/**
 * Phase StashedObjectMigration with the kubevirt-instancetypes preset, on the real API
 * server: ControllerRevisions holding instancetype copies at every old version, owned by
 * and referred to by VirtualMachine-like objects (the seed's testing approach, 003).
 */
import { pino } from 'pino'
import t, { type Test } from 'tap'
import { startConversionWebhook } from '../../dev/conversion/webhook.js'
import { convertObjects } from '../../src/kube/conversion-review.js'
import { ContentType, type KubeHttp } from '../../src/kube/http.js'
import { KubeApiError } from '../../src/kube/api-errors.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import { CRD_API } from '../../src/kube/paths.js'
import { dryRun } from '../../src/migrator/dry-run.js'
import { migrateCrd } from '../../src/migrator/migrate.js'
import { resolveStashRules } from '../../src/migrator/phases/stashes/rules.js'
import { createNamespace, crdManifest, defaultSettings, httpFor } from '../helpers/cluster.js'
import { getControlPlane, uniqueName } from '../helpers/controlplane.js'
import { until } from '../helpers/until.js'

const logger = pino({ level: 'silent' })
const INSTANCETYPES = 'virtualmachineinstancetypes.instancetype.kubevirt.io'
const VERSION_LABEL = 'instancetype.kubevirt.io/object-version'
const settings = () => defaultSettings({ stashes: resolveStashRules(['kubevirt-instancetypes'], []) })
const schema = { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } }

interface Revision {
  metadata: {
    name: string
    uid: string
    resourceVersion: string
    labels?: Record<string, string>
    ownerReferences?: Array<{ uid: string }>
  }
  data: { apiVersion: string; kind: string; metadata: { name: string }; spec: Record<string, unknown> }
  revision: number
}
interface Vm {
  metadata: { name: string; uid: string; resourceVersion: string }
  spec: { instancetype?: { name: string; revisionName?: string }; preference?: { name: string; revisionName?: string } }
}

/** KubeVirt's two CRDs, as far as this phase sees them; created once per control plane. */
async function ensureCrds(http: KubeHttp): Promise<void> {
  const crds: CustomResourceDefinition[] = [
    {
      apiVersion: 'apiextensions.k8s.io/v1',
      kind: 'CustomResourceDefinition',
      metadata: { name: INSTANCETYPES },
      spec: {
        group: 'instancetype.kubevirt.io',
        scope: 'Namespaced',
        names: { plural: 'virtualmachineinstancetypes', kind: 'VirtualMachineInstancetype', singular: 'virtualmachineinstancetype' },
        versions: ['v1alpha1', 'v1alpha2', 'v1beta1'].map((name) => ({ name, served: true, storage: name === 'v1beta1', schema })),
      },
    },
    {
      apiVersion: 'apiextensions.k8s.io/v1',
      kind: 'CustomResourceDefinition',
      metadata: { name: 'virtualmachines.kubevirt.io' },
      spec: {
        group: 'kubevirt.io',
        scope: 'Namespaced',
        names: { plural: 'virtualmachines', kind: 'VirtualMachine', singular: 'virtualmachine' },
        versions: [{ name: 'v1', served: true, storage: true, schema }],
      },
    },
  ]
  for (const crd of crds) {
    await http.request({ method: 'POST', path: CRD_API, body: crd }).catch((err: unknown) => {
      if (!(err instanceof KubeApiError && err.status === 409)) throw err
    })
  }
  // Served once both answer a list.
  for (const path of ['/apis/instancetype.kubevirt.io/v1beta1/virtualmachineinstancetypes', '/apis/kubevirt.io/v1/virtualmachines']) {
    await until(
      `a list of ${path} to answer`,
      15_000,
      () => http.request({ method: 'GET', path, query: { limit: 1 } }),
      () => true,
      {
        everyMs: 50,
      },
    )
  }
}

const revisionsPath = (ns: string) => `/apis/apps/v1/namespaces/${ns}/controllerrevisions`
const vmsPath = (ns: string) => `/apis/kubevirt.io/v1/namespaces/${ns}/virtualmachines`
const spec = (i: number) => ({ cpu: { guest: 1 + (i % 4) }, memory: { guest: `${i + 1}Gi` } })

/** A VM per stash, each pointing at a ControllerRevision that holds its instancetype at `versions[i]`. */
async function populate(http: KubeHttp, ns: string, versions: string[]): Promise<Array<{ vm: string; revision: string; version: string }>> {
  const out = []
  for (const [i, version] of versions.entries()) {
    const vm = `vm-${i}`
    const revision = `${vm}-it-${i}-${version}-1`
    const created = (
      await http.request<Vm>({
        method: 'POST',
        path: vmsPath(ns),
        body: {
          apiVersion: 'kubevirt.io/v1',
          kind: 'VirtualMachine',
          metadata: { name: vm },
          spec: { instancetype: { kind: 'VirtualMachineInstancetype', name: `it-${i}`, revisionName: revision }, running: false },
        },
      })
    ).body
    await http.request({
      method: 'POST',
      path: revisionsPath(ns),
      body: {
        apiVersion: 'apps/v1',
        kind: 'ControllerRevision',
        metadata: {
          name: revision,
          labels: { [VERSION_LABEL]: version, 'instancetype.kubevirt.io/object-kind': 'VirtualMachineInstancetype' },
          ownerReferences: [
            { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachine', name: vm, uid: created.metadata.uid, controller: true },
          ],
        },
        data: {
          apiVersion: `instancetype.kubevirt.io/${version}`,
          kind: 'VirtualMachineInstancetype',
          metadata: { name: `it-${i}` },
          spec: spec(i),
        },
        revision: 1,
      },
    })
    out.push({ vm, revision, version })
  }
  return out
}

async function state(http: KubeHttp, ns: string) {
  const revisions = (await http.request<{ items: Revision[] }>({ method: 'GET', path: revisionsPath(ns) })).body.items
  const vms = (await http.request<{ items: Vm[] }>({ method: 'GET', path: vmsPath(ns) })).body.items
  return { revisions, vms, byName: new Map(revisions.map((r) => [r.metadata.name, r])) }
}

/** The replacement a run creates for `old` (at v1beta1), made by hand as a run that died would leave it. */
async function createReplacement(http: KubeHttp, ns: string, old: Revision): Promise<string> {
  const name = `${old.metadata.name}-v1beta1`
  await http.request({
    method: 'POST',
    path: revisionsPath(ns),
    body: {
      apiVersion: 'apps/v1',
      kind: 'ControllerRevision',
      metadata: { name, labels: { ...old.metadata.labels, [VERSION_LABEL]: 'v1beta1' }, ownerReferences: old.metadata.ownerReferences },
      data: { ...old.data, apiVersion: 'instancetype.kubevirt.io/v1beta1' },
      revision: 1,
    },
  })
  return name
}

async function namespace(t: Test): Promise<{ http: KubeHttp; ns: string }> {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  await ensureCrds(http)
  const ns = uniqueName('kv')
  await createNamespace(http, ns)
  t.teardown(() => http.request({ method: 'DELETE', path: `/api/v1/namespaces/${ns}` }).catch(() => {}))
  return { http, ns }
}

t.test(
  'kubevirt-instancetypes: every stash moves to v1beta1, referrers follow, old revisions go, a second run changes nothing',
  async (t) => {
    const { http, ns } = await namespace(t)
    const made = await populate(http, ns, ['v1alpha1', 'v1alpha2', 'v1alpha1', 'v1alpha2', 'v1beta1'])
    const before = await state(http, ns)

    const planned = await dryRun(http, INSTANCETYPES, settings(), logger)
    const plannedHere = planned.stashes?.planned.filter((p) => p.startsWith(`${ns}/`)) ?? []
    t.equal(plannedHere.length, 4, 'the dry run lists the 4 old stashes')
    t.match(plannedHere[0], /v1alpha1 -> v1beta1 as vm-0-it-0-v1alpha1-1-v1beta1; 1 referrer pointer\(s\) moved/)
    const afterDryRun = await state(http, ns)
    t.same(
      afterDryRun.revisions.map((r) => r.metadata.resourceVersion).sort(),
      before.revisions.map((r) => r.metadata.resourceVersion).sort(),
      'and writes nothing',
    )

    const result = await migrateCrd(INSTANCETYPES, settings(), { http, logger, owner: 'test-owner' })
    t.equal(result.outcome, 'Succeeded', result.reason)
    t.ok((result.stashes?.counts.migrated ?? 0) >= 4, 'the phase moved the old stashes')

    const after = await state(http, ns)
    for (const [i, m] of made.entries()) {
      const vm = after.vms.find((v) => v.metadata.name === m.vm)!
      const pointed = after.byName.get(vm.spec.instancetype!.revisionName!)
      t.ok(pointed, `${m.vm} points at an existing revision`)
      t.equal(pointed?.data.apiVersion, 'instancetype.kubevirt.io/v1beta1', `${m.vm}'s stash is at the storage version`)
      t.same(pointed?.data.spec, spec(i), `with the same content`)
      t.equal(pointed?.metadata.labels?.[VERSION_LABEL], 'v1beta1', 'and the version label says so')
      t.equal(pointed?.metadata.ownerReferences?.[0]?.uid, vm.metadata.uid, 'owned by the same VM')
      if (m.version !== 'v1beta1') t.notOk(after.byName.has(m.revision), `the old revision ${m.revision} is gone`)
      else t.equal(pointed?.metadata.name, m.revision, 'the current stash was left alone')
    }
    t.equal(after.revisions.length, made.length, 'no orphaned revision')

    const again = await migrateCrd(INSTANCETYPES, settings(), { http, logger, owner: 'test-owner' })
    const final = await state(http, ns)
    t.equal(again.outcome, 'Skipped', `a second run has nothing to do (${again.reason})`)
    t.same(
      final.revisions.map((r) => r.metadata.resourceVersion).sort(),
      after.revisions.map((r) => r.metadata.resourceVersion).sort(),
      'and changes nothing',
    )
  },
)

t.test('a run that died mid-phase is finished by the next one; a stash nobody points at is reported, not touched', async (t) => {
  const { http, ns } = await namespace(t)
  const made = await populate(http, ns, ['v1alpha1', 'v1alpha2'])
  const first = await state(http, ns)

  // What kill -9 leaves behind. Stash 0: its replacement was created, no referrer moved yet.
  const replacement0 = await createReplacement(http, ns, first.byName.get(made[0]!.revision)!)
  // Stash 1: replacement created and the VM moved, the old revision not yet deleted.
  const replacement1 = await createReplacement(http, ns, first.byName.get(made[1]!.revision)!)
  await http.request({
    method: 'PATCH',
    path: `${vmsPath(ns)}/${made[1]!.vm}`,
    contentType: ContentType.mergePatch,
    body: { spec: { instancetype: { revisionName: replacement1 } } },
  })
  // And a stash at an old version that no VM points at.
  await http.request({
    method: 'POST',
    path: revisionsPath(ns),
    body: {
      apiVersion: 'apps/v1',
      kind: 'ControllerRevision',
      metadata: { name: 'lonely', labels: { [VERSION_LABEL]: 'v1alpha1' } },
      data: { apiVersion: 'instancetype.kubevirt.io/v1alpha1', kind: 'VirtualMachineInstancetype', metadata: { name: 'x' }, spec: {} },
      revision: 1,
    },
  })

  const result = await migrateCrd(INSTANCETYPES, settings(), { http, logger, owner: 'test-owner' })
  t.equal(result.outcome, 'Failed', 'the run fails because of the lonely stash')
  t.equal(result.errorCode, 'CRDM_STASH_FAILED')
  t.match(
    result.stashes?.failures,
    [{ key: `${ns}/lonely`, error: /^CRDM_STASH_FAILED: nothing points at it, so it was left at v1alpha1/ }],
    'the result names it with why',
  )
  t.match(result.reason, /^1 stashed copy not migrated \(/, 'its public reason counts it')
  t.notMatch(result.reason, 'lonely', 'and names nobody')

  const after = await state(http, ns)
  t.same(
    after.vms.find((v) => v.metadata.name === made[0]!.vm)?.spec.instancetype?.revisionName,
    replacement0,
    'stash 0: its VM was moved to the replacement found again',
  )
  t.notOk(after.byName.has(made[0]!.revision), 'and its old revision deleted')
  t.same(
    after.vms.find((v) => v.metadata.name === made[1]!.vm)?.spec.instancetype?.revisionName,
    replacement1,
    'stash 1: the VM stays on its replacement',
  )
  t.notOk(after.byName.has(made[1]!.revision), 'and its old revision deleted')
  t.equal(after.byName.get('lonely')?.data.apiVersion, 'instancetype.kubevirt.io/v1alpha1', 'the lonely stash was not touched')
  t.same([...after.byName.keys()].sort(), ['lonely', replacement0, replacement1].sort(), 'no orphan, nothing half-done')
})

t.test("a stash of a webhook-converted CRD is converted by the CRD's own webhook", async (t) => {
  const webhook = await startConversionWebhook()
  t.teardown(() => webhook.stop())
  const crd = crdManifest({ group: 'conv.example.com', versions: ['v1', 'v2'], storage: 'v2' })
  crd.spec.conversion = webhook.conversion()
  const stash = { apiVersion: 'conv.example.com/v1', kind: 'Widget', metadata: { name: 'w' }, spec: { replicas: 3, image: 'app:1' } }
  const [converted] = await convertObjects(crd, [stash], 'v2')
  t.same(
    converted,
    { ...stash, apiVersion: 'conv.example.com/v2', spec: { template: { replicas: 3, containers: [{ image: 'app:1' }] } } },
    'reshaped',
  )
  webhook.refuse(['w'], 'no')
  await t.rejects(convertObjects(crd, [stash], 'v2'), { code: 'CRDM_CONVERSION_REFUSED', message: /refused: no \(object w\)/ })
  await webhook.setMode('down')
  await t.rejects(convertObjects(crd, [stash], 'v2'), { code: 'CRDM_CONVERSION_OUTAGE', message: /ECONNREFUSED/ })
  const none = crdManifest({ group: 'conv.example.com', versions: ['v1', 'v2'], storage: 'v2' })
  t.same(await convertObjects(none, [stash], 'v2'), [{ ...stash, apiVersion: 'conv.example.com/v2' }], 'strategy None relabels')
})
