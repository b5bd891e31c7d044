import type { ConversionProbe } from './conversion.js'
import { planVsActualLine } from './plan-estimate.js'
import type { ForegroundStats } from './foreground.js'
import type { LoadSummary, MachineInfo } from './stats.js'
import type { WebhookCaseResult } from './webhook-load.js'
import type { EtcdProof } from './fixtures.js'

export type Tool =
  | 'ours-default'
  | 'ours-best'
  | 'ours-sweep'
  | 'ours-neighbour'
  | 'ours-neighbour-apf'
  | 'ceiling'
  | 'ceiling-apply'
  | 'ceiling-sweep'
  | 'ksvm'
  | 'ksvm-manifest'
  | 'ksvm-default'

/** What the conversion webhook saw of one run of the conversion case. */
export interface RunConversion {
  /** The webhook's delay before each answer during the run. */
  webhookDelayMs: number
  /** The no-op write the migrator sent (ours: as its requests showed). */
  write: string
  /** ConversionReviews from just before the migrating process started until the webhook was quiet for 0.5 s after it exited. */
  reviews: number
  /** Objects in those reviews. */
  objects: number
  /** Objects converted, by `from→to`. */
  byDirection: Record<string, number>
  reviewsPerObject: number
  objectsPerReview: number | null
  /** Of `reviews`, those that came after the migrating process had exited. */
  reviewsAfterExit: number
  /** How long after the migrating process exited the last review came (the API server's watch caches catching up). */
  lastReviewAfterExitMs: number
  /** Setup, not counted above: reviews while the N objects were created at v1, and for the storage flip (its probe object included). */
  setupReviews: { create: number; flip: number }
  /** How many objects carried each managedFields entry (`manager operation version`) before and after the run. */
  managedFieldsBefore: Record<string, number>
  managedFieldsAfter: Record<string, number>
  /** ours: the requests it sent, by kind (`method target content-type`). */
  requests?: Record<string, number>
  /** ours: the migration result's `conversion` report, when the product gives one. */
  productReport?: unknown
}

export interface MigrationRun {
  size: number
  tool: Tool
  /** Human-readable settings of the run. */
  settings: string
  group: string
  /** Creating the N objects at v1 (setup, not measured work). */
  createMs: number
  /** Object rewriting: ours = its StorageVersionMigration phase; ceiling = all of it; KSVM = Running -> Succeeded. */
  rewriteMs: number
  /** The whole run: ours = migrateCrd (freeze ... storedVersions, managedFields pass, unfreeze); KSVM = created -> Succeeded. */
  wallMs: number
  objectsPerSecond: number
  p50Ms: number | null
  p99Ms: number | null
  peakRssMb: number | null
  baselineRssMb: number | null
  /** CPU time of the migrating process per 1,000 objects (ours and the ceiling; KSVM from /proc). */
  cpuMsPer1000: number | null
  /**
   * CPU per 1,000 objects of the rewriting alone (what `rewriteMs` times): ours = its
   * StorageVersionMigration phase (list + writes, the ceiling's whole work); the ceiling =
   * cpuMsPer1000. Absent for KSVM.
   */
  rewriteCpuMsPer1000?: number | null
  failedWrites: number | null
  outcome: string
  etcd: EtcdProof
  notes?: string
  /** The conversion case only. */
  conversion?: RunConversion
  /** 1-minute load average when the run started (setup done) and when it ended. */
  load?: { start: number; end: number }
  /** ours: the adaptive concurrency limit during the storage phase (crd_migrator_concurrency_limit). */
  concurrencyLimit?: { final: number; mean: number; max: number } | null
  /** ours: 429 answers it got. */
  throttled?: number
  /** ours: when the run and each phase ran (Date.now()). */
  timeline?: Array<{ what: string; from: number; to: number }>
  /** ours: the lossless check before its storage phase (method, objects compared, time). */
  lossless?: { method: string; checked: number; durationMs: number }
  /** ours at the defaults, main case: `plan --measure`'s estimate made before the run, and the run's whole time (plan-estimate.ts). */
  planEstimate?: {
    estimateMs: number
    /** The estimate's range, fastest to slowest (a measured basis). */
    estimateRangeMs: [number, number] | null
    source: string
    objectsPerSecond: number
    samples: number
    dryRunPerSecond: number | null
    actualMs: number
    ratio: number
  }
}

