/**
 * Migrations of a CRD whose versions differ in shape and convert through a real HTTPS
 * conversion webhook (dev/conversion), on the real kube-apiserver + etcd: data reshaped
 * (proved in etcd by value), a webhook down before the run (Blocked, nothing frozen), an
 * outage in the middle of the storage phase and of the cleanup phase (run succeeds, no
 * object loses managedFields), objects the webhook refuses (named, the others migrated),
 * and a slow webhook.
 */
import { execFile, spawn } from 'node:child_process'
import { promisify } from 'node:util'
import PQueue from 'p-queue'
import { pino } from 'pino'
import t, { type Test } from 'tap'
import { startConversionWebhook, type ConversionWebhook } from '../../dev/conversion/webhook.js'
import { getCrd } from '../../src/kube/crds.js'
import type { KubeHttp } from '../../src/kube/http.js'
import { objectPath, type ResourceRef } from '../../src/kube/paths.js'
import type { CustomResourceDefinition, ManagedFieldsEntry } from '../../src/kube/types.js'
import { migrateCrd, type MigrationSettings } from '../../src/migrator/migrate.js'
import { Phase } from '../../src/migrator/plan.js'
import { settled } from '../../src/migrator/engine/walker.js'
import { StateAnnotation } from '../../src/state/crd-state.js'
import { defaultSettings, httpFor, refFor, setStorageVersion, sleep, serverSideApply as apply } from '../helpers/cluster.js'
import { getControlPlane } from '../helpers/controlplane.js'
import { crdWithObjects } from '../helpers/fixtures.js'
import type { ControlPlane } from '../../dev/controlplane/controlplane.js'

const logger = pino({ level: 'silent' })
const MIGRATING = 'ksvm.sigs.k8s.io/migrating'

interface Fixture {
  cp: ControlPlane
  http: KubeHttp
  webhook: ConversionWebhook
  crd: CustomResourceDefinition
  ns: string
  names: string[]
  ref: (version: string) => ResourceRef
}

const imageOf = (i: number) => `registry.example.com/app-${i}:1.${i % 7}`
const replicasOf = (i: number) => 1 + (i % 5)
const indexOf = (name: string) => Number(name.slice(name.lastIndexOf('-') + 1))

/**
 * A CRD with `versions` (v1 shape: spec.replicas/image; v2: spec.template), `storage`
 * stored first, objects applied at v1 by field manager `old-manager`, then storage
 * flipped to v2 (and `unserved` made unserved).
 */
async function fixture(
  t: Test,
  count: number,
  options: { versions?: string[]; createAt?: string; unserved?: string[]; extraManager?: { name: string; version: string } } = {},
): Promise<Fixture> {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const webhook = await startConversionWebhook()
  t.teardown(() => webhook.stop())
  const { ns, crd } = await crdWithObjects(http, {
    prefix: 'conv',
    count: 0, // applied below, by field manager old-manager
    versions: options.versions ?? ['v1', 'v2'],
    storage: options.createAt ?? 'v1',
    conversion: webhook.conversion(),
    flipTo: false,
  })
  const ref = (version: string) => refFor(crd, version)
  const names = Array.from({ length: count }, (_, i) => `w-${String(i).padStart(4, '0')}`)
  const queue = new PQueue({ concurrency: 16 })
  for (const [i, name] of names.entries()) {
    void queue.add(async () => {
      await apply(http, ref('v1'), ns, name, 'old-manager', { replicas: replicasOf(i), image: imageOf(i) })
      if (options.extraManager) await apply(http, ref(options.extraManager.version), ns, name, options.extraManager.name, { note: `n${i}` })
    })
  }
  await queue.onIdle()
  await setStorageVersion(http, crd.metadata.name, 'v2', options.unserved ?? [])
  return { cp, http, webhook, crd, ns, names, ref }
}

interface Stored {
  apiVersion: string
  metadata: { name: string; managedFields?: ManagedFieldsEntry[] }
  spec: Record<string, unknown> & { template?: { replicas?: number; containers?: Array<{ image?: string }> } }
}

