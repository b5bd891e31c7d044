/**
 * The connection policy's decisions (src/webhook/connection-policy.ts), as a table: given
 * the connections open (peer, API server or not, busy, idle time, reviewed) and the caps,
 * which one is evicted, or whether the new one is refused or accepted.
 */
import t from 'tap'
import { ConfigSchema } from '../../src/config/schema.js'
import {
  addressMatcher,
  admitConnection,
  mayWait,
  type ConnectionCaps,
  type TrackedConnection,
} from '../../src/webhook/connection-policy.js'

const API = '10.0.0.1'
const FLOOD = '10.1.0.9'
const OTHER = '10.1.0.7'

let ids = 0
function conn(peer: string, opts: Partial<Omit<TrackedConnection, 'id' | 'peer'>> & { id?: number } = {}): TrackedConnection {
  return { id: opts.id ?? ++ids + 1000, peer, apiServer: peer === API, busy: false, idleMs: 1000, reviewed: true, ...opts }
}
function many(n: number, peer: string, opts: Partial<TrackedConnection> = {}): TrackedConnection[] {
  return Array.from({ length: n }, () => conn(peer, opts))
}

const caps: ConnectionCaps = { maxConnections: 10, maxPerPeer: 4, reserved: 3 }

const table: {
  name: string
  incoming: string
  open: TrackedConnection[]
  caps?: ConnectionCaps
  expect: ReturnType<typeof admitConnection>
}[] = [
  { name: 'nothing open: accepted', incoming: FLOOD, open: [], expect: { action: 'accept' } },
  { name: 'below every cap: accepted', incoming: FLOOD, open: many(3, FLOOD), expect: { action: 'accept' } },
  {
    name: 'a peer at its cap: its longest idle connection goes, not the new one',
    incoming: FLOOD,
    open: [conn(FLOOD, { idleMs: 10 }), conn(FLOOD, { id: 1, idleMs: 50_000 }), conn(FLOOD, { idleMs: 20 }), conn(FLOOD, { idleMs: 30 })],
    expect: { action: 'evict', victim: 1, reason: 'peer' },
  },
  {
    name: 'a peer at its cap: one that never carried a review goes before a longer idle reviewed one',
    incoming: FLOOD,
    open: [conn(FLOOD, { idleMs: 90_000 }), conn(FLOOD, { id: 2, idleMs: 100, reviewed: false }), conn(FLOOD), conn(FLOOD)],
    expect: { action: 'evict', victim: 2, reason: 'peer' },
  },
  {
    name: 'a peer at its cap, all of them busy: refused',
    incoming: FLOOD,
    open: many(4, FLOOD, { busy: true }),
    expect: { action: 'refuse', reason: 'peer' },
  },
  {
    name: 'a peer at its cap never takes another peer’s connection',
    incoming: FLOOD,
    open: [...many(4, FLOOD, { busy: true }), conn(OTHER, { idleMs: 999_999 })],
    expect: { action: 'refuse', reason: 'peer' },
  },
  {
    name: 'other peers fill the shared part (max - reserved): the idle one of the peer holding most goes',
    incoming: '10.1.0.1',
    open: [
      ...many(3, OTHER, { idleMs: 80_000 }),
      conn(FLOOD, { idleMs: 10 }),
      conn(FLOOD, { id: 3, idleMs: 20 }),
      ...many(2, FLOOD, { busy: true }),
    ],
    expect: { action: 'evict', victim: 3, reason: 'shared' },
  },
  {
    name: 'the shared part full of busy connections: refused',
    incoming: '10.1.0.1',
    open: [...many(4, OTHER, { busy: true }), ...many(3, FLOOD, { busy: true })],
    expect: { action: 'refuse', reason: 'shared' },
  },
  {
    name: 'the API server gets a reserved slot while other peers hold the shared part, busy',
    incoming: API,
    open: [...many(4, OTHER, { busy: true }), ...many(3, FLOOD, { busy: true })],
    expect: { action: 'accept' },
  },
  {
    name: 'the API server is not held to the per-peer cap',
    incoming: API,
    open: many(6, API),
    expect: { action: 'accept' },
  },
  {
    name: 'everything full: the API server’s new connection takes an idle one of another peer',
    incoming: API,
    open: [
      ...many(4, API),
      ...many(3, FLOOD, { busy: true }),
      conn(OTHER, { busy: true }),
      conn(OTHER, { id: 4, idleMs: 5 }),
      conn(OTHER, { busy: true }),
    ],
    expect: { action: 'evict', victim: 4, reason: 'total' },
  },
  {
    name: 'the API server’s own idle connections are never evicted',
    incoming: API,
    open: [...many(7, API, { idleMs: 80_000 }), ...many(3, FLOOD, { busy: true })],
    expect: { action: 'refuse', reason: 'total' },
  },
  {
    name: 'another peer never takes an API server connection, even idle',
    incoming: OTHER,
    open: [...many(3, API, { idleMs: 80_000 }), ...many(4, FLOOD, { busy: true }), ...many(3, OTHER, { busy: true })],
    expect: { action: 'refuse', reason: 'shared' },
  },
  {
    name: 'API server addresses unknown (nothing reserved): the shared part is the whole cap',
    incoming: '10.1.0.1',
    caps: { ...caps, reserved: 0 },
    open: [...many(4, OTHER, { busy: true }), ...many(3, FLOOD, { busy: true }), ...many(2, '10.1.0.2', { busy: true })],
    expect: { action: 'accept' },
  },
  {
    name: 'API server addresses unknown, every flood connection busy: a flooder never takes the one idle connection of a peer holding fewer (the API server’s pooled one); it waits',
    incoming: FLOOD,
    caps: { ...caps, reserved: 0 },
    open: [...many(3, FLOOD, { busy: true }), ...many(3, '10.1.0.2', { busy: true }), ...many(3, '10.1.0.3', { busy: true }), conn(OTHER)],
    expect: { action: 'refuse', reason: 'shared' },
  },
  {
    name: 'at the shared cap a peer may replace its own idle connection',
    incoming: FLOOD,
    caps: { ...caps, reserved: 0 },
    open: [
      ...many(2, FLOOD, { busy: true }),
      conn(FLOOD, { id: 8 }),
      ...many(3, '10.1.0.2', { busy: true }),
      ...many(3, '10.1.0.3', { busy: true }),
      conn(OTHER),
    ],
    expect: { action: 'evict', victim: 8, reason: 'shared' },
  },
  {
    name: 'at the shared cap a peer takes the idle connection of a peer holding more',
    incoming: OTHER,
    caps: { ...caps, reserved: 0 },
    open: [conn(OTHER, { busy: true }), ...many(3, FLOOD, { busy: true }), conn(FLOOD, { id: 9 }), ...many(5, '10.1.0.2', { busy: true })],
    expect: { action: 'evict', victim: 9, reason: 'shared' },
  },
  {
    name: 'the attack in small: a flooder at its cap re-opening only ever replaces its own idle connections',
    incoming: FLOOD,
    caps: { maxConnections: 10, maxPerPeer: 4, reserved: 0 },
    open: [
      conn(API, { idleMs: 85_000 }),
      conn(FLOOD, { id: 5, idleMs: 300 }),
      conn(FLOOD, { idleMs: 200 }),
      conn(FLOOD, { idleMs: 100 }),
      conn(FLOOD, { idleMs: 0 }),
    ],
    expect: { action: 'evict', victim: 5, reason: 'peer' },
  },
]

