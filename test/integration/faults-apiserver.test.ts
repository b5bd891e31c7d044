/**
 * Faults of the control plane during a migration, on a private control plane (these
 * restart kube-apiserver, stop etcd, compact etcd, and run with tiny in-flight limits):
 *
 * - kube-apiserver restarted and etcd killed for 2 s mid-run: the migrator retries with
 *   backoff (default retry budget), finishes, and narrows storedVersions only once etcd
 *   holds every object at the storage version;
 * - continue tokens expiring (etcd compacted between list pages, 410 Gone): the list
 *   starts over and every object is still written exactly once;
 * - throttling (--max-mutating-requests-inflight 1, APF off, so the API server answers
 *   429 with Retry-After): the migration completes, waits out every Retry-After, and
 *   crd_migrator_throttled_total counts the 429s.
 *
 * The API server exempts system:masters from the in-flight limits, so the first two run
 * as admin and the throttled one as a migrator identity with the chart's RBAC.
 */
import { performance } from 'node:perf_hooks'
import { pino } from 'pino'
import { Registry } from 'prom-client'
import t from 'tap'
import { ConfigSchema } from '../../src/config/schema.js'
import { getCrd } from '../../src/kube/crds.js'
import { Accept, KubeHttp, type KubeRequest, type KubeResponse } from '../../src/kube/http.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import { migrateCrd } from '../../src/migrator/migrate.js'
import { settled as done } from '../../src/migrator/engine/walker.js'
import { createMigratorMetrics } from '../../src/migrator/metrics.js'
import { defaultSettings, httpFor, sleep } from '../helpers/cluster.js'
import { ensureBinaries } from '../../dev/controlplane/controlplane.js'
import { kubeConfigFromFile, startPrivateControlPlane } from '../helpers/controlplane.js'
import { capturingLogger, compactEtcd, countVersions, etcdVersionsByKey, migratorIdentity } from '../helpers/faults.js'
import { crdWithObjects } from '../helpers/fixtures.js'
import { until, Watermark } from '../helpers/until.js'

const DEFAULT_MAX_ATTEMPTS = ConfigSchema.parse({}).migrator.maxAttempts

const { kubeMinor } = await ensureBinaries()
const cp = await startPrivateControlPlane({
  extraApiserverFlags: {
    // Paginated lists are otherwise continued from the watch cache's snapshots (beta and
    // on in 1.34+), which outlive an etcd compaction; off, continue pages come from etcd
    // and an old token is answered 410 Gone, as on older API servers or once a snapshot
    // has expired. Older servers do not know the gate (and do that anyway).
    ...(kubeMinor === undefined || kubeMinor >= 34 ? { 'feature-gates': 'ListFromCacheSnapshot=false' } : {}),
    // Tiny in-flight limits (APF replaces them when on). system:masters is exempt.
    'enable-priority-and-fairness': 'false',
    'max-requests-inflight': '2',
    'max-mutating-requests-inflight': '1',
  },
})
const admin = httpFor(cp.kubeconfigPath)

async function prepare(prefix: string, count: number, namespaces = 3): Promise<{ crd: CustomResourceDefinition; group: string }> {
  const { crd, group } = await crdWithObjects(admin, { prefix, count, namespaces })
  return { crd, group }
}

