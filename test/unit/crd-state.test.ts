import t from 'tap'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import {
  blockedPatch,
  decideFreeze,
  describeResume,
  describeFreeze,
  freezeLiveness,
  freezePatch,
  staleAt,
  isStateAnnotation,
  runStatePatch,
  readCrdState,
  StateAnnotation,
  unfreezePatch,
  handOffPatch,
  takeOverPatch,
  upToDatePatch,
  type CrdState,
  type FreezeVerdict,
  type RunState,
} from '../../src/state/crd-state.js'

const KEY = DEFAULT_MIGRATING_ANNOTATION
const NOW = new Date('2024-05-06T12:00:00.000Z')
const TAKEOVER_MS = 30_000
const SELF = 'pod-a'

function crd(annotations?: Record<string, string>): CustomResourceDefinition {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: 'widgets.example.com', ...(annotations ? { annotations } : {}) },
    spec: {
      group: 'example.com',
      names: { plural: 'widgets', kind: 'Widget' },
      scope: 'Namespaced',
      versions: [{ name: 'v1', served: true, storage: true }],
    },
  }
}

interface ReadRow {
  name: string
  annotations?: Record<string, string>
  key?: string
  expect: Partial<CrdState>
}

const unfrozen: CrdState = {
  frozen: false,
  owner: undefined,
  heartbeat: undefined,
  targetStorageVersion: undefined,
  frozenGeneration: undefined,
  startedAt: undefined,
  checkpoint: undefined,
  checkpointSeal: undefined,
  phase: undefined,
  progress: undefined,
  lastResult: undefined,
  lastDuration: undefined,
  observedGeneration: undefined,
  builtinMigration: undefined,
  handedOff: undefined,
  carriesState: false,
}

const readRows: ReadRow[] = [
  { name: 'no annotations', expect: unfrozen },
  { name: 'empty annotations', annotations: {}, expect: unfrozen },
  { name: 'migrating "true" is frozen', annotations: { [KEY]: 'true' }, expect: { frozen: true, owner: undefined } },
  { name: 'migrating "True" is not frozen', annotations: { [KEY]: 'True' }, expect: { frozen: false } },
  { name: 'migrating "false" is not frozen', annotations: { [KEY]: 'false' }, expect: { frozen: false } },
  { name: 'migrating "" is not frozen', annotations: { [KEY]: '' }, expect: { frozen: false } },
  { name: 'migrating "yes" is not frozen', annotations: { [KEY]: 'yes' }, expect: { frozen: false } },
  {
    name: 'custom key: the default key means nothing',
    annotations: { [KEY]: 'true' },
    key: 'example.com/frozen',
    expect: { frozen: false },
  },
  { name: 'custom key: frozen by it', annotations: { 'example.com/frozen': 'true' }, key: 'example.com/frozen', expect: { frozen: true } },
  { name: 'owner', annotations: { [KEY]: 'true', [StateAnnotation.owner]: 'pod-b' }, expect: { frozen: true, owner: 'pod-b' } },
  { name: 'empty owner is no owner', annotations: { [KEY]: 'true', [StateAnnotation.owner]: '' }, expect: { owner: undefined } },
  {
    name: 'heartbeat parsed',
    annotations: { [StateAnnotation.heartbeat]: '2024-05-06T11:59:50.250Z' },
    expect: { heartbeat: new Date('2024-05-06T11:59:50.250Z') },
  },
  { name: 'garbage heartbeat ignored', annotations: { [StateAnnotation.heartbeat]: 'yesterday-ish' }, expect: { heartbeat: undefined } },
  { name: 'empty heartbeat ignored', annotations: { [StateAnnotation.heartbeat]: '' }, expect: { heartbeat: undefined } },
  { name: 'frozenGeneration parsed', annotations: { [StateAnnotation.frozenGeneration]: '7' }, expect: { frozenGeneration: 7 } },
  { name: 'frozenGeneration 0', annotations: { [StateAnnotation.frozenGeneration]: '0' }, expect: { frozenGeneration: 0 } },
  {
    name: 'garbage frozenGeneration ignored',
    annotations: { [StateAnnotation.frozenGeneration]: 'seven' },
    expect: { frozenGeneration: undefined },
  },
  { name: 'target storage version', annotations: { [StateAnnotation.targetStorageVersion]: 'v2' }, expect: { targetStorageVersion: 'v2' } },
  {
    name: 'empty target storage version',
    annotations: { [StateAnnotation.targetStorageVersion]: '' },
    expect: { targetStorageVersion: undefined },
  },
  { name: 'checkpoint', annotations: { [StateAnnotation.checkpoint]: 'ns-1/widget-42' }, expect: { checkpoint: 'ns-1/widget-42' } },
  { name: 'empty checkpoint', annotations: { [StateAnnotation.checkpoint]: '' }, expect: { checkpoint: undefined } },
  {
    name: 'everything at once',
    annotations: {
      [KEY]: 'true',
      [StateAnnotation.owner]: 'pod-b',
      [StateAnnotation.heartbeat]: '2024-05-06T11:59:00Z',
      [StateAnnotation.targetStorageVersion]: 'v1',
      [StateAnnotation.frozenGeneration]: '12',
      [StateAnnotation.checkpoint]: 'default/w-9',
      [StateAnnotation.phase]: 'StorageVersionMigration',
    },
    expect: {
      frozen: true,
      owner: 'pod-b',
      heartbeat: new Date('2024-05-06T11:59:00Z'),
      targetStorageVersion: 'v1',
      frozenGeneration: 12,
      checkpoint: 'default/w-9',
    },
  },
]

