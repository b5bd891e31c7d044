/** The results of `npm run bench:client` (client-ceiling.ts) as markdown. */
import type { LoadSummary, MachineInfo } from './stats.js'

/** The APF bound the 1,000,000-object estimate assumes (docs/performance.md "On paper"). */
export const APF_BOUND = { low: 1_500, high: 3_000 }

export interface CeilingRun {
  /** The adaptive limit's cap: `default (64)` or the --concurrency given. */
  concurrency: string
  /** The client's node flags: the product's (its shebang's) or `none`. */
  nodeFlags: string
  objects: number
  objectsPerSecond: number
  wallSeconds: number
  clientCpuMsPer1000: number
  /** Client CPU seconds per wall second: the cores it used. */
  clientCores: number
  clientUserMs: number
  clientSystemMs: number
  eventLoopUtilization: number
  gcMs: number
  gcCount: number
  /** objects / client CPU seconds. */
  writesPerClientCoreSecond: number
  stubCpuMsPer1000: number
  stubCores: number
  listPages: number
  patches: number
  adaptiveLimitAtEnd: number | null
  retries: number
  peakRssMb: number | null
  /** Set when the run did not rewrite every object exactly as expected. */
  error?: string
}

export interface ClientCeilingReport {
  command: string
  startedAt: string
  machine: MachineInfo
  loadBefore: number[]
  loadDuring: LoadSummary
  loadAfter: number[]
  objects: number
  productNodeFlags: string[]
  smoke: boolean
  runs: CeilingRun[]
}

const fmt = (n: number | null) => (n === null ? '–' : n.toLocaleString('en-US'))

/** The paragraph that puts the runs against the APF bound. */
export function whatItMeans(report: ClientCeilingReport): string {
  const good = report.runs.filter((r) => !r.error)
  const product = good.filter((r) => r.nodeFlags !== 'none')
  if (!product.length) return 'No run of the product with its node flags succeeded: nothing to conclude.'
  const perCore = Math.max(...product.map((r) => r.writesPerClientCoreSecond))
  const fastest = product.reduce((a, b) => (b.objectsPerSecond > a.objectsPerSecond ? b : a))
  // Event loop busy near 1 and a full core: the one thread is the bound. Busy but less than a
  // core: the thread had work but the machine gave its core to others (a loaded machine).
  const busy = fastest.eventLoopUtilization >= 0.9
  const bound =
    busy && fastest.clientCores >= 0.9
      ? 'the one thread was the bound'
      : busy
        ? 'it had work all the time but got less than a core from this machine, so one process can do more on a core of its own'
        : 'not saturated, so the stub or the machine bounded it and one process can do more'
  const cores = (rate: number) => (rate / perCore).toFixed(2)
  const verdict =
    perCore >= APF_BOUND.high
      ? `one process on one core can drive the whole APF bound (${fmt(APF_BOUND.low)}–${fmt(APF_BOUND.high)} writes/s): the estimate's bound stays the APF seats`
      : perCore >= APF_BOUND.low
        ? `one process on one core reaches the low end of the APF bound (${fmt(APF_BOUND.low)} writes/s) but not the high end (${fmt(APF_BOUND.high)}): above ~${fmt(perCore)}/s the migrator process, not the API servers, is the bound`
        : `one process falls short of the APF bound (${fmt(APF_BOUND.low)}–${fmt(APF_BOUND.high)} writes/s): the estimate's bound is the client, ~${fmt(perCore)} writes/s per process, unless migrations are spread over replicas`
  const flagsLine = flagComparison(good)
  return [
    `With the product's node flags the client spends at best ${fmt(product.find((r) => r.writesPerClientCoreSecond === perCore)!.clientCpuMsPer1000)} ms of CPU per 1,000 objects: **${fmt(perCore)} writes/s per core of the client**.`,
    `The APF bound of the 1,000,000-object estimate would take ${cores(APF_BOUND.low)}–${cores(APF_BOUND.high)} cores of it; a Node process runs its JavaScript on one thread, so ${verdict}.`,
    `Its fastest run here did ${fmt(fastest.objectsPerSecond)} objects/s using ${fastest.clientCores} cores (event loop ${Math.round(fastest.eventLoopUtilization * 100)}% busy: ${bound}), while the stub took ${fastest.stubCores} cores.`,
    flagsLine,
    report.smoke ? '_A smoke run: too few objects for these figures to mean much._' : '',
  ]
    .filter(Boolean)
    .join(' ')
}

