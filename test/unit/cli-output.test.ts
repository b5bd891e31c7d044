import t from 'tap'
import type { ObjectFailure } from '../../src/migrator/engine/walker.js'
import type { StatusRow } from '../../src/cli/status/run-status.js'
import { loadConfig } from '../../src/config/load.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import type { DryRunReport } from '../../src/migrator/dry-run.js'
import type { MigrationResult } from '../../src/migrator/migrate.js'
import type { WalkCounts } from '../../src/migrator/engine/walker.js'

/** A failed object as the walker records it (the printed text is `error`). */
const failure = (key: string, error: string): ObjectFailure => ({ key, code: 'CRDM_KUBE_API', message: error, error })

// The formatters are pure; stub the Kubernetes client so @kubernetes/client-node is not loaded
// (it alone takes seconds to import).
const kubeStub = {
  '../../src/kube/client.js': {
    kubeHttp: () => {
      throw new Error('no cluster in unit tests')
    },
  },
}
const { formatTable, heartbeatCell, lastResultCell, statusRows } = await t.mockImport<typeof import('../../src/cli/status/run-status.js')>(
  '../../src/cli/status/run-status.js',
  kubeStub,
)
const { formatDryRun, formatResult } = await t.mockImport<typeof import('../../src/cli/migrate/run-migrate.js')>(
  '../../src/cli/migrate/run-migrate.js',
  kubeStub,
)

const MIGRATING = 'ksvm.sigs.k8s.io/migrating'
const NOW = new Date('2026-11-28T12:00:00.000Z')

function crd(
  name: string,
  options: { labels?: Record<string, string>; annotations?: Record<string, string>; storage?: string; storedVersions?: string[] } = {},
): CustomResourceDefinition {
  const storage = options.storage ?? 'v1'
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: {
      name,
      ...(options.labels ? { labels: options.labels } : {}),
      ...(options.annotations ? { annotations: options.annotations } : {}),
    },
    spec: {
      group: name.split('.').slice(1).join('.'),
      names: { plural: name.split('.')[0]!, kind: 'X' },
      scope: 'Namespaced',
      versions: ['v1alpha1', 'v1'].map((v) => ({ name: v, served: true, storage: v === storage })),
    },
    status: { storedVersions: options.storedVersions ?? ['v1'], conditions: [{ type: 'Established', status: 'True' }] },
  }
}

const crds = [
  crd('zeta.example.com', { labels: { 'crd-migrator.io/managed': 'true' }, storedVersions: ['v1alpha1', 'v1'] }),
  crd('byname.example.com'),
  crd('foreign.example.com', { annotations: { [MIGRATING]: 'true' } }),
  crd('ours.example.com', {
    annotations: {
      [MIGRATING]: 'true',
      'crd-migrator.io/owner': 'crd-migrator-7d9f-abc',
      'crd-migrator.io/heartbeat': NOW.toISOString(),
      'crd-migrator.io/phase': 'StorageVersionMigration',
      'crd-migrator.io/progress': '120/400',
    },
  }),
  crd('migrated.example.com', {
    annotations: {
      'crd-migrator.io/last-result': 'Succeeded',
      'crd-migrator.io/last-duration': '12.3s',
      'crd-migrator.io/phase': 'Succeeded',
    },
  }),
  crd('unfrozen.example.com', { annotations: { [MIGRATING]: 'false' } }),
  crd('unrelated.example.com', { labels: { app: 'x' }, annotations: { 'example.com/owner': 'team-a' } }),
  crd('notmanaged.example.com', { labels: { 'crd-migrator.io/managed': 'false' } }),
  crd('nostorage.example.com', { labels: { 'crd-migrator.io/managed': 'true' }, storage: 'none', storedVersions: [] }),
]