for (const row of table) {
  t.test(row.name, async (t) => {
    t.same(admitConnection({ peer: row.incoming, apiServer: row.incoming === API }, row.open, row.caps ?? caps), row.expect)
  })
}

t.test('the API server keeps getting in while one peer re-opens at its cap 1,000 times', async (t) => {
  const c: ConnectionCaps = { maxConnections: 20, maxPerPeer: 5, reserved: 0 }
  let open: TrackedConnection[] = []
  let next = 1
  const apply = (peer: string) => {
    const v = admitConnection({ peer, apiServer: peer === API }, open, c)
    if (v.action === 'refuse') return v
    if (v.action === 'evict') open = open.filter((o) => o.id !== v.victim)
    open.push({ id: next++, peer, apiServer: peer === API, busy: false, idleMs: 0, reviewed: true })
    return v
  }
  for (let i = 0; i < 1000; i++) {
    open = open.map((o) => ({ ...o, idleMs: o.idleMs + 100 }))
    t.not(apply(FLOOD).action, 'refuse')
    if (i % 100 === 50) t.not(apply(API).action, 'refuse', `the API server's connection at step ${i}`)
  }
  t.equal(open.filter((o) => o.peer === FLOOD).length, 5, 'the flooder holds its cap, no more')
  t.equal(open.filter((o) => o.peer === API).length, 10, 'and every API server connection is still open')
})