t.test('kube-apiserver restarted and etcd down for 2 s mid-run: retried, finished, storedVersions last', async (t) => {
  const N = 1000
  const { crd, group } = await prepare('restart', N)
  const name = crd.metadata.name
  const { logger, lines } = capturingLogger('debug')

  // Watches status.storedVersions all along; when it first reads [v2], etcd is read at once.
  let stopPolling = false
  let firstNarrowed: { atMs: number; etcd: Record<string, number> } | undefined
  const storedSeen: string[] = []
  const t0 = performance.now()
  // One more look after the stop request: the narrowing may land between two polls just
  // before the migration returns (up to 50 tries while the API server does not answer).
  let finalTries = 0
  const poller = until(
    'the migration to return, watching storedVersions',
    600_000,
    async () => {
      const last = stopPolling
      const res = await cp
        .apiRequest(`/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`, { timeoutMs: 1000 })
        .catch(() => undefined)
      const stored = (res?.status === 200 ? (res.json as CustomResourceDefinition).status?.storedVersions : undefined)?.join(',')
      if (stored && storedSeen[storedSeen.length - 1] !== stored) storedSeen.push(stored)
      if (stored === 'v2' && !firstNarrowed) {
        firstNarrowed = { atMs: performance.now() - t0, etcd: countVersions(await etcdVersionsByKey(cp, group, 'widgets')) }
      }
      return last && (res?.status === 200 || ++finalTries >= 50)
    },
    (over) => over,
  )

  const progress = new Watermark()
  let progressed = 0
  const faults: Record<string, number> = {}
  let faultRun: Promise<void> | undefined
  const startFaults = () =>
    (async () => {
      faults['restartAtDone'] = progressed
      let s = performance.now()
      await cp.restartApiserver()
      faults['apiserverDownMs'] = Math.round(performance.now() - s)
      await progress.reached(Math.min(progressed + 150, N))
      faults['etcdStopAtDone'] = progressed
      s = performance.now()
      await cp.stopEtcd({ graceMs: 0 })
      // A sleep on purpose: the fault is etcd gone for 2 s, whatever the migrator does meanwhile.
      await sleep(2000)
      await cp.startEtcd()
      faults['etcdDownMs'] = Math.round(performance.now() - s)
    })()

  const result = await migrateCrd(
    name,
    defaultSettings({ concurrency: 8, qps: 120, maxAttempts: DEFAULT_MAX_ATTEMPTS, progressIntervalMs: 500 }),
    {
      http: admin,
      logger,
      owner: 'faults-restart',
      onProgress: (_phase, p) => {
        progressed = done(p)
        progress.set(progressed)
        if (!faultRun && progressed >= 250) faultRun = startFaults()
      },
    },
  )
  const runMs = Math.round(performance.now() - t0)
  await faultRun
  stopPolling = true
  await poller

  t.ok(
    faults['restartAtDone']! >= 250 && faults['restartAtDone']! < N,
    `the API server was restarted mid-run (after ${faults['restartAtDone']} objects)`,
  )
  t.ok(faults['etcdStopAtDone']! < N, `etcd was stopped mid-run (after ${faults['etcdStopAtDone']} objects)`)
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.equal(result.storage?.counts.seen, N, 'every object listed once')
  t.equal(result.storage?.counts.failed, 0, 'no object failed')
  const c = result.storage!.counts
  t.equal(
    c.rewritten + c.conflict + c.current,
    N,
    `every object handled (rewritten ${c.rewritten}, conflict ${c.conflict}, current ${c.current})`,
  )
  const retries = lines().filter((l) => l['msg'] === 'retrying write')
  t.ok(retries.length > 0, `writes were retried with backoff (${retries.length} retries logged)`)

  t.same(storedSeen[0], 'v1,v2', 'storedVersions listed v1 while objects were being rewritten')
  t.ok(firstNarrowed, 'storedVersions was narrowed in the end')
  t.same(firstNarrowed?.etcd, { [`${group}/v2`]: N }, 'when storedVersions first read [v2], etcd already held every object at v2')
  t.same((await getCrd(admin, name)).status?.storedVersions, ['v2'])
  t.same(countVersions(await etcdVersionsByKey(cp, group, 'widgets')), { [`${group}/v2`]: N }, 'etcd holds every object at v2')
  t.comment(
    `restart/etcd: ${N} objects in ${(runMs / 1000).toFixed(1)} s; API server down ${faults['apiserverDownMs']} ms, etcd down ${faults['etcdDownMs']} ms; ${retries.length} write retries; storedVersions narrowed at ${Math.round(firstNarrowed?.atMs ?? 0)} ms`,
  )
})

/** Compacts etcd right before the continue requests of the given (1-based) pages. */
class CompactingHttp extends KubeHttp {
  continues = 0
  gone = 0
  readonly patches = new Map<string, number>()
  constructor(
    kc: ConstructorParameters<typeof KubeHttp>[0],
    private readonly collection: string,
    private readonly compactBeforePage: number[],
    /** Whose continued pages: the storage phase's metadata list, or the lossless check's lists of whole objects. */
    private readonly lister: 'storage phase' | 'lossless check' = 'storage phase',
  ) {
    super(kc, { maxSockets: 64 })
  }