/**
 * The good-neighbour case: a foreground client (another, non-exempt tenant) measured idle,
 * during a migration by ours at its defaults without the chart's FlowSchema, and with it.
 */
export interface NeighbourCase {
  size: number
  /** Who the foreground is, what it does, and the priority level APF put it in. */
  foreground: { user: string; priorityLevel: string; ratePerSecond: number; what: string }
  /** The migrator's identity and its priority level without / with the FlowSchema. */
  migrator: { user: string; priorityLevelWithout: string; priorityLevelWith: string }
  /** The objects installed for the "with" run (from charts/crd-migrator/files/flowcontrol.yaml). */
  flowControl: { priorityLevel: string; nominalConcurrencyShares: number; nominalSeats: number | null; flowSchemas: string[] }
  idle: ForegroundStats
  without: { foreground: ForegroundStats; migration: MigrationRun }
  with: { foreground: ForegroundStats; migration: MigrationRun }
  /** Foreground p99 over its idle p99. */
  p99RatioWithout: number | null
  p99RatioWith: number | null
  /** 1 - objects/s with the FlowSchema over objects/s without. */
  throughputLoss: number | null
}

/** The conversion-webhook case: the same migration with a CRD whose v1 and v2 convert through a webhook. */
export interface ConversionCase {
  /** What converts, where it runs. */
  webhook: string
  sizes: number[]
  /** Webhook delays the runs were made with (0 and the slow one). */
  delaysMs: number[]
  runs: MigrationRun[]
  ratios: Array<{
    size: number
    delayMs: number
    oursBestVsCeiling: number | null
    oursDefaultVsCeiling: number | null
    /** The ceiling writing with server-side apply vs with a merge patch. */
    ceilingApplyVsCeiling: number | null
  }>
  probe: ConversionProbe | null
}

export interface Target {
  name: string
  target: string
  value: string
  met: boolean | null
}

export interface BenchResult {
  version: 1
  startedAt: string
  finishedAt: string
  command: string
  smoke: boolean
  /** Node flags the ours and ceiling processes ran with (--child-node-options). */
  childNodeOptions: string[]
  /** The node flags of the product's executable, which ours ran with (before childNodeOptions). */
  oursNodeFlags?: string[]
  machine: MachineInfo
  loadAverage: { before: number[]; after: number[] }
  sizes: number[]
  bestConcurrency: number | null
  ceilingConcurrency: number | null
  ksvm: { module: string; version: string; buildSeconds: number | null; builtNow: boolean; defaults: string; notes: string } | null
  migrations: MigrationRun[]
  ratios: Array<{
    size: number
    oursBestVsCeiling: number | null
    oursDefaultVsCeiling: number | null
    oursBestVsKsvm: number | null
    oursDefaultVsKsvm: number | null
    ceilingVsKsvm: number | null
    ksvmTool: Tool | null
  }>
  webhook: { pinned: boolean; repeat: number; cases: WebhookCaseResult[] } | null
  /** The conversion-webhook case (null when skipped); its runs are not in `migrations`. */
  conversion: ConversionCase | null
  /** The good-neighbour case (null when skipped); its runs are not in `migrations`. */
  neighbour: NeighbourCase | null
  /** Who the migrating processes ran as: a ServiceAccount, never system:masters (exempt from APF). */
  identity: { migrator: string; priorityLevel: string } | null
  /** The 1-minute load average, sampled every 5 s from start to end. */
  loadDuring: LoadSummary
  targets: Target[]
  allProvedInEtcd: boolean
}

const fmt = (n: number | null | undefined, d = 1) =>
  n === null || n === undefined ? 'n/a' : n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d })
const int = (n: number | null | undefined) => (n === null || n === undefined ? 'n/a' : Math.round(n).toLocaleString('en-US'))

