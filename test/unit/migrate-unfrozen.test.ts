import t from 'tap'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import { storedVersionsAfterRewrite, type RewriteStart } from '../../src/migrator/phases/stored-versions.js'

const start: RewriteStart = { uid: 'u1', generation: 3, storageVersion: 'v2' }

function crd(o: { uid?: string; generation?: number; storage?: string[]; storedVersions?: string[] } = {}) {
  const storage = o.storage ?? ['v2']
  return {
    metadata: { name: 'widgets.example.com', uid: o.uid ?? 'u1', generation: o.generation ?? 3 },
    spec: {
      group: 'example.com',
      names: { plural: 'widgets', kind: 'Widget' },
      scope: 'Namespaced',
      versions: ['v1', 'v2', 'v3'].map((name) => ({ name, served: true, storage: storage.includes(name) })),
    },
    status: { storedVersions: o.storedVersions ?? ['v1', 'v2'] },
  } as unknown as CustomResourceDefinition
}

t.test('storedVersions are narrowed only under the uid and generation the rewrite started with', async (t) => {
  t.same(storedVersionsAfterRewrite(start, crd()), { action: 'narrow' }, 'nothing moved: narrow')
  t.same(storedVersionsAfterRewrite(start, crd({ storedVersions: ['v2'] })), { action: 'done' }, 'already [storage]: nothing to patch')
  t.same(
    storedVersionsAfterRewrite(start, crd({ generation: 4, storage: ['v3'] })),
    { action: 'keep', why: "the CRD's generation changed during the rewrite (3 -> 4)" },
    'a storage flip under the rewrite (no freeze prevented it): left alone',
  )
  t.same(
    storedVersionsAfterRewrite(start, crd({ generation: 4 })),
    { action: 'keep', why: "the CRD's generation changed during the rewrite (3 -> 4)" },
    'any spec change counts, as for the built-in migrator',
  )
  t.same(
    storedVersionsAfterRewrite(start, crd({ uid: 'u2' })),
    { action: 'keep', why: 'the CRD was deleted and created again during the rewrite' },
    'a CRD made anew under the same name',
  )
  t.same(
    storedVersionsAfterRewrite(start, crd({ storage: ['v3'] })),
    { action: 'keep', why: 'the storage version is no longer v2' },
    'a storage version that differs at the same generation is still not narrowed to',
  )
})
