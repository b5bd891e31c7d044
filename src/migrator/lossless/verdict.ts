/**
 * Which differences between an object before and after its rewrite stop a migration: every change
 * unless consent, a schema default or round-trip bookkeeping explains it (the table in
 * docs/migrate-one-crd.md#lossless-or-refused-the-check-before-any-write). Pure, table-tested
 * (test/unit/lossless.test.ts). Conversion None can only prune: its storage-version list view shows
 * none of the defaults the write adds, so additions there are never judged (check.ts).
 */
import type { CustomResourceDefinition } from '../../kube/types.js'
import {
  canonical,
  childPath,
  diffValues,
  fieldPattern,
  hasPath,
  isObj,
  leaves,
  pairMoves,
  withoutValues,
  type FieldChange,
  type FieldChangeKind,
  type Obj,
  type ValuedChange,
} from './content-diff.js'

export interface LosslessRules {
  /** Whether additions are judged (Webhook) or cannot be seen (None). */
  judgeAdditions: boolean
  /** Field patterns (`spec.token`, `spec.items[*].name`) whose removal is accepted, and all below them. */
  acceptedRemovals: readonly string[]
  /** Field patterns where any change is accepted, and all below them. */
  acceptedChanges: readonly string[]
  /** Field patterns a schema defaults, with the schema node that says how. */
  defaults: ReadonlyMap<string, SchemaNode>
}

export interface ChangeVerdict {
  blocking: FieldChange[]
  accepted: FieldChange[]
  defaults: FieldChange[]
  /** Additions of the round trip that the rewrite does not store. */
  bookkeeping: FieldChange[]
  /** Additions that only the storage version's view can tell from injected content (not given yet). */
  needsStorageView: boolean
}

/** `pattern` names `path` or a field above it. */
export function covers(pattern: string, path: string): boolean {
  const p = fieldPattern(path)
  const q = fieldPattern(pattern)
  return p === q || p.startsWith(`${q}.`) || p.startsWith(`${q}[`)
}

export interface RoundTrip {
  before: Obj
  /** What the rewrite keeps, as `before`'s version shows it. */
  after: Obj
  /** What the rewrite stores, through the storage version (Webhook: asked for when additions need it). */
  stored?: Obj | undefined
  /** Fields that managedFields say a manager set and that the rewrite does not keep. */
  lostManaged?: readonly string[]
}

export function judgeRoundTrip(trip: RoundTrip, rules: LosslessRules): ChangeVerdict {
  const verdict: ChangeVerdict = { blocking: [], accepted: [], defaults: [], bookkeeping: [], needsStorageView: false }
  const split: ValuedChange[] = []
  for (const c of diffValues(trip.before, trip.after)) {
    if (c.change === 'added' && !rules.judgeAdditions) continue
    if (c.change === 'added' && isDefault(c, rules.defaults)) verdict.defaults.push(withoutValues(c))
    else if (c.change === 'added' || c.change === 'removed') split.push(...leaves(c))
    else split.push(c)
  }
  const seen = new Set(split.map((c) => c.path))
  for (const path of trip.lostManaged ?? [])
    if (![...seen].some((s) => covers(s, path))) split.push({ path, change: 'removed', managedFields: true })
  for (const c of pairMoves(split)) {
    const change = withoutValues(c)
    if (accepted(change, rules)) verdict.accepted.push(change)
    else if (c.change !== 'added') verdict.blocking.push(change)
    else if (trip.stored === undefined) {
      verdict.blocking.push(change)
      verdict.needsStorageView = true
    } else if (hasPath(trip.stored, c.path)) verdict.blocking.push(change)
    else verdict.bookkeeping.push(change)
  }
  const order = (a: FieldChange, b: FieldChange) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0)
  verdict.blocking.sort(order)
  return verdict
}

function accepted(c: FieldChange, rules: LosslessRules): boolean {
  const changes = (path: string) => rules.acceptedChanges.some((q) => covers(q, path))
  if (c.change === 'moved') return changes(c.from!) && changes(c.path)
  if (changes(c.path)) return true
  return c.change === 'removed' && rules.acceptedRemovals.some((q) => covers(q, c.path))
}

/** An addition at exactly a defaulted path, with exactly its default (nested defaults applied). */
function isDefault(c: ValuedChange, defaults: ReadonlyMap<string, SchemaNode>): boolean {
  const node = defaults.get(fieldPattern(c.path))
  if (!node) return false
  return canonical(c.after) === canonical(withNestedDefaults(node, structuredClone(node.default)))
}

/** A value as the API server's structural defaulting leaves it: defaults of absent properties filled in, recursively. */
export function withNestedDefaults(node: SchemaNode, value: unknown): unknown {
  if (isObj(value)) {
    for (const [key, child] of Object.entries(node.properties ?? {})) {
      if (!Object.hasOwn(value, key)) {
        if (child.default === undefined) continue
        value[key] = structuredClone(child.default)
      }
      value[key] = withNestedDefaults(child, value[key])
    }
  } else if (Array.isArray(value) && node.items && !Array.isArray(node.items)) {
    const items = node.items
    return value.map((v) => withNestedDefaults(items, v))
  }
  return value
}

