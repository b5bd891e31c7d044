import t from 'tap'
import { freezeLost, type FrozenCrd } from '../../src/migrator/freeze/freeze-guard.js'
import { StateAnnotation } from '../../src/state/crd-state.js'

const KEY = 'ksvm.sigs.k8s.io/migrating'
const OWNER = StateAnnotation.owner
const frozen: FrozenCrd = { name: 'widgets.example.com', uid: 'uid-1', generation: 3, migratingAnnotation: KEY, owner: 'replica-a' }
const crd = (metadata: { uid?: string; generation?: number; annotations?: Record<string, string> }) => ({
  metadata: { name: 'widgets.example.com', uid: 'uid-1', generation: 3, annotations: { [KEY]: 'true', [OWNER]: 'replica-a' }, ...metadata },
})

t.test('freezeLost: the run holds only while its freeze does', async (t) => {
  t.equal(freezeLost(frozen, crd({})), undefined, 'frozen as it froze it')
  t.equal(
    freezeLost(frozen, crd({ annotations: { [KEY]: 'true', [OWNER]: 'replica-a', 'crd-migrator.io/heartbeat': 'x' } })),
    undefined,
    'our own progress writes change nothing',
  )

  const lifted = freezeLost(frozen, crd({ annotations: {} }))
  t.equal(lifted?.code, 'CRDM_FREEZE_LIFTED', 'the annotation removed (a break-glass user lifting the freeze)')
  t.match(lifted?.message, /annotation ksvm\.sigs\.k8s\.io\/migrating\) was removed by someone else during the migration; stopped at once/)
  t.equal(freezeLost(frozen, crd({ annotations: { [KEY]: 'false' } }))?.code, 'CRDM_FREEZE_LIFTED', 'or set to anything but "true"')

  const moved = freezeLost(frozen, crd({ generation: 4 }))
  t.equal(moved?.code, 'CRDM_CRD_CHANGED', 'the generation moved (the spec changed under the freeze)')
  t.match(moved?.message, /CRD generation changed during the migration \(3 -> 4\); stopped at once/)

  t.equal(freezeLost(frozen, crd({ uid: 'uid-2' }))?.code, 'CRDM_CRD_CHANGED', 'another CRD of the same name')
  t.match(freezeLost(frozen, undefined)?.message, /was deleted during the migration/)
  t.equal(freezeLost({ ...frozen, uid: undefined }, crd({ uid: 'uid-2' })), undefined, 'no uid to compare: not judged on it')
})

t.test("freezeLost: a freeze taken over by another instance is no longer this run's", async (t) => {
  const rows: Array<[string, Record<string, string>, string | undefined, RegExp | undefined]> = [
    ['the owner is still this run', { [KEY]: 'true', [OWNER]: 'replica-a' }, undefined, undefined],
    [
      'another instance took it over (owner + heartbeat, as takeOverPatch writes them)',
      { [KEY]: 'true', [OWNER]: 'replica-b', 'crd-migrator.io/heartbeat': '2026-01-01T00:00:00Z' },
      'CRDM_FREEZE_TAKEN_OVER',
      /^the freeze was taken over by replica-b during the migration .*; stopped at once, the freeze left to replica-b, which finishes the migration; status\.storedVersions left as they were$/,
    ],
    [
      'the owner annotation removed while the migrating annotation stays',
      { [KEY]: 'true' },
      'CRDM_FREEZE_TAKEN_OVER',
      /^the freeze's owner annotation \(crd-migrator\.io\/owner\) was removed during the migration while the CRD stayed frozen; stopped at once, the freeze left as it is/,
    ],
    [
      'the name of the new owner is text from the cluster: escapes and line breaks are not passed on',
      { [KEY]: 'true', [OWNER]: 'evil\u001b[2J\nforged line' },
      'CRDM_FREEZE_TAKEN_OVER',
      /taken over by evil forged line during/,
    ],
    ['both gone: lifted, not taken over', {}, 'CRDM_FREEZE_LIFTED', undefined],
  ]
  for (const [what, annotations, code, message] of rows) {
    const why = freezeLost(frozen, crd({ annotations }))
    t.equal(why?.code, code, what)
    if (message) t.match(why?.message, message, `${what}: the message`)
  }
  t.equal(
    freezeLost(frozen, crd({ generation: 4, annotations: { [KEY]: 'true', [OWNER]: 'replica-b' } }))?.code,
    'CRDM_FREEZE_TAKEN_OVER',
    "a takeover is said before a generation change: the freeze is the new owner's either way",
  )
})
