import t from 'tap'
import { etaSeconds, fleetState, formatSummary, parseProgress, summarize, type SummaryInput } from '../../src/cli/status-summary.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import { readCrdState } from '../../src/state/crd-state.js'

const MIGRATING = 'ksvm.sigs.k8s.io/migrating'

function crd(annotations: Record<string, string>, storedVersions = ['v2'], storageMigrating = false): CustomResourceDefinition {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: 'widgets.example.com', annotations },
    spec: {
      group: 'example.com',
      names: { plural: 'widgets', kind: 'Widget' },
      scope: 'Namespaced',
      versions: ['v1', 'v2'].map((v) => ({ name: v, served: true, storage: v === 'v2' })),
    },
    status: {
      storedVersions,
      conditions: [{ type: 'Established', status: 'True' }, ...(storageMigrating ? [{ type: 'StorageMigrating', status: 'True' }] : [])],
    },
  } as CustomResourceDefinition
}

t.test('fleetState: one state per CRD', async (t) => {
  const cases: Array<[string, CustomResourceDefinition, string]> = [
    ['frozen by a crd-migrator', crd({ [MIGRATING]: 'true', 'crd-migrator.io/owner': 'pod-1' }, ['v1', 'v2']), 'Running'],
    ['frozen by another tool', crd({ [MIGRATING]: 'true' }, ['v1', 'v2']), 'FrozenByAnother'],
    ["Kubernetes' own migrator at work", crd({}, ['v1', 'v2'], true), 'Running'],
    ['last run failed', crd({ 'crd-migrator.io/last-result': 'Failed: 3 object(s)' }, ['v1', 'v2']), 'Failed'],
    ['blocked', crd({ 'crd-migrator.io/last-result': 'Blocked: webhook down' }, ['v1', 'v2']), 'Failed'],
    ['storedVersions not narrowed yet, never run', crd({}, ['v1', 'v2']), 'Pending'],
    [
      'migrated before, needs it again',
      crd({ 'crd-migrator.io/last-result': 'Succeeded', 'crd-migrator.io/last-duration': '1.0s' }, ['v1', 'v2']),
      'Pending',
    ],
    ['migrated by a run', crd({ 'crd-migrator.io/last-result': 'Succeeded', 'crd-migrator.io/last-duration': '1.0s' }), 'Succeeded'],
    [
      'found with nothing to do',
      crd({ 'crd-migrator.io/last-result': 'Succeeded', 'crd-migrator.io/observed-generation': '1' }),
      'UpToDate',
    ],
    ['never looked at, [storage]', crd({}), 'UpToDate'],
  ]
  for (const [what, c, want] of cases) t.equal(fleetState(c, readCrdState(c, MIGRATING)), want, what)
  const frozen = crd({ [MIGRATING]: 'true', 'crd-migrator.io/owner': 'pod-1' }, ['v1', 'v2'])
  const state = readCrdState(frozen, MIGRATING)
  t.equal(fleetState(frozen, state, { heartbeatAgeMs: 5_000, handedOff: false, stale: false }), 'Running', 'a live heartbeat')
  t.equal(fleetState(frozen, state, { heartbeatAgeMs: 90_000, handedOff: false, stale: true }), 'Stale', 'its run stopped (kill -9)')
  t.equal(fleetState(frozen, state, { heartbeatAgeMs: undefined, handedOff: true, stale: true }), 'Stale', 'handed off')
  const foreign = crd({ [MIGRATING]: 'true' }, ['v1', 'v2'])
  t.equal(fleetState(foreign, readCrdState(foreign, MIGRATING), { heartbeatAgeMs: undefined, handedOff: false, stale: true }), 'FrozenByAnother', 'never ours to call stale')
})

t.test('parseProgress: settled/total only', async (t) => {
  t.strictSame(parseProgress('120/400'), { done: 120, total: 400 })
  t.strictSame(parseProgress('0/0'), { done: 0, total: 0 })
  for (const text of [undefined, '120/?', 'waiting for API server(s) a to store v2', '5/4', '1/2/3'])
    t.equal(parseProgress(text), undefined, `${String(text)}: none`)
})

