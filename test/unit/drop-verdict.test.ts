import t from 'tap'
import { decideDrop, droppedVersions, type CheckName, type DropEvidence, type Reason } from '../../src/check/drop-verdict.js'
import { requestedDeprecatedApis, samplesOf, wasRequested } from '../../src/check/deprecated-requests.js'
import { parseManifests } from '../../src/check/manifests.js'

const parseCrdManifests = (text: string, file: string) => parseManifests(text, file).crds
import { MS_PER_CRD, MS_PER_OBJECT, planRow, planSummary } from '../../src/check/fleet-plan.js'
import { ConfigError } from '../../src/errors.js'

/** v1alpha1 fully retired: unserved, not storage, not stored, no objects left at it. */
const clean: DropEvidence = {
  crd: 'widgets.example.com',
  group: 'example.com',
  version: 'v1alpha1',
  defined: true,
  served: false,
  storage: false,
  deprecated: true,
  storageVersion: 'v1',
  storedVersions: ['v1'],
  generation: 4,
  objects: { count: 10 },
  managedFields: { count: 0 },
  stashes: { rules: 0, atVersion: 0, where: [] },
  clients: undefined,
  migrator: { frozen: false, owner: undefined, phase: undefined, progress: undefined, lastResult: 'Succeeded', observedGeneration: 4 },
}

const status = (reasons: Reason[], check: CheckName) => reasons.find((r) => r.check === check)?.status

t.test('each piece of evidence, and the verdict it gives', async (t) => {
  const rows: Array<[string, Partial<DropEvidence>, { safe: boolean; blocks?: CheckName[]; unknown?: CheckName[]; says?: RegExp }]> = [
    ['everything clean', {}, { safe: true, says: /last run \(generation 4\) succeeded/ }],
    [
      'still in storedVersions, objects not rewritten',
      { storedVersions: ['v1alpha1', 'v1'], migrator: { ...clean.migrator, lastResult: undefined, observedGeneration: undefined } },
      { safe: false, blocks: ['storedVersions', 'objects'], says: /10 objects not known to be rewritten.*no crd-migrator run on record/ },
    ],
    [
      'in storedVersions but no objects at all',
      { storedVersions: ['v1alpha1', 'v1'], objects: { count: 0 } },
      { safe: false, blocks: ['storedVersions'], says: /no objects/ },
    ],
    [
      'a migration under way',
      {
        storedVersions: ['v1alpha1', 'v1'],
        migrator: { ...clean.migrator, frozen: true, owner: 'pod-a', phase: 'StorageVersionMigration', progress: '3/10' },
      },
      {
        safe: false,
        blocks: ['storedVersions', 'objects'],
        says: /a migration by pod-a is under way \(phase StorageVersionMigration, 3\/10\)/,
      },
    ],
    [
      'the last run failed',
      { storedVersions: ['v1alpha1', 'v1'], migrator: { ...clean.migrator, lastResult: 'Failed: CRDM_OBJECTS_FAILED: 2 objects' } },
      { safe: false, blocks: ['storedVersions', 'objects'], says: /last run: Failed: CRDM_OBJECTS_FAILED/ },
    ],
    [
      'the last run was refused by its lossless check',
      {
        storedVersions: ['v1alpha1', 'v1'],
        migrator: { ...clean.migrator, lastResult: 'Blocked: CRDM_DATA_LOSS: rewriting 3 object(s) would not keep their content' },
      },
      {
        safe: false,
        blocks: ['storedVersions', 'objects'],
        says: /last run stopped Blocked \(CRDM_DATA_LOSS\).*crd-migrator plan .* lists each change and the flag that accepts it/,
      },
    ],
    [
      'a success at an older generation',
      { migrator: { ...clean.migrator, observedGeneration: 2 } },
      { safe: true, says: /last success was at generation 2, the CRD is at 4/ },
    ],
    [
      'managedFields entries left',
      { managedFields: { count: 3 } },
      { safe: false, blocks: ['managedFields'], says: /3 objects have managedFields entries at example.com\/v1alpha1/ },
    ],
    ['listing forbidden', { managedFields: { unknown: 'forbidden' } }, { safe: true, unknown: ['managedFields'] }],
    [
      'stashed copies',
      { stashes: { rules: 1, atVersion: 2, where: ['controllerrevisions ns/a', 'controllerrevisions ns/b'] } },
      { safe: false, blocks: ['stashes'], says: /2 stashed copies at v1alpha1 \(controllerrevisions ns\/a, controllerrevisions ns\/b\)/ },
    ],
    ['stash rules, nothing at the version', { stashes: { rules: 1, atVersion: 0, where: [] } }, { safe: true }],
    [
      'the storage version',
      { storage: true, storageVersion: 'v1alpha1', storedVersions: ['v1alpha1'] },
      {
        safe: false,
        blocks: ['storage', 'storedVersions', 'objects'],
        says: /10 objects are stored at v1alpha1: it is the storage version/,
      },
    ],
    [
      'served, not deprecated: clients unknown',
      { served: true, deprecated: false },
      { safe: false, blocks: ['served'], unknown: ['clients'], says: /not marked deprecated/ },
    ],
    ['served, deprecated, requested', { served: true, clients: { requested: true } }, { safe: false, blocks: ['served', 'clients'] }],
    ['served, deprecated, not requested', { served: true, clients: { requested: false } }, { safe: false, blocks: ['served'] }],
    [
      'served, deprecated, /metrics forbidden',
      { served: true, clients: { unknown: 'forbidden' } },
      { safe: false, blocks: ['served'], unknown: ['clients'] },
    ],
    ['not a version of the CRD', { defined: false }, { safe: true, says: /nothing to drop/ }],
  ]
  for (const [name, change, want] of rows) {
    const verdict = decideDrop({ ...clean, ...change })
    t.equal(verdict.safe, want.safe, `${name}: safe ${want.safe}`)
    const blocks = verdict.reasons.filter((r) => r.status === 'blocks').map((r) => r.check)
    t.strictSame(blocks.sort(), [...(want.blocks ?? [])].sort(), `${name}: blocking checks`)
    const unknown = verdict.reasons.filter((r) => r.status === 'unknown').map((r) => r.check)
    t.strictSame(unknown.sort(), [...(want.unknown ?? [])].sort(), `${name}: unknown checks`)
    if (want.says) t.match(verdict.reasons.map((r) => r.message).join('\n'), want.says, `${name}: says why`)
  }
})

