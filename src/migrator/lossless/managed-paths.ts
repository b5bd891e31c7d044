/**
 * The fields managedFields say some manager set (fieldsV1), as content-diff paths: what the check
 * can still hold a rewrite to where no view shows the stored content. Pure. A path stops above a
 * list item (`k:`, `v:`, `i:`): the list must still be there.
 */
import { childPath, isObj, OWNED_METADATA, type Obj } from './content-diff.js'

interface ManagedFieldsEntry {
  apiVersion?: string
  fieldsV1?: unknown
}

/** The object's managedFields entries (none when there are none, or they are not a list). */
export function managedEntries(object: Obj): ManagedFieldsEntry[] {
  const metadata = object['metadata']
  const entries = isObj(metadata) ? metadata['managedFields'] : undefined
  return Array.isArray(entries) ? entries.filter(isObj) : []
}

/** The deepest named fields of the entries `select` takes, de-duplicated, at most `limit`. */
export function managedPaths(object: Obj, select: (entry: ManagedFieldsEntry) => boolean = () => true, limit = 500): string[] {
  const out = new Set<string>()
  const visit = (node: Obj, path: string, top: boolean) => {
    let named = false
    for (const [key, child] of Object.entries(node)) {
      if (!key.startsWith('f:') || out.size >= limit) continue
      const name = key.slice(2)
      if (top && (name === 'apiVersion' || name === 'kind')) continue
      named = true
      if (top && name === 'metadata') {
        if (isObj(child))
          for (const [mk, mchild] of Object.entries(child))
            if (mk.startsWith('f:') && OWNED_METADATA.includes(mk.slice(2)))
              visit(isObj(mchild) ? mchild : {}, childPath('metadata', mk.slice(2)), false)
        continue
      }
      visit(isObj(child) ? child : {}, childPath(path, name), false)
    }
    if (!named && path) out.add(path)
  }
  for (const entry of managedEntries(object)) if (select(entry) && isObj(entry.fieldsV1)) visit(entry.fieldsV1, '', true)
  return [...out]
}
