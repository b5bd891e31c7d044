import t from 'tap'
import { freezeLost, type FrozenCrd } from '../../src/migrator/freeze/freeze-guard.js'

const KEY = 'ksvm.sigs.k8s.io/migrating'
const frozen: FrozenCrd = { name: 'widgets.example.com', uid: 'uid-1', generation: 3, migratingAnnotation: KEY }
const crd = (metadata: { uid?: string; generation?: number; annotations?: Record<string, string> }) => ({
  metadata: { name: 'widgets.example.com', uid: 'uid-1', generation: 3, annotations: { [KEY]: 'true' }, ...metadata },
})

t.test('freezeLost: the run holds only while its freeze does', async (t) => {
  t.equal(freezeLost(frozen, crd({})), undefined, 'frozen as it froze it')
  t.equal(
    freezeLost(frozen, crd({ annotations: { [KEY]: 'true', 'crd-migrator.io/heartbeat': 'x' } })),
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
