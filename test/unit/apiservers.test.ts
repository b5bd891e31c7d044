import t from 'tap'
import { endpointsFromSlices, SharedApiServers } from '../../src/kube/apiservers.js'
import type { KubeHttp } from '../../src/kube/http.js'

t.test('endpointsFromSlices: every ready address with the https port, once', async (t) => {
  const urls = (slices: Parameters<typeof endpointsFromSlices>[0]) => endpointsFromSlices(slices).map((u) => u.href)
  t.same(
    urls([
      {
        addressType: 'IPv4',
        ports: [{ name: 'https', port: 6443 }],
        endpoints: [
          { addresses: ['10.0.0.1'], conditions: { ready: true } },
          { addresses: ['10.0.0.2'] },
          { addresses: ['10.0.0.3'], conditions: { ready: false } },
        ],
      },
    ]),
    ['https://10.0.0.1:6443/', 'https://10.0.0.2:6443/'],
    'ready (or unknown) endpoints; not-ready ones left out',
  )
  t.same(
    urls([
      { ports: [{ name: 'https', port: 443 }], endpoints: [{ addresses: ['10.0.0.1'] }] },
      { ports: [{ name: 'https', port: 443 }], endpoints: [{ addresses: ['10.0.0.1'] }, { addresses: ['fd00::2'] }] },
    ]),
    ['https://10.0.0.1/', 'https://[fd00::2]/'],
    'several slices, deduplicated; IPv6 in brackets',
  )
  t.same(
    urls([{ ports: [{ port: 6443 }], endpoints: [{ addresses: ['10.0.0.9'] }] }]),
    ['https://10.0.0.9:6443/'],
    'an unnamed single port',
  )
  t.same(
    urls([
      {
        ports: [
          { name: 'a', port: 1 },
          { name: 'b', port: 2 },
        ],
        endpoints: [{ addresses: ['10.0.0.9'] }],
      },
    ]),
    [],
    'no https port among several',
  )
  t.same(urls([{ endpoints: [{ addresses: ['10.0.0.9'] }] }]), [], 'no port')
  t.same(urls([]), [])
})

t.test('SharedApiServers: one list per address per window; a failure is not kept', async (t) => {
  let now = 0
  const calls: string[] = []
  let fail = false
  const shared = new SharedApiServers(
    10_000,
    () => now,
    async (http) => {
      calls.push(http.server.href)
      if (fail) throw new Error('refused')
      return [new URL('https://10.0.0.1:6443')]
    },
  )
  const a = { server: new URL('https://a.example:6443') } as KubeHttp
  const b = { server: new URL('https://b.example:6443') } as KubeHttp
  await Promise.all([shared.get(a), shared.get(a)])
  now = 9_999
  await shared.get(a)
  t.same(calls, ['https://a.example:6443/'], 'asked at once and within the window: one list')
  await shared.get(b)
  t.equal(calls.length, 2, 'another address lists for itself')
  now = 10_000
  await shared.get(a)
  t.equal(calls.length, 3, 'after the window: listed again')
  fail = true
  now = 30_000
  await t.rejects(shared.get(a), /refused/)
  fail = false
  t.same((await shared.get(a)).map(String), ['https://10.0.0.1:6443/'], 'the failure was not kept: the next asks again')
  t.equal(calls.length, 5)
})
