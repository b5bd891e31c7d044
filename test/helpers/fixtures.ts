/**
 * The setup layer of the integration tests: the situations they start from, each made in
 * one place. "A CRD with these versions and N objects created at the first one, then the
 * storage flipped" (crdWithObjects), "the first N of them already rewritten by a run that
 * died" (rewriteObjects), and "the freeze that run left behind" (crashedFreeze).
 */
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { ContentType, type KubeHttp } from '../../src/kube/http.js'
import { objectPath } from '../../src/kube/paths.js'
import type { CustomResourceDefinition } from '../../src/kube/types.js'
import type { CheckpointSeal } from '../../src/migrator/freeze/checkpoint-seal.js'
import { StateAnnotation } from '../../src/state/crd-state.js'
import { createCrd, createNamespace, createObjects, crdManifest, refFor, setStorageVersion, type ObjectId } from './cluster.js'
import { uniqueGroup, uniqueName } from './controlplane.js'

export interface CrdWithObjectsOptions {
  /** Prefix of the unique group and namespace names (what the test is about, for the logs). */
  prefix: string
  /** Objects to create, spread over the namespaces, through the storage version at creation. */
  count: number
  /** Versions of the CRD (default v1, v2). */
  versions?: string[]
  /** Its storage version at creation (default the first version). */
  storage?: string
  /** Namespaces to spread the objects over (default 1). */
  namespaces?: number
  /** Labels of the CRD (a test webhook's scope). */
  labels?: Record<string, string>
  /**
   * The storage version to flip to once the objects are there (setStorageVersion: waits
   * until the API server writes in it), or false for no flip. Default: the last version.
   */
  flipTo?: string | false
  /** Versions to stop serving with the flip. */
  unserved?: string[]
  /** spec.conversion of the CRD (a conversion webhook's), created with it. */
  conversion?: unknown
}

export interface CrdWithObjects {
  group: string
  /** The first namespace: the only one unless `namespaces` said more. */
  ns: string
  namespaces: string[]
  /** The CRD as the flip left it (or as created, without one). */
  crd: CustomResourceDefinition
  /** Its name, `widgets.<group>`. */
  name: string
  ids: ObjectId[]
}

/**
 * A namespaced CRD `widgets.<unique group>` with `versions` (stored at `storage`, the first
 * unless said), `count` objects created through that version (obj-00000, obj-00001, ...
 * spread over `namespaces` fresh namespaces; etcd holds them at that version), then
 * storage flipped to `flipTo`: the starting point of a storage version migration.
 */
export async function crdWithObjects(http: KubeHttp, options: CrdWithObjectsOptions): Promise<CrdWithObjects> {
  const versions = options.versions ?? ['v1', 'v2']
  const storage = options.storage ?? versions[0]!
  const group = uniqueGroup(options.prefix)
  const namespaces = Array.from({ length: options.namespaces ?? 1 }, () => uniqueName(options.prefix))
  for (const ns of namespaces) await createNamespace(http, ns)
  const manifest = crdManifest({ group, versions, storage, labels: options.labels })
  if (options.conversion !== undefined) manifest.spec.conversion = options.conversion
  const created = await createCrd(http, manifest)
  const ids = await createObjects(http, refFor(created, storage), namespaces, options.count)
  const flipTo = options.flipTo ?? versions[versions.length - 1]!
  const crd = flipTo === false ? created : await setStorageVersion(http, created.metadata.name, flipTo, options.unserved ?? [])
  return { group, ns: namespaces[0]!, namespaces, crd, name: crd.metadata.name, ids }
}

/**
 * Rewrites the first `count` objects of crdWithObjects in namespace `ns` through `version`
 * (a no-op merge patch is a write in the storage version): what a run that died after
 * `count` objects leaves behind.
 */
export async function rewriteObjects(
  http: KubeHttp,
  crd: CustomResourceDefinition,
  ns: string,
  count: number,
  version = 'v2',
): Promise<void> {
  const ref = refFor(crd, version)
  for (let i = 0; i < count; i++) {
    await http.request({
      method: 'PATCH',
      path: objectPath(ref, ns, `obj-${String(i).padStart(5, '0')}`),
      contentType: ContentType.mergePatch,
      body: { apiVersion: `${crd.spec.group}/${version}`, kind: crd.spec.names.kind },
    })
  }
}

export interface CrashedFreezeOptions {
  /** The checkpoint the run had reached. */
  checkpoint?: string
  /** Seals the checkpoint, bound to this CRD and freeze (the key the run held, or another). */
  seal?: CheckpointSeal
  /** Annotations to set besides (or instead of) these. */
  extra?: Record<string, string>
}

/**
 * The annotations a run of replica `crashed-replica` leaves on `crd` when it dies mid-way
 * through the storage phase towards v2: the freeze, started 3,700 s ago, its heartbeat
 * silent for an hour, and (when given) its checkpoint and that checkpoint's seal.
 */
export function crashedFreeze(crd: CustomResourceDefinition, options: CrashedFreezeOptions = {}): Record<string, string> {
  const startedAt = new Date(Date.now() - 3_700_000).toISOString()
  const annotations: Record<string, string> = {
    [DEFAULT_MIGRATING_ANNOTATION]: 'true',
    [StateAnnotation.owner]: 'crashed-replica',
    [StateAnnotation.heartbeat]: new Date(Date.now() - 3_600_000).toISOString(),
    [StateAnnotation.startedAt]: startedAt,
    [StateAnnotation.targetStorageVersion]: 'v2',
    [StateAnnotation.frozenGeneration]: String(crd.metadata.generation),
    [StateAnnotation.phase]: 'StorageVersionMigration',
  }
  if (options.checkpoint !== undefined) {
    annotations[StateAnnotation.checkpoint] = options.checkpoint
    if (options.seal) {
      annotations[StateAnnotation.checkpointSeal] = options.seal.seal(
        { crdUid: crd.metadata.uid!, targetStorageVersion: 'v2', frozenGeneration: crd.metadata.generation!, startedAt },
        options.checkpoint,
      )
    }
  }
  return { ...annotations, ...options.extra }
}
