/** The lossless check's pure parts: what is compared, how changes are named and judged. */
import t from 'tap'
import { diffOwnedContent, fieldPattern, hasPath, ownedContent, parsePath } from '../../src/migrator/lossless/content-diff.js'
import { managedPaths } from '../../src/migrator/lossless/managed-paths.js'
import { describeRefusedChanges, elideKeys } from '../../src/migrator/lossless/check.js'
import type { ChangeCount } from '../../src/migrator/lossless/verdict.js'
import {
  covers,
  describeFindings,
  judgeRoundTrip,
  schemaDefaults,
  withNestedDefaults,
  type LosslessRules,
  type SchemaNode,
} from '../../src/migrator/lossless/verdict.js'
import { acceptedFieldsFor, invalidAcceptEntry } from '../../src/config/accept-entries.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import { ConfigSchema } from '../../src/config/schema.js'

const obj = (extra: Record<string, unknown>, metadata: Record<string, unknown> = {}) => ({
  apiVersion: 'example.com/v1',
  kind: 'Widget',
  metadata: { name: 'w', namespace: 'ns', uid: 'u', resourceVersion: '1', managedFields: [{ manager: 'm' }], ...metadata },
  ...extra,
})

t.test('diffOwnedContent', async (t) => {
  const cases: Array<[string, Record<string, unknown>, Record<string, unknown>, ReturnType<typeof diffOwnedContent>]> = [
    ['identical', obj({ spec: { a: 1 } }), obj({ spec: { a: 1 } }), []],
    [
      'apiVersion, resourceVersion and managedFields are not owned',
      obj({ spec: {} }),
      { ...obj({ spec: {} }, { resourceVersion: '9', managedFields: [] }), apiVersion: 'example.com/v2' },
      [],
    ],
    ['a removed field', obj({ spec: { a: 1, token: 's' } }), obj({ spec: { a: 1 } }), [{ path: 'spec.token', change: 'removed' }]],
    ['an added field', obj({ spec: { a: 1 } }), obj({ spec: { a: 1, owner: 'x' } }), [{ path: 'spec.owner', change: 'added' }]],
    ['a changed value', obj({ spec: { a: 1 } }), obj({ spec: { a: 2 } }), [{ path: 'spec.a', change: 'changed' }]],
    ['a changed type', obj({ spec: { a: { b: 1 } } }), obj({ spec: { a: 'b' } }), [{ path: 'spec.a', change: 'changed' }]],
    ['a whole status removed', obj({ spec: {}, status: { ready: true } }), obj({ spec: {} }), [{ path: 'status', change: 'removed' }]],
    [
      'array elements, by index',
      obj({ spec: { items: [{ n: 'a' }, { n: 'b', x: 1 }, { n: 'c' }] } }),
      obj({ spec: { items: [{ n: 'a' }, { n: 'b' }] } }),
      [
        { path: 'spec.items[1].x', change: 'removed' },
        { path: 'spec.items[2]', change: 'removed' },
      ],
    ],
    [
      'a label added where there were none',
      obj({}),
      obj({}, { labels: { pwned: 'true' } }),
      [{ path: 'metadata.labels.pwned', change: 'added' }],
    ],
    [
      'annotation keys in brackets',
      obj({}, { annotations: { 'example.com/a': '1' } }),
      obj({}, { annotations: {} }),
      [{ path: 'metadata.annotations["example.com/a"]', change: 'removed' }],
    ],
    [
      'finalizers and ownerReferences are owned',
      obj({}, { finalizers: ['f'] }),
      obj({}),
      [{ path: 'metadata.finalizers', change: 'removed' }],
    ],
    ['an empty map is no map', obj({}, { labels: {} }), obj({}), []],
  ]
  for (const [name, before, after, want] of cases) t.same(diffOwnedContent(before, after), want, name)
  t.equal(
    diffOwnedContent(obj({ spec: Object.fromEntries(Array.from({ length: 80 }, (_, i) => [`f${i}`, i])) }), obj({ spec: {} }), 10).length,
    10,
    'at most limit changes',
  )
  t.same(Object.keys(ownedContent(obj({ spec: {}, data: 1 }))).sort(), ['data', 'metadata', 'spec'])
  t.equal(fieldPattern('spec.items[12].x[3]'), 'spec.items[*].x[*]')
})

