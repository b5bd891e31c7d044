import t from 'tap'
import jsonpatch from 'fast-json-patch'
import type { CustomResourceDefinition, ManagedFieldsEntry } from '../../src/kube/types.js'
import {
  cleanManagedFields,
  managedFieldsPatch,
  managedFieldsPolicy,
  mergeFieldSets,
  needsManagedFieldsCleanup,
  type ManagedFieldsPolicy,
} from '../../src/migrator/phases/managed-fields.js'

const GROUP = 'example.com'
const NOW = new Date('2024-05-06T07:08:09.123Z')

// v1alpha1 and v1alpha2 are no longer served, v1beta1 is served but not storage, v1 is storage.
// `policy` is conversion strategy Webhook (remove + seed), `relabelling` is None.
const policy: ManagedFieldsPolicy = {
  group: GROUP,
  servedVersions: new Set(['v1beta1', 'v1']),
  storageVersion: 'v1',
  rewriteServedNonStorage: false,
  relabelUnserved: false,
  now: () => NOW,
}
const rewriting: ManagedFieldsPolicy = { ...policy, rewriteServedNonStorage: true }
const relabelling: ManagedFieldsPolicy = { ...policy, relabelUnserved: true }
const relabellingAndRewriting: ManagedFieldsPolicy = { ...policy, relabelUnserved: true, rewriteServedNonStorage: true }

function entry(manager: string, apiVersion: string | undefined, more: Partial<ManagedFieldsEntry> = {}): ManagedFieldsEntry {
  const e: ManagedFieldsEntry = {
    manager,
    operation: 'Update',
    time: '2024-01-01T00:00:00Z',
    fieldsType: 'FieldsV1',
    fieldsV1: { 'f:spec': { [`f:${manager}`]: {} } },
    ...more,
  }
  if (apiVersion !== undefined) e.apiVersion = apiVersion
  return e
}

const kubectlAlpha = entry('kubectl', 'example.com/v1alpha1')
const kubectlBeta = entry('kubectl', 'example.com/v1beta1')
const kubectlV1 = entry('kubectl', 'example.com/v1')
const fluxAlpha = entry('flux', 'example.com/v1alpha1', { operation: 'Apply' })
const helmV1 = entry('helm', 'example.com/v1')
const otherGroupAlpha = entry('other', 'other.com/v1alpha1')
const subdomainAlpha = entry('sub', 'sub.example.com/v1alpha1')
const lookalikeAlpha = entry('lookalike', 'example.com.evil/v1alpha1')
const coreV1 = entry('core', 'v1')
const noApiVersion = entry('nover', undefined)

interface Row {
  name: string
  entries: ManagedFieldsEntry[] | undefined
  policy?: ManagedFieldsPolicy
  changed: boolean
  removed: ManagedFieldsEntry[]
  rewritten: number
  /** Defaults to 0. */
  relabelled?: number
  seeded: boolean
  managedFields: ManagedFieldsEntry[]
}

/** `e` moved to the storage version. */
const atV1 = (e: ManagedFieldsEntry): ManagedFieldsEntry => ({ ...e, apiVersion: 'example.com/v1' })

const seed = (manager: string, operation: string): ManagedFieldsEntry => ({
  manager,
  operation,
  apiVersion: 'example.com/v1',
  time: '2024-05-06T07:08:09Z',
  fieldsType: 'FieldsV1',
  fieldsV1: { 'f:metadata': { 'f:name': {} } },
})

