import t from 'tap'
import { storageVersionHash, waitForStorageVersion } from '../../src/kube/discovery.js'
import type { KubeHttp } from '../../src/kube/http.js'
import { StorageAgreements, type AgreementKey } from '../../src/kube/storage-agreement.js'

const key = (over: Partial<AgreementKey> = {}): AgreementKey => ({
  server: 'https://10.0.0.1:6443/',
  group: 'example.com',
  plural: 'widgets',
  hash: 'h2',
  generation: 3,
  ...over,
})

t.test('StorageAgreements: since when a server has shown the hash, for one CRD generation', async (t) => {
  const cases: Array<{
    name: string
    steps: Array<{ at: number; key?: Partial<AgreementKey>; shows: boolean; since: number | undefined }>
  }> = [
    { name: 'the first answer showing it starts the count', steps: [{ at: 100, shows: true, since: 100 }] },
    {
      name: 'later answers (another CRD run, the batch first look) keep the first time',
      steps: [
        { at: 100, shows: true, since: 100 },
        { at: 5000, shows: true, since: 100 },
      ],
    },
    {
      name: 'an answer not showing it forgets: the count starts again',
      steps: [
        { at: 100, shows: true, since: 100 },
        { at: 200, shows: false, since: undefined },
        { at: 300, shows: true, since: 300 },
      ],
    },
    {
      name: 'another generation (the storage may have flipped since) starts again',
      steps: [
        { at: 100, shows: true, since: 100 },
        { at: 900, key: { generation: 4 }, shows: true, since: 900 },
        { at: 950, key: { generation: 4 }, shows: true, since: 900 },
      ],
    },
    {
      name: 'each server, resource and hash on its own',
      steps: [
        { at: 100, shows: true, since: 100 },
        { at: 200, key: { server: 'https://10.0.0.2:6443/' }, shows: true, since: 200 },
        { at: 300, key: { plural: 'gadgets' }, shows: true, since: 300 },
        { at: 400, key: { hash: 'h3' }, shows: true, since: 400 },
        { at: 500, key: { server: 'https://10.0.0.2:6443/' }, shows: false, since: undefined },
        { at: 600, shows: true, since: 100 },
      ],
    },
  ]
  for (const c of cases) {
    let now = 0
    const agreements = new StorageAgreements(() => now)
    c.steps.forEach((step, i) => {
      now = step.at
      t.equal(agreements.observe(key(step.key), step.shows), step.since, `${c.name}: step ${i + 1}`)
    })
  }
})

t.test('waitForStorageVersion counts its settle from an earlier agreement: one answer, no wait', async (t) => {
  const crd = { group: 'example.com', plural: 'widgets', kind: 'Widget' }
  const want = storageVersionHash(crd.group, 'v2', crd.kind)
  let reads = 0
  const served = async () => {
    reads++
    return want
  }
  const http = {} as KubeHttp
  const earlier = Date.now() - 60_000
  await waitForStorageVersion(http, crd, 'v2', { timeoutMs: 120_000, settleMs: 30_000, served, agreedSince: () => earlier })
  t.equal(reads, 1, 'agreed for longer than the settle time already: the first answer ends the wait')

  // Not shown: the agreement is told, and the wait goes on until it is shown for the settle time.
  const told: boolean[] = []
  const answers = [undefined, 'h-old', want]
  reads = 0
  await waitForStorageVersion(http, crd, 'v2', {
    timeoutMs: 120_000,
    settleMs: 0,
    served: async () => {
      reads++
      return answers[reads - 1]
    },
    agreedSince: (shows) => {
      told.push(shows)
      return shows ? Date.now() : undefined
    },
  })
  t.same(told, [false, false, true], 'each answer is told, not showing it included')
  t.equal(reads, 3)
})
