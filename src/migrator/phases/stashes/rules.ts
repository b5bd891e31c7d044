/** Stash rules, resolved: presets filled in, explicit fields over them. Pure. */
import type { z } from 'zod'
import type { STASH_PRESETS, StashRuleSchema } from '../../../config/schema.js'

export interface GroupVersionResource {
  group: string
  version: string
  resource: string
}

export interface StashRule {
  /** Embedded objects of this API group count. */
  group: string
  source: GroupVersionResource & { labelSelector?: string | undefined; namespaces: string[]; dataPointer: string }
  versionLabel?: string | undefined
  referrers: Array<GroupVersionResource & { pointers: string[] }>
}

/**
 * KubeVirt keeps each VM's instancetype and preference in a ControllerRevision (`data`: the whole
 * object), pointed at by spec.{instancetype,preference}.revisionName. Revisions before v1.0.0 have
 * no object-version label, so every ControllerRevision is looked at and the embedded group decides.
 */
export const PRESETS: Record<(typeof STASH_PRESETS)[number], StashRule> = {
  'kubevirt-instancetypes': {
    group: 'instancetype.kubevirt.io',
    source: { group: 'apps', version: 'v1', resource: 'controllerrevisions', namespaces: [], dataPointer: '/data' },
    versionLabel: 'instancetype.kubevirt.io/object-version',
    referrers: [
      {
        group: 'kubevirt.io',
        version: 'v1',
        resource: 'virtualmachines',
        pointers: ['/spec/instancetype/revisionName', '/spec/preference/revisionName'],
      },
    ],
  },
}

type RuleInput = z.infer<typeof StashRuleSchema>

export function resolveStashRules(presets: readonly (typeof STASH_PRESETS)[number][], rules: readonly RuleInput[]): StashRule[] {
  const out: StashRule[] = presets.map((p) => structuredClone(PRESETS[p]))
  for (const r of rules) {
    const base = r.preset ? structuredClone(PRESETS[r.preset]) : undefined
    const group = r.group ?? base?.group
    const source = r.source ?? base?.source
    const referrers = r.referrers ?? base?.referrers
    // The schema refuses a rule with neither a preset nor these three.
    if (!group || !source || !referrers) continue
    out.push({ group, source, versionLabel: r.versionLabel ?? base?.versionLabel, referrers })
  }
  return out
}

export function rulesForGroup(rules: readonly StashRule[], group: string): StashRule[] {
  return rules.filter((r) => r.group === group)
}