const rows: Row[] = [
  { name: 'undefined list', entries: undefined, changed: false, removed: [], rewritten: 0, seeded: false, managedFields: [] },
  { name: 'empty list', entries: [], changed: false, removed: [], rewritten: 0, seeded: false, managedFields: [] },
  {
    name: 'only storage-version entries: unchanged',
    entries: [kubectlV1, helmV1],
    changed: false,
    removed: [],
    rewritten: 0,
    seeded: false,
    managedFields: [kubectlV1, helmV1],
  },
  {
    name: 'served non-storage entry kept when rewriting is off',
    entries: [kubectlBeta, helmV1],
    changed: false,
    removed: [],
    rewritten: 0,
    seeded: false,
    managedFields: [kubectlBeta, helmV1],
  },
  {
    name: 'unserved entry removed, storage entry kept',
    entries: [kubectlAlpha, helmV1],
    changed: true,
    removed: [kubectlAlpha],
    rewritten: 0,
    seeded: false,
    managedFields: [helmV1],
  },
  {
    name: 'unserved entry removed, served non-storage entry kept',
    entries: [kubectlBeta, fluxAlpha],
    changed: true,
    removed: [fluxAlpha],
    rewritten: 0,
    seeded: false,
    managedFields: [kubectlBeta],
  },
  {
    name: 'same version name in another group is kept',
    entries: [otherGroupAlpha, kubectlAlpha],
    changed: true,
    removed: [kubectlAlpha],
    rewritten: 0,
    seeded: false,
    managedFields: [otherGroupAlpha],
  },
  {
    name: 'a subdomain group and a look-alike group are not ours',
    entries: [subdomainAlpha, lookalikeAlpha],
    changed: false,
    removed: [],
    rewritten: 0,
    seeded: false,
    managedFields: [subdomainAlpha, lookalikeAlpha],
  },
  {
    name: 'entries without apiVersion and core-group entries are kept',
    entries: [noApiVersion, coreV1, kubectlAlpha],
    changed: true,
    removed: [kubectlAlpha],
    rewritten: 0,
    seeded: false,
    managedFields: [noApiVersion, coreV1],
  },
  {
    name: 'all removed: seeded with the first removed manager and operation',
    entries: [fluxAlpha, kubectlAlpha],
    changed: true,
    removed: [fluxAlpha, kubectlAlpha],
    rewritten: 0,
    seeded: true,
    managedFields: [seed('flux', 'Apply')],
  },
  {
    name: 'all removed, first without manager/operation: seeded as crd-migrator Update',
    entries: [{ apiVersion: 'example.com/v1alpha1', fieldsType: 'FieldsV1', fieldsV1: {} }],
    changed: true,
    removed: [{ apiVersion: 'example.com/v1alpha1', fieldsType: 'FieldsV1', fieldsV1: {} }],
    rewritten: 0,
    seeded: true,
    managedFields: [seed('crd-migrator', 'Update')],
  },
  {
    name: "removal leaving only another group's entry: not seeded",
    entries: [kubectlAlpha, otherGroupAlpha],
    changed: true,
    removed: [kubectlAlpha],
    rewritten: 0,
    seeded: false,
    managedFields: [otherGroupAlpha],
  },
  {
    name: 'rewrite on: served non-storage entry moved to the storage version',
    entries: [kubectlBeta, helmV1],
    policy: rewriting,
    changed: true,
    removed: [],
    rewritten: 1,
    seeded: false,
    managedFields: [{ ...kubectlBeta, apiVersion: 'example.com/v1' }, helmV1],
  },
  {
    name: 'rewrite on: unserved removed and served rewritten in one go',
    entries: [fluxAlpha, kubectlBeta, otherGroupAlpha],
    policy: rewriting,
    changed: true,
    removed: [fluxAlpha],
    rewritten: 1,
    seeded: false,
    managedFields: [{ ...kubectlBeta, apiVersion: 'example.com/v1' }, otherGroupAlpha],
  },
  {
    name: 'rewrite on: a rewrite that removes nothing else never seeds',
    entries: [kubectlBeta],
    policy: rewriting,
    changed: true,
    removed: [],
    rewritten: 1,
    seeded: false,
    managedFields: [{ ...kubectlBeta, apiVersion: 'example.com/v1' }],
  },
  {
    name: 'rewrite on: storage entries and foreign entries untouched',
    entries: [kubectlV1, otherGroupAlpha, noApiVersion],
    policy: rewriting,
    changed: false,
    removed: [],
    rewritten: 0,
    seeded: false,
    managedFields: [kubectlV1, otherGroupAlpha, noApiVersion],
  },
  {
    name: 'rewrite on: collision with the same manager/operation merges field sets, later time wins',
    entries: [
      entry('kubectl', 'example.com/v1', {
        time: '2024-01-01T00:00:00Z',
        fieldsV1: { 'f:spec': { 'f:a': {} }, 'f:metadata': { 'f:labels': { 'f:x': {} } } },
      }),
      entry('kubectl', 'example.com/v1beta1', {
        time: '2024-03-01T00:00:00Z',
        fieldsV1: { 'f:spec': { 'f:b': {} }, 'f:metadata': { 'f:labels': { 'f:y': {} } } },
      }),
    ],
    policy: rewriting,
    changed: true,
    removed: [],
    rewritten: 1,
    seeded: false,
    managedFields: [
      entry('kubectl', 'example.com/v1', {
        time: '2024-03-01T00:00:00Z',
        fieldsV1: { 'f:spec': { 'f:a': {}, 'f:b': {} }, 'f:metadata': { 'f:labels': { 'f:x': {}, 'f:y': {} } } },
      }),
    ],
  },
  {
    name: 'rewrite on: collision keeps the later time when the rewritten entry is older',
    entries: [
      entry('kubectl', 'example.com/v1beta1', { time: '2023-01-01T00:00:00Z', fieldsV1: { 'f:spec': { 'f:b': {} } } }),
      entry('kubectl', 'example.com/v1', { time: '2024-06-01T00:00:00Z', fieldsV1: { 'f:spec': { 'f:a': {} } } }),
    ],
    policy: rewriting,
    changed: true,
    removed: [],
    rewritten: 1,
    seeded: false,
    managedFields: [entry('kubectl', 'example.com/v1', { time: '2024-06-01T00:00:00Z', fieldsV1: { 'f:spec': { 'f:b': {}, 'f:a': {} } } })],
  },
  {
    name: 'rewrite on: a different operation is a different entry',
    entries: [entry('kubectl', 'example.com/v1'), entry('kubectl', 'example.com/v1beta1', { operation: 'Apply' })],
    policy: rewriting,
    changed: true,
    removed: [],
    rewritten: 1,
    seeded: false,
    managedFields: [entry('kubectl', 'example.com/v1'), entry('kubectl', 'example.com/v1', { operation: 'Apply' })],
  },
  {
    name: 'rewrite on: a different subresource is a different entry',
    entries: [entry('kubectl', 'example.com/v1'), entry('kubectl', 'example.com/v1beta1', { subresource: 'status' })],
    policy: rewriting,
    changed: true,
    removed: [],
    rewritten: 1,
    seeded: false,
    managedFields: [entry('kubectl', 'example.com/v1'), entry('kubectl', 'example.com/v1', { subresource: 'status' })],
  },
  {
    name: 'rewrite on: same subresource collides',
    entries: [
      entry('ctrl', 'example.com/v1', { subresource: 'status', fieldsV1: { 'f:status': { 'f:a': {} } } }),
      entry('ctrl', 'example.com/v1beta1', { subresource: 'status', fieldsV1: { 'f:status': { 'f:b': {} } } }),
    ],
    policy: rewriting,
    changed: true,
    removed: [],
    rewritten: 1,
    seeded: false,
    managedFields: [entry('ctrl', 'example.com/v1', { subresource: 'status', fieldsV1: { 'f:status': { 'f:a': {}, 'f:b': {} } } })],
  },
  {
    name: 'rewrite off: a served non-storage entry does not collide with its storage twin',
    entries: [entry('kubectl', 'example.com/v1'), entry('kubectl', 'example.com/v1beta1')],
    changed: false,
    removed: [],
    rewritten: 0,
    seeded: false,
    managedFields: [entry('kubectl', 'example.com/v1'), entry('kubectl', 'example.com/v1beta1')],
  },

  // Conversion strategy None: entries of unserved versions are relabelled, never removed.
  {
    name: 'None: the same entries that Webhook removes are relabelled to the storage version',
    entries: [kubectlAlpha, helmV1],
    policy: relabelling,
    changed: true,
    removed: [],
    rewritten: 0,
    relabelled: 1,
    seeded: false,
    managedFields: [atV1(kubectlAlpha), helmV1],
  },
  {
    name: 'None: every entry unserved: all relabelled, nothing seeded',
    entries: [fluxAlpha, kubectlAlpha],
    policy: relabelling,
    changed: true,
    removed: [],
    rewritten: 0,
    relabelled: 2,
    seeded: false,
    managedFields: [atV1(fluxAlpha), atV1(kubectlAlpha)],
  },
  {
    name: 'None: only storage-version entries: unchanged',
    entries: [kubectlV1, helmV1],
    policy: relabelling,
    changed: false,
    removed: [],
    rewritten: 0,
    seeded: false,
    managedFields: [kubectlV1, helmV1],
  },
  {
    name: 'None: a served non-storage entry is kept when rewriting is off',
    entries: [kubectlBeta, fluxAlpha],
    policy: relabelling,
    changed: true,
    removed: [],
    rewritten: 0,
    relabelled: 1,
    seeded: false,
    managedFields: [kubectlBeta, atV1(fluxAlpha)],
  },
  {
    name: 'None: a relabelled entry folds into the storage entry of the same manager/operation, later time wins',
    entries: [
      entry('team-a', 'example.com/v1', { operation: 'Apply', time: '2024-01-01T00:00:00Z', fieldsV1: { 'f:spec': { 'f:a': {} } } }),
      entry('team-a', 'example.com/v1alpha1', {
        operation: 'Apply',
        time: '2024-02-01T00:00:00Z',
        fieldsV1: { 'f:spec': { 'f:b': {} }, 'f:metadata': { 'f:labels': { 'f:x': {} } } },
      }),
    ],
    policy: relabelling,
    changed: true,
    removed: [],
    rewritten: 0,
    relabelled: 1,
    seeded: false,
    managedFields: [
      entry('team-a', 'example.com/v1', {
        operation: 'Apply',
        time: '2024-02-01T00:00:00Z',
        fieldsV1: { 'f:spec': { 'f:a': {}, 'f:b': {} }, 'f:metadata': { 'f:labels': { 'f:x': {} } } },
      }),
    ],
  },
  {
    name: 'None: entries of two unserved versions of one manager fold into one',
    entries: [
      entry('kubectl', 'example.com/v1alpha1', { time: '2024-03-01T00:00:00Z', fieldsV1: { 'f:spec': { 'f:a': {} } } }),
      helmV1,
      entry('kubectl', 'example.com/v1alpha2', { time: '2024-01-01T00:00:00Z', fieldsV1: { 'f:spec': { 'f:b': {} } } }),
    ],
    policy: relabelling,
    changed: true,
    removed: [],
    rewritten: 0,
    relabelled: 2,
    seeded: false,
    managedFields: [
      entry('kubectl', 'example.com/v1', { time: '2024-03-01T00:00:00Z', fieldsV1: { 'f:spec': { 'f:a': {}, 'f:b': {} } } }),
      helmV1,
    ],
  },
  {
    name: 'None: a different operation is a different entry',
    entries: [entry('kubectl', 'example.com/v1'), entry('kubectl', 'example.com/v1alpha1', { operation: 'Apply' })],
    policy: relabelling,
    changed: true,
    removed: [],
    rewritten: 0,
    relabelled: 1,
    seeded: false,
    managedFields: [entry('kubectl', 'example.com/v1'), entry('kubectl', 'example.com/v1', { operation: 'Apply' })],
  },
  {
    name: 'None: a status entry is relabelled but not folded into the main entry',
    entries: [
      entry('ctrl', 'example.com/v1', { fieldsV1: { 'f:spec': { 'f:a': {} } } }),
      entry('ctrl', 'example.com/v1alpha1', { subresource: 'status', fieldsV1: { 'f:status': { 'f:ready': {} } } }),
    ],
    policy: relabelling,
    changed: true,
    removed: [],
    rewritten: 0,
    relabelled: 1,
    seeded: false,
    managedFields: [
      entry('ctrl', 'example.com/v1', { fieldsV1: { 'f:spec': { 'f:a': {} } } }),
      entry('ctrl', 'example.com/v1', { subresource: 'status', fieldsV1: { 'f:status': { 'f:ready': {} } } }),
    ],
  },
  {
    name: 'None: a status entry folds into the status entry of the same manager',
    entries: [
      entry('ctrl', 'example.com/v1alpha1', { subresource: 'status', fieldsV1: { 'f:status': { 'f:ready': {} } } }),
      entry('ctrl', 'example.com/v1', { subresource: 'status', fieldsV1: { 'f:status': { 'f:phase': {} } } }),
    ],
    policy: relabelling,
    changed: true,
    removed: [],
    rewritten: 0,
    relabelled: 1,
    seeded: false,
    managedFields: [entry('ctrl', 'example.com/v1', { subresource: 'status', fieldsV1: { 'f:status': { 'f:ready': {}, 'f:phase': {} } } })],
  },
  {
    name: 'None: mixed list: only our unserved entries move, foreign and served ones keep their place',
    entries: [noApiVersion, otherGroupAlpha, fluxAlpha, subdomainAlpha, kubectlBeta, lookalikeAlpha, coreV1, helmV1, kubectlAlpha],
    policy: relabelling,
    changed: true,
    removed: [],
    rewritten: 0,
    relabelled: 2,
    seeded: false,
    managedFields: [
      noApiVersion,
      otherGroupAlpha,
      atV1(fluxAlpha),
      subdomainAlpha,
      kubectlBeta,
      lookalikeAlpha,
      coreV1,
      helmV1,
      atV1(kubectlAlpha),
    ],
  },
  {
    name: 'None: entries of other groups only: untouched',
    entries: [otherGroupAlpha, subdomainAlpha, lookalikeAlpha, coreV1, noApiVersion],
    policy: relabelling,
    changed: false,
    removed: [],
    rewritten: 0,
    seeded: false,
    managedFields: [otherGroupAlpha, subdomainAlpha, lookalikeAlpha, coreV1, noApiVersion],
  },
  {
    name: 'None + rewrite on: relabelled and rewritten entries of one manager fold with its storage entry',
    entries: [
      entry('kubectl', 'example.com/v1alpha1', { time: '2024-01-01T00:00:00Z', fieldsV1: { 'f:spec': { 'f:a': {} } } }),
      entry('kubectl', 'example.com/v1beta1', { time: '2024-02-01T00:00:00Z', fieldsV1: { 'f:spec': { 'f:b': {} } } }),
      entry('kubectl', 'example.com/v1', { time: '2024-03-01T00:00:00Z', fieldsV1: { 'f:spec': { 'f:c': {} } } }),
      otherGroupAlpha,
    ],
    policy: relabellingAndRewriting,
    changed: true,
    removed: [],
    rewritten: 1,
    relabelled: 1,
    seeded: false,
    managedFields: [
      entry('kubectl', 'example.com/v1', { time: '2024-03-01T00:00:00Z', fieldsV1: { 'f:spec': { 'f:a': {}, 'f:b': {}, 'f:c': {} } } }),
      otherGroupAlpha,
    ],
  },
  {
    name: 'None: an unserved storage version has nothing to relabel to: its entries stay, the rest move',
    entries: [kubectlAlpha, kubectlV1],
    policy: { ...relabelling, servedVersions: new Set(['v1beta1']) },
    changed: true,
    removed: [],
    rewritten: 0,
    relabelled: 1,
    seeded: false,
    managedFields: [entry('kubectl', 'example.com/v1', { fieldsV1: { 'f:spec': { 'f:kubectl': {} } } })],
  },
  {
    name: 'Webhook: same manager in two unserved versions: both removed, seeded once',
    entries: [
      entry('kubectl', 'example.com/v1alpha1', { fieldsV1: { 'f:spec': { 'f:a': {} } } }),
      entry('kubectl', 'example.com/v1alpha2', { fieldsV1: { 'f:spec': { 'f:b': {} } } }),
    ],
    changed: true,
    removed: [
      entry('kubectl', 'example.com/v1alpha1', { fieldsV1: { 'f:spec': { 'f:a': {} } } }),
      entry('kubectl', 'example.com/v1alpha2', { fieldsV1: { 'f:spec': { 'f:b': {} } } }),
    ],
    rewritten: 0,
    seeded: true,
    managedFields: [seed('kubectl', 'Update')],
  },
  {
    name: 'Webhook: unserved status entry removed, main entry kept',
    entries: [
      entry('ctrl', 'example.com/v1'),
      entry('ctrl', 'example.com/v1alpha1', { subresource: 'status', fieldsV1: { 'f:status': { 'f:ready': {} } } }),
    ],
    changed: true,
    removed: [entry('ctrl', 'example.com/v1alpha1', { subresource: 'status', fieldsV1: { 'f:status': { 'f:ready': {} } } })],
    rewritten: 0,
    seeded: false,
    managedFields: [entry('ctrl', 'example.com/v1')],
  },
]

