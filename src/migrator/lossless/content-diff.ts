/**
 * What a user owns of an object (every top-level field but apiVersion, kind and metadata, plus
 * OWNED_METADATA) and how two copies differ, as kubectl's field paths (`spec.items[2].name`,
 * `metadata.labels["app.kubernetes.io/name"]`). Pure. Only own keys count: `__proto__` or
 * `constructor` is a field like any other (`in` would see the prototype's).
 */

export type FieldChangeKind = 'removed' | 'changed' | 'added' | 'moved'

export interface FieldChange {
  path: string
  change: FieldChangeKind
  /** `moved`: where the value was (`path` is where it is now). */
  from?: string
  /** Seen through managedFields only: a manager set it, and no view of the object shows it. */
  managedFields?: true
}

/** A change with the values it is about: what judging needs, never what is reported (values may be secrets). */
export interface ValuedChange extends FieldChange {
  before?: unknown
  after?: unknown
}

export type Obj = Record<string, unknown>

/** The parts of metadata a user owns (ownedContent, managed-paths.ts). */
export const OWNED_METADATA: readonly string[] = ['labels', 'annotations', 'finalizers', 'ownerReferences']
const NOT_OWNED = new Set(['apiVersion', 'kind', 'metadata'])

export const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v)

/** The owned content of an object, as one object keyed like the object itself. */
export function ownedContent(object: Obj): Obj {
  // Object.fromEntries defines keys as own data properties: `__proto__` stays a key.
  const owned = Object.fromEntries(Object.entries(object).filter(([key]) => !NOT_OWNED.has(key)))
  const metadata = isObj(object['metadata']) ? object['metadata'] : {}
  // No labels and no annotations are empty maps: an added label is named by its key.
  const ownedMetadata: Obj = { labels: {}, annotations: {} }
  for (const key of OWNED_METADATA)
    if (Object.hasOwn(metadata, key) && metadata[key] !== undefined && metadata[key] !== null) ownedMetadata[key] = metadata[key]
  owned['metadata'] = ownedMetadata
  return owned
}

/** `a.b` for plain names, `a["b.c/d"]` for the rest (label keys, annotation keys). */
export function childPath(parent: string, key: string): string {
  if (/^[A-Za-z_$][\w$-]*$/.test(key)) return parent ? `${parent}.${key}` : key
  return `${parent}[${JSON.stringify(key)}]`
}

/** How `after` differs from `before` (owned content, path order, highest differing node, values attached); the first `limit` changes. */
export function diffValues(before: Obj, after: Obj, limit = 200): ValuedChange[] {
  const changes: ValuedChange[] = []
  walk(ownedContent(before), ownedContent(after), '', changes, limit)
  return changes
}

export function diffOwnedContent(before: Obj, after: Obj, limit = 50): FieldChange[] {
  return diffValues(before, after, limit).map(withoutValues)
}

export function withoutValues({ before: _before, after: _after, ...change }: ValuedChange): FieldChange {
  return change
}

function walk(a: unknown, b: unknown, path: string, out: ValuedChange[], limit: number): void {
  if (out.length >= limit) return
  if (isObj(a) && isObj(b)) {
    for (const key of Object.keys(a)) {
      if (out.length >= limit) return
      const p = childPath(path, key)
      if (!Object.hasOwn(b, key)) out.push({ path: p, change: 'removed', before: a[key] })
      else walk(a[key], b[key], p, out, limit)
    }
    for (const key of Object.keys(b)) {
      if (out.length >= limit) return
      if (!Object.hasOwn(a, key)) out.push({ path: childPath(path, key), change: 'added', after: b[key] })
    }
    return
  }
  if (Array.isArray(a) && Array.isArray(b)) {
    const common = Math.min(a.length, b.length)
    for (let i = 0; i < common; i++) walk(a[i], b[i], `${path}[${i}]`, out, limit)
    for (let i = common; i < a.length && out.length < limit; i++) out.push({ path: `${path}[${i}]`, change: 'removed', before: a[i] })
    for (let i = common; i < b.length && out.length < limit; i++) out.push({ path: `${path}[${i}]`, change: 'added', after: b[i] })
    return
  }
  // Scalars (JSON has no NaN), or an object/array where the other holds something else.
  if (a !== b) out.push({ path, change: 'changed', before: a, after: b })
}