t.test('statusRows: which CRDs are shown', async (t) => {
  const config = loadConfig({ flags: { 'migrator.selector.names': ['byname.example.com'] } })
  const rows = statusRows(crds, config, undefined, new Date(NOW.getTime() + 5_000))
  t.strictSame(
    rows.map((r) => r.name),
    [
      'byname.example.com',
      'foreign.example.com',
      'migrated.example.com',
      'nostorage.example.com',
      'ours.example.com',
      'unfrozen.example.com',
      'zeta.example.com',
    ],
    'selected by label or name, frozen, or carrying our annotations; sorted by name',
  )
  t.notOk(
    rows.some((r) => r.name === 'unrelated.example.com'),
    'unrelated hidden',
  )
  t.notOk(
    rows.some((r) => r.name === 'notmanaged.example.com'),
    'label not matching hidden',
  )

  const byName = Object.fromEntries(rows.map((r) => [r.name, r]))
  t.strictSame(
    byName['zeta.example.com'],
    {
      name: 'zeta.example.com',
      storage: 'v1',
      storedVersions: 'v1alpha1,v1',
      frozen: 'no',
      heartbeat: '-',
      phase: '-',
      progress: '-',
      lastResult: '-',
      duration: '-',
      builtin: '?',
      state: 'Pending',
    },
    'selected by label',
  )
  t.equal(byName['foreign.example.com']?.frozen, 'yes (foreign)', 'foreign freeze')
  t.strictSame(
    byName['ours.example.com'],
    {
      name: 'ours.example.com',
      storage: 'v1',
      storedVersions: 'v1',
      frozen: 'yes (crd-migrator-7d9f-abc)',
      frozenBy: 'crd-migrator-7d9f-abc',
      heartbeat: '5s',
      phase: 'StorageVersionMigration',
      progress: '120/400',
      lastResult: '-',
      duration: '-',
      builtin: '?',
      state: 'Running',
      heartbeatAgeSeconds: 5,
      stale: false,
    },
    'our freeze, with its owner (no started-at: no ETA)',
  )
  t.equal(byName['unfrozen.example.com']?.frozen, 'no', 'migrating "false" is not frozen')
  t.equal(byName['migrated.example.com']?.lastResult, 'Succeeded')
  t.equal(byName['migrated.example.com']?.duration, '12.3s')
  t.equal(byName['nostorage.example.com']?.storage, '-', 'no storage version')
  t.equal(byName['nostorage.example.com']?.storedVersions, '-', 'nothing stored')
})

t.test('statusRows: a run killed with -9 is stale once the next run may take it over', async (t) => {
  const config = loadConfig({ flags: { 'migrator.selector.labelSelector': '', 'migrator.takeoverAfterSeconds': 30 } })
  const frozen = (heartbeat: Record<string, string>) =>
    crd('dead.example.com', {
      annotations: {
        [MIGRATING]: 'true',
        'crd-migrator.io/owner': 'crd-migrator-cli-x',
        'crd-migrator.io/progress': '120/400',
        ...heartbeat,
      },
    })
  const at = (ms: number) => new Date(NOW.getTime() + ms)
  const [alive] = statusRows([frozen({ 'crd-migrator.io/heartbeat': NOW.toISOString() })], config, undefined, at(29_000))
  t.match(alive, { heartbeat: '29s', state: 'Running', heartbeatAgeSeconds: 29, stale: false })
  const [dead] = statusRows([frozen({ 'crd-migrator.io/heartbeat': NOW.toISOString() })], config, undefined, at(130_000))
  t.match(dead, { heartbeat: '2m10s, stale', state: 'Stale', heartbeatAgeSeconds: 130, stale: true })
  t.notOk('etaSeconds' in (dead ?? {}), 'no ETA for a run that stopped')
  const [handed] = statusRows([frozen({ 'crd-migrator.io/handed-off': NOW.toISOString() })], config, undefined, at(1_000))
  t.match(handed, { heartbeat: 'handed off', state: 'Stale', stale: true })
  t.notOk('heartbeatAgeSeconds' in (handed ?? {}))
  t.equal(heartbeatCell({ heartbeatAgeMs: undefined, handedOff: false, stale: true }), 'none, stale')
  t.equal(
    heartbeatCell({ heartbeatAgeMs: -2_000, handedOff: false, stale: false }),
    '0s',
    'a heartbeat from the future (clock skew) is no negative age',
  )
})