t.ok(rows.length >= 12, `at least 12 rows (${rows.length})`)

for (const row of rows) {
  t.test(row.name, async (t) => {
    const before = JSON.stringify(row.entries)
    const p = row.policy ?? policy
    const result = cleanManagedFields(row.entries, p)
    t.equal(result.changed, row.changed, 'changed')
    t.strictSame(result.removed, row.removed, 'removed')
    t.equal(result.rewritten, row.rewritten, 'rewritten')
    t.equal(result.relabelled, row.relabelled ?? 0, 'relabelled')
    t.equal(result.seeded, row.seeded, 'seeded')
    t.strictSame(result.managedFields, row.managedFields, 'managedFields')
    t.equal(JSON.stringify(row.entries), before, 'the input is not mutated')
    t.equal(needsManagedFieldsCleanup(row.entries, p), row.changed, 'needsManagedFieldsCleanup agrees')
  })
}

t.test('seeding time comes from policy.now, without milliseconds', async (t) => {
  const r = cleanManagedFields([kubectlAlpha], { ...policy, now: () => new Date('2030-12-31T23:59:59.999Z') })
  t.equal(r.managedFields[0]?.time, '2030-12-31T23:59:59Z')
  t.match(r.managedFields[0]?.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/)
})

t.test('seeding without policy.now uses the current time', async (t) => {
  const { now: _unused, ...noClock } = policy
  const before = Math.floor(Date.now() / 1000) * 1000
  const r = cleanManagedFields([kubectlAlpha], noClock)
  const at = Date.parse(r.managedFields[0]!.time!)
  t.ok(at >= before && at <= Date.now(), 'a current timestamp')
  t.notMatch(r.managedFields[0]!.time!, /\.\d+Z$/, 'no fractional seconds')
})

