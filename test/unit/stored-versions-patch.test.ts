import t from 'tap'
import { storedVersionsPatch } from '../../src/state/crd-record.js'

t.test('the storedVersions patch tests uid, generation, annotations and the storedVersions read, then replaces', async (t) => {
  const ops = storedVersionsPatch(['v2'], {
    uid: 'u-1',
    generation: 3,
    storedVersions: ['v1', 'v2'],
    annotations: { 'ksvm.sigs.k8s.io/migrating': 'true', 'a~b/c/d': 'x' },
  })
  t.same(ops, [
    { op: 'test', path: '/metadata/uid', value: 'u-1' },
    { op: 'test', path: '/metadata/generation', value: 3 },
    { op: 'test', path: '/metadata/annotations/ksvm.sigs.k8s.io~1migrating', value: 'true' },
    { op: 'test', path: '/metadata/annotations/a~0b~1c~1d', value: 'x' },
    { op: 'test', path: '/status/storedVersions', value: ['v1', 'v2'] },
    { op: 'replace', path: '/status/storedVersions', value: ['v2'] },
  ])
  t.notOk(
    ops.some((op) => (op as { path: string }).path === '/metadata/resourceVersion'),
    'no resourceVersion: annotation-only writes cannot make it fail',
  )
})
