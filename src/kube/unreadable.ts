/**
 * Listing past objects the API server cannot read.
 *
 * An object it cannot decode (its conversion webhook refuses it) fails every list page
 * that holds it, through every version that would need converting it: the page, its
 * continue token and every object after it are lost with it. So that one such object
 * costs itself and not the run, the lister narrows the page down to that object and
 * continues right after it, which takes two things the API does not hand out:
 *
 * - **The object's key.** From 1.32 the refusal carries one `details.causes` entry per
 *   undecodable object, `field` being its storage key (`/registry/<group>/<plural>/<ns>/<name>`).
 *   Before that the error names no object; its key is then found by asking, one
 *   character at a time, where lists of one object stop failing ({@link findUnreadableKey}).
 * - **A continue token that starts after it.** The token is the API server's
 *   `{"v":"meta.k8s.io/v1","rv":<snapshot>,"start":"<key after the resource prefix>"}`,
 *   base64url without padding (k8s.io/apiserver pkg/storage/continue.go, the same from
 *   1.30 to 1.37). The server checks it (`path.Clean` of the start key, a resourceVersion
 *   not compacted) as it checks its own.
 */
import { statusCauses } from './api-errors.js'
import type { ResourceRef } from './paths.js'

/**
 * The list-order keys (`<namespace>/<name>`, or `<name>`) of the objects a failed list of
 * `ref` names in its causes, in key order. Empty when the server names none (before 1.32).
 */
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

/**
 * A start key the API server accepts (its path.Clean leaves it as it is) that lists from
 * the same object as `start`. Keys never end with `/`, hold `//`, or have `.`/`..`
 * segments, so the first key at or after an unclean start is the first after a clean one
 * just above it.
 */
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
 * The key of the object right after `after` (undefined: the first), which the API server
 * cannot read, found through `probe`: a list of one object from a start key. A start after
 * `after` and at or before that object lists it (unreadable); one just past it lists the
 * next object. The key is built a character at a time, each by bisection: about 8 probes
 * a character.
 *
 * Past the next object the probes say nothing of this one (a later unreadable object
 * answers the same), so the key found may be a later one: the caller checks it against
 * the number of objects between (remainingItemCount) before it skips anything. Returns
 * undefined when the probes contradict themselves (a key with characters outside
 * printable ASCII, say).
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