t.test('mergeFieldSets is a deep union', async (t) => {
  t.strictSame(
    mergeFieldSets(
      { 'f:spec': { 'f:a': {}, 'f:nested': { 'f:x': {} } }, 'f:metadata': {} },
      { 'f:spec': { 'f:b': {}, 'f:nested': { 'f:y': {} } }, 'f:status': { 'f:c': {} } },
    ),
    {
      'f:spec': { 'f:a': {}, 'f:nested': { 'f:x': {}, 'f:y': {} }, 'f:b': {} },
      'f:metadata': {},
      'f:status': { 'f:c': {} },
    },
  )
  t.strictSame(mergeFieldSets(undefined, { 'f:a': {} }), { 'f:a': {} }, 'undefined left side')
  t.strictSame(mergeFieldSets({ 'f:a': {} }, undefined), { 'f:a': {} }, 'undefined right side')
  t.strictSame(
    mergeFieldSets({ '.': {} }, { '.': {}, 'k:{"name":"x"}': { '.': {} } }),
    { '.': {}, 'k:{"name":"x"}': { '.': {} } },
    'key and dot fields',
  )
  const a = { 'f:spec': { 'f:a': {} } }
  mergeFieldSets(a, { 'f:spec': { 'f:b': {} } })
  t.strictSame(a, { 'f:spec': { 'f:a': {} } }, 'inputs are not mutated')
})

