import { execFile } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { parse } from 'yaml'
import { pino } from 'pino'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { ConfigSchema } from '../../src/config/schema.js'
import { serve } from '../../src/cli/serve/run-serve.js'
import { getCrd, patchCrdAnnotations } from '../../src/kube/crds.js'
import { servedStorageVersionHash, storageVersionHash, waitForStorageVersion } from '../../src/kube/discovery.js'
import { loadCheckpointSeal } from '../../src/migrator/freeze/checkpoint-seal.js'
import type { MigrationResult } from '../../src/migrator/migrate.js'
import { httpFor, storedVersionsInEtcd } from '../helpers/cluster.js'
import { getControlPlane, uniqueName } from '../helpers/controlplane.js'
import { crashedFreeze, crdWithObjects, rewriteObjects } from '../helpers/fixtures.js'

const run = promisify(execFile)

t.test('serve: the leader resumes a freeze left by a crashed run, after its checkpoint', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const { group, ns, crd } = await crdWithObjects(http, { prefix: 'resume', count: 300 })

  // The API server switches storage asynchronously; the crashed run had waited for it too.
  await waitForStorageVersion(http, { group, plural: 'widgets', kind: 'Widget' }, 'v2', { timeoutMs: 30_000, settleMs: 1000 })
  t.equal(
    await servedStorageVersionHash(http, group, 'v2', 'widgets'),
    storageVersionHash(group, 'v2', 'Widget'),
    "our storage version hash is the API server's",
  )
  // What a run killed after 100 objects leaves behind: those objects rewritten, the freeze
  // with its checkpoint, and a heartbeat that stopped long ago.
  await rewriteObjects(http, crd, ns, 100)
  // The replicas share a state key (the chart mounts it from a Secret), so the leader
  // trusts the checkpoint the crashed replica sealed with it.
  const keyDir = await mkdtemp(path.join(os.tmpdir(), 'crd-migrator-key-'))
  t.teardown(() => rm(keyDir, { recursive: true, force: true }))
  const keyFile = path.join(keyDir, 'key')
  // Ending in a newline, as a key file written by hand or from a Secret often does.
  await writeFile(keyFile, Buffer.concat([randomBytes(32), Buffer.from('\n')]))
  // Loaded as serve loads it: a key file's trailing newline bytes are not key material (the
  // test sealed with the raw bytes once, and failed whenever the random key ended in one).
  const seal = await loadCheckpointSeal(keyFile, pino({ level: 'silent' }))
  await patchCrdAnnotations(http, crd.metadata.name, crashedFreeze(crd, { checkpoint: `${ns}/obj-00099`, seal }))
  const etcdBefore = await storedVersionsInEtcd(cp, group, 'widgets')
  t.same(Object.fromEntries(etcdBefore), { [`${group}/v1`]: 200, [`${group}/v2`]: 100 }, 'the crashed run got 100 objects across')

  const lease = uniqueName('lease')
  const config = ConfigSchema.parse({
    kubeconfig: cp.kubeconfigPath,
    webhook: { enabled: false },
    metrics: { port: 0 },
    migrator: {
      selector: { labelSelector: '', names: [crd.metadata.name] },
      takeoverAfterSeconds: 1,
      progressIntervalSeconds: 0.5,
      stateKeyFile: keyFile,
    },
    leaderElection: { namespace: 'default', leaseName: lease, leaseDurationSeconds: 5, renewDeadlineSeconds: 3, retryPeriodSeconds: 0.5 },
  })
  let resolveResult: (r: MigrationResult) => void
  const result = new Promise<MigrationResult>((resolve) => {
    resolveResult = resolve
  })
  const handle = await serve(config, pino({ level: 'silent' }), {
    identity: 'replica-a',
    defaultMetrics: false,
    onResult: (r) => resolveResult(r),
  })
  t.teardown(() => handle.close())
  const r = await result
  t.equal(r.outcome, 'Succeeded', r.reason)
  t.equal(r.resumedFrom, `${ns}/obj-00099`, 'resumed from the checkpoint')
  t.equal(r.storage?.counts.resumed, 100, 'the 100 objects before the checkpoint were not written again')
  t.equal(r.storage?.counts.rewritten, 200, 'the other 200 were')
  const after = await getCrd(http, crd.metadata.name)
  t.same(after.status?.storedVersions, ['v2'])
  t.notOk(DEFAULT_MIGRATING_ANNOTATION in (after.metadata.annotations ?? {}), 'the freeze is lifted')
  t.same(Object.fromEntries(await storedVersionsInEtcd(cp, group, 'widgets')), { [`${group}/v2`]: 300 }, 'etcd holds every object at v2')
  const leaseObj = await cp.apiRequest(`/apis/coordination.k8s.io/v1/namespaces/default/leases/${lease}`)
  t.equal((leaseObj.json as { spec: { holderIdentity: string } }).spec.holderIdentity, 'replica-a', 'replica-a holds the Lease')
  const metrics = await handle.registry.metrics()
  t.match(metrics, new RegExp(`crd_migrator_migrations_total\\{result="Succeeded"\\} 1`))
})

