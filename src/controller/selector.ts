/**
 * Kubernetes label selector matching (equality- and set-based), for choosing managed
 * CRDs from one watch of all CRDs.
 */
import { CrdMigratorError } from '../errors.js'

type Requirement = { op: 'exists' | 'notexists'; key: string } | { op: 'in' | 'notin'; key: string; values: Set<string> }

export class LabelSelector {
  private constructor(private readonly requirements: Requirement[]) {}

  static parse(selector: string): LabelSelector {
    const requirements: Requirement[] = []
    for (const part of splitTopLevel(selector)) {
      const text = part.trim()
      if (text === '') continue
      let m: RegExpMatchArray | null
      if ((m = text.match(/^([^\s!=()]+)\s+(in|notin)\s*\(([^)]*)\)$/))) {
        requirements.push({
          op: m[2] as 'in' | 'notin',
          key: m[1]!,
          values: new Set(
            m[3]!
              .split(',')
              .map((v) => v.trim())
              .filter((v) => v !== ''),
          ),
        })
      } else if ((m = text.match(/^([^\s!=()]+)\s*(==|=|!=)\s*([^\s!=()]*)$/))) {
        requirements.push({ op: m[2] === '!=' ? 'notin' : 'in', key: m[1]!, values: new Set([m[3]!]) })
      } else if ((m = text.match(/^!\s*([^\s!=()]+)$/))) {
        requirements.push({ op: 'notexists', key: m[1]! })
      } else if ((m = text.match(/^([^\s!=()]+)$/))) {
        requirements.push({ op: 'exists', key: m[1]! })
      } else {
        throw new CrdMigratorError(
          'CRDM_LABEL_SELECTOR',
          `invalid label selector ${JSON.stringify(selector)}: cannot parse ${JSON.stringify(text)}`,
        )
      }
    }
    return new LabelSelector(requirements)
  }

  get empty(): boolean {
    return this.requirements.length === 0
  }

  matches(labels: Record<string, string> | undefined): boolean {
    const l = labels ?? {}
    return this.requirements.every((r) => {
      const has = Object.hasOwn(l, r.key)
      switch (r.op) {
        case 'exists':
          return has
        case 'notexists':
          return !has
        case 'in':
          return has && r.values.has(l[r.key]!)
        case 'notin':
          return !has || !r.values.has(l[r.key]!)
      }
    })
  }
}

function splitTopLevel(s: string): string[] {
  const parts: string[] = []
  let depth = 0
  let current = ''
  for (const ch of s) {
    if (ch === '(') depth++
    if (ch === ')') depth--
    if (ch === ',' && depth === 0) {
      parts.push(current)
      current = ''
    } else current += ch
  }
  parts.push(current)
  return parts
}

/**
 * Which CRDs are managed: those named in `migrator.selector.names`, and those whose labels
 * match `migrator.selector.labelSelector` (empty selects none by label). The controller
 * and `status` both choose through this.
 */
export class CrdSelection {
  private readonly selector: LabelSelector | undefined
  private readonly names: ReadonlySet<string>

  constructor(selection: { labelSelector: string; names: readonly string[] }) {
    this.selector = selection.labelSelector.trim() === '' ? undefined : LabelSelector.parse(selection.labelSelector)
    this.names = new Set(selection.names)
  }

  selects(crd: { metadata: { name: string; labels?: Record<string, string> } }): boolean {
    return this.names.has(crd.metadata.name) || (this.selector?.matches(crd.metadata.labels) ?? false)
  }
}