for (const row of readRows) {
  t.test(`readCrdState: ${row.name}`, async (t) => {
    const state = readCrdState(crd(row.annotations), row.key ?? KEY)
    for (const [k, v] of Object.entries(row.expect)) t.strictSame(state[k as keyof CrdState], v, k)
  })
}

t.test('readCrdState: an empty frozen-generation annotation reads as absent, like the other state annotations', async (t) => {
  // An empty value parses as Number('') === 0, and migrate.ts then compares generation 0 with the
  // CRD's real generation (>= 1) before narrowing storedVersions, failing every resumed run.
  const state = readCrdState(crd({ [KEY]: 'true', [StateAnnotation.frozenGeneration]: '' }), KEY)
  t.equal(state.frozenGeneration, undefined, 'empty frozen-generation is no generation', {})
})

interface DecideRow {
  name: string
  state: Partial<CrdState>
  storageVersion?: string
  expect: FreezeVerdict | { action: 'wait' | 'foreign'; includes: string[] }
}

const ago = (ms: number) => new Date(NOW.getTime() - ms)

const decideRows: DecideRow[] = [
  { name: 'not frozen: freeze', state: {}, expect: { action: 'freeze' } },
  {
    name: 'not frozen, stale state annotations left over: still freeze',
    state: { owner: 'pod-b', checkpoint: 'x', targetStorageVersion: 'v1' },
    expect: { action: 'freeze' },
  },
  {
    name: 'frozen without owner: foreign',
    state: { frozen: true, heartbeat: ago(1000) },
    expect: { action: 'foreign', includes: ['no crd-migrator owner', 'another migrator'] },
  },
  {
    name: 'frozen by another owner, fresh heartbeat: wait',
    state: { frozen: true, owner: 'pod-b', heartbeat: ago(5_000), targetStorageVersion: 'v1', checkpoint: 'a' },
    expect: { action: 'wait', includes: ['pod-b', '5s ago'] },
  },
  {
    name: 'frozen by another owner, heartbeat from the future (clock skew): wait',
    state: { frozen: true, owner: 'pod-b', heartbeat: new Date(NOW.getTime() + 10_000) },
    expect: { action: 'wait', includes: ['pod-b'] },
  },
  {
    name: 'frozen by another owner, heartbeat just under the takeover age: wait',
    state: { frozen: true, owner: 'pod-b', heartbeat: ago(TAKEOVER_MS - 1) },
    expect: { action: 'wait', includes: ['pod-b', '30s ago'] },
  },
  {
    name: 'frozen by another owner, heartbeat exactly the takeover age: resume',
    state: { frozen: true, owner: 'pod-b', heartbeat: ago(TAKEOVER_MS), targetStorageVersion: 'v1', checkpoint: 'ns/a' },
    expect: {
      action: 'resume',
      checkpoint: 'ns/a',
      previousOwner: 'pod-b',
      previous: { heartbeatAgeMs: TAKEOVER_MS, handedOff: false, stale: true },
    },
  },
  {
    name: 'stale heartbeat: resume with the checkpoint',
    state: { frozen: true, owner: 'pod-b', heartbeat: ago(10 * 60_000), targetStorageVersion: 'v1', checkpoint: 'ns/w-100' },
    expect: {
      action: 'resume',
      checkpoint: 'ns/w-100',
      previousOwner: 'pod-b',
      previous: { heartbeatAgeMs: 10 * 60_000, handedOff: false, stale: true },
    },
  },
  {
    name: 'no heartbeat: resume',
    state: { frozen: true, owner: 'pod-b', targetStorageVersion: 'v1', checkpoint: 'ns/w-1' },
    expect: {
      action: 'resume',
      checkpoint: 'ns/w-1',
      previousOwner: 'pod-b',
      previous: { heartbeatAgeMs: undefined, handedOff: false, stale: true },
    },
  },
  {
    name: 'same owner with a fresh heartbeat: resume immediately',
    state: { frozen: true, owner: SELF, heartbeat: ago(100), targetStorageVersion: 'v1', checkpoint: 'ns/w-7' },
    expect: {
      action: 'resume',
      checkpoint: 'ns/w-7',
      previousOwner: SELF,
      previous: { heartbeatAgeMs: 100, handedOff: false, stale: false },
    },
  },
  {
    name: 'checkpoint dropped when the target storage version differs',
    state: { frozen: true, owner: 'pod-b', heartbeat: ago(60_000), targetStorageVersion: 'v1beta1', checkpoint: 'ns/w-100' },
    expect: {
      action: 'resume',
      checkpoint: undefined,
      previousOwner: 'pod-b',
      previous: { heartbeatAgeMs: 60_000, handedOff: false, stale: true },
    },
  },
  {
    name: 'checkpoint dropped when no target storage version was recorded',
    state: { frozen: true, owner: SELF, checkpoint: 'ns/w-100' },
    expect: {
      action: 'resume',
      checkpoint: undefined,
      previousOwner: SELF,
      previous: { heartbeatAgeMs: undefined, handedOff: false, stale: true },
    },
  },
  {
    name: 'handed off by another owner, no heartbeat: resume at once with the checkpoint',
    state: { frozen: true, owner: 'pod-b', handedOff: ago(100).toISOString(), targetStorageVersion: 'v1', checkpoint: 'ns/w-9' },
    expect: {
      action: 'resume',
      checkpoint: 'ns/w-9',
      previousOwner: 'pod-b',
      previous: { heartbeatAgeMs: undefined, handedOff: true, stale: true },
    },
  },
  {
    name: 'handed off, a heartbeat still fresh (written before the hand-off landed): resume at once',
    state: { frozen: true, owner: 'pod-b', heartbeat: ago(1_000), handedOff: ago(100).toISOString(), targetStorageVersion: 'v1' },
    expect: {
      action: 'resume',
      checkpoint: undefined,
      previousOwner: 'pod-b',
      previous: { heartbeatAgeMs: 1_000, handedOff: true, stale: true },
    },
  },
  {
    name: 'handed off but without an owner: still foreign, never touched',
    state: { frozen: true, handedOff: ago(100).toISOString() },
    expect: { action: 'foreign', includes: ['no crd-migrator owner'] },
  },
  {
    name: 'a hand-off marker left on an unfrozen CRD: a fresh freeze',
    state: { owner: 'pod-b', handedOff: ago(100).toISOString() },
    expect: { action: 'freeze' },
  },
  {
    name: 'resume without a checkpoint',
    state: { frozen: true, owner: SELF, targetStorageVersion: 'v1' },
    expect: {
      action: 'resume',
      checkpoint: undefined,
      previousOwner: SELF,
      previous: { heartbeatAgeMs: undefined, handedOff: false, stale: true },
    },
  },
]