/** Field patterns with a `default` in the schemas of these versions of the CRD, each with its schema node. */
export function schemaDefaults(crd: CustomResourceDefinition, versions: readonly string[]): Map<string, SchemaNode> {
  const out = new Map<string, SchemaNode>()
  for (const v of crd.spec.versions) {
    if (!versions.includes(v.name)) continue
    const schema = (v.schema as { openAPIV3Schema?: SchemaNode } | undefined)?.openAPIV3Schema
    if (schema) collectDefaults(schema, '', out)
  }
  return out
}

/** The parts of a structural schema that say where defaults are. */
export interface SchemaNode {
  default?: unknown
  properties?: Record<string, SchemaNode>
  items?: SchemaNode | SchemaNode[]
}

function collectDefaults(node: SchemaNode, path: string, out: Map<string, SchemaNode>): void {
  if (path && node.default !== undefined && !out.has(path)) out.set(path, node)
  for (const [key, child] of Object.entries(node.properties ?? {})) collectDefaults(child, childPath(path, key), out)
  if (node.items && !Array.isArray(node.items)) collectDefaults(node.items, `${path}[*]`, out)
}

export interface ObjectFinding {
  /** namespace/name */
  key: string
  changes: FieldChange[]
}

/** How a change at `path` reads: "spec.token removed", "spec.timeouts.pipeline moved from spec.timeout"; `show` writes each path. */
export function describeChange(path: string, c: Omit<FieldChange, 'path'>, show = (p: string) => p): string {
  if (c.change === 'moved') return `${show(path)} moved from ${show(c.from ?? '')}`
  return `${show(path)} ${c.change}${c.managedFields ? ' (set by a manager, not in what the rewrite keeps)' : ''}`
}

/** One line per object, its first changes named: "ns/obj-00007: spec.token removed, spec.owner added". */
export function describeFindings(findings: readonly ObjectFinding[], objects: number, shown = 5): string {
  const lines = findings.slice(0, shown).map((f) => {
    const named = f.changes.slice(0, 4).map((c) => describeChange(c.path, c))
    if (f.changes.length > 4) named.push(`${f.changes.length - 4} more`)
    return `${f.key}: ${named.join(', ')}`
  })
  const more = objects > lines.length ? `; and ${objects - lines.length} more object(s)` : ''
  return `${lines.join('; ')}${more}`
}

/** How the old versions are read: a list at the same snapshot (conversion None) or a dry-run write (a webhook). */
export type LosslessMethod = 'list' | 'dry-run'

/** What the check found for one CRD (check.ts), as a run's result, the plan and the refusal report it. */
export interface LosslessReport {
  method: LosslessMethod
  /** The old versions the objects were read through. */
  through: string[]
  /** Stored versions that are no longer served: objects stored in them cannot be read as stored. */
  unserved: string[]
  /** Object reads compared (an object is counted once per old version). */
  checked: number
  /** Objects whose rewrite would lose, change or add content. */
  lossy: number
  /** The first of them, with their changes. */
  findings: ObjectFinding[]
  /** Objects whose only changes are accepted ones (acceptChanges, acceptRemovals). */
  accepted: number
  /** Objects that gain fields their schema defaults (reported, not refused). */
  defaultsAdded: number
  /** Objects whose round trip adds bookkeeping the rewrite does not store (reported, not refused). */
  bookkeeping: number
  /** Objects read once more through the storage version to tell bookkeeping from stored content (the extra view's cost). */
  storageViews: number
  /** Objects no view can check (stored in an unserved version, no managedFields): refused unless accepted. */
  unchecked: number
  uncheckedReason?: string
  /** Whether this CRD's unchecked objects are accepted (the run goes on with them). */
  uncheckedAccepted: boolean
  /** Each field that changes, by pattern and kind, with its object count and verdict (at most 50 patterns). */
  changes: ChangeCount[]
  /** Consent taken from the CRD's annotations (consentFromCrd), and the entries there that are not field paths (ignored). */
  crdConsent?: { acceptChanges: string[]; acceptUnchecked: boolean; ignored: string[] }
  /** Objects the conversion webhook refused to convert: the rewrite fails them by name. */
  refused: number
  /** Whether the whole collection was checked (false: the first pages only). */
  complete: boolean
  durationMs: number
}

/** One field that changes in some objects: what the plan and the refusal list, with the line that accepts it. */
export interface ChangeCount {
  /** Field pattern (`spec.items[*].name`); for a move, where the value goes. */
  pattern: string
  change: FieldChangeKind
  /** A move's source pattern. */
  from?: string
  /** Seen through managedFields only (pruned from every view). */
  managedFields?: true
  verdict: 'refused' | 'accepted' | 'bookkeeping' | 'default'
  objects: number
}