t.test('mayWait: one waiting connection per address, the API server up to maxPerPeer, maxPerPeer in all', async (t) => {
  const c: ConnectionCaps = { maxConnections: 30, maxPerPeer: 3, reserved: 0 }
  const other = { peer: FLOOD, apiServer: false }
  const api = { peer: API, apiServer: true }
  const rows: [string, { peer: string; apiServer: boolean }, { peer: string }[], boolean][] = [
    ['nobody waiting', other, [], true],
    ['its address already waits', other, [{ peer: FLOOD }], false],
    ['another address waits', other, [{ peer: '10.0.0.9' }], true],
    ['maxPerPeer waiting in all', other, [{ peer: 'a' }, { peer: 'b' }, { peer: 'c' }], false],
    ['the API server, two of its own waiting', api, [{ peer: API }, { peer: API }], true],
    ['the API server, maxPerPeer waiting in all', api, [{ peer: API }, { peer: API }, { peer: 'a' }], false],
  ]
  for (const [name, incoming, waiting, expect] of rows) t.equal(mayWait(incoming, waiting, c), expect, name)
})

t.test('addressMatcher: IPs and CIDRs, IPv4-mapped IPv6 included', async (t) => {
  const m = addressMatcher(['10.0.0.0/24', '192.168.1.5', 'fd00::/64'])
  t.ok(m('10.0.0.7'))
  t.ok(m('::ffff:10.0.0.7'))
  t.notOk(m('10.0.1.7'))
  t.ok(m('192.168.1.5'))
  t.notOk(m('192.168.1.6'))
  t.ok(m('fd00::1'))
  t.notOk(m('fd01::1'))
  t.notOk(m(undefined))
  t.notOk(addressMatcher([])('10.0.0.7'))
})

t.test('the settings: API server addresses are IPs or CIDRs; the per-peer cap and the reserve fit under the cap', async (t) => {
  const parse = (webhook: object) => ConfigSchema.safeParse({ webhook })
  t.ok(parse({ apiServerAddresses: ['10.0.0.0/16', '192.168.1.5', 'fd00::/64'] }).success)
  for (const bad of ['10.0.0.0/33', 'apiserver.example.com', '10.0.0.0/8/1', 'fd00::/129', '']) {
    t.notOk(parse({ apiServerAddresses: [bad] }).success, `${JSON.stringify(bad)} refused`)
  }
  t.match(
    JSON.stringify(parse({ maxConnections: 50, maxConnectionsPerPeer: 60 }).error?.issues),
    /maxConnectionsPerPeer must not be more than maxConnections/,
  )
  t.match(
    JSON.stringify(parse({ maxConnections: 50, reservedConnections: 50 }).error?.issues),
    /reservedConnections must be less than maxConnections/,
  )
  t.match(ConfigSchema.parse({}).webhook, {
    maxConnectionsPerPeer: 100,
    reservedConnections: 100,
    apiServerAddresses: [],
    timeouts: { firstReviewSeconds: 5 },
  })
})
