/**
 * Since when each API server has shown a CRD's new storageVersionHash, so CRDs queued behind maxParallelCrds after a
 * mass flip settle from then, not each for its own settle time (storage-switch.ts). Sound because an observation holds
 * only for its CRD generation (docs/api-behaviour.md) and any answer not showing the hash forgets it.
 */

export interface AgreementKey {
  /** The API server asked (its URL). */
  server: string
  group: string
  plural: string
  /** The storageVersionHash waited for. */
  hash: string
  /** metadata.generation of the CRD when the answer was asked for. */
  generation: number
}

export class StorageAgreements {
  private readonly since = new Map<string, { generation: number; since: number }>()

  constructor(private readonly now: () => number = Date.now) {}

  /** Records one answer; returns since when the server has shown `key.hash` for this generation, or undefined. */
  observe(key: AgreementKey, shows: boolean): number | undefined {
    const id = `${key.server} ${key.group} ${key.plural} ${key.hash}`
    if (!shows) {
      this.since.delete(id)
      return undefined
    }
    const seen = this.since.get(id)
    if (seen && seen.generation === key.generation) return seen.since
    const since = this.now()
    this.since.set(id, { generation: key.generation, since })
    return since
  }
}

/** The process's: every migration's storage-switch checks, and the batch's first look, go through it. */
export const sharedAgreements = new StorageAgreements()