export function renderMarkdown(r: BenchResult): string {
  const m = r.machine
  const lines: string[] = []
  lines.push(
    `Machine: ${m.cpuModel}, ${m.cores} cores, ${m.memoryGb} GB RAM, ${m.os}; Node ${m.node}; kube-apiserver ${m.kubeVersion ?? '?'} + etcd ${m.etcdVersion ?? '?'} (local, loopback, same machine). ` +
      `Load average before/after: ${r.loadAverage.before.join(' ')} / ${r.loadAverage.after.join(' ')}; during the run (1-minute, every 5 s): ${loadText(r.loadDuring)}. Run ${r.startedAt}${r.smoke ? ' (smoke sizes)' : ''}.` +
      (r.oursNodeFlags?.length
        ? ` Ours ran with the node flags of the crd-migrator executable, ${r.oursNodeFlags.join(' ')} (its shebang; the image runs serve, and the webhook here, without).`
        : '') +
      (r.childNodeOptions.length ? ` Ours and the ceiling ran with node ${r.childNodeOptions.join(' ')}.` : '') +
      (r.identity
        ? ` The migrators ran as ${r.identity.migrator} (APF priority level ${r.identity.priorityLevel}; system:masters would be exempt).`
        : ''),
  )
  if (r.targets.length) {
    lines.push('')
    lines.push('| target | wanted | measured | met |')
    lines.push('|---|---|---|---|')
    for (const t of r.targets) lines.push(`| ${t.name} | ${t.target} | ${t.value} | ${t.met === null ? 'n/a' : t.met ? 'yes' : '**no**'} |`)
  }
  if (r.migrations.length) {
    lines.push('')
    lines.push(
      '| objects | migrator | settings | rewrite s | objects/s | p50 ms | p99 ms | peak RSS MB | client CPU ms / 1k obj: rewrite / whole run | failed | whole run s | load | etcd: all at v2 |',
    )
    lines.push('|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|')
    for (const run of r.migrations.filter((x) => !x.tool.endsWith('-sweep'))) lines.push(runRow(run))
    const plan = planVsActualLine(r.migrations)
    if (plan) lines.push('', plan)
    const sweep = r.migrations.filter((x) => x.tool === 'ours-sweep')
    if (sweep.length) {
      lines.push('')
      lines.push(
        `Concurrency sweep of ours (qps 0, ${int(sweep[0]!.size)} objects): ${sweep.map((s) => `${s.settings.replace(/, qps 0/, '')}: ${int(s.objectsPerSecond)}/s`).join(', ')}; best: ${r.bestConcurrency ?? 'n/a'}.`,
      )
    }
    const ceilingSweep = r.migrations.filter((x) => x.tool === 'ceiling-sweep')
    if (ceilingSweep.length) {
      lines.push('')
      lines.push(
        `Concurrency sweep of the ceiling (${int(ceilingSweep[0]!.size)} objects): ${ceilingSweep.map((s) => `${s.settings.replace(/, no limit/, '')}: ${int(s.objectsPerSecond)}/s`).join(', ')}; best: ${r.ceilingConcurrency ?? 'n/a'}.`,
      )
    }
    lines.push('')
    lines.push('| objects | ours best / ceiling | ours default / ceiling | ours best / KSVM | ours default / KSVM | ceiling / KSVM |')
    lines.push('|---:|---:|---:|---:|---:|---:|')
    for (const x of r.ratios) {
      lines.push(
        `| ${int(x.size)} | ${fmt(x.oursBestVsCeiling, 2)} | ${fmt(x.oursDefaultVsCeiling, 2)} | ${fmt(x.oursBestVsKsvm, 1)} | ${fmt(x.oursDefaultVsKsvm, 1)} | ${fmt(x.ceilingVsKsvm, 1)} |`,
      )
    }
  }
  // Ours' runs, plain and webhook-converted: what the lossless check cost of each.
  const checked = [...r.migrations, ...(r.conversion?.runs ?? [])].filter((x) => x.lossless)
  if (checked.length) {
    lines.push('')
    lines.push(
      `Lossless check (ours, before the storage phase; part of the whole run): ${checked
        .map(
          (x) =>
            `${int(x.size)} objects${x.conversion ? ` (webhook, ${x.conversion.webhookDelayMs} ms)` : ''}, ${x.tool}: ${x.lossless!.method} ${fmt(x.lossless!.durationMs / 1000, 2)} s = ${fmt((100 * x.lossless!.durationMs) / x.wallMs, 1)}% of ${fmt(x.wallMs / 1000, 2)} s`,
        )
        .join('; ')}.`,
    )
  }
  if (r.webhook) {
    lines.push('')
    lines.push(
      `Webhook \`/validate-crd\` over HTTPS, server ${r.webhook.pinned ? 'pinned to core 1 and vegeta (the load generator) to core 0 with taskset' : 'and vegeta NOT pinned (no taskset)'}; fixed rate = open loop, saturation = as fast as the connections are answered; AdmissionReview = UPDATE of a frozen CRD with object + oldObject. "floor" = a bare node:https server that only reads and JSON.parses the review and answers allowed: what any Node webhook pays here.${r.webhook.repeat > 1 ? ` Each case ran ${r.webhook.repeat} times, ours and the floor taking turns; the figures are the medians (errors summed), the p99 of every repetition in the last column.` : ''}`,
    )
    lines.push('')
    lines.push(
      '| server | CRD | review body | decision | load | req/s | p50 ms | p90 ms | p99 ms | max ms | errors/non-2xx | p99 of each repetition |',
    )
    lines.push('|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|---|')
    for (const c of r.webhook.cases) {
      lines.push(
        `| ${c.server} | ${c.crd} | ${fmt(c.bodyBytes / 1024, 0)} KB | ${c.server === 'floor' ? 'n/a' : c.decision} | ${c.mode === 'fixed' ? `${c.targetRate} req/s` : `saturation (${c.connections} conns)`} | ${int(c.requestsPerSecond)} | ${fmt(c.p50Ms, 2)} | ${fmt(c.p90Ms, 2)} | ${fmt(c.p99Ms, 2)} | ${fmt(c.maxMs, 2)} | ${c.errors}/${c.non2xx} | ${c.repeats ? c.repeats.map((x) => fmt(x.p99Ms, 2)).join(', ') : '-'} |`,
      )
    }
  }
  if (r.neighbour) renderNeighbour(r.neighbour, lines)
  if (r.conversion) renderConversion(r.conversion, lines)
  if (r.ksvm) {
    lines.push('')
    lines.push(
      `KSVM: ${r.ksvm.module} ${r.ksvm.version}, \`migrator\` built from the Go module (${r.ksvm.buildSeconds !== null ? `build ${fmt(r.ksvm.buildSeconds, 0)} s` : 'cached build'}). ${r.ksvm.defaults} ${r.ksvm.notes}`,
    )
  }
  return `${lines.join('\n')}\n`
}