t.test('schemaDefaults reads every named version', async (t) => {
  const crd = {
    spec: {
      versions: [
        {
          name: 'v2',
          schema: {
            openAPIV3Schema: {
              properties: {
                spec: {
                  properties: {
                    size: { default: 'm' },
                    items: { items: { properties: { weight: { default: 1 } } } },
                  },
                },
              },
            },
          },
        },
        { name: 'v1', schema: { openAPIV3Schema: { properties: { spec: { properties: { old: { default: 0 } } } } } } },
      ],
    },
  } as unknown as CustomResourceDefinition
  t.same([...schemaDefaults(crd, ['v2']).keys()].sort(), ['spec.items[*].weight', 'spec.size'])
  t.same([...schemaDefaults(crd, ['v1', 'v2']).keys()].length, 3)
})

t.test('consent entries: parsed per CRD, refused when not a field path', async (t) => {
  t.same(acceptedFieldsFor('a.example.com', ['a.example.com:spec.x', 'b.example.com:spec.y', 'a.example.com:status']), ['spec.x', 'status'])
  t.equal(invalidAcceptEntry('a.example.com:spec.items[*].name'), undefined)
  t.equal(invalidAcceptEntry('a.example.com:metadata.labels["app.kubernetes.io/name"]'), undefined)
  t.match(invalidAcceptEntry('spec.token'), /not <crd name>:<field path>/)
  t.match(invalidAcceptEntry('a.example.com:spec..x'), /not a field path/)
  t.match(invalidAcceptEntry('a.example.com:metadata.name'), /only labels, annotations/)
  t.throws(() => ConfigSchema.parse({ migrator: { acceptRemovals: ['nope'] } }), /not <crd name>:<field path>/, 'the config refuses it')
})

t.test('describeFindings names objects and paths, then counts the rest', async (t) => {
  const f = (i: number) => ({ key: `ns/o${i}`, changes: [{ path: 'spec.t', change: 'removed' as const }] })
  t.equal(describeFindings([f(1)], 1), 'ns/o1: spec.t removed')
  t.equal(describeFindings([f(1), f(2)], 9, 1), 'ns/o1: spec.t removed; and 8 more object(s)')
  const many = { key: 'k', changes: Array.from({ length: 6 }, (_, i) => ({ path: `spec.f${i}`, change: 'added' as const })) }
  t.equal(describeFindings([many], 1), 'k: spec.f0 added, spec.f1 added, spec.f2 added, spec.f3 added, 2 more')
})

t.test('own keys only: fields and labels named like Object.prototype members are seen', async (t) => {
  // JSON.parse makes `__proto__` an own key, as the API server's JSON does.
  const parsed = (json: string) => JSON.parse(json) as Record<string, unknown>
  const cases: Array<[string, string, string, ReturnType<typeof diffOwnedContent>]> = [
    ['an added constructor', '{"spec":{}}', '{"spec":{"constructor":"x"}}', [{ path: 'spec.constructor', change: 'added' }]],
    ['a removed toString', '{"spec":{"toString":1}}', '{"spec":{}}', [{ path: 'spec.toString', change: 'removed' }]],
    [
      'an added __proto__',
      '{"spec":{"a":1}}',
      '{"spec":{"a":1,"__proto__":{"polluted":true}}}',
      [{ path: 'spec.__proto__', change: 'added' }],
    ],
    [
      'a hasOwnProperty label',
      '{"metadata":{}}',
      '{"metadata":{"labels":{"hasOwnProperty":"x"}}}',
      [{ path: 'metadata.labels.hasOwnProperty', change: 'added' }],
    ],
    ['valueOf as a top-level field', '{}', '{"valueOf":{"a":1}}', [{ path: 'valueOf', change: 'added' }]],
    ['__proto__ as a top-level field', '{}', '{"__proto__":{"a":1}}', [{ path: '__proto__', change: 'added' }]],
    ['unchanged prototype names', '{"spec":{"constructor":1}}', '{"spec":{"constructor":1}}', []],
  ]
  for (const [name, a, b, want] of cases) t.same(diffOwnedContent(parsed(a), parsed(b)), want, name)
  t.equal(({} as Record<string, unknown>)['polluted'], undefined, 'nothing reached Object.prototype')
  t.ok(hasPath(parsed('{"spec":{"__proto__":{"x":1}}}'), 'spec.__proto__.x'))
  t.notOk(hasPath(parsed('{"spec":{}}'), 'spec.constructor'))
  t.notOk(hasPath(parsed('{"spec":{}}'), 'spec.toString'))
})

