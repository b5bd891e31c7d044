/**
 * What a user owns of an object, and how two copies of it differ: the comparison behind
 * the lossless check (check.ts). Pure: no I/O, table-tested.
 *
 * Owned content is everything but apiVersion, kind and the API server's own metadata:
 * every other top-level field (spec, status, data, ...), and metadata's labels,
 * annotations, finalizers and ownerReferences. Paths are written the way kubectl's
 * field paths read: `spec.items[2].name`, `metadata.labels["app.kubernetes.io/name"]`.
 */

export type FieldChangeKind = 'removed' | 'changed' | 'added'

export interface FieldChange {
  path: string
  change: FieldChangeKind
}

type Obj = Record<string, unknown>

const OWNED_METADATA = ['labels', 'annotations', 'finalizers', 'ownerReferences'] as const
const NOT_OWNED = new Set(['apiVersion', 'kind', 'metadata'])

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v)

/** The owned content of an object, as one object keyed like the object itself. */
export function ownedContent(object: Obj): Obj {
  const owned: Obj = {}
  for (const [key, value] of Object.entries(object)) if (!NOT_OWNED.has(key)) owned[key] = value
  const metadata = isObj(object['metadata']) ? object['metadata'] : {}
  // No labels and no annotations are empty maps: an added label is named by its key.
  const ownedMetadata: Obj = { labels: {}, annotations: {} }
  for (const key of OWNED_METADATA) if (metadata[key] !== undefined && metadata[key] !== null) ownedMetadata[key] = metadata[key]
  owned['metadata'] = ownedMetadata
  return owned
}

/** `a.b` for plain names, `a["b.c/d"]` for the rest (label keys, annotation keys). */
export function childPath(parent: string, key: string): string {
  if (/^[A-Za-z_$][\w$-]*$/.test(key)) return parent ? `${parent}.${key}` : key
  return `${parent}[${JSON.stringify(key)}]`
}

/**
 * How `after` differs from `before`, owned content only, in path order. At most `limit`
 * changes are returned (an object with hundreds of changes names the first ones).
 */
export function diffOwnedContent(before: Obj, after: Obj, limit = 50): FieldChange[] {
  const changes: FieldChange[] = []
  walk(ownedContent(before), ownedContent(after), '', changes, limit)
  return changes
}

function walk(a: unknown, b: unknown, path: string, out: FieldChange[], limit: number): void {
  if (out.length >= limit) return
  if (isObj(a) && isObj(b)) {
    for (const key of Object.keys(a)) {
      if (out.length >= limit) return
      const p = childPath(path, key)
      if (!(key in b)) out.push({ path: p, change: 'removed' })
      else walk(a[key], b[key], p, out, limit)
    }
    for (const key of Object.keys(b)) {
      if (out.length >= limit) return
      if (!(key in a)) out.push({ path: childPath(path, key), change: 'added' })
    }
    return
  }
  if (Array.isArray(a) && Array.isArray(b)) {
    const common = Math.min(a.length, b.length)
    for (let i = 0; i < common; i++) walk(a[i], b[i], `${path}[${i}]`, out, limit)
    for (let i = common; i < a.length && out.length < limit; i++) out.push({ path: `${path}[${i}]`, change: 'removed' })
    for (let i = common; i < b.length && out.length < limit; i++) out.push({ path: `${path}[${i}]`, change: 'added' })
    return
  }
  // Scalars (JSON has no NaN), or an object/array where the other holds something else.
  if (a !== b) out.push({ path, change: 'changed' })
}

/** A path with its array indices as `[*]`: how accepted removals and schema defaults name fields. */
export function fieldPattern(path: string): string {
  return path.replace(/\[\d+\]/g, '[*]')
}
