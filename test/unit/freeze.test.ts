import t from 'tap'
import { DEFAULT_MIGRATING_ANNOTATION, StateAnnotation } from '../../src/config/annotations.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import { decideFreeze, freezeAnnotations, readFreezeState, type FreezeState, type FreezeVerdict } from '../../src/migrator/freeze.js'

const KEY = DEFAULT_MIGRATING_ANNOTATION
const NOW = new Date('2024-05-06T12:00:00.000Z')
const TAKEOVER_MS = 30_000
const SELF = 'pod-a'

function crd(annotations?: Record<string, string>): CustomResourceDefinition {
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: 'widgets.example.com', ...(annotations ? { annotations } : {}) },
    spec: { group: 'example.com', names: { plural: 'widgets', kind: 'Widget' }, scope: 'Namespaced', versions: [{ name: 'v1', served: true, storage: true }] },
  }
}

interface ReadRow {
  name: string
  annotations?: Record<string, string>
  key?: string
  expect: Partial<FreezeState>
}

const unfrozen: FreezeState = {
  frozen: false, owner: undefined, heartbeat: undefined, targetStorageVersion: undefined, frozenGeneration: undefined, startedAt: undefined, checkpoint: undefined, checkpointSeal: undefined,
}

const readRows: ReadRow[] = [
  { name: 'no annotations', expect: unfrozen },
  { name: 'empty annotations', annotations: {}, expect: unfrozen },
  { name: 'migrating "true" is frozen', annotations: { [KEY]: 'true' }, expect: { frozen: true, owner: undefined } },
  { name: 'migrating "True" is not frozen', annotations: { [KEY]: 'True' }, expect: { frozen: false } },
  { name: 'migrating "false" is not frozen', annotations: { [KEY]: 'false' }, expect: { frozen: false } },
  { name: 'migrating "" is not frozen', annotations: { [KEY]: '' }, expect: { frozen: false } },
  { name: 'migrating "yes" is not frozen', annotations: { [KEY]: 'yes' }, expect: { frozen: false } },
  { name: 'custom key: the default key means nothing', annotations: { [KEY]: 'true' }, key: 'example.com/frozen', expect: { frozen: false } },
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
  { name: 'garbage frozenGeneration ignored', annotations: { [StateAnnotation.frozenGeneration]: 'seven' }, expect: { frozenGeneration: undefined } },
  { name: 'target storage version', annotations: { [StateAnnotation.targetStorageVersion]: 'v2' }, expect: { targetStorageVersion: 'v2' } },
  { name: 'empty target storage version', annotations: { [StateAnnotation.targetStorageVersion]: '' }, expect: { targetStorageVersion: undefined } },
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
      frozen: true, owner: 'pod-b', heartbeat: new Date('2024-05-06T11:59:00Z'), targetStorageVersion: 'v1', frozenGeneration: 12, checkpoint: 'default/w-9',
    },
  },
]

for (const row of readRows) {
  t.test(`readFreezeState: ${row.name}`, async (t) => {
    const state = readFreezeState(crd(row.annotations), row.key ?? KEY)
    for (const [k, v] of Object.entries(row.expect)) t.strictSame(state[k as keyof FreezeState], v, k)
  })
}

t.test('readFreezeState: an empty frozen-generation annotation reads as absent, like the other state annotations', async (t) => {
  // An empty value parses as Number('') === 0, and migrate.ts then compares generation 0 with the
  // CRD's real generation (>= 1) before narrowing storedVersions, failing every resumed run.
  const state = readFreezeState(crd({ [KEY]: 'true', [StateAnnotation.frozenGeneration]: '' }), KEY)
  t.equal(state.frozenGeneration, undefined, 'empty frozen-generation is no generation', {
  })
})

