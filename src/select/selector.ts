/**
 * Kubernetes label selector matching (equality- and set-based), and which CRDs the
 * controller lists and watches: the API server filters by the same selector, and by name.
 */
import { ANNOTATION_KEY } from '../config/schema.js'
import { CrdMigratorError } from '../errors.js'
import type { ListWatchFilter } from '../kube/watch.js'

/** Above this many `--crds` names, one watch of all CRDs (filtered here) replaces a watch per name. */
export const MAX_NAME_WATCHES = 10

type Requirement = { op: 'exists' | 'notexists'; key: string } | { op: 'in' | 'notin'; key: string; values: Set<string> }

export class LabelSelector {
  private constructor(private readonly requirements: Requirement[]) {}

  static parse(selector: string): LabelSelector {
    const requirements: Requirement[] = []
    const invalid = (why: string) =>
      new CrdMigratorError('CRDM_LABEL_SELECTOR', `invalid label selector ${JSON.stringify(selector)}: ${why}`)
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
        throw invalid(`cannot parse ${JSON.stringify(text)}`)
      }
    }
    // The API server parses the selector too (it filters the watch): refuse here what it would refuse there.
    for (const r of requirements) {
      if (!isLabelKey(r.key))
        throw invalid(`${JSON.stringify(r.key)} is not a label key (an optional DNS prefix and /, then 1-63 of A-Z a-z 0-9 - _ .)`)
      for (const value of 'values' in r ? r.values : []) {
        if (!LABEL_VALUE.test(value))
          throw invalid(`${JSON.stringify(value)} is not a label value (at most 63 of A-Z a-z 0-9 - _ ., alphanumeric at both ends)`)
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

const LABEL_VALUE = /^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$/

/** A qualified name, as an annotation key: `name` or `prefix/name`, the prefix a DNS subdomain of at most 253 characters. */
function isLabelKey(key: string): boolean {
  return ANNOTATION_KEY.test(key) && key.indexOf('/') <= 253 // the prefix's length (-1: none)
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

/** Which CRDs are managed (by name, or by label); the controller and `status` both choose through this. */
export class CrdSelection {
  private readonly selector: LabelSelector | undefined
  private readonly labelSelector: string
  private readonly names: ReadonlySet<string>

  constructor(selection: { labelSelector: string; names: readonly string[] }) {
    this.labelSelector = selection.labelSelector.trim()
    this.selector = this.labelSelector === '' ? undefined : LabelSelector.parse(selection.labelSelector)
    this.names = new Set(selection.names)
  }

  /**
   * One watch by label, one per name (field selectors cannot say "any of these"); past
   * {@link MAX_NAME_WATCHES}, one of every CRD filtered here, as each watch costs a connection and a list.
   */
  watchFilters(): ListWatchFilter[] {
    if (this.names.size > MAX_NAME_WATCHES) return [{}]
    return [
      ...(this.labelSelector === '' ? [] : [{ labelSelector: this.labelSelector }]),
      ...[...this.names].map((name) => ({ fieldSelector: `metadata.name=${name}` })),
    ]
  }

  selects(crd: { metadata: { name: string; labels?: Record<string, string> } }): boolean {
    return this.names.has(crd.metadata.name) || (this.selector?.matches(crd.metadata.labels) ?? false)
  }
}