async function readEtcd(f: Fixture): Promise<Stored[]> {
  const keys = await f.cp.listEtcdKeys(`/registry/${f.crd.spec.group}/${f.crd.spec.names.plural}/`)
  return Promise.all(keys.map(async (key) => JSON.parse((await f.cp.readEtcdKey(key))!.toString('utf8')) as Stored))
}

/** Every object in etcd holds the v2 shape with its original values. */
function assertV2Shape(t: Test, stored: Stored[], expected: number, except: Set<string> = new Set()): void {
  const bad: string[] = []
  for (const o of stored) {
    if (except.has(o.metadata.name)) continue
    const i = indexOf(o.metadata.name)
    const ok =
      o.apiVersion.endsWith('/v2') &&
      o.spec.template?.replicas === replicasOf(i) &&
      o.spec.template?.containers?.[0]?.image === imageOf(i) &&
      !('image' in o.spec) &&
      !('replicas' in o.spec)
    if (!ok) bad.push(`${o.metadata.name}: ${JSON.stringify({ apiVersion: o.apiVersion, spec: o.spec })}`)
  }
  t.equal(stored.length - except.size, expected, `${expected} objects checked in etcd`)
  t.same(bad, [], 'every object is stored in the v2 shape with its values (read from etcd)')
}

function managersOf(o: Stored): string[] {
  return (o.metadata.managedFields ?? []).map((e) => `${e.manager}@${e.apiVersion?.split('/')[1]}`).sort()
}

const settings = (overrides: Partial<MigrationSettings> = {}) => defaultSettings({ storageSettleMs: 500, ...overrides })

t.test('a webhook-converted CRD: every object reshaped in etcd, storedVersions [v2], old field manager still applies', async (t) => {
  const f = await fixture(t, 120)
  f.webhook.resetStats()
  const result = await migrateCrd(f.crd.metadata.name, settings(), { http: f.http, logger, owner: 'test-owner' })
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.equal(result.storage?.counts.rewritten, 120, 'all 120 rewritten')
  t.ok(f.webhook.stats.byDirection['v1→v2']! >= 120, 'the webhook converted every object to v2')
  t.same(result.conversion, { webhook: f.webhook.url, outages: 0, outageSeconds: 0 }, 'no outage met')

  const stored = await readEtcd(f)
  assertV2Shape(t, stored, 120)
  t.same(
    stored.filter((o) => !managersOf(o).includes('old-manager@v1')).map((o) => o.metadata.name),
    [],
    "every object keeps old-manager's v1 entry",
  )
  const migrated = await getCrd(f.http, f.crd.metadata.name)
  t.same(migrated.status?.storedVersions, ['v2'], 'storedVersions narrowed to [v2]')
  t.ok(
    migrated.metadata.managedFields?.some((e) => e.manager === 'crd-migrator' && e.subresource === 'status'),
    "the storedVersions patch is recorded under crd-migrator's field manager",
  )
  t.ok(
    migrated.metadata.managedFields?.some((e) => e.manager === 'crd-migrator' && e.subresource === undefined),
    'and so are its annotation writes',
  )

  // The old field manager keeps applying through v1, and the change lands in the v2 shape.
  const name = f.names[7]!
  await apply(f.http, f.ref('v1'), f.ns, name, 'old-manager', { replicas: 9, image: 'registry.example.com/app-7:2.0' })
  const after = (await f.http.request<Stored>({ method: 'GET', path: objectPath(f.ref('v2'), f.ns, name) })).body
  t.same(after.spec.template, { replicas: 9, containers: [{ image: 'registry.example.com/app-7:2.0' }] }, 'the v1 apply is seen in v2')
  t.ok(managersOf(after).includes('old-manager@v1'), 'and old-manager still owns its fields')
})

