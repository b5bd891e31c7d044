/**
 * List, then watch from the list's resourceVersion, and list again when the watch
 * expires (410): the informer loop of client-go, small. Every object of the list and
 * every event goes to `onObject`; deletions to `onDeleted`.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { isGone, type KubeHttp } from './http.js'

export interface Watched {
  metadata: { name: string; resourceVersion?: string }
}

export interface ListWatchHandlers<T extends Watched> {
  onObject: (object: T) => void
  onDeleted?: (object: T) => void
  onError: (err: unknown) => void
}

export async function listAndWatch<T extends Watched>(
  http: KubeHttp,
  path: string,
  handlers: ListWatchHandlers<T>,
  signal: AbortSignal,
): Promise<void> {
  let resourceVersion: string | undefined
  let failures = 0
  while (!signal.aborted) {
    try {
      if (resourceVersion === undefined) {
        const list = (await http.request<{ items: T[]; metadata: { resourceVersion: string } }>({ method: 'GET', path, signal })).body
        for (const object of list.items) handlers.onObject(object)
        resourceVersion = list.metadata.resourceVersion
        failures = 0
      }
      await http.stream(
        { method: 'GET', path, query: { watch: 1, resourceVersion, allowWatchBookmarks: true, timeoutSeconds: 300 }, signal },
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
      if (isGone(err)) resourceVersion = undefined
      handlers.onError(err)
      // 1 s, doubling to 30 s while it keeps failing (e.g. a CRD that is not installed).
      failures++
      await sleep(Math.min(30_000, 1000 * 2 ** (failures - 1)), undefined, { signal }).catch(() => {})
    }
  }
}