interface DecideRow {
  name: string
  state: Partial<FreezeState>
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
    expect: { action: 'resume', checkpoint: 'ns/a', previousOwner: 'pod-b' },
  },
  {
    name: 'stale heartbeat: resume with the checkpoint',
    state: { frozen: true, owner: 'pod-b', heartbeat: ago(10 * 60_000), targetStorageVersion: 'v1', checkpoint: 'ns/w-100' },
    expect: { action: 'resume', checkpoint: 'ns/w-100', previousOwner: 'pod-b' },
  },
  {
    name: 'no heartbeat: resume',
    state: { frozen: true, owner: 'pod-b', targetStorageVersion: 'v1', checkpoint: 'ns/w-1' },
    expect: { action: 'resume', checkpoint: 'ns/w-1', previousOwner: 'pod-b' },
  },
  {
    name: 'same owner with a fresh heartbeat: resume immediately',
    state: { frozen: true, owner: SELF, heartbeat: ago(100), targetStorageVersion: 'v1', checkpoint: 'ns/w-7' },
    expect: { action: 'resume', checkpoint: 'ns/w-7', previousOwner: SELF },
  },
  {
    name: 'checkpoint dropped when the target storage version differs',
    state: { frozen: true, owner: 'pod-b', heartbeat: ago(60_000), targetStorageVersion: 'v1beta1', checkpoint: 'ns/w-100' },
    expect: { action: 'resume', checkpoint: undefined, previousOwner: 'pod-b' },
  },
  {
    name: 'checkpoint dropped when no target storage version was recorded',
    state: { frozen: true, owner: SELF, checkpoint: 'ns/w-100' },
    expect: { action: 'resume', checkpoint: undefined, previousOwner: SELF },
  },
  {
    name: 'resume without a checkpoint',
    state: { frozen: true, owner: SELF, targetStorageVersion: 'v1' },
    expect: { action: 'resume', checkpoint: undefined, previousOwner: SELF },
  },
]

for (const row of decideRows) {
  t.test(`decideFreeze: ${row.name}`, async (t) => {
    const state: FreezeState = { ...unfrozen, ...row.state }
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

t.test('decideFreeze from annotations end to end', async (t) => {
  const state = readFreezeState(crd({
    [KEY]: 'true',
    [StateAnnotation.owner]: 'pod-b',
    [StateAnnotation.heartbeat]: ago(45_000).toISOString(),
    [StateAnnotation.targetStorageVersion]: 'v2',
    [StateAnnotation.checkpoint]: 'ns/x',
  }), KEY)
  t.strictSame(decideFreeze(state, SELF, 'v2', TAKEOVER_MS, NOW), { action: 'resume', checkpoint: 'ns/x', previousOwner: 'pod-b' })
  t.strictSame(decideFreeze(state, SELF, 'v2', 60_000, NOW).action, 'wait', 'a longer takeover window waits')
  t.strictSame(decideFreeze(state, SELF, 'v3', TAKEOVER_MS, NOW), { action: 'resume', checkpoint: undefined, previousOwner: 'pod-b' })
})

t.test('freezeAnnotations', async (t) => {
  const at = new Date('2024-05-06T07:08:09.123Z')
  t.strictSame(freezeAnnotations(KEY, 'pod-a', 'v2', 5, at), {
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
  })
  const custom = freezeAnnotations('example.com/frozen', 'cli:me@host', 'v1', 1, at)
  t.equal(custom['example.com/frozen'], 'true', 'custom migrating key')
  t.equal(custom[KEY], undefined, 'default key not written')

  // What freezeAnnotations writes, readFreezeState reads back.
  const annotations = Object.fromEntries(Object.entries(freezeAnnotations(KEY, 'pod-a', 'v2', 5, at)).filter((e): e is [string, string] => e[1] !== null))
  t.strictSame(readFreezeState(crd(annotations), KEY), {
    frozen: true, owner: 'pod-a', heartbeat: at, targetStorageVersion: 'v2', frozenGeneration: 5, startedAt: at.toISOString(), checkpoint: undefined, checkpointSeal: undefined,
  }, 'round trip')
})