  override async request<T = unknown>(req: KubeRequest): Promise<KubeResponse<T>> {
    // The storage phase's list: metadata only (the lossless check before it lists whole objects).
    const metadataList =
      req.method === 'GET' &&
      req.path === this.collection &&
      (req.accept === Accept.partialObjectMetadataList) === (this.lister === 'storage phase')
    if (metadataList && req.query?.['continue']) {
      this.continues++
      if (this.compactBeforePage.includes(this.continues + 1)) await compactEtcd(cp)
    }
    if (req.method === 'PATCH' && req.path.startsWith(`${this.collection.replace(/\/[^/]+$/, '')}/namespaces/`)) {
      this.patches.set(req.path, (this.patches.get(req.path) ?? 0) + 1)
    }
    try {
      return await super.request<T>(req)
    } catch (err) {
      if (metadataList && (err as { status?: number }).status === 410) this.gone++
      throw err
    }
  }
}

t.test('continue tokens expire between pages (etcd compacted): the list restarts, every object written once', async (t) => {
  const N = 600
  const { crd, group } = await prepare('gone', N, 4)
  const kc = kubeConfigFromFile(cp.kubeconfigPath)
  const http = new CompactingHttp(kc, `/apis/${group}/v2/widgets`, [2, 5, 6])
  t.teardown(() => http.close())
  const { logger, lines } = capturingLogger('info')
  const t0 = performance.now()
  const result = await migrateCrd(crd.metadata.name, defaultSettings({ concurrency: 8, qps: 0, pageSize: 60 }), {
    http,
    logger,
    owner: 'faults-gone',
  })
  const runMs = Math.round(performance.now() - t0)

  t.equal(result.outcome, 'Succeeded', result.reason)
  t.ok(http.gone >= 2, `the API server answered 410 Gone to expired continue tokens (${http.gone} times)`)
  const restarts = lines().filter((l) => l['msg'] === 'list continue token expired; listing again after the last key seen')
  t.equal(restarts.length, http.gone, 'each 410 restarted the list')
  t.equal(result.storage?.counts.seen, N, 'every object listed exactly once, none twice')
  t.equal(result.storage?.counts.failed, 0)
  t.equal(result.storage!.counts.rewritten + result.storage!.counts.conflict, N, 'every object written anew')
  const writes = [...http.patches.values()]
  t.equal(http.patches.size, N, 'a write for every object')
  t.equal(writes.filter((n) => n !== 1).length, 0, 'and exactly one each')
  t.same((await getCrd(admin, crd.metadata.name)).status?.storedVersions, ['v2'])
  t.same(countVersions(await etcdVersionsByKey(cp, group, 'widgets')), { [`${group}/v2`]: N }, 'etcd holds every object at v2')
  t.comment(
    `continue-token expiry: ${N} objects, pages of 60, ${http.gone} x 410 Gone, list restarted ${restarts.length} times, ${(runMs / 1000).toFixed(1)} s`,
  )
})

t.test("continue tokens expire under the lossless check's second view: it lists again and checks every object once", async (t) => {
  const N = 300
  const { crd, group } = await prepare('gone-check', N, 3)
  const kc = kubeConfigFromFile(cp.kubeconfigPath)
  // The check's continued lists through v2 are its views of the storage version at a page's snapshot.
  const http = new CompactingHttp(kc, `/apis/${group}/v2/widgets`, [2, 4], 'lossless check')
  t.teardown(() => http.close())
  const result = await migrateCrd(crd.metadata.name, defaultSettings({ concurrency: 8, qps: 0, pageSize: 50 }), {
    http,
    logger: capturingLogger('info').logger,
    owner: 'faults-gone-check',
  })
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.ok(http.gone >= 1, `the API server answered 410 Gone to a compacted snapshot (${http.gone} times)`)
  t.equal(result.lossless?.checked, N, 'every object checked exactly once')
  t.equal(result.lossless?.complete, true)
  t.same(countVersions(await etcdVersionsByKey(cp, group, 'widgets')), { [`${group}/v2`]: N }, 'etcd holds every object at v2')
})

