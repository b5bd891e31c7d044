import type { Config } from '../../config/schema.js'
import { CrdSelection } from '../../select/selector.js'
import { closing, commandHttp } from '../command-http.js'
import { errorMessage } from '../../errors.js'
import { getCrd, listCrds } from '../../kube/crds.js'
import {
  builtinMigrationApi,
  builtinMigrationRunning,
  builtinMigrationState,
  listBuiltinMigrations,
  migrationsFor,
  STORAGE_MIGRATING,
  type BuiltinMigration,
} from '../../kube/builtin-migrations.js'
import { Accept, type KubeHttp } from '../../kube/http.js'
import { unlessForbidden, unlessNotFound } from '../../kube/api-errors.js'
import { listPages } from '../../kube/list-pages.js'
import { CRD_API } from '../../kube/paths.js'
import type { CustomResourceDefinition, PartialObjectMetadata } from '../../kube/types.js'
import { listAndWatch } from '../../kube/watch.js'
import { planCrd } from '../../migrator/plan.js'
import { runInParallel } from '../../migrator/parallel.js'
import { describeFreeze, freezeLiveness, readCrdState, staleAt, type CrdState, type FreezeLiveness } from '../../state/crd-state.js'
import { ellipsize, plainText, sanitizeText } from '../../sanitize.js'
import { clockDuration } from '../../duration.js'
import { columnWidths, isData, renderData, renderNames, reportMissing, tableLine } from '../output.js'
import type { ReadCommandOptions } from '../command-kit.js'
import { etaSeconds, fleetState, formatSummary, summarize, type FleetState, type StatusSummary } from './status-summary.js'

export interface StatusRow {
  name: string
  storage: string
  storedVersions: string
  frozen: string
  /** Who holds the freeze, as the FROZEN cell names it and cleaned as it is (-o json|yaml; not a column); absent when not frozen. */
  frozenBy?: string
  /** Of a freeze of ours: the heartbeat's age, `stale` once the next run may take it over, or `handed off`. */
  heartbeat: string
  phase: string
  progress: string
  lastResult: string
  duration: string
  /** Kubernetes' own migrator on this CRD's resource: its latest StorageVersionMigration, or the CRD's StorageMigrating condition. */
  builtin: string
  /** For the summary and -o json/yaml (not a table column). */
  state: FleetState
  /** Seconds left for a running CRD at the rate its progress shows (-o json/yaml; absent without a rate). */
  etaSeconds?: number
  /** Of a freeze of ours: seconds since its heartbeat (-o json/yaml; absent without one). */
  heartbeatAgeSeconds?: number
  /** Of a freeze of ours: its run stopped, and the next run takes it over (-o json/yaml). */
  stale?: boolean
}

type Column = Exclude<keyof StatusRow, 'frozenBy' | 'state' | 'etaSeconds' | 'heartbeatAgeSeconds' | 'stale'>

/**
 * The CRDs worth showing: those the config selects, and any other carrying our state
 * annotations (migrated once by name, or frozen).
 */
export function statusRows(
  crds: CustomResourceDefinition[],
  config: Config,
  builtin?: readonly BuiltinMigration[],
  now = new Date(),
): StatusRow[] {
  const selection = new CrdSelection(config.migrator.selector)
  return crds
    .map((crd) => ({ crd, state: readCrdState(crd, config.annotations.migrating) }))
    .filter(({ crd, state }) => selection.selects(crd) || state.carriesState)
    .map(({ crd, state }) => {
      const plan = planCrd(crd)
      const liveness = state.frozen && state.owner ? freezeLiveness(state, config.migrator.takeoverAfterSeconds * 1000, now) : undefined
      const fleet = fleetState(crd, state, liveness)
      const eta = fleet === 'Running' ? etaSeconds(state.progress, state.startedAt, now, state.heartbeat) : undefined
      const builtinRunning = !state.frozen && builtinMigrationRunning(crd)
      const frozenBy = builtinRunning ? 'built-in' : state.frozen ? sanitizeText(state.owner ?? 'foreign') : undefined
      return {
        name: crd.metadata.name,
        storage: plan.storageVersion ?? '-',
        storedVersions: plan.storedVersions.join(',') || '-',
        // The annotations are text anyone allowed to patch the CRD may have written: cleaned
        // and cut (sanitize.ts) before they reach a terminal.
        frozen: builtinRunning ? 'yes (built-in)' : cell(describeFreeze(state)),
        ...(frozenBy ? { frozenBy } : {}),
        heartbeat: liveness ? heartbeatCell(liveness) : '-',
        phase: cell(state.phase),
        progress: cell(state.progress),
        lastResult: lastResultCell(state, crd.metadata.generation),
        duration: cell(state.lastDuration),
        builtin: describeBuiltin(crd, builtin),
        state: fleet,
        ...(eta === undefined ? {} : { etaSeconds: eta }),
        ...(liveness?.heartbeatAgeMs === undefined ? {} : { heartbeatAgeSeconds: Math.max(0, Math.floor(liveness.heartbeatAgeMs / 1000)) }),
        ...(liveness ? { stale: liveness.stale } : {}),
      }
    })
    .sort((x, y) => x.name.localeCompare(y.name))
}

