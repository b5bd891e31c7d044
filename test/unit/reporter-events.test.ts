import t from 'tap'
import { pino } from 'pino'
import type { EventRecorder, EventType } from '../../src/kube/events.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import { startingResult, type MigrationResult } from '../../src/migrator/context.js'
import type { Frozen } from '../../src/migrator/freeze/freeze.js'
import { planCrd } from '../../src/migrator/plan.js'
import { RunReporter } from '../../src/migrator/reporter.js'

const crd: CustomResourceDefinition = {
  apiVersion: 'apiextensions.k8s.io/v1',
  kind: 'CustomResourceDefinition',
  metadata: { name: 'widgets.example.com', uid: 'u1', generation: 2 },
  spec: {
    group: 'example.com',
    names: { plural: 'widgets', kind: 'Widget' },
    scope: 'Namespaced',
    versions: [
      { name: 'v1', served: true, storage: false },
      { name: 'v2', served: true, storage: true },
    ],
  },
  status: { storedVersions: ['v1', 'v2'] },
}

function recorder() {
  const events: Array<{ type: EventType; reason: string; message: string }> = []
  const events$: EventRecorder = {
    record: async (_crd, type, reason, message) => {
      events.push({ type, reason, message })
    },
  }
  return { events, recorder: events$ }
}

function run(deferMs: number, events: EventRecorder, outcome: MigrationResult['outcome'] = 'Succeeded') {
  const report = new RunReporter(crd.metadata.name, { http: undefined as never, logger: pino({ level: 'silent' }), owner: 'o', events })
  const plan = planCrd(crd)
  const frozen: Frozen = { crd, frozenGeneration: 2, binding: undefined, resumeAfter: undefined, unverifiedCheckpoint: undefined }
  report.started(plan, 'v2', { action: 'freeze' }, frozen, 'process', deferMs)
  const result: MigrationResult = { ...startingResult(crd.metadata.name, crd, plan), outcome, reason: '20 object(s) rewritten in v2' }
  if (outcome === 'Failed') result.errorCode = 'CRDM_STORAGE_NOT_SWITCHED'
  return { finish: () => report.finished(result, crd) }
}

t.test('a run that ends within the interval records one Event: its outcome, its start told in it', async (t) => {
  const { events, recorder: r } = recorder()
  await run(60_000, r).finish()
  t.same(events, [
    {
      type: 'Normal',
      reason: 'MigrationSucceeded',
      message: '20 object(s) rewritten in v2. Started: Migrating to storage version v2 (storedVersions ["v1","v2"])',
    },
  ])
})

t.test('a failure folds the start the same way, its code first', async (t) => {
  const { events, recorder: r } = recorder()
  await run(60_000, r, 'Failed').finish()
  t.equal(events.length, 1)
  t.equal(events[0]!.type, 'Warning')
  t.match(events[0]!.message, /^CRDM_STORAGE_NOT_SWITCHED: 20 object\(s\) rewritten in v2\. Started: Migrating to storage version v2/)
})

t.test('a run longer than the interval records its start when the interval has passed, then its outcome alone', async (t) => {
  const { events, recorder: r } = recorder()
  const running = run(1, r)
  // Evidence, not a sleep: wait until the Started Event is there.
  while (events.length === 0) await new Promise((resolve) => setTimeout(resolve, 5))
  t.same(
    events.map((e) => e.reason),
    ['MigrationStarted'],
  )
  t.equal(events[0]!.message, 'Migrating to storage version v2 (storedVersions ["v1","v2"])')
  await running.finish()
  t.same(
    events.map((e) => [e.reason, e.message]),
    [
      ['MigrationStarted', 'Migrating to storage version v2 (storedVersions ["v1","v2"])'],
      ['MigrationSucceeded', '20 object(s) rewritten in v2'],
    ],
  )
})
