/**
 * Listing past objects the API server cannot decode: one fails its whole page and everything after it, so the lister
 * narrows to that object and continues right after it, with its key and a continue token in the API server's format
 * (docs/api-behaviour.md; k8s.io/apiserver pkg/storage/continue.go), checked like its own.
 */
import { statusCauses } from './api-errors.js'
import type { ResourceRef } from './paths.js'

/** List-order keys (`<ns>/<name>` or `<name>`), sorted, of the objects a failed list of `ref` names in its causes; none before 1.32. */
export function unreadableKeys(err: unknown, ref: Pick<ResourceRef, 'group' | 'plural'>): string[] {
  const marker = `/${ref.group}/${ref.plural}/`
  const keys = statusCauses(err).flatMap((c) => {
    const at = c.field?.indexOf(marker) ?? -1
    return at >= 0 ? [c.field!.slice(at + marker.length)] : []
  })
  return [...new Set(keys.filter((k) => k !== ''))].sort()
}

/** A continue token that lists, at snapshot `resourceVersion`, from `startKey` on (prefix-relative). */
export function continueFrom(startKey: string, resourceVersion: string): string {
  const token = JSON.stringify({ v: 'meta.k8s.io/v1', rv: Number(resourceVersion), start: cleanStart(startKey) })
  return Buffer.from(token, 'utf8').toString('base64url')
}

/** A continue token for the first key after `key`, as the API server makes for the last item of a page. */
export const continueAfter = (key: string, resourceVersion: string): string => continueFrom(`${key}\u0000`, resourceVersion)

/** A start key path.Clean leaves as is that lists from the same object as `start` (keys never end with `/` or hold `//`, `.`, `..`). */
function cleanStart(start: string): string {
  let s = start
  for (;;) {
    const doubled = s.indexOf('//')
    if (doubled >= 0) {
      // Nothing starts with `a//`: the first key at or after it starts above `a/` + '/'.
      s = `${s.slice(0, doubled + 1)}0`
      continue
    }
    if (s.endsWith('/') || s.endsWith('/.') || s.endsWith('/..') || s === '.' || s === '..') {
      s = `${s}\u0001`
      continue
    }
    return s
  }
}

/** What a list of one object, from a start key, found there. */
export type Probe = 'unreadable' | 'readable' | 'end'

/** Printable ASCII: the characters searched for. A key with others is not found (and said so). */
const LOWEST = 0x01
const HIGHEST = 0x7e

/**
 * The key of the unreadable object right after `after`, built a character at a time by
 * bisection over `probe` (a list of one object from a start key; ~8 probes a character).
 * It may be a later unreadable object's: the caller checks remainingItemCount before skipping.
 * undefined when the probes contradict themselves (non-ASCII keys).
 */
export async function findUnreadableKey(after: string | undefined, probe: (start: string) => Promise<Probe>): Promise<string | undefined> {
  const floor = after === undefined ? undefined : `${after}\u0000`
  // A start at or before `after` would list objects before the one sought.
  const unreadable = async (start: string) => (await probe(floor !== undefined && start < floor ? floor : start)) === 'unreadable'
  let key = ''
  // While the key is longer than what is known, a start one (lowest) character longer still lists it.
  while (await unreadable(key + String.fromCharCode(LOWEST))) {
    if (key.length >= 1024) return undefined
    let lo = LOWEST // the start key + lo lists it
    let hi = HIGHEST + 1 // key + hi is past it (or not tried)
    while (hi - lo > 1) {
      const mid = (lo + hi) >> 1
      if (await unreadable(key + String.fromCharCode(mid))) lo = mid
      else hi = mid
    }
    key += String.fromCharCode(lo)
  }
  if (key === '' || (after !== undefined && key <= after)) return undefined
  // A start at the key lists it; one just past it does not.
  if (!(await unreadable(key)) || (await unreadable(`${key}\u0000`))) return undefined
  return key
}