function runRow(run: MigrationRun): string {
  const limit = run.concurrencyLimit
    ? `; adaptive limit mean ${fmt(run.concurrencyLimit.mean, 0)}, max ${run.concurrencyLimit.max}, last ${run.concurrencyLimit.final}`
    : ''
  const throttled = run.throttled ? `; ${int(run.throttled)} × 429` : ''
  return `| ${int(run.size)} | ${run.tool} | ${run.settings}${limit}${throttled} | ${fmt(run.rewriteMs / 1000, 2)} | ${int(run.objectsPerSecond)} | ${fmt(run.p50Ms, 2)} | ${fmt(run.p99Ms, 2)} | ${fmt(run.peakRssMb)} | ${run.rewriteCpuMsPer1000 != null && run.rewriteCpuMsPer1000 !== run.cpuMsPer1000 ? `${int(run.rewriteCpuMsPer1000)} / ` : ''}${int(run.cpuMsPer1000)} | ${run.failedWrites ?? 'n/a'} | ${fmt(run.wallMs / 1000, 2)} | ${run.load ? `${fmt(run.load.start, 2)} → ${fmt(run.load.end, 2)}` : 'n/a'} | ${run.etcd.allV2 ? `yes (${int(run.etcd.total)})` : `NO ${JSON.stringify(run.etcd.byApiVersion)}`} |`
}

function loadText(l: LoadSummary): string {
  return l.samples ? `min ${fmt(l.min, 2)}, mean ${fmt(l.mean, 2)}, max ${fmt(l.max, 2)} (${l.samples} samples)` : 'not sampled'
}