t.test('needsManagedFieldsCleanup', async (t) => {
  t.equal(needsManagedFieldsCleanup(undefined, policy), false, 'no managedFields')
  t.equal(needsManagedFieldsCleanup([helmV1], policy), false, 'storage only')
  t.equal(needsManagedFieldsCleanup([helmV1, fluxAlpha], policy), true, 'one unserved')
  t.equal(needsManagedFieldsCleanup([kubectlBeta], policy), false, 'served non-storage, rewrite off')
  t.equal(needsManagedFieldsCleanup([kubectlBeta], rewriting), true, 'served non-storage, rewrite on')
  t.equal(needsManagedFieldsCleanup([otherGroupAlpha, noApiVersion], rewriting), false, 'nothing of ours')
  t.equal(needsManagedFieldsCleanup([helmV1, fluxAlpha], relabelling), true, 'one unserved, relabelled')
  t.equal(needsManagedFieldsCleanup([kubectlBeta], relabelling), false, 'served non-storage, relabelling')
})

t.test('None: cleaning again changes nothing (the relabelled list settles)', async (t) => {
  for (const p of [relabelling, relabellingAndRewriting, { ...relabelling, servedVersions: new Set(['v1beta1']) }]) {
    const once = cleanManagedFields([fluxAlpha, kubectlAlpha, kubectlBeta, kubectlV1, helmV1, otherGroupAlpha], p)
    t.ok(once.changed)
    const twice = cleanManagedFields(once.managedFields, p)
    t.equal(twice.changed, false, 'nothing left to do')
    t.strictSame(twice.managedFields, once.managedFields)
  }
})

