/**
 * crd_migrator_leader on /metrics follows the real Lease: 1 on the replica holding it, 0 on
 * the other, and it moves when the leader shuts down and the other takes over.
 */
import { randomBytes } from 'node:crypto'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { pino } from 'pino'
import t from 'tap'
import { serve, type ServeHandle } from '../../src/cli/serve/run-serve.js'
import { ConfigSchema } from '../../src/config/schema.js'
import { PROCESS_METRIC_NAMES } from '../../src/health/process-metrics.js'
import { httpFor } from '../helpers/cluster.js'
import { getControlPlane, uniqueName } from '../helpers/controlplane.js'
import { until } from '../helpers/until.js'

/** The leader gauge as the replica's /metrics would show it. */
async function leaderMetric(handle: ServeHandle): Promise<number | undefined> {
  const metric = handle.registry.getSingleMetric(PROCESS_METRIC_NAMES.leader)
  return (await metric?.get())?.values[0]?.value
}

t.test('crd_migrator_leader: 1 on the Lease holder, 0 on the other; it moves with the Lease', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const keyDir = await mkdtemp(path.join(os.tmpdir(), 'crd-migrator-key-'))
  t.teardown(() => rm(keyDir, { recursive: true, force: true }))
  const keyFile = path.join(keyDir, 'key')
  await writeFile(keyFile, randomBytes(32), { mode: 0o600 })
  const lease = uniqueName('lease')
  const config = ConfigSchema.parse({
    kubeconfig: cp.kubeconfigPath,
    webhook: { enabled: false },
    metrics: { port: 0 },
    // Manages no CRD: the controller runs, idle, on the leader.
    migrator: { selector: { labelSelector: `${uniqueName('none')}=true`, names: [] }, stateKeyFile: keyFile },
    leaderElection: { namespace: 'default', leaseName: lease, leaseDurationSeconds: 5, renewDeadlineSeconds: 3, retryPeriodSeconds: 0.5 },
  })
  const holder = async () =>
    (
      await http.request<{ spec: { holderIdentity?: string | null } }>({
        method: 'GET',
        path: `/apis/coordination.k8s.io/v1/namespaces/default/leases/${lease}`,
      })
    ).body.spec.holderIdentity
  const start = async (identity: string) => {
    const handle = await serve(config, pino({ level: 'silent' }), { identity, defaultMetrics: false })
    t.teardown(() => handle.close())
    return handle
  }

  const a = await start('replica-a')
  await until('replica-a to hold the Lease', 30_000, holder, (h) => h === 'replica-a')
  await until(
    'replica-a to report itself leader',
    10_000,
    () => leaderMetric(a),
    (v) => v === 1,
  )
  const b = await start('replica-b')
  t.equal(await leaderMetric(b), 0, 'replica-b, campaigning against a held Lease, is not leader')
  t.equal(await holder(), 'replica-a', 'the Lease is still replica-a')
  t.match(await b.registry.metrics(), `${PROCESS_METRIC_NAMES.leader} 0\n`, 'as /metrics writes it')

  await a.close()
  t.equal(await leaderMetric(a), 0, 'replica-a, shut down, released the Lease and reports 0')
  await until('replica-b to hold the Lease', 30_000, holder, (h) => h === 'replica-b')
  await until(
    'replica-b to report itself leader',
    10_000,
    () => leaderMetric(b),
    (v) => v === 1,
  )
  t.match(await b.registry.metrics(), `${PROCESS_METRIC_NAMES.leader} 1\n`)
  t.match(await b.registry.metrics(), /crd_migrator_build_info\{version="[^"]+",node_version="v\d+[^"]*"\} 1\n/, 'build info beside it')
})