const node = (schema: Record<string, unknown>) => schema as SchemaNode
const rules = (over: Partial<LosslessRules> = {}): LosslessRules => ({
  judgeAdditions: true,
  acceptedRemovals: [],
  acceptedChanges: [],
  defaults: new Map(),
  ...over,
})

t.test('judgeRoundTrip: every change needs consent, a default or bookkeeping', async (t) => {
  const o = (spec: Record<string, unknown>, annotations: Record<string, string> = {}, labels: Record<string, string> = {}) =>
    obj({ spec }, { annotations, labels })
  const bookkeeping = 'cluster.x-k8s.io/conversion-data'
  type Row = [
    string,
    ReturnType<typeof o>,
    ReturnType<typeof o>,
    Partial<LosslessRules>,
    ReturnType<typeof o> | undefined,
    Record<string, string[]>,
  ]
  const paths = (v: ReturnType<typeof judgeRoundTrip>) => ({
    blocking: v.blocking.map((c) => `${c.path} ${c.change}${c.from ? ` from ${c.from}` : ''}`),
    accepted: v.accepted.map((c) => `${c.path} ${c.change}`),
    defaults: v.defaults.map((c) => c.path),
    bookkeeping: v.bookkeeping.map((c) => c.path),
  })
  const rows: Row[] = [
    ['identical', o({ a: 1 }), o({ a: 1 }), {}, undefined, {}],
    ['a removal refused', o({ a: 1, t: 's' }), o({ a: 1 }), {}, undefined, { blocking: ['spec.t removed'] }],
    [
      'a removal accepted by acceptRemovals',
      o({ t: 's' }),
      o({}),
      { acceptedRemovals: ['spec.t'] },
      undefined,
      { accepted: ['spec.t removed'] },
    ],
    [
      'acceptRemovals does not accept a change',
      o({ t: 's' }),
      o({ t: 'x' }),
      { acceptedRemovals: ['spec.t'] },
      undefined,
      { blocking: ['spec.t changed'] },
    ],
    [
      'acceptChanges accepts a change',
      o({ t: 's' }),
      o({ t: 'x' }),
      { acceptedChanges: ['spec.t'] },
      undefined,
      { accepted: ['spec.t changed'] },
    ],
    [
      'acceptChanges accepts an addition below it',
      o({}),
      o({ p: { f: { s: false } } }),
      { acceptedChanges: ['spec.p.f'] },
      undefined,
      { accepted: ['spec.p.f.s added'] },
    ],
    [
      'a move shown as a move',
      o({ timeout: '1h0m0s' }),
      o({ timeouts: { pipeline: '1h0m0s' } }),
      {},
      o({ timeouts: { pipeline: '1h0m0s' } }),
      { blocking: ['spec.timeouts.pipeline moved from spec.timeout'] },
    ],
    [
      'a move accepted needs both ends',
      o({ timeout: '1h0m0s' }),
      o({ timeouts: { pipeline: '1h0m0s' } }),
      { acceptedChanges: ['spec.timeout'] },
      o({ timeouts: { pipeline: '1h0m0s' } }),
      { blocking: ['spec.timeouts.pipeline moved from spec.timeout'] },
    ],
    [
      'a move accepted',
      o({ timeout: '1h0m0s' }),
      o({ timeouts: { pipeline: '1h0m0s' } }),
      { acceptedChanges: ['spec.timeout', 'spec.timeouts'] },
      undefined,
      { accepted: ['spec.timeouts.pipeline moved'] },
    ],
    [
      'bookkeeping: added in the old view, not stored',
      o({ a: 1 }),
      o({ a: 1 }, { [bookkeeping]: '{"spec":{}}' }),
      {},
      o({ a: 1 }),
      { bookkeeping: [`metadata.annotations["${bookkeeping}"]`] },
    ],
    [
      'an injected label is stored: refused',
      o({ a: 1 }),
      o({ a: 1 }, {}, { pwned: 'true' }),
      {},
      o({ a: 1 }, {}, { pwned: 'true' }),
      { blocking: ['metadata.labels.pwned added'] },
    ],
    [
      'an injected spec.owner is stored: refused',
      o({ a: 1 }),
      o({ a: 1, owner: 'x' }),
      {},
      o({ a: 1, owner: 'x' }),
      { blocking: ['spec.owner added'] },
    ],
    [
      'without the storage view an addition is refused',
      o({ a: 1 }),
      o({ a: 1, owner: 'x' }),
      {},
      undefined,
      { blocking: ['spec.owner added'] },
    ],
    [
      'a changed value absent from storage is still refused',
      o({}, { k: 'a' }),
      o({}, { k: 'b' }),
      {},
      o({}),
      { blocking: ['metadata.annotations.k changed'] },
    ],
    [
      'a default at exactly its path with exactly its value',
      o({ a: 1 }),
      o({ a: 1, size: 'm' }),
      { defaults: new Map([['spec.size', node({ default: 'm' })]]) },
      undefined,
      { defaults: ['spec.size'] },
    ],
    [
      'a defaulted path with another value is refused',
      o({ a: 1 }),
      o({ a: 1, size: 'xl' }),
      { defaults: new Map([['spec.size', node({ default: 'm' })]]) },
      o({ a: 1, size: 'xl' }),
      { blocking: ['spec.size added'] },
    ],
    [
      'a default of {} does not cover what is below it',
      obj({}),
      obj({ spec: { owner: 'x', secretCopy: 's' } }),
      { defaults: new Map([['spec', node({ default: {} })]]) },
      obj({ spec: { owner: 'x', secretCopy: 's' } }),
      { blocking: ['spec.owner added', 'spec.secretCopy added'] },
    ],
    [
      'nested defaults of a defaulted object count',
      o({}),
      o({ res: { cpu: 1 } }),
      { defaults: new Map([['spec.res', node({ default: {}, properties: { cpu: { default: 1 } } })]]) },
      undefined,
      { defaults: ['spec.res'] },
    ],
    ['None: additions are not judged', o({}), o({ owner: 'x' }), { judgeAdditions: false }, undefined, {}],
  ]
  for (const [name, before, after, over, stored, want] of rows) {
    const got = paths(judgeRoundTrip({ before, after, stored }, rules(over)))
    t.same(got, { blocking: [], accepted: [], defaults: [], bookkeeping: [], ...want }, name)
  }
  const needs = judgeRoundTrip({ before: o({}), after: o({ x: 1 }) }, rules())
  t.ok(needs.needsStorageView, 'an addition asks for the storage view')
  t.notOk(judgeRoundTrip({ before: o({ x: 1 }), after: o({}) }, rules()).needsStorageView, 'a removal does not')
})