t.test('managedFieldsPatch: the resourceVersion we read (a precondition), then the replace', async (t) => {
  const fields = [helmV1]
  const ops = managedFieldsPatch('1234', fields)
  t.strictSame(ops, [
    { op: 'replace', path: '/metadata/resourceVersion', value: '1234' },
    { op: 'replace', path: '/metadata/managedFields', value: fields },
  ])
  t.notOk(
    ops.some((op) => op.op === 'test'),
    'no test op: a failed one answers a bare 422; a stale resourceVersion answers 409 (the real API server: migrate-managed-fields.test.ts)',
  )

  const doc = (rv: string) => ({
    apiVersion: 'example.com/v1',
    kind: 'Widget',
    metadata: { name: 'w', resourceVersion: rv, managedFields: [kubectlAlpha, helmV1] },
  })
  const applied = jsonpatch.applyPatch(doc('1235'), ops).newDocument
  t.equal(applied.metadata.resourceVersion, '1234', 'the patched object carries the resourceVersion we read, whatever is stored')
  t.strictSame(applied.metadata.managedFields, [helmV1], 'managedFields replaced')
  t.equal(applied.metadata.name, 'w', 'the rest untouched')
})

t.test('managedFieldsPatch accepts an empty list', async (t) => {
  const ops = managedFieldsPatch('9', [])
  t.equal(ops.length, 2)
  t.strictSame(ops[1], { op: 'replace', path: '/metadata/managedFields', value: [] })
})

