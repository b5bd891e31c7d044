import t from 'tap'
import { pino } from 'pino'
import { LeaderElector, seizeLease } from '../../src/controller/leader.js'
import type { KubeHttp } from '../../src/kube/http.js'
import { HandOff, handsOff } from '../../src/migrator/freeze/hand-off.js'

interface LeaseSpec {
  holderIdentity?: string | null
  leaseDurationSeconds?: number
  renewTime?: string | null
  acquireTime?: string | null
  leaseTransitions?: number
}

/** One Lease in memory, behind the two requests the elector makes (GET, PUT). */
function leaseServer(spec: LeaseSpec) {
  const lease = { metadata: { name: 'l', namespace: 'ns', resourceVersion: '1' }, spec }
  const puts: LeaseSpec[] = []
  const http = {
    request: async (req: { method: string; body?: { spec: LeaseSpec } }) => {
      if (req.method === 'GET') return { status: 200, body: structuredClone(lease) }
      if (req.method === 'PUT' && req.body) {
        lease.spec = structuredClone(req.body.spec)
        puts.push(lease.spec)
        return { status: 200, body: structuredClone(lease) }
      }
      throw new Error(`unexpected ${req.method}`)
    },
  } as unknown as KubeHttp
  return { http, lease, puts }
}

const options = {
  namespace: 'ns',
  name: 'l',
  identity: 'pod-a',
  leaseDurationSeconds: 15,
  renewDeadlineSeconds: 10,
  retryPeriodSeconds: 0.1,
}

t.test('a leader that sees another holder (the uninstall hook) ends its term at once, as a hand-off, and releases nothing', async (t) => {
  const server = leaseServer({ holderIdentity: null, leaseDurationSeconds: 1, leaseTransitions: 0 })
  const elector = new LeaderElector(server.http, options, pino({ level: 'silent' }))
  const stop = new AbortController()
  let reason: unknown
  const term = elector.run(stop.signal, async (signal) => {
    // Leading: the hook takes the Lease.
    const seized = await seizeLease(server.http, { namespace: 'ns', name: 'l', identity: 'hook', holdSeconds: 300 })
    t.same(seized, { previousHolder: 'pod-a', previousLive: true }, 'the hook saw a live leader')
    if (!signal.aborted) await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }))
    reason = signal.reason
  })
  await term
  t.ok(reason instanceof HandOff, 'the term ended with a hand-off (its runs keep their freezes)')
  t.match(String((reason as Error).message), /leadership lost to hook/)
  t.equal(server.lease.spec.holderIdentity, 'hook', 'the Lease stays the hook’s: not released by the old leader')
  t.equal(server.lease.spec.leaseDurationSeconds, 300, 'held for holdSeconds')
})

t.test('shutting down hands off too, then releases the Lease', async (t) => {
  const server = leaseServer({ holderIdentity: null, leaseDurationSeconds: 1, leaseTransitions: 0 })
  const elector = new LeaderElector(server.http, options, pino({ level: 'silent' }))
  const stop = new AbortController()
  let handedOff = false
  await elector.run(stop.signal, async (signal) => {
    stop.abort(new Error('SIGTERM'))
    handedOff = handsOff(signal)
  })
  t.ok(handedOff, 'the term signal says hand off (endRun keeps the freeze)')
  t.equal(server.lease.spec.holderIdentity, null, 'released: the next leader takes over at once')
})