t.test('lastResultCell: a success for an earlier generation says so', async (t) => {
  t.equal(lastResultCell({ lastResult: 'Succeeded', observedGeneration: 3 }, 4), 'Succeeded (generation 3; now 4)')
  t.equal(lastResultCell({ lastResult: 'Succeeded', observedGeneration: 4 }, 4), 'Succeeded')
  t.equal(lastResultCell({ lastResult: 'Succeeded', observedGeneration: undefined }, 4), 'Succeeded')
  t.equal(lastResultCell({ lastResult: 'Failed: x', observedGeneration: 3 }, 4), 'Failed: x')
  t.equal(lastResultCell({ lastResult: undefined, observedGeneration: 3 }, 4), '-')
})

t.test('statusRows: an empty selector selects nothing by label', async (t) => {
  const config = loadConfig({ flags: { 'migrator.selector.labelSelector': '' } })
  t.strictSame(
    statusRows(crds, config).map((r) => r.name),
    ['foreign.example.com', 'migrated.example.com', 'ours.example.com', 'unfrozen.example.com'],
  )
})

t.test('statusRows: a custom migrating annotation', async (t) => {
  const config = loadConfig({ flags: { 'annotations.migrating': 'example.com/frozen', 'migrator.selector.labelSelector': '' } })
  const rows = statusRows(
    [
      crd('a.example.com', { annotations: { 'example.com/frozen': 'true' } }),
      crd('b.example.com', { annotations: { [MIGRATING]: 'true' } }),
    ],
    config,
  )
  t.strictSame(
    rows.map((r) => [r.name, r.frozen]),
    [['a.example.com', 'yes (foreign)']],
    'only the configured key counts',
  )
})

t.test('statusRows: a selector with set-based requirements', async (t) => {
  const config = loadConfig({ flags: { 'migrator.selector.labelSelector': 'tier in (data, cache)' } })
  const rows = statusRows([crd('a.example.com', { labels: { tier: 'cache' } }), crd('b.example.com', { labels: { tier: 'web' } })], config)
  t.strictSame(
    rows.map((r) => r.name),
    ['a.example.com'],
  )
})

t.test('formatTable aligns columns', async (t) => {
  const rows: StatusRow[] = [
    {
      name: 'a-very-long-name.example.com',
      storage: 'v1',
      storedVersions: 'v1alpha1,v1',
      frozen: 'yes (pod-1)',
      heartbeat: '3s',
      phase: 'StorageVersionMigration',
      progress: '1/2',
      lastResult: '-',
      duration: '-',
      builtin: 'Running crd-migrator-a-g2-x1',
      state: 'Running',
    },
    {
      name: 'b.example.com',
      storage: 'v2beta1',
      storedVersions: 'v2beta1',
      frozen: 'no',
      heartbeat: '-',
      phase: '-',
      progress: '-',
      lastResult: 'Failed: 3 object(s)',
      duration: '1.5s',
      builtin: '-',
      state: 'Failed',
    },
  ]
  const text = formatTable(rows)
  t.ok(text.endsWith('\n'), 'ends with a newline')
  const lines = text.slice(0, -1).split('\n')
  t.equal(lines.length, 3, 'header and two rows')
  const headers = ['NAME', 'STORAGE', 'STORED', 'FROZEN', 'HEARTBEAT', 'PHASE', 'PROGRESS', 'LAST RESULT', 'DURATION', 'BUILT-IN MIGRATION']
  const starts = headers.map((h) => lines[0]!.indexOf(h))
  t.equal(starts[0], 0, 'NAME first')
  t.strictSame(
    [...starts].sort((a, b) => a - b),
    starts,
    'headers in order',
  )
  const keys: Exclude<keyof StatusRow, 'frozenBy' | 'state' | 'etaSeconds' | 'heartbeatAgeSeconds' | 'stale'>[] = [
    'name',
    'storage',
    'storedVersions',
    'frozen',
    'heartbeat',
    'phase',
    'progress',
    'lastResult',
    'duration',
    'builtin',
  ]
  for (const [r, row] of rows.entries()) {
    const line = lines[r + 1]!
    for (const [i, key] of keys.entries()) {
      t.equal(line.slice(starts[i], starts[i]! + row[key].length), row[key], `row ${r + 1} ${key} starts under ${headers[i]}`)
      if (i > 0) t.equal(line.slice(starts[i]! - 2, starts[i]), '  ', `row ${r + 1}: two spaces before ${key}`)
    }
  }
  t.equal(starts[1], 'a-very-long-name.example.com'.length + 2, 'the widest cell sets the column width')
  t.equal(starts[4]! - starts[3]!, 'yes (pod-1)'.length + 2, 'FROZEN column as wide as its widest cell')
  for (const line of lines) t.equal(line, line.trimEnd(), 'no trailing spaces')
})

