/** client-go's informer loop, small: list in pages, watch from its resourceVersion, list again on 410. */
import { setTimeout as sleep } from 'node:timers/promises'
import { type KubeHttp } from './http.js'
import { isGone } from './api-errors.js'
import { listPages } from './list-pages.js'

export interface Watched {
  metadata: { name: string; resourceVersion?: string }
}

export interface ListWatchHandlers<T extends Watched> {
  onObject: (object: T) => void
  onDeleted?: (object: T) => void
  onError: (err: unknown) => void
}

/** What the API server filters on, for the list and the watch alike. */
export interface ListWatchFilter {
  labelSelector?: string | undefined
  fieldSelector?: string | undefined
}

export interface ListWatchOptions extends ListWatchFilter {
  /** Objects per list page; default 500, client-go's pager's. */
  pageSize?: number | undefined
  /** Watch from here without a first list: the caller has seen the objects at it (a write's answer). Too old (410): listed as usual. */
  resourceVersion?: string | undefined
}

export const DEFAULT_LIST_PAGE_SIZE = 500

export async function listAndWatch<T extends Watched>(
  http: KubeHttp,
  path: string,
  handlers: ListWatchHandlers<T>,
  signal: AbortSignal,
  options: ListWatchOptions = {},
): Promise<void> {
  const filter = { labelSelector: options.labelSelector, fieldSelector: options.fieldSelector }
  let resourceVersion = options.resourceVersion || undefined
  let failures = 0
  let relisting = false
  while (!signal.aborted) {
    try {
      if (resourceVersion === undefined) {
        // Watched from the list's resourceVersion once it is read whole; an expired continue token (410) is thrown, to list again.
        const pageSize = options.pageSize ?? DEFAULT_LIST_PAGE_SIZE
        let listed: string | undefined
        for await (const page of listPages<T>(http, path, { query: filter, pageSize, signal })) {
          for (const object of page.items) handlers.onObject(object)
          listed = page.metadata.resourceVersion
        }
        resourceVersion = listed
        failures = 0
        relisting = false
      }
      await http.stream(
        { method: 'GET', path, query: { ...filter, watch: 1, resourceVersion, allowWatchBookmarks: true, timeoutSeconds: 300 }, signal },
        (raw) => {
          const event = raw as { type: string; object: T & { code?: number } }
          if (event.type === 'ERROR') {
            if (event.object.code === 410) resourceVersion = undefined
            return
          }
          resourceVersion = event.object.metadata?.resourceVersion ?? resourceVersion
          if (event.type === 'DELETED') handlers.onDeleted?.(event.object)
          else if (event.type === 'ADDED' || event.type === 'MODIFIED') handlers.onObject(event.object)
        },
      )
    } catch (err) {
      if (signal.aborted) return
      if (isGone(err) && !relisting) {
        // An expired continue token or watch resourceVersion: list again, now (once; a list
        // that is gone again counts as a failure below).
        resourceVersion = undefined
        relisting = true
        continue
      }
      if (isGone(err)) resourceVersion = undefined
      handlers.onError(err)
      // 1 s, doubling to 30 s while it keeps failing (e.g. a CRD that is not installed).
      failures++
      await sleep(Math.min(30_000, 1000 * 2 ** (failures - 1)), undefined, { signal }).catch(() => {})
    }
  }
}