/** The product's node flags against none: CPU per 1,000 objects and GC, mean over the caps. */
function flagComparison(runs: CeilingRun[]): string {
  const mean = (rs: CeilingRun[], f: (r: CeilingRun) => number) => rs.reduce((s, r) => s + f(r), 0) / rs.length
  const withFlags = runs.filter((r) => r.nodeFlags !== 'none')
  const without = runs.filter((r) => r.nodeFlags === 'none')
  if (!withFlags.length || !without.length) return ''
  const cpu = mean(withFlags, (r) => r.clientCpuMsPer1000) / mean(without, (r) => r.clientCpuMsPer1000)
  return `The node flags (${withFlags[0]!.nodeFlags}) cost ${cpu.toFixed(2)}× the client CPU per object of Node's defaults (GC ${fmt(Math.round(mean(withFlags, (r) => r.gcMs)))} against ${fmt(Math.round(mean(without, (r) => r.gcMs)))} ms per run, mean over the caps).`
}

export function renderClientCeiling(report: ClientCeilingReport): string {
  const m = report.machine
  const rows = report.runs.map(
    (r) =>
      `| ${r.concurrency} | ${r.nodeFlags === 'none' ? 'none' : 'product'} | ${fmt(r.objectsPerSecond)} | ${r.wallSeconds} | ${fmt(r.clientCpuMsPer1000)} | ${r.clientCores} | ${r.eventLoopUtilization} | ${fmt(r.gcMs)} (${r.gcCount}) | **${fmt(r.writesPerClientCoreSecond)}** | ${fmt(r.stubCpuMsPer1000)} | ${r.stubCores} | ${fmt(r.adaptiveLimitAtEnd)} | ${fmt(r.peakRssMb)} | ${r.error ? `FAILED: ${r.error}` : 'ok'} |`,
  )
  return `# The client's own ceiling${report.smoke ? ' (smoke)' : ''}

\`${report.command}\` — ${report.startedAt}

Machine: ${m.cores} cores, ${m.cpuModel}, ${m.memoryGb} GB, ${m.os}, Node ${m.node}. Load average (1/5/15 min) before
${report.loadBefore.join(' / ')}, after ${report.loadAfter.join(' / ')}; 1-min load during the runs
${report.loadDuring.min}–${report.loadDuring.max} (mean ${report.loadDuring.mean}).

The product's storage phase (\`runPhase\`, metadata-only list pages + a no-op merge patch per
object, its KubeHttp and adaptive limit) over ${fmt(report.objects)} objects of one resource
served by a stub API server that answers cheaply (its own process). Client and stub CPU
are their own processes' (user + system); "product" node flags are the CLI's shebang
(\`${report.productNodeFlags.join(' ')}\`).

## What it means

${whatItMeans(report)}

## Runs

| cap | node flags | objects/s | wall s | client CPU ms / 1k | client cores | event loop busy | GC ms (count) | writes/s per client core | stub CPU ms / 1k | stub cores | limit at end | peak RSS MB | |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
${rows.join('\n')}

"client cores" is client CPU seconds per wall second; "event loop busy" is Node's event loop
utilisation over the phase (it counts time the thread waited for a core as busy: on a loaded
machine it is near 1 with less than a core); "writes/s per client core" is objects / client
CPU seconds; "limit at end" is the adaptive limit when the phase ended.
`
}