t.test('the CLI: migrate --dry-run, migrate, status', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const { crd } = await crdWithObjects(http, { prefix: 'cli', count: 40 })
  const cli = (...args: string[]) =>
    run(process.execPath, ['dist/cli/main.js', ...args, '--kubeconfig', cp.kubeconfigPath], { cwd: process.cwd() })

  const dry = await cli('migrate', crd.metadata.name, '--dry-run')
  t.match(dry.stdout, /would rewrite 40 object\(s\), then set storedVersions to \["v2"\]/)
  t.same((await getCrd(http, crd.metadata.name)).status?.storedVersions, ['v1', 'v2'], 'dry run changed nothing')

  const done = await cli('migrate', crd.metadata.name)
  t.match(done.stdout, `${crd.metadata.name}: Succeeded`)
  t.match(done.stdout, /status.storedVersions: \["v1","v2"\] -> \["v2"\]/)

  const status = await cli('status', '--crds', crd.metadata.name)
  t.match(status.stdout, /NAME\s+STORAGE\s+STORED/)
  // After a success only the compact record stays: no phase, no progress; the result and duration.
  t.match(
    status.stdout,
    new RegExp(`${crd.metadata.name.replace(/\./g, '\\.')}\\s+v2\\s+v2\\s+no\\s+-\\s+-\\s+-\\s+Succeeded\\s+\\d+\\.\\ds\\s+-\\n`),
  )

  const one = parse((await cli('status', crd.metadata.name, '-o', 'yaml')).stdout) as Array<Record<string, unknown>>
  t.same(
    one.map((r) => [r.name, r.storage, r.storedVersions, r.lastResult]),
    [[crd.metadata.name, 'v2', ['v2'], 'Succeeded']],
    'status CRD -o yaml: that CRD',
  )
  const missing = await cli('status', 'absent.example.com').then(
    () => undefined,
    (err: { code: number; stderr: string }) => err,
  )
  t.equal(missing?.code, 1, 'status of a CRD that does not exist exits 1')
  t.match(missing?.stderr, /customresourcedefinition "absent.example.com" not found/)
  const again = JSON.parse((await cli('migrate', crd.metadata.name, '-o', 'json')).stdout) as Array<{
    crd: string
    outcome: string
    skipReason?: string
  }>
  t.match(again, [{ crd: crd.metadata.name, outcome: 'Skipped', skipReason: 'up-to-date' }], 'migrate -o json: the results as data')
  t.match((await cli('--version')).stdout, /^\d+\.\d+\.\d+\n$/, '--version')

  const bad = await cli('migrate', crd.metadata.name, '--concurrency', '0').then(
    () => undefined,
    (err: { code: number; stderr: string }) => err,
  )
  t.equal(bad?.code, 2, 'a bad flag stops with exit code 2')
  t.match(bad?.stderr, /migrator\.concurrency.*--concurrency/, 'naming the field and the flag')
})
