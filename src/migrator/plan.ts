import { PHASE_NAMES } from '../config/schema.js'
import type { CustomResourceDefinition } from '../kube/types.js'

export type Phase = (typeof PHASE_NAMES)[number]
export const Phase = {
  StorageVersionMigration: 'StorageVersionMigration',
  StashedObjectMigration: 'StashedObjectMigration',
  CleanupManagedFields: 'CleanupManagedFields',
} as const satisfies { [P in Phase]: P }
export const ALL_PHASES: readonly Phase[] = PHASE_NAMES

/** What a CRD's spec and status say must happen, before any custom resource is read. */
export interface CrdPlan {
  name: string
  group: string
  generation: number
  storageVersion: string | undefined
  servedVersions: string[]
  storedVersions: string[]
  established: boolean
  storageMigrationNeeded: boolean
  /** Why nothing can be done now, when something stops us before looking at objects. */
  blockedReason: string | undefined
}

export function planCrd(crd: CustomResourceDefinition): CrdPlan {
  const versions = crd.spec?.versions ?? []
  const storage = versions.filter((v) => v.storage)
  const storageVersion = storage.length === 1 ? storage[0]!.name : undefined
  const storedVersions = crd.status?.storedVersions ?? []
  const established = (crd.status?.conditions ?? []).some((c) => c.type === 'Established' && c.status === 'True')
  let blockedReason: string | undefined
  if (!established) blockedReason = 'the CRD is not Established yet'
  else if (storage.length === 0) blockedReason = 'the CRD has no storage version'
  else if (storage.length > 1) blockedReason = `the CRD marks ${storage.length} versions as storage`
  return {
    name: crd.metadata.name,
    group: crd.spec.group,
    generation: crd.metadata.generation ?? 0,
    storageVersion,
    servedVersions: versions.filter((v) => v.served).map((v) => v.name),
    storedVersions,
    established,
    storageMigrationNeeded: storageVersion !== undefined && !(storedVersions.length === 1 && storedVersions[0] === storageVersion),
    blockedReason,
  }
}

/**
 * Whether the storage phase rewrites every object: storedVersions wider than [storage], a freeze
 * resumed (its run had a reason; storedVersions may have been narrowed since), or `force`
 * (storedVersions narrowed by hand while objects are still stored old; cmctl's --skip-stored-version-check).
 */
export function storagePhaseRuns(o: {
  phases: readonly Phase[]
  storageMigrationNeeded: boolean
  resume: boolean
  force: boolean
}): boolean {
  return o.phases.includes(Phase.StorageVersionMigration) && (o.storageMigrationNeeded || o.resume || o.force)
}

export function versionHasStatusSubresource(crd: CustomResourceDefinition, version: string): boolean {
  return crd.spec.versions.some((v) => v.name === version && v.subresources?.status !== undefined)
}