t.test('formatTable with no rows is the header', async (t) => {
  t.equal(formatTable([]), 'NAME  STORAGE  STORED  FROZEN  HEARTBEAT  PHASE  PROGRESS  LAST RESULT  DURATION  BUILT-IN MIGRATION\n')
})

const counts = (c: Partial<WalkCounts>): WalkCounts => ({
  seen: 0,
  rewritten: 0,
  current: 0,
  skipped: 0,
  gone: 0,
  conflict: 0,
  failed: 0,
  resumed: 0,
  ...c,
})

const base: MigrationResult = {
  crd: 'widgets.example.com',
  outcome: 'Succeeded',
  reason: '10 object(s) rewritten in v1, storedVersions ["v1"]',
  storageVersion: 'v1',
  crdUid: 'c0ffee',
  generation: 2,
  storedVersionsBefore: ['v1alpha1', 'v1'],
  storedVersionsAfter: ['v1'],
  durationMs: 1540,
  leftFrozen: false,
}

t.test('formatResult: a full success', async (t) => {
  const text = formatResult({
    ...base,
    storage: { counts: counts({ seen: 10, rewritten: 6, current: 1, conflict: 1, gone: 2 }), failures: [], checkpoint: 'ns/w9' },
    cleanup: { counts: counts({ seen: 10, rewritten: 4, skipped: 6 }), failures: [], checkpoint: 'ns/w9', entriesRemoved: 5 },
  })
  t.equal(
    text,
    [
      'widgets.example.com: Succeeded in 1.5s — 10 object(s) rewritten in v1, storedVersions ["v1"]',
      '  storage version v1: 10 listed, 6 rewritten, 1 already current, 1 written by others, 2 deleted, 0 failed',
      '  status.storedVersions: ["v1alpha1","v1"] -> ["v1"]',
      '  managedFields: 5 entries of unserved versions removed from 4 of 10 objects, 0 failed',
      '',
    ].join('\n'),
  )
})

t.test('formatResult: failures, resumed objects, left frozen', async (t) => {
  const failures = Array.from({ length: 7 }, (_, i) => failure(`ns/w${i}`, `denied ${i}`))
  const text = formatResult({
    ...base,
    outcome: 'Failed',
    reason: '7 object(s) could not be rewritten',
    storedVersionsAfter: ['v1alpha1', 'v1'],
    storage: { counts: counts({ seen: 20, rewritten: 3, failed: 7, resumed: 10 }), failures, checkpoint: 'ns/w2' },
    leftFrozen: true,
  })
  t.match(text, /^widgets\.example\.com: Failed in 1\.5s — 7 object\(s\) could not be rewritten\n/)
  t.ok(
    text.includes('20 listed, 3 rewritten, 0 already current, 0 written by others, 0 deleted, 7 failed, 10 done by an earlier run'),
    'counts with resumed',
  )
  t.ok(text.includes('    failed ns/w0: denied 0\n'), 'first failure listed')
  t.ok(text.includes('    failed ns/w4: denied 4\n'), 'fifth failure listed')
  t.notOk(text.includes('ns/w5'), 'at most five failures listed')
  t.ok(text.includes('status.storedVersions: ["v1alpha1","v1"] -> ["v1alpha1","v1"]'), 'storedVersions shown when the storage phase ran')
  t.ok(text.includes('WARNING: the migrating annotation could not be removed'), 'the freeze warning')
  t.ok(text.trimEnd().endsWith('(unfreezing by hand)'), 'the warning is last')
})

