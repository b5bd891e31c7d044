import { Accept, type KubeHttp } from './http.js'
import { isGone } from './api-errors.js'
import { collectionPath, CRD_API, listOrderKey, type ResourceRef } from './paths.js'
import { followPages, pageRequest, type ListPage, type PageRequest } from './list-pages.js'
import type { PartialObjectMetadata } from './types.js'
import { continueAfter, continueFrom, findUnreadableKey, unreadableKeys, type Probe } from './unreadable.js'

/** An object the API server could not list (see unreadable.ts), by its list-order key. */
export interface UnreadableObject {
  key: string
  error: unknown
}

/** A page of resumableList: its objects not handed out before. */
export interface MetadataPage<T = PartialObjectMetadata> {
  items: T[]
  /** Objects the API server says are still to come after this page, when it knows. */
  remainingItemCount: number | undefined
  /** Objects at this point of the list that the API server could not read. */
  unreadable?: UnreadableObject[]
  /** Of a page read from the list: its snapshot (the list's resourceVersion), and whether the list goes on after it. */
  resourceVersion?: string | undefined
  more?: boolean
}

export interface ListMetadataOptions {
  pageSize: number
  signal?: AbortSignal
  /** Called when a continue token expired (410 Gone) and the list restarts. */
  onRestart?: (afterKey: string | undefined) => void
  /** Hook around each page request, e.g. to retry transient errors. */
  fetchPage?: <T>(fetch: () => Promise<T>) => Promise<T>
  /**
   * Versions to list the same page through when `ref.version` fails as `listThroughAlternate`
   * accepts: metadata and continue tokens are the same in every version, and an object the
   * webhook refuses to convert may still list through the version it is stored in.
   */
  alternateVersions?: readonly string[]
  listThroughAlternate?: (err: unknown) => boolean
  /** Errors of one object (a webhook's refusal): the list narrows to it, hands it out as unreadable, goes on after it; others end it. */
  unreadable?: (err: unknown) => boolean
  /** A list started over by its reader: objects up to this key were handed out already. */
  after?: string | undefined
}

/** Streams every object of a resource, all namespaces, as PartialObjectMetadata (resumableList). */
export function listMetadata(http: KubeHttp, ref: ResourceRef, options: ListMetadataOptions): AsyncGenerator<MetadataPage> {
  const fetchPage = options.fetchPage ?? (<T>(f: () => Promise<T>) => f())
  // The API server's current resourceVersion (etcd's revision), read from a list of one CRD.
  const crds = pageRequest<PartialObjectMetadata>(http, CRD_API, { accept: Accept.partialObjectMetadataList })
  const currentResourceVersion = async () =>
    (await fetchPage(() => crds({ limit: 1, continue: undefined }))).metadata.resourceVersion ?? '0'
  const anyVersion = throughAnyVersion(http, ref, options)
  return resumableList((query) => fetchPage(() => anyVersion(query)), options, { ref, currentResourceVersion })
}

/**
 * The one pager that restarts an expired list. Lists come in key order (namespace/name): on
 * 410 Gone (e.g. etcd compaction) it starts over and drops keys up to the last handed out,
 * so nothing is yielded twice, and nothing is missed (objects created since are already in
 * the storage version). A reader listing again for its own reason passes `after`.
 */