for (const row of decideRows) {
  t.test(`decideFreeze: ${row.name}`, async (t) => {
    const state: CrdState = { ...unfrozen, ...row.state }
    const verdict = decideFreeze(state, SELF, row.storageVersion ?? 'v1', TAKEOVER_MS, NOW)
    if ('includes' in row.expect) {
      t.equal(verdict.action, row.expect.action, 'action')
      const reason = 'reason' in verdict ? verdict.reason : ''
      for (const part of row.expect.includes) t.ok(reason.includes(part), `reason mentions ${JSON.stringify(part)}`, { reason })
    } else {
      t.strictSame(verdict, row.expect)
    }
  })
}

t.test('freezeLiveness: the heartbeat age and whether the next run may take the freeze over', async (t) => {
  const rows: Array<
    [string, Pick<CrdState, 'heartbeat' | 'handedOff'>, { heartbeatAgeMs: number | undefined; handedOff: boolean; stale: boolean }]
  > = [
    ['fresh', { heartbeat: ago(5_000), handedOff: undefined }, { heartbeatAgeMs: 5_000, handedOff: false, stale: false }],
    [
      'just under the takeover age',
      { heartbeat: ago(TAKEOVER_MS - 1), handedOff: undefined },
      { heartbeatAgeMs: TAKEOVER_MS - 1, handedOff: false, stale: false },
    ],
    [
      'the takeover age',
      { heartbeat: ago(TAKEOVER_MS), handedOff: undefined },
      { heartbeatAgeMs: TAKEOVER_MS, handedOff: false, stale: true },
    ],
    ['no heartbeat', { heartbeat: undefined, handedOff: undefined }, { heartbeatAgeMs: undefined, handedOff: false, stale: true }],
    ['handed off', { heartbeat: undefined, handedOff: ago(1).toISOString() }, { heartbeatAgeMs: undefined, handedOff: true, stale: true }],
    [
      'from the future (clock skew)',
      { heartbeat: new Date(NOW.getTime() + 10_000), handedOff: undefined },
      { heartbeatAgeMs: -10_000, handedOff: false, stale: false },
    ],
  ]
  for (const [what, state, want] of rows) t.strictSame(freezeLiveness(state, TAKEOVER_MS, NOW), want, what)
})