/** An annotation's text as a table cell: cleaned and cut; `-` when nothing is left. */
const cell = (text: string | undefined): string => sanitizeText(text ?? '') || '-'

/** `2m10s, stale`: the next run may take the freeze over (a run killed with -9 stops heart-beating but stays frozen). */
export function heartbeatCell(l: FreezeLiveness): string {
  if (l.handedOff) return 'handed off'
  if (l.heartbeatAgeMs === undefined) return 'none, stale'
  const age = clockDuration(Math.max(0, l.heartbeatAgeMs))
  return l.stale ? `${age}, stale` : age
}

/** Characters of a failure's reason in the table's LAST RESULT column; -o json/yaml give it whole. */
const LAST_RESULT_COLUMN = 200

/**
 * The last result, saying which generation a success was for when the CRD has changed
 * since (a new storage version makes it Pending again: "Succeeded" alone read as done).
 */
export function lastResultCell(state: Pick<CrdState, 'lastResult' | 'observedGeneration'>, generation: number | undefined): string {
  const text = cell(state.lastResult)
  const og = state.observedGeneration
  if (text === 'Succeeded' && og !== undefined && generation !== undefined && og !== generation)
    return `Succeeded (generation ${og}; now ${generation})`
  return text
}

/** Its latest StorageVersionMigration's state and name, or the CRD's StorageMigrating condition; `?`: they could not be listed. */
export function describeBuiltin(crd: CustomResourceDefinition, builtin: readonly BuiltinMigration[] | undefined): string {
  const latest = builtin ? migrationsFor(builtin, crd.spec.group, crd.spec.names.plural).at(-1) : undefined
  if (latest) return `${builtinMigrationState(latest)} ${latest.metadata.name}`
  if (builtinMigrationRunning(crd)) return STORAGE_MIGRATING
  return builtin === undefined ? '?' : '-'
}

/** A row as data (-o json|yaml): lists as lists, an empty cell (`-` in the table) left out. */
export function statusData(row: StatusRow): Record<string, unknown> {
  const data: Record<string, unknown> = { name: row.name }
  for (const [k, v] of Object.entries(row)) {
    if (k === 'name' || k === 'frozenBy' || v === '-' || v === undefined) continue
    data[k] = k === 'storedVersions' ? String(v).split(',') : v
  }
  if (!('storedVersions' in data)) data['storedVersions'] = []
  // As data, frozen is a boolean, and who holds the freeze is frozenBy.
  data['frozen'] = row.frozen.startsWith('yes')
  if (row.frozenBy) data['frozenBy'] = row.frozenBy
  return data
}

/** -o wide: the fleet state and the ETA of a running CRD besides the table's columns. */
const WIDE_HEADER = ['STATE', 'ETA']
const wideCells = (row: StatusRow): string[] => [row.state, row.etaSeconds === undefined ? '-' : `${row.etaSeconds}s`]

const HEADER: Record<Column, string> = {
  name: 'NAME',
  storage: 'STORAGE',
  storedVersions: 'STORED',
  frozen: 'FROZEN',
  heartbeat: 'HEARTBEAT',
  phase: 'PHASE',
  progress: 'PROGRESS',
  lastResult: 'LAST RESULT',
  duration: 'DURATION',
  builtin: 'BUILT-IN MIGRATION',
}
const COLUMNS = Object.keys(HEADER) as Column[]

function cells(row: StatusRow | 'header', wide: boolean): string[] {
  const base = COLUMNS.map((k) => (row === 'header' ? HEADER[k] : k === 'lastResult' ? ellipsize(row[k], LAST_RESULT_COLUMN) : row[k]))
  return wide ? [...base, ...(row === 'header' ? WIDE_HEADER : wideCells(row))] : base
}

const widthsOf = (rows: readonly StatusRow[], wide: boolean): number[] =>
  columnWidths([cells('header', wide), ...rows.map((r) => cells(r, wide))])

const formatRow = (row: StatusRow | 'header', widths: readonly number[], wide: boolean): string =>
  `${tableLine(cells(row, wide), widths)}\n`

export function formatTable(rows: StatusRow[], widths?: number[], wide = false): string {
  const w = widths ?? widthsOf(rows, wide)
  return [formatRow('header', w, wide), ...rows.map((r) => formatRow(r, w, wide))].join('')
}

