/** Entries a cleanup leaves on purpose (old versions still served), counted from the walk's list so the run can say what stays and the next step. */
import type { ManagedFieldsEntry } from '../../kube/types.js'
import { servedKeptVersion, type ManagedFieldsPolicy } from './managed-fields.js'

/** Per still-served old version: its entries, and the objects carrying at least one. */
export type ServedEntriesKept = Record<string, { entries: number; objects: number }>

export class ServedEntriesCount {
  private readonly kept: ServedEntriesKept = {}

  constructor(private readonly policy: Pick<ManagedFieldsPolicy, 'group' | 'servedVersions' | 'storageVersion'>) {}

  add(entries: readonly ManagedFieldsEntry[] | undefined): void {
    const seen = new Set<string>()
    for (const e of entries ?? []) {
      const version = servedKeptVersion(e, this.policy)
      if (version === undefined) continue
      const k = (this.kept[version] ??= { entries: 0, objects: 0 })
      k.entries++
      if (!seen.has(version)) k.objects++
      seen.add(version)
    }
  }

  /** undefined when nothing stays. */
  result(): ServedEntriesKept | undefined {
    return Object.keys(this.kept).length ? { ...this.kept } : undefined
  }
}