t.test('a conversion webhook that is down before the run: Blocked, nothing frozen, then it runs once the webhook is back', async (t) => {
  const f = await fixture(t, 20)
  await f.webhook.setMode('down')
  const blocked = await migrateCrd(f.crd.metadata.name, settings(), { http: f.http, logger, owner: 'test-owner' })
  t.equal(blocked.outcome, 'Blocked')
  t.equal(blocked.errorCode, 'CRDM_CONVERSION_OUTAGE')
  t.match(blocked.reason, `conversion webhook ${f.webhook.url} does not answer`, 'the reason names the webhook')
  t.match(blocked.reason, /connection refused/, "and the API server's error")
  const crd = await getCrd(f.http, f.crd.metadata.name)
  const annotations = crd.metadata.annotations ?? {}
  t.notOk(MIGRATING in annotations, 'the CRD was not frozen')
  t.match(
    annotations[StateAnnotation.lastResult],
    /^Blocked: conversion webhook https:\/\/127\.0\.0\.1:\d+\/convert does not answer/,
    'Blocked on the CRD',
  )
  t.same(crd.status?.storedVersions, ['v1', 'v2'], 'storedVersions untouched')
  t.ok(
    (await readEtcd(f)).every((o) => o.apiVersion.endsWith('/v1')),
    'no object was rewritten',
  )

  await f.webhook.setMode('up')
  const result = await migrateCrd(f.crd.metadata.name, settings(), { http: f.http, logger, owner: 'test-owner' })
  t.equal(result.outcome, 'Succeeded', result.reason)
  assertV2Shape(t, await readEtcd(f), 20)
})

t.test('a 20 s webhook outage in the middle of the storage phase: Succeeded, every object converted, no managedFields lost', async (t) => {
  const f = await fixture(t, 300)
  let outage: Promise<void> | undefined
  const result = await migrateCrd(f.crd.metadata.name, settings({ concurrency: 8, qps: 30 }), {
    http: f.http,
    logger,
    owner: 'test-owner',
    onProgress: (phase, p) => {
      if (phase !== Phase.StorageVersionMigration || outage || settled(p) < 60) return
      outage = (async () => {
        await f.webhook.setMode('down')
        // A sleep on purpose: the fault is an outage of 20 s (the run must pause through
        // it, outageSeconds >= 15 below), whatever the migrator does meanwhile.
        await sleep(20_000)
        await f.webhook.setMode('up')
      })()
    },
  })
  await outage
  t.ok(outage, 'the outage happened during the run')
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.ok((result.conversion?.outages ?? 0) >= 1, 'the run met the outage')
  t.ok((result.conversion?.outageSeconds ?? 0) >= 15, `and paused through it (${result.conversion?.outageSeconds}s)`)
  t.equal(result.storage?.counts.failed, 0, 'no object failed')
  const stored = await readEtcd(f)
  assertV2Shape(t, stored, 300)
  t.same(
    stored.filter((o) => managersOf(o).join() !== 'old-manager@v1').map((o) => `${o.metadata.name}: ${managersOf(o).join()}`),
    [],
    'every object still has exactly its managedFields entry',
  )
  t.notOk(MIGRATING in ((await getCrd(f.http, f.crd.metadata.name)).metadata.annotations ?? {}), 'freeze lifted')
})

t.test('an outage during the managedFields cleanup: entries the API server dropped are put back', async (t) => {
  // v0 is stored nowhere but owns entries; unserving it leaves only the cleanup to do, and
  // each cleanup write makes the API server convert the object to v1 for old-manager's entry.
  const f = await fixture(t, 150, { versions: ['v0', 'v1', 'v2'], extraManager: { name: 'ancient', version: 'v0' }, unserved: ['v0'] })
  let outage: Promise<void> | undefined
  const result = await migrateCrd(f.crd.metadata.name, settings({ concurrency: 8, qps: 25, phases: [Phase.CleanupManagedFields] }), {
    http: f.http,
    logger,
    owner: 'test-owner',
    onProgress: (phase, p) => {
      if (phase !== Phase.CleanupManagedFields || outage || settled(p) < 20) return
      outage = (async () => {
        await f.webhook.setMode('down')
        // A sleep on purpose: the fault is an outage of 8 s during the cleanup, long
        // enough for the run to meet it, whatever the migrator does meanwhile.
        await sleep(8_000)
        await f.webhook.setMode('up')
      })()
    },
  })
  await outage
  t.ok(outage, 'the outage happened during the cleanup')
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.ok((result.conversion?.outages ?? 0) >= 1, 'the run met the outage')
  const stored = await readEtcd(f)
  t.equal(stored.length, 150)
  t.same(
    stored.filter((o) => managersOf(o).join() !== 'old-manager@v1').map((o) => `${o.metadata.name}: ${managersOf(o).join()}`),
    [],
    "every object lost ancient's v0 entry and kept old-manager's",
  )
})