export interface StatusCommandOptions extends ReadCommandOptions {
  /** CRDs to show, managed or not; all managed ones when empty. */
  names: readonly string[]
  /** The summary only (counts by state, in flight, queued, ETA), not the table. */
  summary?: boolean
  /** Keep watching, printing each change (a row, or the summary) until `signal` aborts: kubectl get -w. */
  watch?: boolean
  /** -l on the command line: exactly the CRDs it matches (kubectl), not those carrying our state besides. */
  selectorOnly?: boolean
}

/** GETs at once, when reading CRDs one by one. */
const PARALLEL_GETS = 8

/** `crd-migrator status [CRD...]`; exit code 1 when a named CRD does not exist. */
export async function runStatusCommand(config: Config, out: NodeJS.WritableStream, options: StatusCommandOptions): Promise<number> {
  return closing(commandHttp(config, 'status', options.logger, options.client), (http) => showStatus(http, config, out, options))
}

/** `status` through a client of the caller's. */
export async function showStatus(
  http: KubeHttp,
  config: Config,
  out: NodeJS.WritableStream,
  options: StatusCommandOptions,
): Promise<number> {
  const [{ crds, missing }, builtin] = await Promise.all([
    readCrds(http, config, options.names, options.selectorOnly),
    // Every built-in StorageVersionMigration; none when the API is not served; undefined when they may not be listed.
    unlessForbidden(builtinMigrationApi(http).then((api) => (api === undefined ? [] : listBuiltinMigrations(http, api)))),
  ])
  const exitCode = reportMissing(missing)
  const rows = statusRows(crds, rowConfig(config, options.names), builtin)
  const view = new StatusView(out, options, rows)
  view.first()
  if (options.watch && exitCode === 0 && options.signal) await watchRows(http, config, options, crds, builtin, view, options.signal)
  return exitCode
}

/** The named CRDs (GET each; missing: not found), else every managed CRD and every one carrying our state. */
export async function readCrds(
  http: KubeHttp,
  config: Config,
  names: readonly string[],
  selectorOnly = false,
): Promise<{ crds: CustomResourceDefinition[]; missing: string[] }> {
  if (names.length > 0) {
    const got = await getEach(http, [...new Set(names)])
    const found = new Set(got.map((c) => c.metadata.name))
    return { crds: got, missing: names.filter((n) => !found.has(n)) }
  }
  // Parsed before the list: a bad selector is CRDM_LABEL_SELECTOR (exit 2), as in migrate and plan, not the API server's 400.
  const selection = new CrdSelection(config.migrator.selector)
  const { labelSelector } = config.migrator.selector
  const byLabel = labelSelector.trim() ? await listCrds(http, labelSelector) : []
  if (selectorOnly) return { crds: byLabel, missing: [] }
  const have = new Set(byLabel.map((c) => c.metadata.name))
  const others: string[] = []
  // Names, labels and annotations only: a CRD's schema can be hundreds of kilobytes.
  for await (const page of listPages<PartialObjectMetadata>(http, CRD_API, { accept: Accept.partialObjectMetadataList, pageSize: 500 })) {
    for (const m of page.items) {
      if (have.has(m.metadata.name)) continue
      if (selection.selects(m) || readCrdState(m, config.annotations.migrating).carriesState) others.push(m.metadata.name)
    }
  }
  return { crds: [...byLabel, ...(await getEach(http, others))], missing: [] }
}

async function getEach(http: KubeHttp, names: readonly string[]): Promise<CustomResourceDefinition[]> {
  const got = await runInParallel(names, PARALLEL_GETS, (name) => unlessNotFound(getCrd(http, name)))
  return got.filter((c): c is CustomResourceDefinition => c !== undefined)
}

/** The config rows are read with: named CRDs are a selection of exactly them, managed or not. */
const rowConfig = (config: Config, names: readonly string[]): Config =>
  names.length ? { ...config, migrator: { ...config.migrator, selector: { labelSelector: '', names: [...new Set(names)] } } } : config

/** What `status` prints (docs/commands.md#commands); watching, each change after that: the changed row, at the first table's widths. */
class StatusView {
  private readonly rows = new Map<string, StatusRow>()
  private widths: number[] = []
  private lastSummary = ''
  private readonly wide: boolean

  constructor(
    private readonly out: NodeJS.WritableStream,
    private readonly options: StatusCommandOptions,
    rows: StatusRow[],
  ) {
    for (const r of rows) this.rows.set(r.name, r)
    this.wide = options.format === 'wide'
  }