t.test('staleAt: the moment freezeLiveness turns a silent freeze stale', async (t) => {
  const state = { heartbeat: ago(5_000), handedOff: undefined }
  const due = staleAt(state, TAKEOVER_MS)!
  t.equal(due.getTime(), NOW.getTime() - 5_000 + TAKEOVER_MS, 'the heartbeat plus the takeover age')
  t.equal(freezeLiveness(state, TAKEOVER_MS, new Date(due.getTime() - 1)).stale, false, 'live until then')
  t.equal(freezeLiveness(state, TAKEOVER_MS, due).stale, true, 'stale from then')
  t.equal(
    staleAt({ heartbeat: undefined, handedOff: undefined }, TAKEOVER_MS),
    undefined,
    'no heartbeat: stale already, nothing to wait for',
  )
  t.equal(staleAt({ heartbeat: ago(1), handedOff: ago(1).toISOString() }, TAKEOVER_MS), undefined, 'handed off: stale already')
})

t.test('describeResume: a resumed run says whose freeze it takes and why', async (t) => {
  const live = (heartbeatAgeMs: number | undefined, stale: boolean, handedOff = false) => ({ heartbeatAgeMs, handedOff, stale })
  t.equal(describeResume('pod-b', live(130_000, true), SELF), 'taking over the freeze of pod-b: no heartbeat for 130s (its run stopped)')
  t.equal(describeResume('pod-b', live(undefined, true), SELF), 'taking over the freeze of pod-b: it wrote no heartbeat (its run stopped)')
  t.equal(describeResume('pod-b', live(undefined, true, true), SELF), 'resuming the freeze pod-b handed off (it stopped on purpose)')
  t.equal(
    describeResume(SELF, live(3_000, false), SELF),
    'resuming the freeze of this identity (pod-a), heartbeat 3s ago (the same identity restarted)',
  )
  t.equal(
    describeResume(SELF, live(45_000, true), SELF),
    'resuming the freeze an earlier run of this identity (pod-a) left: no heartbeat for 45s (it stopped)',
  )
})

