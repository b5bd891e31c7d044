/** The lossless check's pure parts: what is compared, how changes are named and judged. */
import t from 'tap'
import { diffOwnedContent, fieldPattern, ownedContent } from '../../src/migrator/lossless/content-diff.js'
import {
  acceptedRemovalsFor,
  covers,
  defaultedFields,
  describeFindings,
  invalidAcceptedRemoval,
  judgeChanges,
} from '../../src/migrator/lossless/verdict.js'
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

t.test('judgeChanges', async (t) => {
  const removed = { path: 'spec.token', change: 'removed' as const }
  const nested = { path: 'spec.items[3].name', change: 'removed' as const }
  const added = { path: 'spec.size', change: 'added' as const }
  const changed = { path: 'spec.a', change: 'changed' as const }
  const none = { judgeAdditions: true, acceptedRemovals: [], defaultedFields: new Set<string>() }
  t.same(judgeChanges([removed, added, changed], none).blocking, [removed, added, changed], 'everything blocks by default')
  t.same(
    judgeChanges([removed, nested], { ...none, acceptedRemovals: ['spec.token', 'spec.items[*].name'] }).accepted,
    [removed, nested],
    'accepted removals',
  )
  t.same(judgeChanges([changed], { ...none, acceptedRemovals: ['spec.a'] }).blocking, [changed], 'only a removal can be accepted')
  t.same(
    judgeChanges([{ ...removed, change: 'added' }], { ...none, acceptedRemovals: ['spec.token'] }).blocking.length,
    1,
    'an accepted removal does not accept an addition',
  )
  t.same(judgeChanges([added], { ...none, defaultedFields: new Set(['spec.size']) }).defaults, [added], 'a schema default is reported')
  t.same(
    judgeChanges([added], { ...none, judgeAdditions: false }),
    { blocking: [], accepted: [], defaults: [] },
    'None: additions are not judged',
  )
  t.ok(covers('spec', 'spec.token'))
  t.ok(covers('spec.items', 'spec.items[2]'))
  t.notOk(covers('spec.tok', 'spec.token'), 'a prefix of a name is not its parent')
})

t.test('defaultedFields reads every named version', async (t) => {
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
  t.same([...defaultedFields(crd, ['v2'])].sort(), ['spec.items[*].weight', 'spec.size'])
  t.same([...defaultedFields(crd, ['v1', 'v2'])].length, 3)
})

t.test('accepted removals: parsed per CRD, refused when not a field path', async (t) => {
  t.same(acceptedRemovalsFor('a.example.com', ['a.example.com:spec.x', 'b.example.com:spec.y', 'a.example.com:status']), [
    'spec.x',
    'status',
  ])
  t.equal(invalidAcceptedRemoval('a.example.com:spec.items[*].name'), undefined)
  t.equal(invalidAcceptedRemoval('a.example.com:metadata.labels["app.kubernetes.io/name"]'), undefined)
  t.match(invalidAcceptedRemoval('spec.token'), /not <crd name>:<field path>/)
  t.match(invalidAcceptedRemoval('a.example.com:spec..x'), /not a field path/)
  t.match(invalidAcceptedRemoval('a.example.com:metadata.name'), /only labels, annotations/)
  t.throws(() => ConfigSchema.parse({ migrator: { acceptRemovals: ['nope'] } }), /not <crd name>:<field path>/, 'the config refuses it')
})

t.test('describeFindings names objects and paths, then counts the rest', async (t) => {
  const f = (i: number) => ({ key: `ns/o${i}`, changes: [{ path: 'spec.t', change: 'removed' as const }] })
  t.equal(describeFindings([f(1)], 1), 'ns/o1: spec.t removed')
  t.equal(describeFindings([f(1), f(2)], 9, 1), 'ns/o1: spec.t removed; and 8 more object(s)')
  const many = { key: 'k', changes: Array.from({ length: 6 }, (_, i) => ({ path: `spec.f${i}`, change: 'added' as const })) }
  t.equal(describeFindings([many], 1), 'k: spec.f0 added, spec.f1 added, spec.f2 added, spec.f3 added, 2 more')
})