t.test('judgeRoundTrip: fields managedFields name that no view shows', async (t) => {
  const before = obj({ spec: { a: 1 } })
  const v = judgeRoundTrip({ before, after: before, lostManaged: ['spec.token', 'spec.a'] }, rules())
  t.same(v.blocking, [
    { path: 'spec.a', change: 'removed', managedFields: true },
    { path: 'spec.token', change: 'removed', managedFields: true },
  ])
  const dup = judgeRoundTrip({ before: obj({ spec: { t: { x: 1 } } }), after: obj({ spec: {} }), lostManaged: ['spec.t.x'] }, rules())
  t.same(dup.blocking, [{ path: 'spec.t.x', change: 'removed' }], 'a removal the diff saw is named once')
  const ok = judgeRoundTrip({ before, after: before, lostManaged: ['spec.token'] }, rules({ acceptedRemovals: ['spec.token'] }))
  t.same(
    ok.accepted.map((c) => c.path),
    ['spec.token'],
    'consent covers it',
  )
})

t.test('covers: a pattern names its field and every field below it', async (t) => {
  t.ok(covers('spec', 'spec.token'))
  t.ok(covers('spec.items', 'spec.items[2]'))
  t.ok(covers('spec.items[*].name', 'spec.items[3].name'))
  t.notOk(covers('spec.tok', 'spec.token'), 'a prefix of a name is not its parent')
})

