import t from 'tap'
import { DiscoveryCache, discoveryReuse, type CachedDiscovery } from '../../src/kube/discovery-cache.js'
import type { APIResourceList } from '../../src/kube/discovery.js'
import type { KubeHttp } from '../../src/kube/http.js'

const list = (hashes: Record<string, string>): APIResourceList => ({
  resources: Object.entries(hashes).map(([name, storageVersionHash]) => ({ name, storageVersionHash })),
})

t.test('discoveryReuse: join a read in flight, reuse a young answer showing the hash, else read', async (t) => {
  const answered = (fetchedAt: number, hashes: Record<string, string>): CachedDiscovery => ({ fetchedAt, list: list(hashes) })
  const cases: Array<[string, CachedDiscovery | undefined, string]> = [
    ['nothing cached', undefined, 'fetch'],
    ['a read in flight', { fetchedAt: undefined, list: undefined }, 'join'],
    ['young, shows the new hash', answered(1000, { widgets: 'new', gadgets: 'old' }), 'reuse'],
    ['young, still the old hash: that server may have switched since', answered(1000, { widgets: 'old' }), 'fetch'],
    ['young, the resource not served yet', answered(1000, { gadgets: 'new' }), 'fetch'],
    ['old enough to read again, though it shows the hash', answered(800, { widgets: 'new' }), 'fetch'],
    ['just under the age limit', answered(801, { widgets: 'new' }), 'reuse'],
  ]
  for (const [what, entry, want] of cases) t.equal(discoveryReuse(entry, 'widgets', 'new', 1000, 200), want, what)
})

/** A client of one server answering discovery reads from `answers`, in order; counts them. */
function server(href: string, answers: Array<APIResourceList | Error>) {
  const reads: string[] = []
  const http = {
    server: new URL(href),
    request: async ({ path }: { path: string }) => {
      reads.push(path)
      await new Promise((r) => setImmediate(r))
      const next = answers.shift()
      if (!next) throw new Error('no more answers')
      if (next instanceof Error) throw next
      return { status: 200, body: next }
    },
  }
  return { http: http as unknown as KubeHttp, reads }
}

t.test('DiscoveryCache: one read per server and group/version answers the CRDs of that group', async (t) => {
  let now = 0
  const cache = new DiscoveryCache(200, () => now)
  const a = server('https://10.0.0.1:6443', [list({ widgets: 'w2', gadgets: 'g2' }), list({ widgets: 'w2', gadgets: 'g2' })])
  const b = server('https://10.0.0.2:6443', [list({ widgets: 'w1', gadgets: 'g2' }), list({ widgets: 'w2', gadgets: 'g2' })])
  // Two CRDs of one group polled at once: one read per server.
  const first = await Promise.all([
    cache.storageVersionHash(a.http, 'example.com', 'v2', 'widgets', 'w2'),
    cache.storageVersionHash(a.http, 'example.com', 'v2', 'gadgets', 'g2'),
    cache.storageVersionHash(b.http, 'example.com', 'v2', 'widgets', 'w2'),
    cache.storageVersionHash(b.http, 'example.com', 'v2', 'gadgets', 'g2'),
  ])
  t.strictSame(first, ['w2', 'g2', 'w1', 'g2'], 'each CRD its own hash, from its server')
  t.equal(a.reads.length + b.reads.length, 2, 'one read per server')
  t.strictSame(a.reads, ['/apis/example.com/v2'])

  now = 100
  t.equal(await cache.storageVersionHash(a.http, 'example.com', 'v2', 'widgets', 'w2'), 'w2', 'a young answer with the hash: reused')
  t.equal(a.reads.length, 1)
  t.equal(await cache.storageVersionHash(b.http, 'example.com', 'v2', 'widgets', 'w2'), 'w2', 'a young answer without it: read again')
  t.equal(b.reads.length, 2)
  now = 400
  t.equal(await cache.storageVersionHash(a.http, 'example.com', 'v2', 'widgets', 'w2'), 'w2', 'an old answer: read again')
  t.equal(a.reads.length, 2)
})

t.test('DiscoveryCache: a failed read is not kept', async (t) => {
  const cache = new DiscoveryCache(200, () => 0)
  const a = server('https://10.0.0.1:6443', [new Error('503'), list({ widgets: 'w2' })])
  const joined = await Promise.allSettled([
    cache.storageVersionHash(a.http, 'example.com', 'v2', 'widgets', 'w2'),
    cache.storageVersionHash(a.http, 'example.com', 'v2', 'gadgets', 'g2'),
  ])
  t.strictSame(
    joined.map((r) => r.status),
    ['rejected', 'rejected'],
    'a poll that joined the read gets its error',
  )
  t.equal(await cache.storageVersionHash(a.http, 'example.com', 'v2', 'widgets', 'w2'), 'w2', 'the next poll reads again')
  t.equal(a.reads.length, 2)
})
