/**
 * Since when each API server has been seen storing a CRD in its storage version: one settle
 * per batch instead of one per CRD.
 *
 * After a storage flip, a run waits until every API server's discovery shows the new
 * storageVersionHash and keeps showing it for the settle time (storage-switch.ts). An
 * operator upgrade flips hundreds of CRDs at once; when their migrations queue behind
 * `maxParallelCrds`, each used to wait its own 2 s, although the servers had switched long
 * before its turn. Here the first answer showing the hash is remembered, and a later wait
 * counts its settle from then.
 *
 * Sound only while the CRD's storage cannot have changed in between: an observation holds
 * for the CRD generation it was made under (a storage flip is a spec change, so it bumps the
 * generation; annotation and status writes do not, and the API server does not rebuild a
 * CRD's storage for them), and any answer not showing the hash forgets it. A run asks with
 * the generation of the CRD it froze, so no flip can come after.
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

  /**
   * Records one discovery answer: `shows` when it served `key.hash`. Returns since when the
   * server has shown it for this generation without an answer to the contrary, or undefined.
   */
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

  /** Entries held (tests). */
  get size(): number {
    return this.since.size
  }
}

/** The process's: every migration's storage-switch checks, and the batch's first look, go through it. */
export const sharedAgreements = new StorageAgreements()