/** Records object writes and the 429s answered to requests that go through the migrator's gate. */
class ThrottleSpy extends KubeHttp {
  readonly writeStarts: number[] = []
  readonly throttledAt: Array<{ at: number; retryAfterSeconds: number; path: string }> = []
  crdThrottled = 0
  constructor(
    kc: ConstructorParameters<typeof KubeHttp>[0],
    private readonly group: string,
  ) {
    super(kc, { maxSockets: 64 })
  }

  override async request<T = unknown>(req: KubeRequest): Promise<KubeResponse<T>> {
    // Lists and object writes go through the migrator's gate; discovery (/apis/<group>/v2) does not.
    const gated = req.path.startsWith(`/apis/${this.group}/v2/`)
    if (gated && req.method === 'PATCH') this.writeStarts.push(performance.now())
    try {
      return await super.request<T>(req)
    } catch (err) {
      const e = err as { status?: number; retryAfterSeconds?: number }
      if (e.status === 429) {
        if (gated) this.throttledAt.push({ at: performance.now(), retryAfterSeconds: e.retryAfterSeconds ?? 1, path: req.path })
        else this.crdThrottled++
      }
      throw err
    }
  }
}

t.test('throttled by the API server (429 + Retry-After): completes, waits out Retry-After, counts 429s', async (t) => {
  const N = 400
  const { crd, group } = await prepare('throttle', N, 2)
  const { http } = await migratorIdentity(cp, 'throttled-migrator', group, (kc) => new ThrottleSpy(kc, group))
  t.teardown(() => http.close())
  const registry = new Registry()
  const metrics = createMigratorMetrics(registry)
  const t0 = performance.now()
  const result = await migrateCrd(crd.metadata.name, defaultSettings({ concurrency: 8, qps: 0, maxAttempts: DEFAULT_MAX_ATTEMPTS }), {
    http,
    logger: pino({ level: 'silent' }),
    owner: 'faults-throttle',
    metrics,
  })
  const runMs = Math.round(performance.now() - t0)

  t.equal(result.outcome, 'Succeeded', result.reason)
  t.equal(result.storage?.counts.seen, N)
  t.equal(result.storage?.counts.failed, 0, 'no object ran out of attempts')
  const throttled = (await registry.getSingleMetric('crd_migrator_throttled_total')!.get()).values[0]?.value ?? 0
  t.ok(
    http.throttledAt.length > 0,
    `the API server answered 429 (${http.throttledAt.length} times to object requests, ${http.crdThrottled} to progress writes)`,
  )
  t.equal(throttled, http.throttledAt.length, 'crd_migrator_throttled_total counts every 429 of the migration')
  t.ok(
    http.throttledAt.every((x) => x.retryAfterSeconds > 0),
    'each 429 carried a Retry-After',
  )

  // Honoured: after a 429 at T with Retry-After R, no object write starts before T + R.
  const early: string[] = []
  for (const x of http.throttledAt) {
    const from = x.at + 20
    const until = x.at + x.retryAfterSeconds * 1000 - 20
    const n = http.writeStarts.filter((s) => s > from && s < until).length
    if (n > 0) early.push(`${n} write(s) within ${x.retryAfterSeconds}s after a 429`)
  }
  t.same(early, [], 'no write started while a Retry-After was running')

  t.same((await getCrd(admin, crd.metadata.name)).status?.storedVersions, ['v2'])
  t.same(countVersions(await etcdVersionsByKey(cp, group, 'widgets')), { [`${group}/v2`]: N }, 'etcd holds every object at v2')
  t.comment(
    `throttling: ${N} objects in ${(runMs / 1000).toFixed(1)} s with --max-mutating-requests-inflight=1; ${throttled} x 429 on object writes (Retry-After ${[...new Set(http.throttledAt.map((x) => x.retryAfterSeconds))].join(',')} s), ${http.crdThrottled} on progress writes`,
  )
})