function renderNeighbour(n: NeighbourCase, lines: string[]): void {
  const fg = (s: ForegroundStats) => `${fmt(s.p50Ms, 2)} / ${fmt(s.p99Ms, 2)} / ${fmt(s.maxMs, 2)}`
  lines.push('')
  lines.push(
    `Good neighbour (${int(n.size)} objects, ours at its defaults): the foreground client ${n.foreground.user} (APF priority level ${n.foreground.priorityLevel}) ${n.foreground.what} at ${n.foreground.ratePerSecond} requests/s, alone, then during a migration (the requests sent from the freeze to the unfreeze, not while the migrating process loaded its modules) without and with the chart's API Priority and Fairness objects (files/flowcontrol.yaml: priority level ${n.flowControl.priorityLevel}, nominalConcurrencyShares ${n.flowControl.nominalConcurrencyShares}, ${n.flowControl.nominalSeats ?? '?'} seats; FlowSchemas ${n.flowControl.flowSchemas.join(', ')}). The migrator (${n.migrator.user}) was in ${n.migrator.priorityLevelWithout} without them and in ${n.migrator.priorityLevelWith} with them.`,
  )
  lines.push('')
  lines.push(
    '| phase | foreground requests | errors | foreground p50 / p99 / max ms | p99 / idle p99 | migration objects/s | migration p50 / p99 ms | 429s |',
  )
  lines.push('|---|---:|---:|---:|---:|---:|---:|---:|')
  lines.push(`| idle | ${int(n.idle.requests)} | ${n.idle.errors} | ${fg(n.idle)} | 1.00 | n/a | n/a | n/a |`)
  for (const [name, x, ratio] of [
    ['migration, no FlowSchema', n.without, n.p99RatioWithout],
    ['migration, with FlowSchema', n.with, n.p99RatioWith],
  ] as const) {
    lines.push(
      `| ${name} | ${int(x.foreground.requests)} | ${x.foreground.errors} | ${fg(x.foreground)} | ${fmt(ratio, 2)} | ${int(x.migration.objectsPerSecond)} | ${fmt(x.migration.p50Ms, 2)} / ${fmt(x.migration.p99Ms, 2)} | ${x.migration.throttled ?? 0} |`,
    )
  }
  lines.push('')
  const slow = (x: ForegroundStats) => x.slowest.map((s) => `${fmt(s.ms, 0)} ms at ${fmt(s.atSeconds, 1)} s`).join(', ')
  lines.push(
    `Migration throughput lost to the FlowSchema: ${n.throughputLoss === null ? 'n/a' : `${fmt(n.throughputLoss * 100, 1)}%`}. The slowest foreground requests (seconds after the migration started): without ${slow(n.without.foreground)}; with ${slow(n.with.foreground)}.`,
  )
}

const censusText = (c: Record<string, number>) =>
  Object.entries(c)
    .map(([k, n]) => `\`${k}\` ${int(n)}`)
    .join(', ') || 'none'