/** A removed or added node split into leaves, so a value moved into a new parent pairs with where it went and consent can name a field below. */
export function leaves(c: ValuedChange, limit = 200): ValuedChange[] {
  const out: ValuedChange[] = []
  const side = c.change === 'removed' ? 'before' : 'after'
  const visit = (value: unknown, path: string) => {
    if (out.length >= limit) return
    const entries = isObj(value)
      ? Object.keys(value).map((k) => [childPath(path, k), value[k]] as const)
      : Array.isArray(value)
        ? value.map((v, i) => [`${path}[${i}]`, v] as const)
        : []
    if (entries.length === 0) out.push({ path, change: c.change, [side]: value })
    for (const [p, v] of entries) visit(v, p)
  }
  visit(c[side], c.path)
  return out
}

/** Pairs removed and added leaves of the same value (each used once) as one `moved` change; the rest as they came. */
export function pairMoves(changes: readonly ValuedChange[]): ValuedChange[] {
  const added = new Map<string, ValuedChange[]>()
  for (const c of changes) if (c.change === 'added') push(added, canonical(c.after), c)
  const paired = new Set<ValuedChange>()
  const out: ValuedChange[] = []
  for (const c of changes) {
    // A field seen through managedFields only has no value to pair.
    if (c.change !== 'removed' || c.managedFields) continue
    const candidates = added.get(canonical(c.before))
    const to = candidates?.find((a) => !paired.has(a))
    if (!to) continue
    paired.add(c).add(to)
    out.push({ path: to.path, change: 'moved', from: c.path, before: c.before, after: to.after })
  }
  return [...changes.filter((c) => !paired.has(c)), ...out]
}

function push<K, V>(m: Map<K, V[]>, k: K, v: V): void {
  const list = m.get(k)
  if (list) list.push(v)
  else m.set(k, [v])
}

/** A JSON text of a value with sorted keys: equal values, equal texts. */
export function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`
  if (isObj(value))
    return `{${Object.keys(value)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`)
      .join(',')}}`
  return JSON.stringify(value) ?? 'null'
}

/** Whether `path` (as childPath writes it) names a field present in `object`'s owned content. */
export function hasPath(object: Obj, path: string): boolean {
  return hasOwnedPath(ownedContent(object), path)
}

/** hasPath on content ownedContent already made (many paths of one object). */
export function hasOwnedPath(owned: Obj, path: string): boolean {
  let node: unknown = owned
  for (const step of parsePath(path)) {
    if (typeof step === 'number') {
      if (!Array.isArray(node) || step >= node.length) return false
      node = node[step]
    } else {
      if (!isObj(node) || !Object.hasOwn(node, step)) return false
      node = node[step]
    }
  }
  return true
}

/** `spec.items[2]["a.b"]` → ['spec', 'items', 2, 'a.b']; `[*]` is kept as '*'. */
export function parsePath(path: string): Array<string | number> {
  const steps: Array<string | number> = []
  const re = /(?:^|\.)([A-Za-z_$][\w$-]*)|\[(\d+)\]|\[(\*)\]|\[("(?:[^"\\]|\\.)*")\]/gy
  let m: RegExpExecArray | null
  while ((m = re.exec(path)) !== null) {
    if (m[1] !== undefined) steps.push(m[1])
    else if (m[2] !== undefined) steps.push(Number(m[2]))
    else if (m[3] !== undefined) steps.push('*')
    else steps.push(JSON.parse(m[4]!) as string)
    if (re.lastIndex === path.length) break
  }
  return steps
}

/** A path with its array indices as `[*]`: how accepted changes and schema defaults name fields. */
export function fieldPattern(path: string): string {
  return path.replace(/\[\d+\]/g, '[*]')
}