export async function* resumableList<T extends { metadata: { namespace?: string | undefined; name: string } }>(
  request: PageRequest<T>,
  options: Pick<ListMetadataOptions, 'pageSize' | 'signal' | 'onRestart' | 'unreadable' | 'after'>,
  // Where unreadable objects are looked for: the list's resource, the API server's current snapshot.
  lookup?: { ref: ResourceRef; currentResourceVersion: () => Promise<string> },
): AsyncGenerator<MetadataPage<T>> {
  let continueToken: string | undefined
  let lastKey = options.after
  let restarted = lastKey !== undefined
  // Narrowed while a page holds an unreadable object, widened again after it.
  let limit = options.pageSize
  // The list's snapshot and what it said remains after lastKey: to continue past an unreadable object.
  let snapshot: string | undefined
  let remainingAfterLast: number | undefined
  // Where the current listing has got to; lastKey is the furthest any listing got.
  let position: string | undefined
  for (;;) {
    // The list from continueToken on, `limit` objects a page, until it ends or a page fails;
    // a failed page starts it again (from the start, narrower, or after an unreadable object).
    const pages = followPages(request, { pageSize: () => limit, continue: continueToken, signal: options.signal })
    for (;;) {
      let next: IteratorResult<ListPage<T>>
      try {
        next = await pages.next()
      } catch (err) {
        if (isGone(err) && continueToken !== undefined) {
          options.onRestart?.(lastKey)
          continueToken = undefined
          restarted = true
          // The new listing has a snapshot and counts of its own.
          position = undefined
          snapshot = undefined
          remainingAfterLast = undefined
          break
        }
        if (!lookup || !options.unreadable?.(err)) throw err
        // Narrow the page down to its first object; that one is then the unreadable one.
        if (limit > 1) {
          limit = Math.ceil(limit / 2)
          break
        }
        snapshot ??= await lookup.currentResourceVersion()
        const skipped = await unreadableAfter(
          { ref: lookup.ref, request, unreadable: options.unreadable },
          position,
          err,
          snapshot,
          restarted ? undefined : remainingAfterLast,
        )
        position = skipped.key
        // After a restart, one handed out before (at or before lastKey) is not handed out again.
        const handedOut = restarted && lastKey !== undefined && skipped.key <= lastKey
        if (!handedOut) lastKey = skipped.key
        remainingAfterLast = skipped.remaining
        continueToken = continueAfter(skipped.key, snapshot)
        if (!handedOut) yield { items: [], remainingItemCount: undefined, unreadable: [{ key: skipped.key, error: err }] }
        break
      }
      if (next.done) return
      const list = next.value
      const { resourceVersion, remainingItemCount } = list.metadata
      limit = Math.min(options.pageSize, limit * 2)
      snapshot = resourceVersion || snapshot
      let items = list.items
      const reached = items[items.length - 1]
      if (reached) position = listOrderKey(reached.metadata.namespace, reached.metadata.name)
      if (restarted && lastKey !== undefined) {
        const after = lastKey
        items = items.filter((i) => listOrderKey(i.metadata.namespace, i.metadata.name) > after)
      }
      const tail = items[items.length - 1]
      if (tail) lastKey = listOrderKey(tail.metadata.namespace, tail.metadata.name)
      continueToken = list.metadata.continue || undefined
      remainingAfterLast = continueToken ? remainingItemCount : 0
      yield { items, remainingItemCount: restarted ? undefined : remainingItemCount, resourceVersion, more: continueToken !== undefined }
      if (!continueToken) return
    }
  }
}

/**
 * The unreadable object right after `after`: named by the error (1.32+), else found by
 * probing (unreadable.ts) and skipped only when the list's counts prove it is the one
 * object between `after` and the next readable one; otherwise the list ends with `err`.
 */
async function unreadableAfter<T>(
  list: { ref: ResourceRef; request: PageRequest<T>; unreadable: (err: unknown) => boolean },
  after: string | undefined,
  err: unknown,
  rv: string,
  remaining: number | undefined,
): Promise<{ key: string; remaining: number | undefined }> {
  const { ref, request, unreadable } = list
  const named = unreadableKeys(err, ref)[0]
  if (named !== undefined) {
    if (after !== undefined && named <= after) throw err
    return { key: named, remaining: undefined }
  }
  if (remaining === undefined) throw err
  let remainingFromProbe = 0
  const probe = async (start: string): Promise<Probe> => {
    try {
      const page = await request({ limit: 1, continue: continueFrom(start, rv) })
      const found = page.items.length
      remainingFromProbe = found + (page.metadata.continue ? (page.metadata.remainingItemCount ?? Number.NaN) : 0)
      return found ? 'readable' : 'end'
    } catch (probeErr) {
      if (unreadable(probeErr)) return 'unreadable'
      throw probeErr
    }
  }
  const key = await findUnreadableKey(after, probe)
  if (key === undefined || (await probe(`${key}\u0000`)) === 'unreadable' || remaining - remainingFromProbe !== 1) throw err
  return { key, remaining: remainingFromProbe }
}

/** A page through the storage version, else through each alternate the error allows. */
function throughAnyVersion(http: KubeHttp, ref: ResourceRef, options: ListMetadataOptions): PageRequest<PartialObjectMetadata> {
  const throughVersion = (version: string) =>
    pageRequest<PartialObjectMetadata>(http, collectionPath({ ...ref, version }), {
      accept: Accept.partialObjectMetadataList,
      signal: options.signal,
    })
  const storage = throughVersion(ref.version)
  const alternates = (options.alternateVersions ?? []).map(throughVersion)
  return async (query) => {
    try {
      return await storage(query)
    } catch (err) {
      const alternate = options.listThroughAlternate
      if (!alternate?.(err)) throw err
      for (const request of alternates) {
        try {
          return await request(query)
        } catch (other) {
          if (!alternate(other)) throw other
        }
      }
      throw err
    }
  }
}