function renderConversion(c: ConversionCase, lines: string[]): void {
  lines.push('')
  lines.push(
    `Conversion webhook case: ${c.webhook} Same starting state (N objects created at v1, storage flipped to v2), then migrated; the etcd proof also checks every stored object's v2 shape (spec.template.containers[0].image and spec.template.replicas as created, no spec.image or spec.replicas). Reviews are counted from just before the migrating process starts until the webhook has been quiet for 0.5 s after it exits (ours: its whole run, freeze to unfreeze). "ceiling-apply" = the ceiling writing with a server-side apply of an empty configuration instead of a merge patch. Both ceilings run at ours-best's concurrency: through a webhook the rate is latency-bound and follows the writes in flight.`,
  )
  lines.push('')
  lines.push(
    '| objects | webhook delay | migrator | settings | write | rewrite s | objects/s | p50 ms | p99 ms | reviews / object | v1→v2 / object | v2→v1 / object | objects / review | failed | whole run s | etcd: all at v2, v2 shape |',
  )
  lines.push('|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|')
  for (const run of c.runs) {
    const v = run.conversion!
    const per = (k: string) => fmt((v.byDirection[k] ?? 0) / run.size, 2)
    const shape = run.etcd.shape
    lines.push(
      `| ${int(run.size)} | ${v.webhookDelayMs} ms | ${run.tool} | ${run.settings} | ${v.write} | ${fmt(run.rewriteMs / 1000, 2)} | ${int(run.objectsPerSecond)} | ${fmt(run.p50Ms, 2)} | ${fmt(run.p99Ms, 2)} | ${fmt(v.reviewsPerObject, 2)} | ${per('v1→v2')} | ${per('v2→v1')} | ${fmt(v.objectsPerReview, 2)} | ${run.failedWrites ?? 'n/a'} | ${fmt(run.wallMs / 1000, 2)} | ${run.etcd.allV2 ? `yes (${int(run.etcd.total)}, shape ${int(shape?.ok)})` : `NO ${JSON.stringify(run.etcd.byApiVersion)}${shape?.firstBad ? `; ${shape.firstBad}` : ''}`} |`,
    )
  }
  lines.push('')
  lines.push('| objects | webhook delay | ours best / ceiling | ours default / ceiling | ceiling-apply / ceiling |')
  lines.push('|---:|---:|---:|---:|---:|')
  for (const x of c.ratios)
    lines.push(
      `| ${int(x.size)} | ${x.delayMs} ms | ${fmt(x.oursBestVsCeiling, 2)} | ${fmt(x.oursDefaultVsCeiling, 2)} | ${fmt(x.ceilingApplyVsCeiling, 2)} |`,
    )
  if (c.runs.length) {
    const befores = new Set(c.runs.map((m) => censusText(m.conversion!.managedFieldsBefore)))
    lines.push('')
    lines.push(
      `managedFields of the objects before each run (entries \`manager operation version\`: objects): ${befores.size === 1 ? `${[...befores][0]} (every run)` : c.runs.map((m) => `${m.tool} ${m.conversion!.webhookDelayMs} ms: ${censusText(m.conversion!.managedFieldsBefore)}`).join('; ')}. After: ${c.runs.map((m) => `${m.tool} ${m.conversion!.webhookDelayMs} ms: ${censusText(m.conversion!.managedFieldsAfter)}`).join('; ')}.`,
    )
    const setup = c.runs[0]!.conversion!.setupReviews
    lines.push('')
    lines.push(
      `Setup (not counted in the runs), first run: creating ${int(c.runs[0]!.size)} objects at v1 cost ${int(setup.create)} reviews, the storage flip ${int(setup.flip)}. Reviews after the migrating process exited (the API server's v1 watch cache still converting the writes' events, one at a time), and when the last one came: ${c.runs.map((m) => `${m.tool} ${m.conversion!.webhookDelayMs} ms: ${m.conversion!.reviewsAfterExit} in ${fmt(m.conversion!.lastReviewAfterExitMs / 1000, 1)} s`).join(', ')}.`,
    )
    for (const m of c.runs.filter((x) => x.conversion?.requests)) {
      lines.push('')
      lines.push(
        `Requests of ${m.tool} (${m.conversion!.webhookDelayMs} ms): ${Object.entries(m.conversion!.requests!)
          .map(([k, n]) => `${k}: ${int(n)}`)
          .join(', ')}.`,
      )
    }
  }
  if (c.probe) {
    lines.push('')
    lines.push(`Where the ConversionReviews come from (probe, group ${c.probe.group}): ${c.probe.notes}`)
    lines.push('')
    lines.push(
      '| objects | managedFields before | request | HTTP | rv moved | managedFields after | reviews by the answer | reviews in all | by direction | objects / review |',
    )
    lines.push('|---|---|---|---:|---|---|---:|---:|---|---:|')
    for (const row of c.probe.rows) {
      lines.push(
        `| ${row.objects} | ${row.managedFields.map((f) => `\`${f}\``).join(', ') || 'none'} | ${row.request} | ${row.status} | ${row.rvMoved === null ? 'n/a' : row.rvMoved ? 'yes' : 'no'} | ${row.managedFieldsAfter === null ? 'n/a' : row.managedFieldsAfter.map((f) => `\`${f}\``).join(', ') || 'none'} | ${row.inRequest} | ${row.reviews} | ${
          Object.entries(row.byDirection)
            .map(([k, n]) => `${k} ${n}`)
            .join(', ') || '-'
        } | ${row.reviews ? fmt(row.objectsConverted / row.reviews, 2) : 'n/a'} |`,
      )
    }
  }
}