t.test('decideFreeze from annotations end to end', async (t) => {
  const state = readCrdState(
    crd({
      [KEY]: 'true',
      [StateAnnotation.owner]: 'pod-b',
      [StateAnnotation.heartbeat]: ago(45_000).toISOString(),
      [StateAnnotation.targetStorageVersion]: 'v2',
      [StateAnnotation.checkpoint]: 'ns/x',
    }),
    KEY,
  )
  const previous = { heartbeatAgeMs: 45_000, handedOff: false, stale: true }
  t.strictSame(decideFreeze(state, SELF, 'v2', TAKEOVER_MS, NOW), {
    action: 'resume',
    checkpoint: 'ns/x',
    previousOwner: 'pod-b',
    previous,
  })
  t.strictSame(decideFreeze(state, SELF, 'v2', 60_000, NOW).action, 'wait', 'a longer takeover window waits')
  t.strictSame(decideFreeze(state, SELF, 'v3', TAKEOVER_MS, NOW), {
    action: 'resume',
    checkpoint: undefined,
    previousOwner: 'pod-b',
    previous,
  })
})

t.test(
  'handOffPatch keeps the freeze and its checkpoint, removes the heartbeat; takeOver, freeze and unfreeze clear the marker',
  async (t) => {
    const handOff = handOffPatch('40/400', NOW)
    t.strictSame(handOff, {
      [StateAnnotation.heartbeat]: null,
      [StateAnnotation.handedOff]: NOW.toISOString(),
      [StateAnnotation.progress]: '40/400',
    })
    for (const key of [KEY, StateAnnotation.owner, StateAnnotation.checkpoint, StateAnnotation.checkpointSeal, StateAnnotation.phase])
      t.notOk(key in handOff, `${key} untouched`)
    t.notOk(StateAnnotation.progress in handOffPatch(undefined, NOW), 'no progress to carry: left as written')
    t.equal(takeOverPatch('pod-c', NOW)[StateAnnotation.handedOff], null, 'the takeover clears it')
    t.equal(freezePatch(KEY, 'pod-c', 'v2', 3, NOW)[StateAnnotation.handedOff], null, 'a fresh freeze clears it')
    const lifted = unfreezePatch(KEY, { outcome: 'Failed', reason: 'x', counts: '', durationMs: 0, frozenGeneration: 3 }, NOW)
    t.equal(lifted[StateAnnotation.handedOff], null, 'the unfreeze clears it')
    const read = readCrdState(crd({ [KEY]: 'true', [StateAnnotation.owner]: 'pod-b', ...stringsOf(handOff) }), KEY)
    t.equal(read.handedOff, NOW.toISOString(), 'read back')
    t.equal(read.heartbeat, undefined, 'no heartbeat')
    t.equal(decideFreeze(read, SELF, 'v2', TAKEOVER_MS, NOW).action, 'resume', 'the next leader resumes at once')
  },
)

const stringsOf = (p: Record<string, string | null>) =>
  Object.fromEntries(Object.entries(p).filter((e): e is [string, string] => e[1] !== null))

t.test('freezePatch', async (t) => {
  const at = new Date('2024-05-06T07:08:09.123Z')
  t.strictSame(freezePatch(KEY, 'pod-a', 'v2', 5, at), {
    [KEY]: 'true',
    'crd-migrator.io/owner': 'pod-a',
    'crd-migrator.io/heartbeat': '2024-05-06T07:08:09.123Z',
    'crd-migrator.io/phase': 'Started',
    'crd-migrator.io/started-at': '2024-05-06T07:08:09.123Z',
    'crd-migrator.io/target-storage-version': 'v2',
    'crd-migrator.io/frozen-generation': '5',
    'crd-migrator.io/progress': null,
    'crd-migrator.io/checkpoint': null,
    'crd-migrator.io/checkpoint-seal': null,
    'crd-migrator.io/builtin-migration': null,
    'crd-migrator.io/handed-off': null,
  })
  const custom = freezePatch('example.com/frozen', 'cli:me@host', 'v1', 1, at)
  t.equal(custom['example.com/frozen'], 'true', 'custom migrating key')
  t.equal(custom[KEY], undefined, 'default key not written')

  // What freezePatch writes, readCrdState reads back.
  const annotations = Object.fromEntries(
    Object.entries(freezePatch(KEY, 'pod-a', 'v2', 5, at)).filter((e): e is [string, string] => e[1] !== null),
  )
  t.strictSame(
    readCrdState(crd(annotations), KEY),
    {
      frozen: true,
      owner: 'pod-a',
      heartbeat: at,
      targetStorageVersion: 'v2',
      frozenGeneration: 5,
      startedAt: at.toISOString(),
      checkpoint: undefined,
      checkpointSeal: undefined,
      phase: 'Started',
      progress: undefined,
      lastResult: undefined,
      lastDuration: undefined,
      observedGeneration: undefined,
      builtinMigration: undefined,
      handedOff: undefined,
      carriesState: true,
    },
    'round trip',
  )
})