t.test(
  'objects the webhook refuses: the others migrate, the run fails listing exactly those (counted in public), a rerun after the fix completes',
  async (t) => {
    const f = await fixture(t, 60)
    const refused = [f.names[11]!, f.names[33]!, f.names[47]!]
    f.webhook.refuse(refused, 'spec.image is not a valid reference')
    const failed = await migrateCrd(f.crd.metadata.name, settings(), { http: f.http, logger, owner: 'test-owner' })
    t.equal(failed.outcome, 'Failed')
    t.equal(failed.errorCode, 'CRDM_CONVERSION_REFUSED')
    const keys = refused.map((n) => `${f.ns}/${n}`)
    t.same(failed.storage?.failures.map((x) => x.key).sort(), keys, 'exactly the refused objects failed')
    t.ok(
      failed.storage?.failures.every((x) => x.message.includes('spec.image is not a valid reference')),
      "each with the webhook's message (migrate prints them)",
    )
    // The reason is public (last-result, the Failed Event): counted, nobody named.
    t.match(failed.reason, /^the conversion webhook refused 3 object\(s\), which could not be rewritten; the others were migrated/)
    for (const key of keys) t.notMatch(failed.reason, key, `the reason does not name ${key}`)
    t.notMatch(failed.reason, 'spec.image', "nor quote the webhook's message")
    t.equal(failed.storage?.conversionRefused, 3)
    const crd = await getCrd(f.http, f.crd.metadata.name)
    t.same(crd.status?.storedVersions, ['v1', 'v2'], 'storedVersions untouched')
    t.notOk(MIGRATING in (crd.metadata.annotations ?? {}), 'freeze lifted')
    t.match(crd.metadata.annotations?.[StateAnnotation.lastCounts], /conversionRefused=3/, 'the counts annotation says so')
    assertV2Shape(t, await readEtcd(f), 57, new Set(refused))

    f.webhook.refuse([])
    const rerun = await migrateCrd(f.crd.metadata.name, settings(), { http: f.http, logger, owner: 'test-owner' })
    t.equal(rerun.outcome, 'Succeeded', rerun.reason)
    t.equal(rerun.storage?.counts.rewritten, 3, 'the rerun rewrote only the 3')
    t.equal(rerun.storage?.counts.current, 57, 'and found the others current')
    assertV2Shape(t, await readEtcd(f), 60)
  },
)

// Refused objects on several list pages (1,000 objects, pages of 500): a page the API
// server cannot list through the storage version (1.30-1.31: the first undecodable object
// fails it; 1.32+: one details.causes entry per undecodable key) costs those objects, not
// the run. With v1 served the page is listed through v1; with v1 unserved no version can
// list it, and the pages are walked around the refused objects.
for (const unserved of [[], ['v1']]) {
  t.test(`refusals on two list pages, v1 ${unserved.length ? 'unserved' : 'served'}: the other 997 migrate, the 3 are named`, async (t) => {
    const f = await fixture(t, 1000, { unserved })
    const refused = [f.names[7]!, f.names[640]!, f.names[998]!]
    f.webhook.refuse(refused, 'spec.image is not a valid reference')
    if (unserved.length) {
      // With v1 unserved and a webhook, no old view shows what the conversion adds: the
      // lossless check refuses every object as unchecked unless that is accepted.
      const blocked = await migrateCrd(f.crd.metadata.name, settings(), { http: f.http, logger, owner: 'test-owner' })
      t.equal(`${blocked.outcome} ${blocked.errorCode}`, 'Blocked CRDM_DATA_LOSS', blocked.reason)
      t.equal(blocked.lossless?.unchecked, 997, 'every object the webhook converts is unchecked')
      t.equal(blocked.lossless?.refused, 3, 'the refused ones are stepped past, counted')
      t.match(blocked.reason, '--accept-unchecked')
    }
    const failed = await migrateCrd(f.crd.metadata.name, settings({ acceptUnchecked: unserved.length > 0 }), {
      http: f.http,
      logger,
      owner: 'test-owner',
    })
    t.equal(failed.outcome, 'Failed', failed.reason)
    t.equal(failed.errorCode, 'CRDM_CONVERSION_REFUSED', failed.reason)
    const keys = refused.map((n) => `${f.ns}/${n}`)
    t.same(failed.storage?.failures.map((x) => x.key).sort(), keys, 'exactly the refused objects failed')
    t.equal(failed.storage?.conversionRefused, 3)
    t.equal(failed.storage?.counts.rewritten, 997, 'every other object rewritten')
    const crd = await getCrd(f.http, f.crd.metadata.name)
    t.same(crd.status?.storedVersions, ['v1', 'v2'], 'storedVersions untouched')
    t.notOk(MIGRATING in (crd.metadata.annotations ?? {}), 'freeze lifted')
    assertV2Shape(t, await readEtcd(f), 997, new Set(refused))
  })
}

