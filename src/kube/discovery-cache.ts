/**
 * Discovery reads shared by a group's CRDs switched together (an operator upgrade), whose storage-switch checks poll the
 * same document. An answer not showing the wanted hash is not reused: the server may have switched since.
 */
import { groupVersionResources, hashOf, type APIResourceList } from './discovery.js'
import type { KubeHttp } from './http.js'

/** What a poll does with what the cache holds for its server and group/version. */
export type DiscoveryReuse = 'reuse' | 'join' | 'fetch'

export interface CachedDiscovery {
  /** When the answer came; undefined while the read is in flight. */
  fetchedAt: number | undefined
  list: APIResourceList | undefined
}

/** The cache's one decision (pure): join a read in flight; reuse a young answer that shows `want`; else read. */
export function discoveryReuse(
  entry: CachedDiscovery | undefined,
  plural: string,
  want: string,
  now: number,
  maxAgeMs: number,
): DiscoveryReuse {
  if (!entry) return 'fetch'
  if (entry.fetchedAt === undefined) return 'join'
  if (now - entry.fetchedAt < maxAgeMs && entry.list && hashOf(entry.list, plural) === want) return 'reuse'
  return 'fetch'
}

/** Shared answers' age limit: under the storage-switch poll interval (250 ms), so no poll sees one older than its own read. */
export const DISCOVERY_MAX_AGE_MS = 200

export class DiscoveryCache {
  private readonly entries = new Map<string, { state: CachedDiscovery; answer: Promise<APIResourceList> }>()

  constructor(
    private readonly maxAgeMs = DISCOVERY_MAX_AGE_MS,
    private readonly now: () => number = Date.now,
  ) {}

  /** The storage version hash `http`'s server serves for `plural`, waited for as `want`. */
  async storageVersionHash(http: KubeHttp, group: string, version: string, plural: string, want: string): Promise<string | undefined> {
    const key = `${http.server.href} ${group}/${version}`
    const entry = this.entries.get(key)
    const decision = discoveryReuse(entry?.state, plural, want, this.now(), this.maxAgeMs)
    if (decision !== 'fetch') return hashOf(await entry!.answer, plural)
    const state: CachedDiscovery = { fetchedAt: undefined, list: undefined }
    const answer = groupVersionResources(http, group, version)
    const cached = { state, answer }
    this.entries.set(key, cached)
    try {
      state.list = await answer
      state.fetchedAt = this.now()
      return hashOf(state.list, plural)
    } catch (err) {
      if (this.entries.get(key) === cached) this.entries.delete(key)
      throw err
    }
  }
}

/** The process's cache: every migration's storage-switch checks go through it. */
export const sharedDiscovery = new DiscoveryCache()
