import type { MachineInfo } from './stats.js'
import type { WebhookCaseResult } from './webhook-load.js'
import type { EtcdProof } from './fixtures.js'

export type Tool = 'ours-default' | 'ours-best' | 'ours-sweep' | 'ceiling' | 'ceiling-sweep' | 'ksvm' | 'ksvm-manifest' | 'ksvm-default'

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
  failedWrites: number | null
  outcome: string
  etcd: EtcdProof
  notes?: string
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
  webhook: { pinned: boolean; cases: WebhookCaseResult[] } | null
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
      `Load average before/after: ${r.loadAverage.before.join(' ')} / ${r.loadAverage.after.join(' ')}. Run ${r.startedAt}${r.smoke ? ' (smoke sizes)' : ''}.` +
      (r.childNodeOptions.length ? ` Ours and the ceiling ran with node ${r.childNodeOptions.join(' ')}.` : ''),
  )
  if (r.migrations.length) {
    lines.push('')
    lines.push(
      '| objects | migrator | settings | rewrite s | objects/s | p50 ms | p99 ms | peak RSS MB | client CPU ms / 1k obj | failed | whole run s | etcd: all at v2 |',
    )
    lines.push('|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|')
    for (const run of r.migrations.filter((x) => !x.tool.endsWith('-sweep'))) {
      lines.push(
        `| ${int(run.size)} | ${run.tool} | ${run.settings} | ${fmt(run.rewriteMs / 1000, 2)} | ${int(run.objectsPerSecond)} | ${fmt(run.p50Ms, 2)} | ${fmt(run.p99Ms, 2)} | ${fmt(run.peakRssMb)} | ${int(run.cpuMsPer1000)} | ${run.failedWrites ?? 'n/a'} | ${fmt(run.wallMs / 1000, 2)} | ${run.etcd.allV2 ? `yes (${int(run.etcd.total)})` : `NO ${JSON.stringify(run.etcd.byApiVersion)}`} |`,
      )
    }
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
  if (r.webhook) {
    lines.push('')
    lines.push(
      `Webhook \`/validate-crd\` over HTTPS, server ${r.webhook.pinned ? 'pinned to core 1 and vegeta (the load generator) to core 0 with taskset' : 'and vegeta NOT pinned (no taskset)'}; fixed rate = open loop, saturation = as fast as the connections are answered; AdmissionReview = UPDATE of a frozen CRD with object + oldObject. "floor" = a bare node:https server that only reads and JSON.parses the review and answers allowed: what any Node webhook pays here.`,
    )
    lines.push('')
    lines.push('| server | CRD | review body | decision | load | req/s | p50 ms | p90 ms | p99 ms | max ms | errors/non-2xx |')
    lines.push('|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|')
    for (const c of r.webhook.cases) {
      lines.push(
        `| ${c.server} | ${c.crd} | ${fmt(c.bodyBytes / 1024, 0)} KB | ${c.server === 'floor' ? 'n/a' : c.decision} | ${c.mode === 'fixed' ? `${c.targetRate} req/s` : `saturation (${c.connections} conns)`} | ${int(c.requestsPerSecond)} | ${fmt(c.p50Ms, 2)} | ${fmt(c.p90Ms, 2)} | ${fmt(c.p99Ms, 2)} | ${fmt(c.maxMs, 2)} | ${c.errors}/${c.non2xx} |`,
      )
    }
  }
  lines.push('')
  lines.push('| target | wanted | measured | met |')
  lines.push('|---|---|---|---|')
  for (const t of r.targets) lines.push(`| ${t.name} | ${t.target} | ${t.value} | ${t.met === null ? 'n/a' : t.met ? 'yes' : '**no**'} |`)
  if (r.ksvm) {
    lines.push('')
    lines.push(
      `KSVM: ${r.ksvm.module} ${r.ksvm.version}, \`migrator\` built from the Go module (${r.ksvm.buildSeconds !== null ? `build ${fmt(r.ksvm.buildSeconds, 0)} s` : 'cached build'}). ${r.ksvm.defaults} ${r.ksvm.notes}`,
    )
  }
  return `${lines.join('\n')}\n`
}