t.test('managedFieldsPolicy from a CRD', async (t) => {
  const crd: CustomResourceDefinition = {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: 'widgets.example.com' },
    spec: {
      group: GROUP,
      names: { plural: 'widgets', kind: 'Widget' },
      scope: 'Namespaced',
      versions: [
        { name: 'v1alpha1', served: false, storage: false },
        { name: 'v1beta1', served: true, storage: false },
        { name: 'v1', served: true, storage: true },
      ],
    },
  }
  const off = managedFieldsPolicy(crd, 'v1', { rewriteServedManagedFields: false })
  t.equal(off.group, GROUP)
  t.strictSame([...off.servedVersions].sort(), ['v1', 'v1beta1'])
  t.equal(off.storageVersion, 'v1')
  t.equal(off.rewriteServedNonStorage, false)
  t.equal(off.now, undefined, 'real clock')

  const on = managedFieldsPolicy(crd, 'v1beta1', { rewriteServedManagedFields: true })
  t.equal(on.storageVersion, 'v1beta1', 'the storage version given wins over spec')
  t.equal(on.rewriteServedNonStorage, true)

  t.equal(off.relabelUnserved, true, 'no spec.conversion is strategy None: relabel')
  const r = cleanManagedFields([kubectlAlpha, kubectlBeta, kubectlV1], off)
  t.strictSame(r.removed, [], 'None: nothing removed')
  t.equal(r.relabelled, 1, 'v1alpha1 is unserved per the CRD and relabelled')
  t.strictSame(r.managedFields, [kubectlV1, kubectlBeta], 'folded with the v1 entry of the same manager, where the first of them was')

  const webhook: CustomResourceDefinition = {
    ...crd,
    spec: {
      ...crd.spec,
      conversion: {
        strategy: 'Webhook',
        webhook: { conversionReviewVersions: ['v1'], clientConfig: { service: { namespace: 'ns', name: 'conv' } } },
      },
    },
  }
  const w = managedFieldsPolicy(webhook, 'v1', { rewriteServedManagedFields: false })
  t.equal(w.relabelUnserved, false, 'strategy Webhook: remove + seed')
  const rw = cleanManagedFields([kubectlAlpha, kubectlBeta, kubectlV1], w)
  t.strictSame(rw.removed, [kubectlAlpha], 'Webhook: v1alpha1 is removed')
  t.equal(rw.relabelled, 0)

  const explicitNone = managedFieldsPolicy({ ...crd, spec: { ...crd.spec, conversion: { strategy: 'None' } } }, 'v1', {
    rewriteServedManagedFields: false,
  })
  t.equal(explicitNone.relabelUnserved, true, 'explicit strategy None: relabel')
})
