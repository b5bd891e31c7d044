/**
 * Lists read a page at a time (limit/continue), so memory holds a page, never a collection.
 * {@link followPages} is the one continue-token loop; resumableList (list-metadata.ts) steers it.
 */
import type { KubeRequest, KubeRequests } from './http.js'
import type { ListMeta } from './types.js'

export interface ListPage<T> {
  items: T[]
  metadata: ListMeta
}

export interface PageQuery {
  limit: number
  continue: string | undefined
}

export type PageRequest<T> = (page: PageQuery) => Promise<ListPage<T>>

export interface PageRequestOptions {
  /** The list's media type, e.g. Accept.partialObjectMetadataList; default JSON. */
  accept?: string | undefined
  /** Other query parameters, sent with every page: labelSelector, fieldSelector. */
  query?: KubeRequest['query']
  signal?: AbortSignal | undefined
}

export interface FollowPagesOptions {
  /** Objects per page; a function is asked before each page (a lister that narrows and widens its pages). */
  pageSize: number | (() => number)
  /** Where to start: a continue token; default the list's beginning. */
  continue?: string | undefined
  /** Checked before each page. */
  signal?: AbortSignal | undefined
}

export function pageRequest<T>(http: KubeRequests, path: string, options: PageRequestOptions = {}): PageRequest<T> {
  return async (page) => {
    const { body } = await http.request<{ items?: T[] | null; metadata?: ListMeta }>({
      method: 'GET',
      path,
      query: { ...options.query, limit: page.limit, continue: page.continue },
      accept: options.accept,
      signal: options.signal,
    })
    return { items: body.items ?? [], metadata: body.metadata ?? {} }
  }
}

/** Pages from `options.continue` on; any error ends them (an expired token: 410 Gone): the caller lists again, from where it chooses. */
export async function* followPages<T>(request: PageRequest<T>, options: FollowPagesOptions): AsyncGenerator<ListPage<T>> {
  let token = options.continue
  do {
    options.signal?.throwIfAborted()
    const page = await request({ limit: typeof options.pageSize === 'function' ? options.pageSize() : options.pageSize, continue: token })
    yield page
    token = page.metadata.continue || undefined
  } while (token)
}

/** Every page of the list at `path`. Every page of one list carries the first page's resourceVersion. */
export function listPages<T>(http: KubeRequests, path: string, options: PageRequestOptions & FollowPagesOptions) {
  return followPages(pageRequest<T>(http, path, options), options)
}