  first(): void {
    const rows = [...this.rows.values()]
    const { format, summary, watch } = this.options
    const s = summarize(rows)
    this.lastSummary = summaryKey(s)
    if (isData(format)) {
      const data = summary ? s : rows.map(statusData)
      this.out.write(watch ? this.document(data) : renderData(data, format))
    } else if (summary) this.out.write(formatSummary(s))
    else if (format === 'name') this.out.write(renderNames(rows.map((r) => r.name)))
    else if (rows.length > 0) {
      this.widths = widthsOf(rows, this.wide)
      this.out.write(formatTable(rows, this.widths, this.wide) + (watch ? '' : `\n${formatSummary(s)}`))
    } else if (this.options.names.length === 0) this.out.write('no managed CRDs (see -l/--selector, --crds)\n')
  }

  /** A CRD as it is now (undefined: deleted, or no longer shown). */
  update(name: string, row: StatusRow | undefined): void {
    const before = this.rows.get(name)
    if (row === undefined) {
      if (!before) return
      this.rows.delete(name)
    } else {
      if (before && rowKey(before) === rowKey(row)) return
      this.rows.set(name, row)
    }
    if (this.options.summary) {
      const s = summarize([...this.rows.values()])
      const key = summaryKey(s)
      if (key === this.lastSummary) return
      this.lastSummary = key
      this.out.write(isData(this.options.format) ? this.document(s) : formatSummary(s))
    } else if (row) {
      if (isData(this.options.format)) this.out.write(this.document(statusData(row)))
      else if (this.options.format === 'name') this.out.write(renderNames([row.name]))
      else {
        if (this.widths.length === 0) {
          this.widths = widthsOf([row], this.wide)
          this.out.write(formatTable([], this.widths, this.wide))
        }
        this.out.write(formatRow(row, this.widths, this.wide))
      }
    }
  }

  private document(value: unknown): string {
    return this.options.format === 'json' ? `${JSON.stringify(value)}\n` : `---\n${renderData(value, 'yaml')}`
  }
}

/** A row without its ETA, which changes with every look at the clock. */
const rowKey = ({ etaSeconds: _eta, ...row }: StatusRow) => JSON.stringify(row)

/** The summary without its ETA, likewise. */
const summaryKey = (s: StatusSummary) => JSON.stringify({ ...s, etaSeconds: undefined })

/**
 * Watches the CRDs shown (by label selector, by name: the filters the controller uses)
 * and hands each change to the view until `signal` aborts. The watch's first list
 * repeats what was just read; unchanged rows print nothing.
 */
async function watchRows(
  http: KubeHttp,
  config: Config,
  options: StatusCommandOptions,
  shown: CustomResourceDefinition[],
  builtin: readonly BuiltinMigration[] | undefined,
  view: StatusView,
  signal: AbortSignal,
): Promise<void> {
  const named = options.names.length > 0
  const selector = config.migrator.selector
  // Named CRDs; else the selection, plus the CRDs shown for the state they carry.
  const shownNames = shown.map((c) => c.metadata.name)
  const watched = named
    ? new CrdSelection({ labelSelector: '', names: [...options.names] })
    : new CrdSelection({ labelSelector: selector.labelSelector, names: [...new Set([...selector.names, ...shownNames])] })
  const rowsConfig = rowConfig(config, options.names)
  // A run killed with -9 writes nothing more: its row turns stale on the clock, not on a CRD change.
  const staleTimers = new Map<string, NodeJS.Timeout>()
  const forget = (name: string) => {
    clearTimeout(staleTimers.get(name))
    staleTimers.delete(name)
  }
  const show = (crd: CustomResourceDefinition) => {
    const name = crd.metadata.name
    forget(name)
    const row = statusRows([crd], rowsConfig, builtin)[0]
    view.update(name, row)
    const state = readCrdState(crd, config.annotations.migrating)
    const due = row?.stale === false ? staleAt(state, config.migrator.takeoverAfterSeconds * 1000) : undefined
    // Node fires a delay past 2^31-1 ms at once: a far-off due date is looked at again then.
    if (due)
      staleTimers.set(
        name,
        setTimeout(() => show(crd), Math.min(due.getTime() - Date.now() + 100, 2 ** 31 - 1)),
      )
  }
  const onObject = (crd: CustomResourceDefinition) => {
    if (!watched.selects(crd) && !named && (options.selectorOnly || !readCrdState(crd, config.annotations.migrating).carriesState))
      return forget(crd.metadata.name)
    show(crd)
  }
  signal.addEventListener('abort', () => staleTimers.forEach(clearTimeout), { once: true })
  await Promise.all(
    watched.watchFilters().map((filter) =>
      listAndWatch<CustomResourceDefinition>(
        http,
        CRD_API,
        {
          onObject,
          onDeleted: (crd) => {
            forget(crd.metadata.name)
            view.update(crd.metadata.name, undefined)
          },
          onError: (err) => process.stderr.write(`crd-migrator: watch of CRDs failed, retrying: ${plainText(errorMessage(err))}\n`),
        },
        signal,
        { ...filter, pageSize: 50 },
      ),
    ),
  )
}
