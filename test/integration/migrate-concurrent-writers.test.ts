/**
 * The managedFields cleanup of 3,000 objects while other clients update and delete them,
 * on the real kube-apiserver + etcd. Every write of the cleanup carries the
 * resourceVersion it read; another client's write in between must cost a re-read and a
 * retry, never a failed object (it did: a stale precondition answered a bare 422 that the
 * cleanup took for a refusal, issue #27). Proved in etcd: no object keeps an entry of the
 * unserved version.
 */
import PQueue from 'p-queue'
import { pino } from 'pino'
import t from 'tap'
import { etcdRangeValues } from '../../dev/controlplane/etcd.js'
import { ContentType } from '../../src/kube/http.js'
import { isNotFound } from '../../src/kube/api-errors.js'
import { objectPath } from '../../src/kube/paths.js'
import type { ManagedFieldsEntry } from '../../src/kube/types.js'
import { migrateCrd } from '../../src/migrator/migrate.js'
import { Phase } from '../../src/migrator/plan.js'
import { defaultSettings, httpFor, refFor, setStorageVersion, serverSideApply as apply } from '../helpers/cluster.js'
import { getControlPlane } from '../helpers/controlplane.js'
import { crdWithObjects } from '../helpers/fixtures.js'

const logger = pino({ level: 'silent' })
const COUNT = 3000
const HOT = 100 // objects the writers update over and over
const DELETED = 150 // objects the writers delete during the cleanup

t.test(`managedFields cleanup of ${COUNT} objects while other clients update and delete them`, async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  // The objects are applied below, by field manager old-manager.
  const { group, ns, crd } = await crdWithObjects(http, { prefix: 'writers', count: 0, flipTo: false })
  const v1 = refFor(crd, 'v1')
  const v2 = refFor(crd, 'v2')
  const names = Array.from({ length: COUNT }, (_, i) => `bolt-${String(i).padStart(5, '0')}`)
  const seed = new PQueue({ concurrency: 16 })
  for (const [i, name] of names.entries()) void seed.add(() => apply(http, v1, ns, name, 'old-manager', { index: i }))
  await seed.onIdle()
  await setStorageVersion(http, crd.metadata.name, 'v2', ['v1'])

  // Spread over the list: hot objects updated again and again, others deleted once.
  const hot = Array.from({ length: HOT }, (_, i) => names[Math.floor((i * COUNT) / HOT)]!)
  const doomed = Array.from({ length: DELETED }, (_, i) => names[Math.floor((i * COUNT) / DELETED) + 7]!)
  let writing = false
  let writes = 0
  let deletes = 0
  const writerErrors: string[] = []
  let writers: Promise<void> | undefined
  const write = async (name: string, value: number) => {
    try {
      await http.request({
        method: 'PATCH',
        path: objectPath(v2, ns, name),
        body: { metadata: { labels: { touched: String(value) } } },
        contentType: ContentType.mergePatch,
        query: { fieldManager: 'other-writer' },
      })
      writes++
    } catch (err) {
      if (!isNotFound(err)) writerErrors.push(String(err))
    }
  }
  const startWriters = () => {
    writing = true
    writers = (async () => {
      const jobs = new PQueue({ concurrency: 8 })
      let round = 0
      while (writing) {
        round++
        for (const name of hot) void jobs.add(() => write(name, round))
        const victim = doomed[round - 1]
        if (victim)
          void jobs.add(async () => {
            try {
              await http.request({ method: 'DELETE', path: objectPath(v2, ns, victim) })
              deletes++
            } catch (err) {
              if (!isNotFound(err)) writerErrors.push(String(err))
            }
          })
        await jobs.onIdle()
      }
    })()
  }

  // Paced at 300 writes/s, so ~10 s: every hot object is written by the others many times
  // between the cleanup's list and its write (the list is a page of 500 ahead).
  const settings = defaultSettings({ phases: [Phase.CleanupManagedFields], qps: 300 })
  const result = await migrateCrd(crd.metadata.name, settings, {
    http,
    logger,
    owner: 'test-owner',
    // The writers start with the cleanup's first progress and stop when the run ends.
    onProgress: (phase) => {
      if (phase === Phase.CleanupManagedFields && !writing) startWriters()
    },
  })
  writing = false
  await writers
  t.same(writerErrors, [], "the other clients' writes went through")
  t.ok(writes > HOT, `the other clients wrote during the cleanup (${writes} writes, ${deletes} deletes)`)
  t.equal(result.outcome, 'Succeeded', result.reason)
  const counts = result.cleanup?.counts
  t.equal(counts?.failed, 0, 'no object failed')
  const staleWrites = result.cleanup?.staleWrites ?? 0
  t.ok(staleWrites > 0, `the writers raced the cleanup: ${staleWrites} write(s) found the object changed, read it again and retried`)

  // Every object left, read from etcd: no managedFields entry of v1.
  const prefix = `/registry/${group}/${crd.spec.names.plural}/${ns}/`
  const stale: string[] = []
  let stored = 0
  for await (const values of etcdRangeValues(cp.etcdEndpoint, prefix)) {
    for (const value of values) {
      stored++
      const o = JSON.parse(value.toString('utf8')) as { metadata: { name: string; managedFields?: ManagedFieldsEntry[] } }
      if ((o.metadata.managedFields ?? []).some((e) => e.apiVersion === `${group}/v1`)) stale.push(o.metadata.name)
    }
  }
  t.equal(stored, COUNT - deletes, 'etcd holds every object not deleted')
  t.same(stale, [], 'no object in etcd keeps a managedFields entry of the unserved v1')
})
