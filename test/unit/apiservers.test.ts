import t from 'tap'
import { endpointsFromSlices } from '../../src/kube/apiservers.js'

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
