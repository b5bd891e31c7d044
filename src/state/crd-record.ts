/**
 * The one writer of the CRD's record (state annotations, status.storedVersions), one named write per
 * change; crd-state.ts makes the annotation patches. The caller's client brings the retries.
 */
import jsonpatch from 'fast-json-patch'
import { patchCrdAnnotations } from '../kube/crds.js'
import { ContentType, type KubeRequests } from '../kube/http.js'
import { crdPath } from '../kube/paths.js'
import type { CustomResourceDefinition } from '../kube/types.js'
import {
  blockedPatch,
  builtinMigrationPatch,
  freezePatch,
  handOffPatch,
  heartbeatPatch,
  readCrdState,
  runStatePatch,
  takeOverPatch,
  unfreezePatch,
  upToDatePatch,
  type RunOutcome,
  type RunState,
} from './crd-state.js'

type Written = Promise<CustomResourceDefinition>

/** Sets a fresh freeze, only on the revision `crd` is (409 otherwise): the freeze is of the spec that was looked at. */
export function writeFreeze(
  http: KubeRequests,
  crd: CustomResourceDefinition,
  migratingAnnotation: string,
  owner: string,
  storageVersion: string,
): Written {
  const patch = freezePatch(migratingAnnotation, owner, storageVersion, crd.metadata.generation ?? 0)
  return patchCrdAnnotations(http, crd.metadata.name, patch, crd.metadata.resourceVersion)
}

/** Takes a freeze of ours over, only on the revision `crd` is (409 otherwise). */
export function writeTakeOver(http: KubeRequests, crd: CustomResourceDefinition, owner: string): Written {
  return patchCrdAnnotations(http, crd.metadata.name, takeOverPatch(owner), crd.metadata.resourceVersion)
}

/** Lifts the run's own freeze and records its outcome (the time lifted is taken at each call, so at each try). */
export function writeUnfreeze(http: KubeRequests, name: string, migratingAnnotation: string, run: RunOutcome): Written {
  return patchCrdAnnotations(http, name, unfreezePatch(migratingAnnotation, run))
}

/** Lifts another process's freeze (`lift-freezes`) as a Failed run, only on the revision `crd` is (409: read, decide again). */
export function writeLiftFreeze(http: KubeRequests, crd: CustomResourceDefinition, migratingAnnotation: string, reason: string): Written {
  const state = readCrdState(crd, migratingAnnotation)
  const patch = unfreezePatch(migratingAnnotation, {
    outcome: 'Failed',
    reason,
    counts: '',
    durationMs: state.startedAt ? Date.now() - Date.parse(state.startedAt) : 0,
    frozenGeneration: state.frozenGeneration ?? crd.metadata.generation ?? 0,
  })
  return patchCrdAnnotations(http, crd.metadata.name, patch, crd.metadata.resourceVersion)
}

/** Leaves the freeze to the next leader, only on the revision `crd` is (a takeover meanwhile wins: 409). */
export function writeHandOff(http: KubeRequests, crd: CustomResourceDefinition, progress: string | undefined): Written {
  return patchCrdAnnotations(http, crd.metadata.name, handOffPatch(progress), crd.metadata.resourceVersion)
}

/** A running migration's phase, progress and checkpoint changed since `written`, with the heartbeat. */
export function writeRunState(http: KubeRequests, name: string, written: RunState | undefined, next: RunState): Written {
  return patchCrdAnnotations(http, name, { ...runStatePatch(written, next), ...heartbeatPatch() })
}

export function writeBuiltinMigration(http: KubeRequests, name: string, migrationName: string): Written {
  return patchCrdAnnotations(http, name, builtinMigrationPatch(migrationName))
}

export function writeBlocked(http: KubeRequests, name: string, reason: string): Written {
  return patchCrdAnnotations(http, name, blockedPatch(reason))
}

/** That `crd`'s generation needs nothing; no write when the CRD says so already. */
export async function writeUpToDate(http: KubeRequests, crd: CustomResourceDefinition): Promise<void> {
  const patch = upToDatePatch(crd)
  if (patch) await patchCrdAnnotations(http, crd.metadata.name, patch)
}

/** What must still hold when storedVersions is narrowed: the read's uid, generation and storedVersions, and the freeze's annotations. */
export interface StoredVersionsPrecondition {
  uid: string
  generation: number
  storedVersions: string[]
  annotations: Record<string, string>
}

/**
 * A `test` of every precondition, then the replace. No resourceVersion, so our own annotation writes
 * (progress, heartbeat) cannot fail it; a changed uid, generation (a storage flip is a spec change),
 * storedVersions or freeze does, with a bare 422 (1.30-1.37).
 */
export function storedVersionsPatch(versions: string[], expect: StoredVersionsPrecondition): unknown[] {
  return [
    { op: 'test', path: '/metadata/uid', value: expect.uid },
    { op: 'test', path: '/metadata/generation', value: expect.generation },
    ...Object.entries(expect.annotations).map(([key, value]) => ({
      op: 'test',
      path: `/metadata/annotations/${jsonpatch.escapePathComponent(key)}`,
      value,
    })),
    { op: 'test', path: '/status/storedVersions', value: expect.storedVersions },
    { op: 'replace', path: '/status/storedVersions', value: versions },
  ]
}

/** `status.storedVersions := versions`, only if `expect` still holds (422 otherwise: see storedVersionsPatch). */
export async function writeStoredVersions(
  http: KubeRequests,
  name: string,
  versions: string[],
  expect: StoredVersionsPrecondition,
): Promise<CustomResourceDefinition> {
  return (
    await http.request<CustomResourceDefinition>({
      method: 'PATCH',
      path: crdPath(name, 'status'),
      body: storedVersionsPatch(versions, expect),
      contentType: ContentType.jsonPatch,
    })
  ).body
}