t.test('managedPaths: the deepest fields each entry names', async (t) => {
  const o = obj(
    { spec: { a: 1 } },
    {
      managedFields: [
        {
          manager: 'kubectl',
          apiVersion: 'example.com/v1',
          fieldsV1: {
            'f:metadata': { 'f:labels': { '.': {}, 'f:app': {} }, 'f:finalizers': { '.': {}, 'v:"x"': {} }, 'f:name': {} },
            'f:spec': { '.': {}, 'f:a': {}, 'f:token': {}, 'f:items': { 'k:{"name":"a"}': { 'f:w': {} } } },
            'f:apiVersion': {},
          },
        },
        { manager: 'status', apiVersion: 'example.com/v2', subresource: 'status', fieldsV1: { 'f:status': { 'f:ready': {} } } },
        { manager: 'broken', fieldsV1: 'nope' },
      ],
    },
  )
  t.same(managedPaths(o).sort(), ['metadata.finalizers', 'metadata.labels.app', 'spec.a', 'spec.items', 'spec.token', 'status.ready'])
  t.same(
    managedPaths(o, (e) => e.apiVersion === 'example.com/v2'),
    ['status.ready'],
    'entries chosen by version',
  )
  t.same(managedPaths(obj({})), [], 'no managedFields')
})

t.test('parsePath and withNestedDefaults', async (t) => {
  t.same(parsePath('spec.items[2]["a.b"].c[*]'), ['spec', 'items', 2, 'a.b', 'c', '*'])
  t.same(parsePath('metadata.annotations["x/y"]'), ['metadata', 'annotations', 'x/y'])
  t.same(withNestedDefaults(node({ properties: { a: { default: 1 }, b: { properties: { c: { default: 2 } } } } }), {}), { a: 1 })
  t.same(withNestedDefaults(node({ properties: { b: { default: {}, properties: { c: { default: 2 } } } } }), {}), { b: { c: 2 } })
  t.same(withNestedDefaults(node({ items: { properties: { w: { default: 1 } } } }), [{}, { w: 3 }]), [{ w: 1 }, { w: 3 }])
})

t.test('describeFindings names moves and managedFields removals', async (t) => {
  t.equal(
    describeFindings([{ key: 'ns/a', changes: [{ path: 'spec.timeouts.pipeline', change: 'moved', from: 'spec.timeout' }] }], 1),
    'ns/a: spec.timeouts.pipeline moved from spec.timeout',
  )
  t.equal(
    describeFindings([{ key: 'ns/a', changes: [{ path: 'spec.x', change: 'removed', managedFields: true }] }], 1),
    'ns/a: spec.x removed (set by a manager, not in what the rewrite keeps)',
  )
})

t.test('the public refusal: patterns with map keys elided, counts, no object names', async (t) => {
  const rows: Array<[string, string]> = [
    ['spec.token', 'spec.token'],
    ['spec.data["db-password=Hunter2!"]', 'spec.data[…]'],
    ['metadata.labels.pwned', 'metadata.labels[…]'],
    ['metadata.annotations["cluster.x-k8s.io/conversion-data"]', 'metadata.annotations[…]'],
    ['spec.items[*].env["A\\"B"].value', 'spec.items[*].env[…].value'],
    ['status.provenance.configSource', 'status.provenance.configSource'],
  ]
  for (const [pattern, want] of rows) t.equal(elideKeys(pattern), want, pattern)
  const changes: ChangeCount[] = [
    { pattern: 'spec.data["db-password=Hunter2!"]', change: 'removed', verdict: 'refused', objects: 3 },
    { pattern: 'spec.data["api-key"]', change: 'removed', verdict: 'refused', objects: 2 },
    { pattern: 'spec.timeouts.pipeline', from: 'spec.timeout', change: 'moved', verdict: 'refused', objects: 1 },
    { pattern: 'spec.x', change: 'removed', verdict: 'accepted', objects: 9 },
  ]
  const text = describeRefusedChanges(changes)
  t.equal(text, 'spec.data[…] removed (3 objects), spec.timeouts.pipeline moved from spec.timeout (1 object)')
  t.notMatch(text, 'Hunter2', 'no key of a map')
})
