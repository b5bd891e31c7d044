/**
 * The bench's result (latest.json) from everything it measured: the ratios of ours to the
 * ceiling and to KSVM at each size, the issue's targets (targets.ts), and whether every
 * run was proved in etcd.
 */
import type { BenchSettings } from './flags.js'
import { KSVM_MODULE, type KsvmBuild } from './ksvm.js'
import { KSVM_UNTHROTTLED } from './migration-runs.js'
import type { BenchResult, ConversionCase, MigrationRun, NeighbourCase, Tool } from './report.js'
import { loadAverage, round } from './stats.js'
import { issueTargets } from './targets.js'

/** What main() gathered for the result. */
export interface Measured {
  startedAt: string
  before: number[]
  loadDuring: BenchResult['loadDuring']
  machine: BenchResult['machine']
  webhook: BenchResult['webhook']
  conversion: ConversionCase | null
  neighbour: NeighbourCase | null
  identity: BenchResult['identity']
  migrations: MigrationRun[]
  bestConcurrency: number | null
  ceilingConcurrency: number | null
  ksvm: KsvmBuild | undefined
  ksvmNote: string
}

export function summarize(settings: BenchSettings, x: Measured): BenchResult {
  const { sizes } = settings
  const find = (size: number, tool: Tool) => x.migrations.find((m) => m.size === size && m.tool === tool)
  const ratio = (a: MigrationRun | undefined, b: MigrationRun | undefined) =>
    a && b ? round(a.objectsPerSecond / b.objectsPerSecond, 2) : null
  const ratios = sizes.map((size) => {
    // Against KSVM's fastest configuration at this size (the hardest comparison for us).
    const ksvmRuns = x.migrations
      .filter((m) => m.size === size && m.tool.startsWith('ksvm'))
      .sort((a, b) => b.objectsPerSecond - a.objectsPerSecond)
    const k = ksvmRuns[0]
    return {
      size,
      oursBestVsCeiling: ratio(find(size, 'ours-best'), find(size, 'ceiling')),
      oursDefaultVsCeiling: ratio(find(size, 'ours-default'), find(size, 'ceiling')),
      oursBestVsKsvm: ratio(find(size, 'ours-best'), k),
      oursDefaultVsKsvm: ratio(find(size, 'ours-default'), k),
      // The most any client could show over KSVM here: the API server's own limit.
      ceilingVsKsvm: ratio(find(size, 'ceiling'), k),
      ksvmTool: k?.tool ?? null,
    }
  })
  const targets = issueTargets(sizes, x, find)
  return {
    version: 1,
    startedAt: x.startedAt,
    finishedAt: new Date().toISOString(),
    command: `node dist-dev/dev/bench/main.js ${process.argv.slice(2).join(' ')}`.trim(),
    smoke: settings.smoke,
    childNodeOptions: settings.childNodeOptions,
    oursNodeFlags: settings.oursNodeFlags,
    machine: x.machine,
    loadAverage: { before: x.before, after: loadAverage() },
    sizes,
    bestConcurrency: x.bestConcurrency,
    ceilingConcurrency: x.ceilingConcurrency,
    ksvm: x.ksvm
      ? {
          module: KSVM_MODULE,
          version: x.ksvm.version,
          buildSeconds: x.ksvm.builtNow ? round(x.ksvm.scriptSeconds, 0) : null,
          builtNow: x.ksvm.builtNow,
          defaults:
            "Its binary defaults are --kube-api-qps=5 --kube-api-burst=10 (client-go's); its own Deployment manifest sets 40/1000. It writes one object at a time (PUT of the full object, after full-object list pages of 500) whatever the QPS.",
          notes: `"ksvm" = rate limiter out of the way (${KSVM_UNTHROTTLED.qps}/${KSVM_UNTHROTTLED.burst}); "ksvm-manifest" = 40/1000 (run up to ${settings.ksvmManifestMax} objects); "ksvm-default" = 5/10 (run up to ${settings.ksvmDefaultMax} objects). Ratios use its fastest run. Rewrite time = Running seen -> Succeeded seen (it polls for work once a second).`,
        }
      : x.ksvmNote
        ? { module: KSVM_MODULE, version: 'n/a', buildSeconds: null, builtNow: false, defaults: '', notes: x.ksvmNote }
        : null,
    migrations: x.migrations,
    ratios,
    webhook: x.webhook,
    conversion: x.conversion,
    neighbour: x.neighbour,
    identity: x.identity,
    loadDuring: x.loadDuring,
    targets,
    allProvedInEtcd: [
      ...x.migrations,
      ...(x.conversion?.runs ?? []),
      ...(x.neighbour ? [x.neighbour.without.migration, x.neighbour.with.migration] : []),
    ].every((m) => m.etcd.allV2),
  }
}
