/**
 * The targets of issue #19 in the bench's result, each a ratio inside one run: ours against
 * KSVM and the ceiling, the good neighbour, the webhook against the bare node:https floor.
 */
import type { BenchResult, MigrationRun, NeighbourCase, Target, Tool } from './report.js'
import { planTarget } from './plan-estimate.js'
import { round } from './stats.js'

const int = (n: number) => n.toLocaleString('en-US')

/**
 * The targets of issue #19, each a ratio inside this run: memory (vs KSVM, growth with
 * size), speed, tail latency and client CPU at the defaults (vs the ceiling), the good
 * neighbour (foreground p99 vs idle, throughput lost to the FlowSchema), the webhook (p99
 * vs the floor). Of the run's `sizes`, those of 10,000 and more count when it has them,
 * else every size.
 */
export function issueTargets(
  sizes: number[],
  x: { migrations: MigrationRun[]; neighbour: NeighbourCase | null; webhook: BenchResult['webhook'] },
  find: (size: number, tool: Tool) => MigrationRun | undefined,
): Target[] {
  const targets: Target[] = []
  const big = sizes.filter((n) => n >= 10_000)
  const counted = big.length ? big : sizes
  const each = (f: (size: number) => { value: string; ratio: number | null } | null) => {
    const rows = counted
      .map((size) => ({ size, r: f(size) }))
      .filter((row): row is { size: number; r: { value: string; ratio: number | null } } => row.r !== null)
    const ratios = rows.map((row) => row.r.ratio).filter((n): n is number => n !== null)
    return { value: rows.map((row) => `${int(row.size)}: ${row.r.value}`).join('; ') || 'n/a', ratios }
  }
  const x2 = (n: number | null) => (n === null ? 'n/a' : `${n}×`)
  if (x.migrations.length) {
    // Memory.
    const memSize = sizes.includes(10_000) ? 10_000 : sizes[0]!
    const od = find(memSize, 'ours-default')
    const ks = find(memSize, 'ksvm')
    const memRatio = od?.peakRssMb && ks?.peakRssMb ? round(od.peakRssMb / ks.peakRssMb, 2) : null
    targets.push({
      name: `peak RSS of ours at the defaults vs KSVM, ${int(memSize)} objects`,
      target: '≤ 2.5×',
      value: od && ks ? `${od.peakRssMb} MB vs ${ks.peakRssMb} MB = ${x2(memRatio)}` : 'n/a (needs KSVM)',
      met: memRatio === null ? null : memRatio <= 2.5,
    })
    const hi = sizes[sizes.length - 1]!
    for (const tool of ['ours-default', 'ours-best'] as const) {
      const a = find(memSize, tool)?.peakRssMb
      const b = find(hi, tool)?.peakRssMb
      const growth = a && b && hi > memSize ? round((b / a - 1) * 100, 1) : null
      targets.push({
        name: `peak RSS growth of ${tool}, ${int(memSize)} -> ${int(hi)} objects`,
        target: '< 10%',
        value: growth === null ? `n/a (needs a size above ${int(memSize)})` : `${a} -> ${b} MB (${growth >= 0 ? '+' : ''}${growth}%)`,
        met: growth === null ? null : growth < 10,
      })
    }
    // Speed, tail and CPU at the defaults, against the ceiling of the same size.
    // `metric` gives undefined where a run did not measure it (that size is left out).
    const againstCeiling = (
      name: string,
      target: string,
      metric: (run: MigrationRun) => number | undefined,
      show: (ours: number, ceiling: number) => string,
      /** None: a figure shown for reference, with no target. */
      met?: (ratios: number[]) => boolean,
    ) => {
      const rows = each((size) => {
        const o = find(size, 'ours-default')
        const c = find(size, 'ceiling')
        const ours = o && metric(o)
        const ceiling = c && metric(c)
        if (ours === undefined || ceiling === undefined) return null
        const r = round(ours / ceiling, 2)
        return { value: `${show(ours, ceiling)} = ${x2(r)}`, ratio: r }
      })
      targets.push({ name, target, value: rows.value, met: met && rows.ratios.length ? met(rows.ratios) : null })
    }
    againstCeiling(
      'objects/s of ours at the defaults vs the ceiling',
      '≥ 0.95×',
      (run) => run.objectsPerSecond,
      (ours, ceiling) => `${Math.round(ours)} vs ${Math.round(ceiling)}/s`,
      (ratios) => Math.min(...ratios) >= 0.95,
    )
    againstCeiling(
      'p99 write latency of ours at the defaults vs the ceiling',
      '≤ 1.5×',
      (run) => run.p99Ms || undefined,
      (ours, ceiling) => `${ours} vs ${ceiling} ms`,
      (ratios) => Math.max(...ratios) <= 1.5,
    )
    // The same work on both sides: ours' storage phase (list + writes) is all the ceiling
    // does. The whole run (freeze, checks, the managedFields pass's second list, unfreeze)
    // is shown beside it.
    againstCeiling(
      'client CPU per 1,000 objects rewritten (list + writes), ours at the defaults vs the ceiling',
      '≤ 1.1×',
      (run) => run.rewriteCpuMsPer1000 ?? undefined,
      (ours, ceiling) => `${ours} vs ${ceiling} ms`,
      (ratios) => Math.max(...ratios) <= 1.1,
    )
    againstCeiling(
      'for reference: client CPU per 1,000 objects of the whole run (freeze to unfreeze, both passes) vs the ceiling',
      'none',
      (run) => run.cpuMsPer1000 || undefined,
      (ours, ceiling) => `${ours} vs ${ceiling} ms`,
    )
  }
  const n = x.neighbour
  if (n) {
    targets.push({
      name: `foreground p99 during a migration with the FlowSchema vs idle (${int(n.size)} objects)`,
      target: '≤ 2×',
      value: `${n.with.foreground.p99Ms} vs ${n.idle.p99Ms} ms = ${x2(n.p99RatioWith)} (without the FlowSchema: ${n.without.foreground.p99Ms} ms = ${x2(n.p99RatioWithout)})`,
      met: n.p99RatioWith === null ? null : n.p99RatioWith <= 2,
    })
    targets.push({
      name: 'migration throughput lost to the FlowSchema',
      target: '≤ 15%',
      value:
        n.throughputLoss === null
          ? 'n/a'
          : `${Math.round(n.with.migration.objectsPerSecond)} vs ${Math.round(n.without.migration.objectsPerSecond)}/s = ${round(n.throughputLoss * 100, 1)}%`,
      met: n.throughputLoss === null ? null : n.throughputLoss <= 0.15,
    })
  }
  if (x.webhook) {
    for (const [crd, wanted] of [
      ['10KB', 1.2],
      ['1MB', 1.5],
    ] as const) {
      const ours = x.webhook.cases.filter((c) => c.crd === crd && c.mode === 'fixed' && c.server === 'ours')
      const floor = x.webhook.cases.find((c) => c.crd === crd && c.mode === 'fixed' && c.server === 'floor')
      const worst = ours.length ? Math.max(...ours.map((c) => c.p99Ms)) : null
      const r = worst !== null && floor ? round(worst / floor.p99Ms, 2) : null
      targets.push({
        name: `webhook p99 at ${ours[0]?.targetRate ?? '?'} req/s, ${crd === '10KB' ? '10 KB' : '1 MB'} CRD, vs the bare node:https floor${x.webhook.repeat > 1 ? ` (medians of ${x.webhook.repeat})` : ''}`,
        target: `≤ ${wanted}×`,
        value:
          ours.length && floor
            ? `${ours.map((c) => `${c.decision} ${c.p99Ms} ms`).join(', ')} vs floor ${floor.p99Ms} ms = ${x2(r)}`
            : 'n/a',
        met: r === null ? null : r <= wanted,
      })
    }
  }
  if (x.migrations.some((m) => m.planEstimate)) targets.push(planTarget(x.migrations))
  return targets
}