t.test('formatResult and statusRows print no escape sequence and no forged line', async (t) => {
  const forged = 'refused\nwidgets.example.com: Succeeded in 0.1s\u001b]0;pwned\u0007\u001b[2J'
  const text = formatResult({
    ...base,
    outcome: 'Failed',
    reason: forged,
    storage: { counts: counts({ seen: 1, failed: 1 }), failures: [failure('ns/w0', forged)], checkpoint: undefined },
  })
  t.notMatch(text.replaceAll('\n', ''), /\p{Cc}/u, 'no control character but the line ends')
  t.equal(text.split('\n').filter((l) => l.startsWith('widgets.example.com:')).length, 1, 'one summary line')
  t.ok(text.includes('    failed ns/w0: refused widgets.example.com: Succeeded in 0.1s\n'), 'indentation kept')
  const config = loadConfig({ flags: { 'migrator.selector.names': ['forged.example.com'] } })
  const [row] = statusRows(
    [
      crd('forged.example.com', {
        annotations: {
          'crd-migrator.io/last-result': `Failed: ${forged}${'x'.repeat(5000)}`,
          'crd-migrator.io/phase': '\u001b[2J',
          'crd-migrator.io/last-duration': '1s\u0007',
        },
      }),
    ],
    config,
  )
  t.match(row?.lastResult, /^Failed: refused widgets\.example\.com: Succeeded in 0\.1sx+…\(\d+ characters\)$/)
  t.ok((row?.lastResult.length ?? Infinity) < 1100, 'cut')
  const cell = formatTable(row ? [row] : []).split('\n')[1] ?? ''
  t.ok(
    cell.includes(`${row?.lastResult.slice(0, 199)}…`) && !cell.includes(row?.lastResult.slice(0, 200) ?? ''),
    'the table cuts the column at 200 characters',
  )
  t.equal(row?.phase, '-', 'nothing left of an escape sequence: the empty cell')
  t.equal(row?.duration, '1s')
  t.notMatch(formatTable(row ? [row] : []).replaceAll('\n', ''), /\p{Cc}/u)
})

t.test('formatResult: the storage switch line only when it is true at the end', async (t) => {
  const storage = { counts: counts({ seen: 1, rewritten: 1 }), failures: [], checkpoint: 'ns/w0' }
  const ok = formatResult({ ...base, storage, apiServers: { mode: 'all-servers', listed: 1, checked: 1 } })
  t.ok(ok.includes('  storage switch: all 1 API servers store v1 (each asked by address)\n'), 'a run that checked every server says so')
  const failed = formatResult({
    ...base,
    outcome: 'Failed',
    errorCode: 'CRDM_STORAGE_NOT_SWITCHED',
    reason: 'API server(s) 10.0.0.1:6443 did not switch to storage version v1 within 120s (of 1 listed)',
    storedVersionsAfter: base.storedVersionsBefore,
    storage,
    // What the first check (before the rewrite) reported; the one before narrowing failed.
    apiServers: { mode: 'all-servers', listed: 1, checked: 1 },
  })
  t.notOk(failed.includes('storage switch:'), 'a run that failed CRDM_STORAGE_NOT_SWITCHED does not claim every server stores the version')
  t.match(
    failed,
    /Failed \(CRDM_STORAGE_NOT_SWITCHED\) in 1\.5s — API server\(s\) 10\.0\.0\.1:6443 did not switch/,
    'its reason says what is true',
  )
})

