/**
 * Three kube-apiservers on one etcd (each on its own address, all listed in the
 * default/kubernetes EndpointSlice). One is paused through a storage flip, with writes
 * queued to it: checking only the server the migrator talks to lets those writes land in
 * the old version after storedVersions says [v2]; asking every server does not. The file
 * runs in a network namespace of its own (helpers/network-namespace.ts), with the servers,
 * their addresses, the webhook and the migrator under test.
 */
import '../helpers/network-namespace.js'
import PQueue from 'p-queue'
import { pino } from 'pino'
import t from 'tap'
import type { ControlPlane } from '../../dev/controlplane/controlplane.js'
import { LeaderElector } from '../../src/controller/leader.js'
import { getCrd, patchCrdAnnotations } from '../../src/kube/crds.js'
import { ContentType, type KubeHttp } from '../../src/kube/http.js'
import { servedStorageVersionHash, storageVersionHash } from '../../src/kube/discovery.js'
import { crdPath, objectPath } from '../../src/kube/paths.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import { migrateCrd, type MigrationResult } from '../../src/migrator/migrate.js'
import { StateAnnotation } from '../../src/state/crd-state.js'
import { defaultSettings, httpFor, refFor, startTestWebhook, storedVersionsInEtcd, TEST_SCOPE_LABEL } from '../helpers/cluster.js'
import { startPrivateControlPlane, uniqueName } from '../helpers/controlplane.js'
import { consistently, until } from '../helpers/until.js'
import { crdWithObjects } from '../helpers/fixtures.js'

const logger = pino({ level: 'silent' })
const cp = await startPrivateControlPlane({ apiservers: 3 })
const [first, , third] = cp.apiservers.map((s) => httpFor(s.kubeconfigPath))

/** A CRD at v1 with `count` objects, made through server 1. */
async function fixture(count: number, labels: Record<string, string> = {}) {
  const { group, ns, crd } = await crdWithObjects(first!, { prefix: 'ha', count, labels, flipTo: false })
  return { group, ns, crd }
}

/** The storage flip, through server 1 only (no waiting: the point is that others lag). */
async function flip(http: KubeHttp, crd: CustomResourceDefinition): Promise<void> {
  const current = await getCrd(http, crd.metadata.name)
  await http.request({
    method: 'PATCH',
    path: crdPath(crd.metadata.name),
    contentType: ContentType.mergePatch,
    body: { spec: { versions: current.spec.versions.map((v) => ({ ...v, storage: v.name === 'v2' })) } },
  })
}

/** `count` creates sent to server 3 while it is paused: they wait in its socket backlog. */
function queueWrites(crd: CustomResourceDefinition, ns: string, count: number): Promise<unknown> {
  const queue = new PQueue({ concurrency: count })
  const ref = refFor(crd, 'v1')
  for (let i = 0; i < count; i++) {
    const name = `late-${i}`
    void queue.add(() =>
      third!.request({
        method: 'POST',
        path: objectPath(ref, ns, name).replace(/\/[^/]+$/, ''),
        body: { apiVersion: `${ref.group}/v1`, kind: ref.kind, metadata: { name, namespace: ns }, spec: { late: i } },
        timeoutMs: 120_000,
      }),
    )
  }
  return queue.onIdle()
}

/** Pauses server 3, queues writes to it, flips storage through server 1; the writes settle once 3 resumes. */
async function pausedThroughTheFlip(cp: ControlPlane, crd: CustomResourceDefinition, ns: string): Promise<{ queued: Promise<unknown> }> {
  // Open (and TLS-handshake) the connections first, as a busy client would have them:
  // requests sent on them while the server is paused are in its socket buffers when it wakes.
  await Promise.all(Array.from({ length: 64 }, () => third!.request({ method: 'GET', path: '/version' })))
  await cp.pauseApiserver(3)
  const queued = queueWrites(crd, ns, 100)
  await flip(first!, crd)
  // In an object: an async function returning the promise itself would wait for it.
  return { queued }
}

