/** The one resource of `npm run bench:client`: what its stub serves and its client migrates. */
import type { ResourceRef } from '../../src/kube/paths.js'

export const STUB_GROUP = 'bench.example.com'
export const STUB_VERSION = 'v1'
export const STUB_PLURAL = 'widgets'

/** widgets.bench.example.com/v1, namespaced: the target of the client's storage phase. */
export const STUB_REF: ResourceRef = { group: STUB_GROUP, version: STUB_VERSION, plural: STUB_PLURAL, kind: 'Widget', namespaced: true }

/** What the stub counted, and its own CPU. */
export interface StubStats {
  /** CPU (user + system) of the stub process so far, ms. */
  cpuMs: number
  listPages: number
  patches: number
  /** Objects patched at least once since the last reset. */
  distinctPatched: number
  /** Requests answered with an error (not what the storage phase sends). */
  refused: number
  /** The first few refused requests, `METHOD path: why`. */
  refusedSamples: string[]
}