t.test('formatResult: a resumed run names its checkpoint', async (t) => {
  const text = formatResult({
    ...base,
    resumedFrom: 'ns/w4',
    storage: { counts: counts({ seen: 10, rewritten: 5, resumed: 5 }), failures: [], checkpoint: 'ns/w9' },
  })
  t.ok(
    text.includes(
      '10 listed, 5 rewritten, 0 already current, 0 written by others, 0 deleted, 0 failed, 5 done by an earlier run (resumed after ns/w4)',
    ),
  )
})

t.test('formatResult: cleanup failures listed', async (t) => {
  const text = formatResult({
    ...base,
    outcome: 'Failed',
    reason: 'x',
    storedVersionsAfter: base.storedVersionsBefore,
    cleanup: {
      counts: counts({ seen: 3, rewritten: 1, failed: 2 }),
      failures: [failure('a', 'conflict'), failure('b', 'gone')],
      checkpoint: undefined,
      entriesRemoved: 1,
    },
  })
  t.ok(text.includes('managedFields: 1 entries of unserved versions removed from 1 of 3 objects, 2 failed'))
  t.ok(text.includes('    failed a: conflict\n    failed b: gone\n'))
  t.notOk(text.includes('status.storedVersions'), 'no storage phase and storedVersions unchanged: not shown')
  t.notOk(text.includes('WARNING'))
})

t.test('formatResult: skipped is one line', async (t) => {
  t.equal(
    formatResult({
      ...base,
      outcome: 'Skipped',
      reason: 'the CRD is not Established yet',
      storedVersionsAfter: base.storedVersionsBefore,
      durationMs: 40,
    }),
    'widgets.example.com: Skipped — the CRD is not Established yet\n',
  )
})

const report: DryRunReport = {
  crd: 'widgets.example.com',
  storageVersion: 'v1',
  storedVersions: ['v1alpha1', 'v1'],
  blockedReason: undefined,
  objectsToRewrite: 12,
  storedVersionsAfter: ['v1'],
  objectsToClean: 3,
  managedFieldsEntriesToRemove: 4,
  managedFieldsEntriesToRelabel: 0,
  objectsToSeed: 1,
  servedKept: {},
}

t.test('formatDryRun', async (t) => {
  t.equal(
    formatDryRun(report),
    [
      'widgets.example.com: dry run (nothing written)',
      '  storage version v1, status.storedVersions ["v1alpha1","v1"]',
      '  StorageVersionMigration: would rewrite 12 object(s), then set storedVersions to ["v1"]',
      '  CleanupManagedFields: would remove 4 managedFields entries from 3 object(s) (1 seeded)',
      '',
    ].join('\n'),
  )

  t.match(
    formatDryRun({ ...report, servedKept: { v1alpha1: { objects: 12 } } }),
    /\n {2}CleanupManagedFields: .*\n {2}next: 12 objects keep managedFields entries of v1alpha1, which is still served .*: to drop v1alpha1, set served: false on it, then run migrate again\n$/,
    'the served-version step, as plan, check and migrate give it',
  )

  const one = formatDryRun({ ...report, objectsToClean: 1, managedFieldsEntriesToRemove: 1, objectsToSeed: 0 })
  t.ok(one.includes('would remove 1 managedFields entry from 1 object(s)\n'), 'singular, no seeding note')

  const nothing = formatDryRun({
    ...report,
    objectsToRewrite: 0,
    storedVersionsAfter: report.storedVersions,
    objectsToClean: 0,
    managedFieldsEntriesToRemove: 0,
    managedFieldsEntriesToRelabel: 0,
    objectsToSeed: 0,
  })
  t.ok(nothing.includes('  StorageVersionMigration: nothing to do\n'))
  t.ok(nothing.includes('  CleanupManagedFields: nothing to do\n'))
  t.ok(nothing.startsWith('widgets.example.com: dry run (nothing written)\n'))

  t.equal(
    formatDryRun({ ...report, blockedReason: 'the CRD marks 2 versions as storage' }),
    'widgets.example.com: nothing can be done: the CRD marks 2 versions as storage\n',
  )
})