t.test('every API server is listed in default/kubernetes and asked', async (t) => {
  t.equal(cp.apiservers.length, 3)
  const { crd } = await fixture(20)
  await flip(first!, crd)
  const result = await migrateCrd(crd.metadata.name, defaultSettings(), { http: first!, logger, owner: 'ha-test' })
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.same(result.apiServers, { mode: 'all-servers', listed: 3, checked: 3 }, 'all three asked by address')
})

t.test('the race with a single-server check: writes through a lagging server land at v1 after storedVersions says [v2]', async (t) => {
  // Whether the woken server handles its queued writes before its informer sees the flip is
  // a race (on a loaded machine the informer sometimes wins): up to three tries.
  const tries: number[] = []
  for (let round = 1; round <= 3 && !tries.some((n) => n > 0); round++) {
    const { group, ns, crd } = await fixture(50)
    const { queued } = await pausedThroughTheFlip(cp, crd, ns)
    let result: MigrationResult
    try {
      // Asking only server 1 is the single-server check of before (and of the fallback).
      result = await migrateCrd(crd.metadata.name, defaultSettings({ apiServerEndpoints: [cp.apiservers[0]!.server] }), {
        http: first!,
        logger,
        owner: 'ha-test',
      })
    } finally {
      await cp.resumeApiserver(3)
    }
    // Server 3 wakes up with its old storage: the writes queued to it, and those a client
    // sends until its informer catches up, are stored at v1.
    const ref = refFor(crd, 'v1')
    const want = storageVersionHash(group, 'v2', 'Widget')
    for (let i = 0; i < 500; i++) {
      await third!.request({
        method: 'POST',
        path: objectPath(ref, ns, `loop-${i}`).replace(/\/[^/]+$/, ''),
        body: { apiVersion: `${group}/v1`, kind: 'Widget', metadata: { name: `loop-${i}`, namespace: ns }, spec: { loop: i } },
      })
      if (i % 5 === 4 && (await servedStorageVersionHash(third!, group, 'v1', 'widgets')) === want) break
    }
    await queued
    t.equal(result.outcome, 'Succeeded', `try ${round}: the migration believed it was done`)
    t.same((await getCrd(first!, crd.metadata.name)).status?.storedVersions, ['v2'])
    tries.push((await storedVersionsInEtcd(cp, group, 'widgets')).get(`${group}/v1`) ?? 0)
  }
  t.ok(
    tries.some((n) => n > 0),
    `yet etcd held objects at v1 (per try: ${tries.join(', ')}): the race is real`,
  )
})

t.test('asking every API server: the run waits for the paused one, names it, and leaves only v2 in etcd', async (t) => {
  const { group, ns, crd } = await fixture(100)
  const { queued } = await pausedThroughTheFlip(cp, crd, ns)
  const running = migrateCrd(crd.metadata.name, defaultSettings({ progressIntervalMs: 200 }), { http: first!, logger, owner: 'ha-test' })
  const paused = cp.apiservers[2]!.server.replace('https://', '')
  // Not in time: the last progress seen (or the error), which the match below rejects.
  const waiting = await until(
    `the CRD's progress to name the paused server ${paused}`,
    30_000,
    async () => (await getCrd(first!, crd.metadata.name)).metadata.annotations?.[StateAnnotation.progress],
    (progress) => progress?.includes(paused) === true,
  ).catch((err: Error) => err.message)
  t.match(waiting, `waiting for API server(s) ${paused} to store v2`, 'the CRD says which server it waits for')
  const v2Meanwhile = await consistently(
    'no object at v2 in etcd while the run waits for the paused server',
    2_000,
    async () => (await storedVersionsInEtcd(cp, group, 'widgets')).get(`${group}/v2`) ?? 0,
    (atV2) => atV2 === 0,
    { everyMs: 250 },
  ).catch((err: Error) => err.message)
  t.equal(v2Meanwhile, 0, 'and nothing was rewritten meanwhile')
  await cp.resumeApiserver(3)
  const result = await running
  await queued
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.same(result.apiServers, { mode: 'all-servers', listed: 3, checked: 3 })
  t.same((await getCrd(first!, crd.metadata.name)).status?.storedVersions, ['v2'])
  t.same(
    Object.fromEntries(await storedVersionsInEtcd(cp, group, 'widgets')),
    { [`${group}/v2`]: 200 },
    'etcd: all 200 at v2, the late ones too',
  )
})

