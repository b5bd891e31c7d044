import { StateAnnotation } from '../config/annotations.js'
import type { Config } from '../config/schema.js'
import { LabelSelector } from '../controller/selector.js'
import { kubeHttp } from '../kube/client.js'
import { listCrds } from '../kube/crds.js'
import type { CustomResourceDefinition } from '../kube/types.js'
import { planCrd } from '../migrator/plan.js'

export interface StatusRow {
  name: string
  storage: string
  storedVersions: string
  frozen: string
  phase: string
  progress: string
  lastResult: string
  duration: string
}

/**
 * The CRDs worth showing: those the config selects, and any other carrying our state
 * annotations (migrated once by name, or frozen).
 */
export function statusRows(crds: CustomResourceDefinition[], config: Config): StatusRow[] {
  const { labelSelector, names } = config.migrator.selector
  const selector = labelSelector.trim() ? LabelSelector.parse(labelSelector) : undefined
  const wanted = new Set(names)
  return crds
    .filter(crd => {
      const a = crd.metadata.annotations ?? {}
      return wanted.has(crd.metadata.name) || selector?.matches(crd.metadata.labels) || a[config.annotations.migrating] !== undefined
        || Object.keys(a).some(k => k.startsWith('crd-migrator.io/'))
    })
    .map(crd => {
      const a = crd.metadata.annotations ?? {}
      const plan = planCrd(crd)
      return {
        name: crd.metadata.name,
        storage: plan.storageVersion ?? '-',
        storedVersions: plan.storedVersions.join(',') || '-',
        frozen: a[config.annotations.migrating] === 'true' ? `yes${a[StateAnnotation.owner] ? ` (${a[StateAnnotation.owner]})` : ' (foreign)'}` : 'no',
        phase: a[StateAnnotation.phase] ?? '-',
        progress: a[StateAnnotation.progress] ?? '-',
        lastResult: a[StateAnnotation.lastResult] ?? '-',
        duration: a[StateAnnotation.lastDuration] ?? '-',
      }
    })
    .sort((x, y) => x.name.localeCompare(y.name))
}

export function formatTable(rows: StatusRow[]): string {
  const header: StatusRow = { name: 'NAME', storage: 'STORAGE', storedVersions: 'STORED', frozen: 'FROZEN', phase: 'PHASE', progress: 'PROGRESS', lastResult: 'LAST RESULT', duration: 'DURATION' }
  const all = [header, ...rows]
  const keys = Object.keys(header) as (keyof StatusRow)[]
  const widths = keys.map(k => Math.max(...all.map(r => r[k].length)))
  return all.map(r => keys.map((k, i) => (i === keys.length - 1 ? r[k] : r[k].padEnd(widths[i]!))).join('  ').trimEnd()).join('\n') + '\n'
}

export async function runStatusCommand(config: Config, out: NodeJS.WritableStream, json: boolean): Promise<number> {
  const http = kubeHttp(config.kubeconfig)
  try {
    const rows = statusRows(await listCrds(http), config)
    out.write(json ? `${JSON.stringify(rows, null, 2)}\n` : rows.length ? formatTable(rows) : 'no managed CRDs (see --selector / --crds)\n')
    return 0
  } finally {
    http.close()
  }
}
