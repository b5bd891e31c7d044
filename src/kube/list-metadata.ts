import { Accept, isGone, type KubeHttp } from './http.js'
import { collectionPath, listOrderKey, type ResourceRef } from './paths.js'
import type { PartialObjectMetadata, PartialObjectMetadataList } from './types.js'

export interface MetadataPage {
  items: PartialObjectMetadata[]
  /** Objects the API server says are still to come after this page, when it knows. */
  remainingItemCount: number | undefined
}

export interface ListMetadataOptions {
  pageSize: number
  signal?: AbortSignal
  /** Called when a continue token expired (410 Gone) and the list restarts. */
  onRestart?: (afterKey: string | undefined) => void
  /** Hook around each page request, e.g. to retry transient errors. */
  fetchPage?: <T>(fetch: () => Promise<T>) => Promise<T>
  /**
   * Versions to list the same page through when listing through `ref.version` fails with
   * an error `listThroughAlternate` accepts. Metadata and continue tokens are the same in
   * every version; an object the conversion webhook refuses to convert to the storage
   * version can still be listed through the version it is stored in.
   */
  alternateVersions?: readonly string[]
  listThroughAlternate?: (err: unknown) => boolean
}

/**
 * Streams every object of a resource, all namespaces, as PartialObjectMetadata, one page
 * at a time, so memory holds a page and not the collection.
 *
 * The API server lists in etcd key order (namespace/name). When a continue token expires
 * (410 Gone, e.g. after an etcd compaction), the list starts over and drops everything up
 * to the last key already handed out: nothing is missed (objects created since were
 * written in the current storage version anyway) and nothing is yielded twice.
 */
export async function* listMetadata(http: KubeHttp, ref: ResourceRef, options: ListMetadataOptions): AsyncGenerator<MetadataPage> {
  const fetchPage = options.fetchPage ?? (<T>(f: () => Promise<T>) => f())
  let continueToken: string | undefined
  let lastKey: string | undefined
  let restarted = false
  for (;;) {
    options.signal?.throwIfAborted()
    let list: PartialObjectMetadataList
    const requestPage = async (version: string) =>
      (
        await http.request<PartialObjectMetadataList>({
          method: 'GET',
          path: collectionPath({ ...ref, version }),
          query: { limit: options.pageSize, continue: continueToken },
          accept: Accept.partialObjectMetadataList,
          signal: options.signal,
        })
      ).body
    try {
      list = await fetchPage(async () => {
        try {
          return await requestPage(ref.version)
        } catch (err) {
          const alternate = options.listThroughAlternate
          if (!alternate?.(err)) throw err
          for (const version of options.alternateVersions ?? []) {
            try {
              return await requestPage(version)
            } catch (other) {
              if (!alternate(other)) throw other
            }
          }
          throw err
        }
      })
    } catch (err) {
      if (!isGone(err) || continueToken === undefined) throw err
      options.onRestart?.(lastKey)
      continueToken = undefined
      restarted = true
      continue
    }
    let items = list.items ?? []
    if (restarted && lastKey !== undefined) {
      const after = lastKey
      items = items.filter((i) => listOrderKey(i.metadata.namespace, i.metadata.name) > after)
    }
    const tail = items[items.length - 1]
    if (tail) lastKey = listOrderKey(tail.metadata.namespace, tail.metadata.name)
    yield { items, remainingItemCount: restarted ? undefined : list.metadata?.remainingItemCount }
    continueToken = list.metadata?.continue || undefined
    if (!continueToken) return
  }
}
