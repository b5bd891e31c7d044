import type { Config } from '../config/schema.js'
import { CrdSelection } from '../controller/selector.js'
import { kubeHttp } from '../kube/client.js'
import { listCrds } from '../kube/crds.js'
import type { CustomResourceDefinition } from '../kube/types.js'
import { planCrd } from '../migrator/plan.js'
import { describeFreeze, readCrdState } from '../state/crd-state.js'

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
  const selection = new CrdSelection(config.migrator.selector)
  return crds
    .map((crd) => ({ crd, state: readCrdState(crd, config.annotations.migrating) }))
    .filter(({ crd, state }) => selection.selects(crd) || state.carriesState)
    .map(({ crd, state }) => {
      const plan = planCrd(crd)
      return {
        name: crd.metadata.name,
        storage: plan.storageVersion ?? '-',
        storedVersions: plan.storedVersions.join(',') || '-',
        frozen: describeFreeze(state),
        phase: state.phase ?? '-',
        progress: state.progress ?? '-',
        lastResult: state.lastResult ?? '-',
        duration: state.lastDuration ?? '-',
      }
    })
    .sort((x, y) => x.name.localeCompare(y.name))
}

export function formatTable(rows: StatusRow[]): string {
  const header: StatusRow = {
    name: 'NAME',
    storage: 'STORAGE',
    storedVersions: 'STORED',
    frozen: 'FROZEN',
    phase: 'PHASE',
    progress: 'PROGRESS',
    lastResult: 'LAST RESULT',
    duration: 'DURATION',
  }
  const all = [header, ...rows]
  const keys = Object.keys(header) as (keyof StatusRow)[]
  const widths = keys.map((k) => Math.max(...all.map((r) => r[k].length)))
  return (
    all
      .map((r) =>
        keys
          .map((k, i) => (i === keys.length - 1 ? r[k] : r[k].padEnd(widths[i]!)))
          .join('  ')
          .trimEnd(),
      )
      .join('\n') + '\n'
  )
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
