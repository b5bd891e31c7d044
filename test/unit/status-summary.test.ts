import t from 'tap'
import {
  etaSeconds,
  fleetState,
  formatSeconds,
  formatSummary,
  parseProgress,
  summarize,
  type SummaryInput,
} from '../../src/cli/status-summary.js'
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
})

t.test('parseProgress: settled/total only', async (t) => {
  t.strictSame(parseProgress('120/400'), { done: 120, total: 400 })
  t.strictSame(parseProgress('0/0'), { done: 0, total: 0 })
  for (const text of [undefined, '120/?', 'waiting for API server(s) a to store v2', '5/4', '1/2/3'])
    t.equal(parseProgress(text), undefined, `${String(text)}: none`)
})

t.test('etaSeconds: the rate since the run started', async (t) => {
  const now = new Date('2026-11-25T12:01:40Z')
  const started = '2026-11-25T12:00:00Z' // 100 s ago
  t.equal(etaSeconds('250/1000', started, now), 300, '250 in 100 s: 750 more take 300 s')
  t.equal(etaSeconds('1000/1000', started, now), 0, 'done')
  t.equal(etaSeconds('3/1000', started, now), 33234, 'rounded up')
  t.equal(etaSeconds('0/1000', started, now), undefined, 'nothing settled yet: no rate')
  t.equal(etaSeconds('250/1000', undefined, now), undefined, 'no start time')
  t.equal(etaSeconds('250/1000', 'garbage', now), undefined, 'an unreadable start time')
  t.equal(etaSeconds('250/1000', '2026-11-25T12:05:00Z', now), undefined, 'a start in the future (clock skew)')
  t.equal(etaSeconds('waiting for API server(s) a to store v2', started, now), undefined, 'waiting: no count')
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
  ]
  const s = summarize(rows)
  t.strictSame(s, {
    crds: 9,
    succeeded: 2,
    upToDate: 1,
    running: 3,
    pending: 1,
    failed: 1,
    frozenByAnother: 1,
    inFlight: 3,
    queued: 2,
    etaSeconds: 95,
    runningWithoutEta: 1,
  })
  t.equal(
    formatSummary(s),
    '9 CRDs: 2 succeeded, 1 up to date, 3 running, 1 pending, 1 failed, 1 frozen by another tool\n' +
      'in flight: 3, queued: 2; ETA of the running: 1m35s (1 without a rate yet)\n',
  )
  t.equal(
    formatSummary(summarize([{ name: 'f', state: 'Running', etaSeconds: undefined }])),
    '1 CRD: 0 succeeded, 0 up to date, 1 running, 0 pending, 0 failed\nin flight: 1, queued: 0; ETA of the running: not known yet\n',
  )
  t.equal(
    formatSummary(summarize([])),
    '0 CRDs: 0 succeeded, 0 up to date, 0 running, 0 pending, 0 failed\nin flight: 0, queued: 0\n',
    'nothing running: no ETA',
  )
})

t.test('formatSeconds', async (t) => {
  t.equal(formatSeconds(0), '0s')
  t.equal(formatSeconds(59), '59s')
  t.equal(formatSeconds(75), '1m15s')
  t.equal(formatSeconds(3600), '1h0m0s')
  t.equal(formatSeconds(3700), '1h1m40s')
})
