import type { Config } from '../config/schema.js'
import { CrdSelection } from '../controller/selector.js'
import { kubeHttp } from '../kube/client.js'
import { userAgent } from '../version.js'
import { listCrds } from '../kube/crds.js'
import {
  builtinMigrationApi,
  builtinMigrationRunning,
  builtinMigrationState,
  listBuiltinMigrations,
  migrationsFor,
  STORAGE_MIGRATING,
  type BuiltinMigration,
} from '../kube/builtin-migrations.js'
import { type KubeHttp } from '../kube/http.js'
import { isForbidden } from '../kube/api-errors.js'
import type { CustomResourceDefinition } from '../kube/types.js'
import { planCrd } from '../migrator/plan.js'
import { describeFreeze, readCrdState } from '../state/crd-state.js'
import { renderData, type OutputFormat } from './output.js'

export interface StatusRow {
  name: string
  storage: string
  storedVersions: string
  frozen: string
  phase: string
  progress: string
  lastResult: string
  duration: string
  /** Kubernetes' own migrator on this CRD's resource: its latest StorageVersionMigration, or the CRD's StorageMigrating condition. */
  builtin: string
}

/**
 * The CRDs worth showing: those the config selects, and any other carrying our state
 * annotations (migrated once by name, or frozen).
 */
export function statusRows(crds: CustomResourceDefinition[], config: Config, builtin?: readonly BuiltinMigration[]): StatusRow[] {
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
        frozen: !state.frozen && builtinMigrationRunning(crd) ? 'yes (built-in)' : describeFreeze(state),
        phase: state.phase ?? '-',
        progress: state.progress ?? '-',
        lastResult: state.lastResult ?? '-',
        duration: state.lastDuration ?? '-',
        builtin: describeBuiltin(crd, builtin),
      }
    })
    .sort((x, y) => x.name.localeCompare(y.name))
}

/**
 * `Running crd-migrator-…`, `Succeeded <name>` (its latest StorageVersionMigration), `StorageMigrating`
 * when only the CRD's condition says so, `?` when they could not be listed, `-` for none.
 */
export function describeBuiltin(crd: CustomResourceDefinition, builtin: readonly BuiltinMigration[] | undefined): string {
  const latest = builtin ? migrationsFor(builtin, crd.spec.group, crd.spec.names.plural).at(-1) : undefined
  if (latest) return `${builtinMigrationState(latest)} ${latest.metadata.name}`
  if (builtinMigrationRunning(crd)) return STORAGE_MIGRATING
  return builtin === undefined ? '?' : '-'
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
    builtin: 'BUILT-IN MIGRATION',
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

export interface StatusCommandOptions {
  format: OutputFormat
  /** CRDs to show, managed or not; all managed ones when empty. */
  names: readonly string[]
}

/** `crd-migrator status [CRD...]`; exit code 1 when a named CRD does not exist. */
export async function runStatusCommand(config: Config, out: NodeJS.WritableStream, options: StatusCommandOptions): Promise<number> {
  const http = kubeHttp(config.kubeconfig, { context: config.context, userAgent: userAgent('status') })
  try {
    const [crds, builtin] = await Promise.all([listCrds(http), builtinMigrationsOrUnknown(http)])
    const { rows, missing } = selectRows(crds, config, options.names, builtin)
    if (options.format !== 'text') out.write(renderData(rows, options.format))
    else out.write(rows.length ? formatTable(rows) : options.names.length ? '' : 'no managed CRDs (see --selector / --crds)\n')
    for (const name of missing) process.stderr.write(`crd-migrator: customresourcedefinition "${name}" not found\n`)
    return missing.length ? 1 : 0
  } finally {
    http.close()
  }
}

/** The rows to show: the named CRDs (whether managed or not), else every managed one. */
export function selectRows(
  crds: CustomResourceDefinition[],
  config: Config,
  names: readonly string[],
  builtin?: readonly BuiltinMigration[],
): { rows: StatusRow[]; missing: string[] } {
  if (names.length === 0) return { rows: statusRows(crds, config, builtin), missing: [] }
  const wanted = new Set(names)
  const everything = { ...config, migrator: { ...config.migrator, selector: { labelSelector: '', names: [...wanted] } } }
  const rows = statusRows(
    crds.filter((crd) => wanted.has(crd.metadata.name)),
    everything,
    builtin,
  )
  const found = new Set(rows.map((r) => r.name))
  return { rows, missing: names.filter((n) => !found.has(n)) }
}

/** Every built-in StorageVersionMigration; none when the API is not served; undefined when they may not be listed. */
async function builtinMigrationsOrUnknown(http: KubeHttp): Promise<BuiltinMigration[] | undefined> {
  try {
    const api = await builtinMigrationApi(http)
    return api === undefined ? [] : await listBuiltinMigrations(http, api)
  } catch (err) {
    if (isForbidden(err)) return undefined
    throw err
  }
}