t.test('unfreezePatch lifts the freeze and records the outcome', async (t) => {
  const at = new Date('2024-05-06T07:08:09.123Z')
  const ok = unfreezePatch(KEY, { outcome: 'Succeeded', reason: 'fine', counts: 'rewritten=3', durationMs: 1234, frozenGeneration: 7 }, at)
  t.strictSame(ok, {
    [KEY]: null,
    'crd-migrator.io/owner': null,
    'crd-migrator.io/heartbeat': null,
    'crd-migrator.io/checkpoint': null,
    'crd-migrator.io/checkpoint-seal': null,
    'crd-migrator.io/builtin-migration': null,
    'crd-migrator.io/handed-off': null,
    'crd-migrator.io/last-result': 'Succeeded',
    'crd-migrator.io/last-counts': 'rewritten=3',
    'crd-migrator.io/last-duration': '1.2s',
    'crd-migrator.io/finished-at': '2024-05-06T07:08:09.123Z',
    'crd-migrator.io/observed-generation': '7',
    // A success leaves only the compact record above.
    'crd-migrator.io/phase': null,
    'crd-migrator.io/progress': null,
    'crd-migrator.io/started-at': null,
    'crd-migrator.io/target-storage-version': null,
    'crd-migrator.io/frozen-generation': null,
  })
  const whole = unfreezePatch(KEY, { outcome: 'Failed', reason: 'x'.repeat(500), counts: '', durationMs: 0, frozenGeneration: 7 }, at)
  t.equal(whole['crd-migrator.io/last-result'], `Failed: ${'x'.repeat(500)}`, 'a 500-character reason is kept whole (check quotes it)')
  const failed = unfreezePatch(KEY, { outcome: 'Failed', reason: 'x'.repeat(5000), counts: '', durationMs: 0, frozenGeneration: 7 }, at)
  t.equal(
    failed['crd-migrator.io/last-result'],
    `Failed: ${'x'.repeat(1024)}…(5000 characters)`,
    'the reason is cut at the outside-text limit',
  )
  const forged = unfreezePatch(
    KEY,
    { outcome: 'Failed', reason: 'refused: \u001b]0;pwned\u0007bad\nSucceeded\u001b[2J', counts: '', durationMs: 0, frozenGeneration: 7 },
    at,
  )
  t.equal(
    forged['crd-migrator.io/last-result'],
    'Failed: refused: bad Succeeded',
    'escape sequences and newlines of a quoted webhook do not reach the annotation',
  )
  t.equal(blockedPatch('webhook said \u0007\r\nok', at)['crd-migrator.io/last-result'], 'Blocked: webhook said ok')
  t.notOk('crd-migrator.io/observed-generation' in failed, 'a failed run does not mark the generation as handled')
  t.equal(failed['crd-migrator.io/phase'], 'Failed', 'a failure keeps its working state, to show where it stopped')
  t.notOk('crd-migrator.io/started-at' in failed)
})