t.test('strict: a check that could not be made answers no', async (t) => {
  const evidence = { ...clean, managedFields: { unknown: 'forbidden: may not list widgets.example.com' } }
  t.equal(decideDrop(evidence).safe, true)
  t.equal(decideDrop(evidence, { strict: true }).safe, false)
  t.equal(status(decideDrop(evidence).reasons, 'managedFields'), 'unknown')
})

t.test("a storedVersions narrowed by hand is the API server's word, said as such", async (t) => {
  const verdict = decideDrop({ ...clean, migrator: { ...clean.migrator, lastResult: undefined, observedGeneration: undefined } })
  t.equal(verdict.safe, true)
  const objects = verdict.reasons.find((r) => r.check === 'objects')!
  t.match(objects.message, /by the API server's record \(status.storedVersions\)$/)
  t.notMatch(objects.message, /rewritten/, 'never claims a rewrite it has no record of')
})

t.test('the versions a manifest drops', async (t) => {
  t.strictSame(droppedVersions(['v1alpha1', 'v1beta1', 'v1'], ['v1beta1', 'v1']), ['v1alpha1'])
  t.strictSame(droppedVersions(['v1'], ['v1', 'v2']), [])
  t.strictSame(droppedVersions(['v1', 'v2'], []), ['v1', 'v2'])
})

t.test('apiserver_requested_deprecated_apis from /metrics text', async (t) => {
  const text = [
    '# HELP apiserver_requested_deprecated_apis [STABLE] Gauge of deprecated APIs that have been requested',
    '# TYPE apiserver_requested_deprecated_apis gauge',
    'apiserver_requested_deprecated_apis{group="example.com",removed_release="",resource="widgets",subresource="",version="v1alpha1"} 1',
    'apiserver_requested_deprecated_apis{group="other.io",removed_release="1.40",resource="gadgets",subresource="status",version="v1"} 1',
    'apiserver_requested_deprecated_apis{group="zero.io",removed_release="",resource="x",subresource="",version="v1"} 0',
    'apiserver_requested_deprecated_apis_total{group="not.this",resource="y",version="v1"} 1',
    'other_metric{group="example.com"} 1',
    'apiserver_requested_deprecated_apis{group="esc\\"aped",resource="r",version="v\\\\1"} 1',
  ].join('\n')
  const requested = requestedDeprecatedApis(text)
  t.strictSame(requested, [
    { group: 'example.com', version: 'v1alpha1', resource: 'widgets' },
    { group: 'other.io', version: 'v1', resource: 'gadgets' },
    { group: 'esc"aped', version: 'v\\1', resource: 'r' },
  ])
  t.ok(wasRequested(requested, { group: 'example.com', version: 'v1alpha1', resource: 'widgets' }))
  t.notOk(wasRequested(requested, { group: 'example.com', version: 'v1', resource: 'widgets' }))
  t.notOk(wasRequested(requested, { group: 'zero.io', version: 'v1', resource: 'x' }), 'a sample at 0 is not a request')
  t.strictSame(samplesOf('up 1\n', 'up'), [{}], 'a sample without labels')
})

t.test('CRD manifests: every CRD document, others left alone', async (t) => {
  const text = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  versions:
    - {name: v1beta1, served: true, storage: false}
    - {name: v1, served: true, storage: true}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: unrelated}
---
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.example.com}
spec: {versions: [{name: v2}]}
`
  t.strictSame(parseCrdManifests(text, 'crds.yaml'), [
    {
      name: 'widgets.example.com',
      group: 'example.com',
      kind: '', // no spec.names in this manifest
      versions: ['v1beta1', 'v1'],
      storage: 'v1',
      conversion: 'None',
      file: 'crds.yaml',
    },
    // No group, kind or storage written: the group from the name, the others unknown.
    {
      name: 'gadgets.example.com',
      group: 'example.com',
      kind: '',
      versions: ['v2'],
      storage: undefined,
      conversion: 'None',
      file: 'crds.yaml',
    },
  ])
  t.throws(() => parseCrdManifests('a: [', 'bad.yaml'), ConfigError, 'not YAML')
  t.throws(
    () => parseCrdManifests('kind: CustomResourceDefinition\napiVersion: apiextensions.k8s.io/v1\nspec: {versions: [{name: v1}]}', 'x'),
    {
      message: /without metadata.name/,
    },
  )
  t.throws(
    () => parseCrdManifests('kind: CustomResourceDefinition\napiVersion: apiextensions.k8s.io/v1beta1\nmetadata: {name: a.b}', 'x'),
    {
      message: /expected apiextensions.k8s.io\/v1/,
    },
  )
})

t.test('plan: work, writes and the estimate from the measured rates', async (t) => {
  const base = { storageVersion: 'v2', blockedReason: undefined, managedFieldsObjects: 0 }
  const rows = [
    planRow({ ...base, name: 'a', storedVersions: ['v1', 'v2'], objects: 3000 }),
    planRow({ ...base, name: 'b', storedVersions: ['v2'], objects: 500 }),
    planRow({ ...base, name: 'c', storedVersions: ['v2'], objects: 500, managedFieldsObjects: 20 }),
    planRow({ ...base, name: 'd', storedVersions: ['v1', 'v2'], objects: undefined }),
    planRow({ ...base, name: 'e', storedVersions: ['v1', 'v2'], objects: 10, blockedReason: 'the CRD is not Established yet' }),
  ]
  t.strictSame(
    rows.map((r) => [r.name, r.work, r.writes]),
    [
      ['a', ['storage'], 3000],
      ['b', [], 0],
      ['c', ['managedFields'], 20],
      ['d', ['storage'], undefined],
      ['e', ['storage'], 10],
    ],
  )
  // The measurement: one CRD of 3,000 objects took 7.7 s; the constants put it within 10%.
  t.ok(Math.abs(rows[0]!.estimateMs! - 7700) / 7700 < 0.1, `3,000 objects: ${rows[0]!.estimateMs} ms`)
  t.equal(rows[1]!.estimateMs, 0)
  const summary = planSummary(rows, 4)
  t.equal(summary.needingWork, 3, 'a, c, d (e is blocked)')
  t.equal(summary.blocked, 1)
  t.equal(summary.writes, 3020)
  t.equal(summary.unknownSize, 1)
  t.equal(summary.serialMs, Math.round(2 * MS_PER_CRD + 3020 * MS_PER_OBJECT))
  t.equal(summary.parallelMs, Math.round(MS_PER_CRD + 3020 * MS_PER_OBJECT), 'the fixed costs overlap, the writes do not')
})
