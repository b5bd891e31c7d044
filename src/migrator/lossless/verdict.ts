/**
 * Which differences between an object before and after its rewrite stop a migration, and
 * how that is said. Pure: table-tested (test/unit/lossless.test.ts).
 *
 * - removed or changed: refused, unless the field is an accepted removal (a removal only:
 *   set by whoever runs the migrator, never by the CRD);
 * - added: refused (a conversion webhook that injects content), unless the storage
 *   version's schema (or the stored one's) defaults that field: then it is reported.
 *
 * Conversion None can only prune: the storage version's list view, which the check
 * compares with, shows what is kept and none of the defaults that the write will add, so
 * additions there are never judged (see check.ts).
 */
import type { CustomResourceDefinition } from '../../kube/types.js'
import { childPath, fieldPattern, type FieldChange } from './content-diff.js'

export interface LosslessRules {
  /** Whether additions are judged (Webhook) or cannot be seen (None). */
  judgeAdditions: boolean
  /** Field patterns (`spec.token`, `spec.items[*].name`) whose removal is accepted, and all below them. */
  acceptedRemovals: readonly string[]
  /** Field patterns a schema defaults, and all below them. */
  defaultedFields: ReadonlySet<string>
}

export interface ChangeVerdict {
  blocking: FieldChange[]
  accepted: FieldChange[]
  defaults: FieldChange[]
}

/** `pattern` names `path` or a field above it. */
export function covers(pattern: string, path: string): boolean {
  const p = fieldPattern(path)
  const q = fieldPattern(pattern)
  return p === q || p.startsWith(`${q}.`) || p.startsWith(`${q}[`)
}

export function judgeChanges(changes: readonly FieldChange[], rules: LosslessRules): ChangeVerdict {
  const verdict: ChangeVerdict = { blocking: [], accepted: [], defaults: [] }
  for (const c of changes) {
    if (c.change === 'removed' && rules.acceptedRemovals.some((q) => covers(q, c.path))) verdict.accepted.push(c)
    else if (c.change === 'added') {
      if ([...rules.defaultedFields].some((q) => covers(q, c.path))) verdict.defaults.push(c)
      else if (rules.judgeAdditions) verdict.blocking.push(c)
    } else verdict.blocking.push(c)
  }
  return verdict
}

/** Field patterns with a `default` in the schemas of these versions of the CRD. */
export function defaultedFields(crd: CustomResourceDefinition, versions: readonly string[]): Set<string> {
  const out = new Set<string>()
  for (const v of crd.spec.versions) {
    if (!versions.includes(v.name)) continue
    const schema = (v.schema as { openAPIV3Schema?: SchemaNode } | undefined)?.openAPIV3Schema
    if (schema) collectDefaults(schema, '', out)
  }
  return out
}

/** The parts of a structural schema that say where defaults are. */
interface SchemaNode {
  default?: unknown
  properties?: Record<string, SchemaNode>
  items?: SchemaNode | SchemaNode[]
}

function collectDefaults(node: SchemaNode, path: string, out: Set<string>): void {
  if (path && node.default !== undefined) out.add(path)
  for (const [key, child] of Object.entries(node.properties ?? {})) collectDefaults(child, childPath(path, key), out)
  if (node.items && !Array.isArray(node.items)) collectDefaults(node.items, `${path}[*]`, out)
}

/**
 * The accepted removals of one CRD, from entries `<crd name>:<field path>` (the
 * migrator's configuration or flag). A field path is checked when the entry is parsed.
 */
export function acceptedRemovalsFor(crdName: string, entries: readonly string[]): string[] {
  const out: string[] = []
  for (const entry of entries) {
    const at = entry.indexOf(':')
    if (entry.slice(0, at) === crdName) out.push(entry.slice(at + 1))
  }
  return out
}

/** Why an accepted-removal entry cannot be used, or undefined when it can. */
export function invalidAcceptedRemoval(entry: string): string | undefined {
  const at = entry.indexOf(':')
  if (at <= 0) return `"${entry}" is not <crd name>:<field path> (e.g. widgets.example.com:spec.token)`
  const path = entry.slice(at + 1)
  if (!/^[A-Za-z_$][\w$-]*(\.[A-Za-z_$][\w$-]*|\[(\*|\d+|"(?:[^"\\]|\\.)*")\])*$/.test(path))
    return `"${path}" in "${entry}" is not a field path (e.g. spec.token, spec.items[*].name, metadata.labels["app.kubernetes.io/name"])`
  const metadataField = path === 'metadata' || path.startsWith('metadata.') || path.startsWith('metadata[')
  if (metadataField && !/^metadata\.(labels|annotations|finalizers|ownerReferences)(?![\w$-])/.test(path))
    return `"${path}" in "${entry}": of metadata only labels, annotations, finalizers and ownerReferences are checked`
  return undefined
}

export interface ObjectFinding {
  /** namespace/name */
  key: string
  changes: FieldChange[]
}

/** One line per object, its first changes named: "ns/obj-00007: spec.token removed, spec.owner added". */
export function describeFindings(findings: readonly ObjectFinding[], objects: number, shown = 5): string {
  const lines = findings.slice(0, shown).map((f) => {
    const named = f.changes.slice(0, 4).map((c) => `${c.path} ${c.change}`)
    if (f.changes.length > 4) named.push(`${f.changes.length - 4} more`)
    return `${f.key}: ${named.join(', ')}`
  })
  const more = objects > lines.length ? `; and ${objects - lines.length} more object(s)` : ''
  return `${lines.join('; ')}${more}`
}