t.test(
  'runStatePatch: one write carries what changed since the last (phase, progress, checkpoint); nothing new is an empty patch',
  async (t) => {
    const P = 'crd-migrator.io/phase'
    const G = 'crd-migrator.io/progress'
    const C = 'crd-migrator.io/checkpoint'
    const S = 'crd-migrator.io/checkpoint-seal'
    const storage = (progress: string, key: string | undefined, seal: string | null = 'mac'): RunState => ({
      phase: 'StorageVersionMigration',
      progress,
      checkpoint: { key, seal },
    })
    const cases: Array<[string, RunState | undefined, RunState, Record<string, string | null>]> = [
      [
        'nothing written yet: the phase and its (empty) progress',
        undefined,
        { phase: 'StorageVersionMigration', progress: null },
        { [P]: 'StorageVersionMigration', [G]: null },
      ],
      ['nothing written yet, no phase entered: progress only', undefined, { phase: undefined, progress: null }, { [G]: null }],
      ['nothing changed: empty (the writer adds the heartbeat)', storage('3/10', 'ns/a'), storage('3/10', 'ns/a'), {}],
      ['progress moved', storage('3/10', 'ns/a'), storage('5/10', 'ns/a'), { [G]: '5/10' }],
      [
        'progress and checkpoint moved',
        storage('3/10', 'ns/a'),
        storage('5/10', 'ns/c', 'mac2'),
        { [G]: '5/10', [C]: 'ns/c', [S]: 'mac2' },
      ],
      ['a seal that changed alone is written', storage('3/10', 'ns/a', 'old'), storage('3/10', 'ns/a', 'new'), { [C]: 'ns/a', [S]: 'new' }],
      [
        'no checkpoint yet: both removed',
        { phase: 'Started', progress: null },
        storage('0/10', undefined),
        { [P]: 'StorageVersionMigration', [G]: '0/10', [C]: null, [S]: null },
      ],
      [
        'two phases since the last write: only the latest, with its progress',
        storage('10/10', 'ns/z'),
        { phase: 'CleanupManagedFields', progress: '2/10' },
        { [P]: 'CleanupManagedFields', [G]: '2/10' },
      ],
      [
        'a new phase without progress yet removes the old progress',
        storage('10/10', 'ns/z'),
        { phase: 'UpdatingStoredVersions', progress: null },
        { [P]: 'UpdatingStoredVersions', [G]: null },
      ],
      [
        'a wait said in the progress annotation',
        { phase: 'StorageVersionMigration', progress: null },
        { phase: 'StorageVersionMigration', progress: 'waiting for x' },
        { [G]: 'waiting for x' },
      ],
    ]
    for (const [name, written, next, want] of cases) t.strictSame(runStatePatch(written, next), want, name)
  },
)

t.test('unfreezePatch carries progress the writer had not written, on a failure only', async (t) => {
  const run = { reason: 'boom', counts: '1/2', durationMs: 1000, frozenGeneration: 3, progress: '7/10' }
  t.equal(unfreezePatch(KEY, { ...run, outcome: 'Failed' }, NOW)['crd-migrator.io/progress'], '7/10')
  t.equal(unfreezePatch(KEY, { ...run, outcome: 'Succeeded' }, NOW)['crd-migrator.io/progress'], null, 'a success removes it')
  t.notOk(
    'crd-migrator.io/progress' in unfreezePatch(KEY, { ...run, progress: undefined, outcome: 'Failed' }, NOW),
    'none: left as written',
  )
})

t.test('upToDatePatch writes only what is not there yet', async (t) => {
  const fresh = crd()
  fresh.metadata.generation = 4
  t.strictSame(upToDatePatch(fresh), { 'crd-migrator.io/observed-generation': '4', 'crd-migrator.io/last-result': 'Succeeded' })
  const recorded = crd({ 'crd-migrator.io/observed-generation': '4', 'crd-migrator.io/last-result': 'Succeeded' })
  recorded.metadata.generation = 4
  t.equal(upToDatePatch(recorded), undefined)
})

t.test('describeFreeze and carriesState, for status', async (t) => {
  t.equal(describeFreeze(readCrdState(crd(), KEY)), 'no')
  t.equal(describeFreeze(readCrdState(crd({ [KEY]: 'true', 'crd-migrator.io/owner': 'pod-a' }), KEY)), 'yes (pod-a)')
  t.equal(describeFreeze(readCrdState(crd({ [KEY]: 'true' }), KEY)), 'yes (foreign)')
  t.equal(readCrdState(crd({ [KEY]: 'false' }), KEY).carriesState, true, 'the migrating annotation with any value')
  t.equal(readCrdState(crd({ 'crd-migrator.io/last-result': 'Succeeded' }), KEY).carriesState, true)
  t.equal(readCrdState(crd({ 'example.com/x': 'y' }), KEY).carriesState, false)
  t.equal(isStateAnnotation('crd-migrator.io/phase'), true)
  t.equal(isStateAnnotation('crd-migrator.iox/phase'), false)
})