t.test("etaSeconds: the run's own rate, only with evidence", async (t) => {
  const now = new Date('2026-11-25T12:01:40Z')
  const started = '2026-11-25T12:00:00Z' // 100 s ago
  const at = (iso: string) => new Date(iso)
  const rows: Array<
    [what: string, progress: string | undefined, startedAt: string | undefined, sampledAt: Date | undefined, eta: number | undefined]
  > = [
    ['250 in 100 s: 750 more take 300 s', '250/1000', started, undefined, 300],
    ['done', '1000/1000', started, undefined, 0],
    ['rounded up', '3/1000', started, undefined, 33234],
    ['nothing settled yet: estimating', '0/1000', started, undefined, undefined],
    ['no start time', '250/1000', undefined, undefined, undefined],
    ['an unreadable start time', '250/1000', 'garbage', undefined, undefined],
    ['a start in the future (clock skew)', '250/1000', '2026-11-25T12:05:00Z', undefined, undefined],
    ['waiting: no count', 'waiting for API server(s) a to store v2', started, undefined, undefined],
    ['9 s of run: not enough evidence yet', '500/1000', '2026-11-25T12:01:31Z', undefined, undefined],
    ['10 s of run: enough', '500/1000', '2026-11-25T12:01:30Z', undefined, 10],
    // Written at the heartbeat 20 s ago: 250 in 80 s, 750 more take 240 s from then, 220 s from now.
    ['the count as of its heartbeat', '250/1000', started, at('2026-11-25T12:01:20Z'), 220],
    ['a fresh heartbeat 9 s into the run: not enough evidence', '250/1000', '2026-11-25T12:01:20Z', at('2026-11-25T12:01:29Z'), undefined],
    ['a heartbeat from the future: now instead', '250/1000', started, at('2026-11-25T12:09:00Z'), 300],
    ['a heartbeat before the start (clock skew): now instead', '250/1000', started, at('2026-11-25T11:59:00Z'), 300],
    ['overdue at its rate: 1 s, never 0 or less while running', '999/1000', started, at('2026-11-25T12:01:15Z'), 1],
    // 31 s old: the run stopped writing; its rate up to now (250 in 100 s), the stall included.
    ['a stale heartbeat: the rate up to now', '250/1000', started, at('2026-11-25T12:01:09Z'), 300],
  ]
  for (const [what, progress, startedAt, sampledAt, eta] of rows) t.equal(etaSeconds(progress, startedAt, now, sampledAt), eta, what)
})

t.test('summarize: counts, in flight, queued, the ETA of the slowest running CRD', async (t) => {
  const rows: SummaryInput[] = [
    { name: 'a', state: 'Succeeded', etaSeconds: undefined },
    { name: 'b', state: 'Succeeded', etaSeconds: undefined },
    { name: 'c', state: 'UpToDate', etaSeconds: undefined },
    { name: 'd', state: 'Running', etaSeconds: 40 },
    { name: 'e', state: 'Running', etaSeconds: 95 },
    { name: 'f', state: 'Running', etaSeconds: undefined },
    { name: 'g', state: 'Pending', etaSeconds: undefined },
    { name: 'h', state: 'Failed', etaSeconds: undefined },
    { name: 'i', state: 'FrozenByAnother', etaSeconds: undefined },
    { name: 'j', state: 'Stale', etaSeconds: undefined },
  ]
  const s = summarize(rows)
  t.strictSame(s, {
    crds: 10,
    succeeded: 2,
    upToDate: 1,
    running: 3,
    stale: 1,
    pending: 1,
    failed: 1,
    frozenByAnother: 1,
    inFlight: 3,
    queued: 3,
    etaSeconds: 95,
    runningWithoutEta: 1,
  })
  t.equal(
    formatSummary(s),
    '10 CRDs: 2 succeeded, 1 up to date, 3 running, 1 stale (its run stopped; the next run takes it over), 1 pending, 1 failed, 1 frozen by another tool\n' +
      'in flight: 3, queued: 3; ETA of the running: 1m35s at the rate seen so far (1 still estimating…)\n',
  )
  t.equal(
    formatSummary(summarize([{ name: 'f', state: 'Running', etaSeconds: undefined }])),
    '1 CRD: 0 succeeded, 0 up to date, 1 running, 0 pending, 0 failed\nin flight: 1, queued: 0; ETA of the running: estimating…\n',
  )
  t.equal(
    formatSummary(summarize([])),
    '0 CRDs: 0 succeeded, 0 up to date, 0 running, 0 pending, 0 failed\nin flight: 0, queued: 0\n',
    'nothing running: no ETA',
  )
})