t.test('a server that never catches up fails the run; the freeze is lifted, storedVersions untouched', async (t) => {
  const { crd } = await fixture(10)
  await cp.pauseApiserver(3)
  let result: MigrationResult
  try {
    await flip(first!, crd)
    result = await migrateCrd(crd.metadata.name, defaultSettings({ storageSettleTimeoutMs: 5_000 }), {
      http: first!,
      logger,
      owner: 'ha-test',
    })
  } finally {
    await cp.resumeApiserver(3)
  }
  t.equal(result.outcome, 'Failed')
  t.equal(result.errorCode, 'CRDM_STORAGE_NOT_SWITCHED')
  t.match(result.reason, `API server(s) ${cp.apiservers[2]!.server.replace('https://', '')} did not switch to storage version v2 within 5s`)
  const after = await getCrd(first!, crd.metadata.name)
  t.same(after.status?.storedVersions, ['v1', 'v2'], 'storedVersions untouched')
  t.notOk('ksvm.sigs.k8s.io/migrating' in (after.metadata.annotations ?? {}), 'freeze lifted')
})

t.test('every API server calls the webhook: a frozen CRD is refused through each of them', async (t) => {
  const scope = uniqueName('ha')
  await startTestWebhook(cp, scope)
  const { crd } = await fixture(1, { [TEST_SCOPE_LABEL]: scope })
  await patchCrdAnnotations(first!, crd.metadata.name, { 'ksvm.sigs.k8s.io/migrating': 'true' })
  const current = await getCrd(first!, crd.metadata.name)
  for (const server of cp.apiservers) {
    const res = await cp.apiRequest(crdPath(crd.metadata.name), {
      apiserver: server.index,
      method: 'PATCH',
      contentType: ContentType.mergePatch,
      body: { spec: { versions: current.spec.versions.map((v) => ({ ...v, storage: v.name === 'v2' })) } },
    })
    t.equal(res.status, 403, `server ${server.index} refuses the storage flip`)
    t.match(res.body, /storage/, 'with the webhook’s reason')
  }
  await patchCrdAnnotations(first!, crd.metadata.name, { 'ksvm.sigs.k8s.io/migrating': null })
})

t.test('leader election across API servers: one leader at a time, the other takes over when it stops', async (t) => {
  const lease = uniqueName('lease')
  const leading: string[] = []
  const elector = (http: KubeHttp, identity: string) =>
    new LeaderElector(
      http,
      { namespace: 'default', name: lease, identity, leaseDurationSeconds: 4, renewDeadlineSeconds: 3, retryPeriodSeconds: 0.5 },
      logger,
    )
  const stopA = new AbortController()
  const stopB = new AbortController()
  const lead = (identity: string) => async (signal: AbortSignal) => {
    leading.push(identity)
    await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }))
    leading.splice(leading.indexOf(identity), 1)
  }
  const a = elector(first!, 'a-via-server-1').run(stopA.signal, lead('a'))
  // b starts once a leads (on evidence: a busy machine may take longer than any fixed wait).
  await until(
    'candidate a to lead',
    15_000,
    async () => leading.includes('a'),
    (leads) => leads,
  )
  const b = elector(third!, 'b-via-server-3').run(stopB.signal, lead('b'))
  const meanwhile = await consistently(
    'a alone to lead while b waits',
    3_000,
    async () => [...leading],
    (leads) => leads.length === 1 && leads[0] === 'a',
  ).catch((err: Error) => err.message)
  t.same(meanwhile, ['a'], 'the first candidate leads; the one talking to another server waits')
  stopA.abort()
  await a
  // Not in time: the assertion below shows who leads.
  await until(
    'b to take over',
    15_000,
    async () => leading.includes('b'),
    (leads) => leads,
  ).catch(() => undefined)
  t.same(leading, ['b'], 'the other one takes over through its own server')
  stopB.abort()
  await b
})
