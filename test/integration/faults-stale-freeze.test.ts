/**
 * Stale freezes. A freeze of ours whose run died is resumed by the leader once its
 * heartbeat is older than takeoverAfterSeconds (controller.test.ts, and the kill -9 test
 * for the CLI). A freeze WITHOUT a crd-migrator owner belongs to another tool (another
 * KEP-2855 migrator, or a person): crd-migrator never lifts it. Through `serve`, it is
 * reported: metric crd_migrator_frozen_crds{owner="foreign"} = 1, a Warning Event
 * FrozenByAnotherMigrator in `default` saying how to unfreeze by hand, `status` shows
 * `yes (foreign)`; and once the annotation is removed by hand (the documented way out) the
 * controller migrates the CRD as usual and the metric goes away.
 */
import { PassThrough } from 'node:stream'
import { pino } from 'pino'
import t from 'tap'
import { runStatusCommand } from '../../src/cli/status/run-status.js'
import { serve } from '../../src/cli/serve/run-serve.js'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { StateAnnotation } from '../../src/state/crd-state.js'
import { ConfigSchema } from '../../src/config/schema.js'
import { getCrd, patchCrdAnnotations } from '../../src/kube/crds.js'
import type { MigrationResult } from '../../src/migrator/migrate.js'
import { httpFor } from '../helpers/cluster.js'
import { getControlPlane, uniqueName } from '../helpers/controlplane.js'
import { countVersions, etcdVersionsByKey } from '../helpers/faults.js'
import { crdWithObjects } from '../helpers/fixtures.js'
import { consistently, until } from '../helpers/until.js'

t.test('a freeze by another tool is reported (metric, Event, status) and never lifted; removed by hand, the migration runs', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const { group, name } = await crdWithObjects(http, { prefix: 'foreign', count: 50 })
  // What another KEP-2855 migrator leaves behind when it dies: the annotation, nothing of ours.
  await patchCrdAnnotations(http, name, { [DEFAULT_MIGRATING_ANNOTATION]: 'true' })

  const config = ConfigSchema.parse({
    kubeconfig: cp.kubeconfigPath,
    webhook: { enabled: false },
    metrics: { port: 0 },
    migrator: { selector: { labelSelector: '', names: [name] }, takeoverAfterSeconds: 1, progressIntervalSeconds: 0.5, resyncSeconds: 1 },
    leaderElection: {
      namespace: 'default',
      leaseName: uniqueName('lease'),
      leaseDurationSeconds: 5,
      renewDeadlineSeconds: 3,
      retryPeriodSeconds: 0.5,
    },
  })
  const results: MigrationResult[] = []
  const handle = await serve(config, pino({ level: 'silent' }), {
    identity: 'replica-stale',
    defaultMetrics: false,
    onResult: (r) => results.push(r),
  })
  t.teardown(() => handle.close())

  const frozenMetric = async () => {
    const m = await handle.registry.getSingleMetric('crd_migrator_frozen_crds')?.get()
    return m?.values.find((v) => v.labels['crd'] === name && v.labels['owner'] === 'foreign')?.value
  }
  const defined = <T>(v: T | undefined) => v !== undefined
  t.equal(await until('the frozen_crds metric', 20_000, frozenMetric, defined), 1, 'crd_migrator_frozen_crds{owner="foreign"} is 1')
  const event = (await until(
    'the FrozenByAnotherMigrator Event',
    20_000,
    async () => {
      const res = await cp.apiRequest(
        `/api/v1/namespaces/default/events?fieldSelector=${encodeURIComponent(`involvedObject.name=${name}`)}`,
      )
      const items = (res.json as { items: Array<{ reason: string; type: string; message: string }> }).items
      return items.find((e) => e.reason === 'FrozenByAnotherMigrator')
    },
    defined,
  ))!
  t.equal(event.type, 'Warning', 'a Warning Event in namespace default')
  t.match(event.message, `kubectl annotate crd ${name} ${DEFAULT_MIGRATING_ANNOTATION}-`, 'naming the way out')

  // Through several resyncs (1 s), the controller still must not touch it: checked all along.
  const still = await consistently(
    'the foreign freeze untouched, no migration run',
    2500,
    () => getCrd(http, name),
    (crd) => {
      const a = crd.metadata.annotations ?? {}
      return (
        a[DEFAULT_MIGRATING_ANNOTATION] === 'true' &&
        !(StateAnnotation.owner in a) &&
        crd.status?.storedVersions?.join() === 'v1,v2' &&
        results.length === 0
      )
    },
    { everyMs: 250 },
  )
  const a = still.metadata.annotations ?? {}
  t.equal(a[DEFAULT_MIGRATING_ANNOTATION], 'true', 'the foreign freeze is never lifted')
  t.notOk(StateAnnotation.owner in a, 'nor taken over (no owner of ours written)')
  t.same(still.status?.storedVersions, ['v1', 'v2'], 'storedVersions untouched')
  t.same(countVersions(await etcdVersionsByKey(cp, group, 'widgets')), { [`${group}/v1`]: 50 }, 'no object was rewritten')
  t.same(results, [], 'no migration ran')
  const events = (
    await cp.apiRequest(`/api/v1/namespaces/default/events?fieldSelector=${encodeURIComponent(`involvedObject.name=${name}`)}`)
  ).json as { items: Array<{ reason: string }> }
  t.equal(events.items.filter((e) => e.reason === 'FrozenByAnotherMigrator').length, 1, 'the Event is recorded once, not per resync')

  const out = new PassThrough()
  let text = ''
  out.on('data', (d: Buffer) => (text += d.toString('utf8')))
  t.equal(
    await runStatusCommand(
      ConfigSchema.parse({ kubeconfig: cp.kubeconfigPath, migrator: { selector: { labelSelector: '', names: [name] } } }),
      out,
      { format: 'text', names: [] },
    ),
    0,
  )
  t.match(
    text,
    new RegExp(`${name.replace(/\./g, '\\.')}\\s+v2\\s+v1,v2\\s+yes \\(foreign\\)`),
    '`crd-migrator status` shows it frozen by a foreign owner',
  )

  // The documented way out: a break-glass user removes the annotation by hand.
  await patchCrdAnnotations(http, name, { [DEFAULT_MIGRATING_ANNOTATION]: null })
  const result = (await until(
    'the migration after the manual unfreeze',
    30_000,
    async () => results.find((r) => r.outcome === 'Succeeded'),
    defined,
  ))!
  t.equal(result.storage?.counts.seen, 50, 'the controller migrates it as usual')
  t.same((await getCrd(http, name)).status?.storedVersions, ['v2'])
  t.equal(await frozenMetric(), undefined, 'the metric series is gone')
})