t.test('a slow webhook (150 ms per review): the run takes longer and completes', async (t) => {
  const f = await fixture(t, 40)
  f.webhook.setDelay(150)
  const result = await migrateCrd(f.crd.metadata.name, settings(), { http: f.http, logger, owner: 'test-owner' })
  t.equal(result.outcome, 'Succeeded', result.reason)
  t.equal(result.conversion?.outages, 0, 'slowness is not an outage')
  assertV2Shape(t, await readEtcd(f), 40)
})

t.test('crd-migrator migrate waits for a conversion webhook that is down, then gives up or goes on', async (t) => {
  const f = await fixture(t, 10)
  const run = promisify(execFile)
  const cli = (...args: string[]) =>
    run(process.execPath, ['dist/cli/main.js', 'migrate', f.crd.metadata.name, '--kubeconfig', f.cp.kubeconfigPath, ...args], {
      cwd: process.cwd(),
    })
  await f.webhook.setMode('down')
  const gaveUp = await cli('--conversion-wait-seconds', '6').then(
    () => undefined,
    (err: { code: number; stdout: string; stderr: string }) => err,
  )
  t.equal(gaveUp?.code, 1, 'exit 1 once the wait is over')
  t.match(gaveUp?.stderr, `${f.crd.metadata.name}: waiting for conversion webhook ${f.webhook.url} (Post`, 'a visible waiting line')
  t.match(gaveUp?.stdout, `${f.crd.metadata.name}: Blocked (CRDM_CONVERSION_OUTAGE)`, 'the summary says Blocked')
  t.match(gaveUp?.stdout, 'nothing was frozen')
  t.notOk(MIGRATING in ((await getCrd(f.http, f.crd.metadata.name)).metadata.annotations ?? {}), 'and nothing is')
  // Each try recorded MigrationBlocked again: one events.k8s.io Event, its series counting the tries.
  const events = (
    await f.http.request<{
      items: Array<{ reason: string; action: string; reportingController: string; regarding: { name: string }; series?: { count: number } }>
    }>({ method: 'GET', path: '/apis/events.k8s.io/v1/namespaces/default/events' })
  ).body.items.filter((e) => e.regarding.name === f.crd.metadata.name && e.reason === 'MigrationBlocked')
  t.equal(events.length, 1, 'one MigrationBlocked Event for all the tries')
  t.match(events[0], { action: 'Preflight', reportingController: 'crd-migrator.io/crd-migrator' })
  t.ok((events[0]?.series?.count ?? 0) >= 2, `its series counts the tries (${events[0]?.series?.count})`)

  // Back up only once the CLI says it waits (its start-up alone can take seconds).
  const child = spawn(
    process.execPath,
    ['dist/cli/main.js', 'migrate', f.crd.metadata.name, '--kubeconfig', f.cp.kubeconfigPath, '--conversion-wait-seconds', '60'],
    { cwd: process.cwd() },
  )
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()))
  const waited = new Promise<void>((resolve) =>
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString()
      if (stderr.includes('waiting for conversion webhook')) resolve()
    }),
  )
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  await Promise.race([waited, exited])
  t.match(stderr, 'waiting for conversion webhook', 'it waited')
  await f.webhook.setMode('up')
  t.equal(await exited, 0, 'exit 0')
  t.match(stdout, `${f.crd.metadata.name}: Succeeded`, 'and migrated once the webhook answered')
  assertV2Shape(t, await readEtcd(f), 10)
})
