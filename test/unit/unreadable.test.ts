import t from 'tap'
import { KubeApiError } from '../../src/kube/api-errors.js'
import { continueAfter, continueFrom, findUnreadableKey, unreadableKeys, type Probe } from '../../src/kube/unreadable.js'

const ref = { group: 'conv.example.com', plural: 'picks' }

/** The list error kube-apiserver 1.37 sends for a page with undecodable objects (details.causes per key). */
const corruptList = (keys: string[]) =>
  new KubeApiError(
    500,
    'GET',
    '/apis/conv.example.com/v2/picks',
    {
      kind: 'Status',
      status: 'Failure',
      reason: 'InternalError',
      message: 'failed to read one or more picks.conv.example.com from the storage',
      details: {
        causes: keys.map((k) => ({
          type: 'FieldValueInvalid',
          message: 'object not decodable',
          field: `/registry/conv.example.com/picks/${k}`,
        })),
      },
    },
    undefined,
  )

t.test('unreadableKeys: the list-order keys of details.causes, sorted, without the storage prefix', async (t) => {
  t.same(unreadableKeys(corruptList(['ns-b/pick-2', 'ns-a/pick-9', 'ns-a/pick-1']), ref), ['ns-a/pick-1', 'ns-a/pick-9', 'ns-b/pick-2'])
  t.same(unreadableKeys(corruptList(['cluster-wide']), ref), ['cluster-wide'], 'a cluster-scoped key')
  const otherPrefix = new KubeApiError(
    500,
    'GET',
    '/x',
    { kind: 'Status', details: { causes: [{ field: '/custom-prefix/conv.example.com/picks/ns/p' }] } },
    undefined,
  )
  t.same(unreadableKeys(otherPrefix, ref), ['ns/p'], 'any --etcd-prefix')
  t.same(
    unreadableKeys(corruptList(['ns/p']), { group: 'other.example.com', plural: 'picks' }),
    [],
    'keys of another resource are not ours',
  )
  const noCauses = new KubeApiError(500, 'GET', '/x', { kind: 'Status', message: 'conversion webhook for x failed: no' }, undefined)
  t.same(unreadableKeys(noCauses, ref), [], 'before 1.32: no key in the error')
  t.same(unreadableKeys(new Error('x'), ref), [])
  const junk = new KubeApiError(500, 'GET', '/x', { kind: 'Status', details: { causes: [null, 7, { field: 3 }] } }, undefined)
  t.same(unreadableKeys(junk, ref), [], 'causes of the wrong shape are ignored')
})

const decode = (token: string) => JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as { v: string; rv: number; start: string }

t.test('continue tokens in the API server’s format', async (t) => {
  t.same(decode(continueAfter('ns/pick-0798', '4711')), { v: 'meta.k8s.io/v1', rv: 4711, start: 'ns/pick-0798\u0000' })
  t.notMatch(continueAfter('ns/p', '1'), /[=+/]/, 'base64url without padding')
  t.equal(decode(continueFrom('ns/', '1')).start, 'ns/\u0001', 'a trailing slash (path.Clean would refuse it) lists from the same place')
  t.equal(decode(continueFrom('ns/.', '1')).start, 'ns/.\u0001', 'a trailing dot segment too')
  t.equal(decode(continueFrom('ns//', '1')).start, 'ns/0', 'no key holds //: the next character up')
  t.equal(decode(continueFrom('.', '1')).start, '.\u0001')
})

/** A probe over sorted keys, some unreadable: what a list of one object from `start` answers. */
function prober(keys: string[], unreadable: Set<string>) {
  const sorted = [...keys].sort()
  let probes = 0
  const probe = async (start: string): Promise<Probe> => {
    probes++
    const first = sorted.find((k) => k >= start)
    if (first === undefined) return 'end'
    return unreadable.has(first) ? 'unreadable' : 'readable'
  }
  return { probe, count: () => probes }
}

t.test('findUnreadableKey: the key right after the last one listed', async (t) => {
  const keys = Array.from({ length: 1000 }, (_, i) => `conv-1/w-${String(i).padStart(4, '0')}`)
  const p = prober(keys, new Set(['conv-1/w-0007', 'conv-1/w-0640']))
  t.equal(await findUnreadableKey('conv-1/w-0006', p.probe), 'conv-1/w-0007')
  t.ok(p.count() < 8 * 14 + 4, `about 8 probes a character (${p.count()})`)
  t.equal(await findUnreadableKey('conv-1/w-0639', p.probe), 'conv-1/w-0640', 'the next one, after the first')
  t.equal(await findUnreadableKey(undefined, prober(['a/x', 'b/y'], new Set(['a/x'])).probe), 'a/x', 'the first object of all')
  t.equal(await findUnreadableKey('a', prober(['a', 'a-b'], new Set(['a-b'])).probe), 'a-b', 'a key that extends the one before')
  t.equal(await findUnreadableKey('ns/a', prober(['ns/a', 'ns/~~'], new Set(['ns/~~'])).probe), 'ns/~~', 'the highest character')
})

t.test('findUnreadableKey: undefined when the probes do not add up', async (t) => {
  t.equal(await findUnreadableKey('a', prober(['a', 'b'], new Set()).probe), undefined, 'nothing unreadable after it')
  t.equal(await findUnreadableKey('a', prober(['a', 'bé'], new Set(['bé'])).probe), undefined, 'a character outside printable ASCII')
  t.equal(await findUnreadableKey('z', prober(['a', 'z'], new Set(['a'])).probe), undefined, 'an unreadable key before `after` is not it')
})
