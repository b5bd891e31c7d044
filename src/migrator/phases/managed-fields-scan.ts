import { resourceRef } from '../../kube/paths.js'
import type { CustomResourceDefinition } from '../../kube/types.js'
import { cleanManagedFields, managedFieldsPolicy, servedKeptVersions } from './managed-fields.js'
import type { RunClient } from '../engine/run-client.js'

interface ScanResult {
  /** Custom resources listed. */
  total: number
  /** Objects with managedFields entries to remove (or rewrite). */
  objects: number
  /** managedFields entries that would be removed. */
  entries: number
  /** managedFields entries of unserved versions that would be relabelled to the storage version (conversion None). */
  relabelled: number
  /** Objects that would get the seeding entry because none would remain. */
  seeded: number
  /** Objects keeping entries of a served non-storage version (left by design), by version. */
  servedKept: Record<string, number>
}

/** Reads every object's metadata and counts the managedFields work, writing nothing. */
export async function scanManagedFields(
  client: RunClient,
  crd: CustomResourceDefinition,
  storageVersion: string,
  settings: { pageSize: number; rewriteServedManagedFields: boolean },
): Promise<ScanResult> {
  const policy = managedFieldsPolicy(crd, storageVersion, settings)
  const result: ScanResult = { total: 0, objects: 0, entries: 0, relabelled: 0, seeded: 0, servedKept: {} }
  // Pages retried (by the caller's client): right after a storage flip the API server answers 429 while it re-initialises storage.
  for await (const page of client.listMetadata(resourceRef(crd, storageVersion), { pageSize: settings.pageSize })) {
    for (const item of page.items) {
      result.total++
      for (const v of servedKeptVersions(item.metadata.managedFields, policy)) result.servedKept[v] = (result.servedKept[v] ?? 0) + 1
      const cleanup = cleanManagedFields(item.metadata.managedFields, policy)
      if (!cleanup.changed) continue
      result.objects++
      result.entries += cleanup.removed.length
      result.relabelled += cleanup.relabelled
      if (cleanup.seeded) result.seeded++
    }
  }
  return result
}
