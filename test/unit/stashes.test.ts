import t from 'tap'
import { ConfigSchema } from '../../src/config/schema.js'
import {
  embeddedOf,
  newStashBody,
  newStashName,
  pointersAt,
  repointPatch,
  valueAt,
  type StashObject,
} from '../../src/migrator/phases/stashes/stash-plan.js'
import { PRESETS, resolveStashRules, rulesForGroup } from '../../src/migrator/phases/stashes/rules.js'

const rule = PRESETS['kubevirt-instancetypes']
const revision = (apiVersion: unknown, extra: Record<string, unknown> = {}): StashObject => ({
  apiVersion: 'apps/v1',
  kind: 'ControllerRevision',
  metadata: {
    name: 'vm-it-1',
    namespace: 'ns',
    uid: 'u1',
    resourceVersion: '7',
    labels: { 'instancetype.kubevirt.io/object-version': 'v1alpha1', keep: 'me' },
    ownerReferences: [{ kind: 'VirtualMachine', uid: 'vm' }],
    managedFields: [],
  },
  data: { apiVersion, kind: 'VirtualMachineInstancetype', metadata: { name: 'it' }, spec: { cpu: { guest: 2 } } },
  revision: 3,
  ...extra,
})

t.test('embeddedOf: only objects of the rule group (and kind)', async (t) => {
  t.match(embeddedOf(revision('instancetype.kubevirt.io/v1alpha1'), rule), { version: 'v1alpha1', kind: 'VirtualMachineInstancetype' })
  t.equal(embeddedOf(revision('instancetype.kubevirt.io/v1alpha1'), rule, ['VirtualMachinePreference']), undefined, 'another kind')
  t.equal(embeddedOf(revision('apps/v1'), rule), undefined, 'another group')
  t.equal(embeddedOf(revision('v1'), rule), undefined, 'the core group')
  t.equal(embeddedOf(revision(undefined), rule), undefined, 'no apiVersion (a StatefulSet revision holds a patch)')
  t.equal(embeddedOf({ metadata: { name: 'x' }, data: 'text' }, rule), undefined, 'data that is not an object')
})

t.test('newStashName: deterministic, within 253 characters', async (t) => {
  t.equal(newStashName('vm-it-1', 'v1beta1'), 'vm-it-1-v1beta1')
  const long = newStashName('a'.repeat(250), 'v1beta1')
  t.equal(long.length, 253)
  t.equal(newStashName('a'.repeat(250), 'v1beta1'), long, 'the same name every time')
  t.not(newStashName(`${'a'.repeat(249)}b`, 'v1beta1'), long, 'and different for another stash')
  t.ok(long.endsWith('-v1beta1'))
})

t.test('newStashBody: the converted object, version label set, the rest kept', async (t) => {
  const old = revision('instancetype.kubevirt.io/v1alpha1', { status: { x: 1 } })
  const converted = { ...(old['data'] as object), apiVersion: 'instancetype.kubevirt.io/v1beta1' }
  const body = newStashBody(old, converted, 'v1beta1', rule)
  t.same(body, {
    apiVersion: 'apps/v1',
    kind: 'ControllerRevision',
    metadata: {
      name: 'vm-it-1-v1beta1',
      namespace: 'ns',
      labels: { 'instancetype.kubevirt.io/object-version': 'v1beta1', keep: 'me' },
      ownerReferences: [{ kind: 'VirtualMachine', uid: 'vm' }],
    },
    data: converted,
    revision: 3,
  })
  t.equal((old['data'] as { apiVersion: string }).apiVersion, 'instancetype.kubevirt.io/v1alpha1', 'the old stash is not modified')
})

t.test('pointers and the repoint patch', async (t) => {
  const vm = { spec: { instancetype: { revisionName: 'r1' }, preference: { revisionName: 'r2' } } }
  t.same(pointersAt(vm, rule.referrers[0]!.pointers, 'r1'), ['/spec/instancetype/revisionName'])
  t.same(pointersAt(vm, rule.referrers[0]!.pointers, 'nope'), [])
  t.equal(valueAt(vm, '/spec/missing/deeper'), undefined, 'a missing path is undefined')
  t.equal(valueAt({ 'a/b': { '~': 1 } }, '/a~1b/~0'), 1, 'escaped pointer segments')
  t.same(repointPatch('/spec/instancetype/revisionName', 'r1', 'r1-v1'), [
    { op: 'test', path: '/spec/instancetype/revisionName', value: 'r1' },
    { op: 'replace', path: '/spec/instancetype/revisionName', value: 'r1-v1' },
  ])
})

t.test('rules: presets, explicit rules, overrides, and what the config refuses', async (t) => {
  t.same(resolveStashRules(['kubevirt-instancetypes'], []), [PRESETS['kubevirt-instancetypes']])
  const explicit = {
    group: 'example.com',
    source: { group: 'apps', version: 'v1', resource: 'controllerrevisions', namespaces: [], dataPointer: '/data' },
    referrers: [{ group: 'example.com', version: 'v1', resource: 'owners', pointers: ['/spec/revision'] }],
  }
  const resolved = resolveStashRules([], [explicit, { preset: 'kubevirt-instancetypes', versionLabel: 'my/label' }])
  t.equal(resolved.length, 2)
  t.equal(resolved[1]!.versionLabel, 'my/label', 'a field given overrides the preset')
  t.same(resolved[1]!.referrers, PRESETS['kubevirt-instancetypes'].referrers, 'the rest comes from the preset')
  t.same(rulesForGroup(resolved, 'example.com'), [resolved[0]])
  t.same(rulesForGroup(resolved, 'other.io'), [])

  t.ok(ConfigSchema.safeParse({ migrator: { stashes: [explicit] } }).success)
  t.notOk(ConfigSchema.safeParse({ migrator: { stashes: [{ group: 'example.com' }] } }).success, 'no source, no referrers, no preset')
  t.notOk(ConfigSchema.safeParse({ migrator: { stashPresets: ['argo'] } }).success, 'an unknown preset')
  t.notOk(
    ConfigSchema.safeParse({
      migrator: { stashes: [{ ...explicit, referrers: [{ ...explicit.referrers[0], pointers: ['spec.revision'] }] }] },
    }).success,
    'a pointer that is not a JSON pointer',
  )
})
