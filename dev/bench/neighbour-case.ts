/**
 * The good-neighbour case: a foreground tenant alone, then during a migration by ours at
 * its defaults without and with the chart's API Priority and Fairness objects; its p99
 * against idle, and the migration's throughput lost to the FlowSchema.
 */
import { mkdir, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { classify, flowControlObjects, installFlowControl, nominalSeats, removeFlowControl } from './apf.js'
import { FOREGROUND_CONFIGMAPS, foregroundStats, type ForegroundSamples, type ForegroundStats } from './foreground.js'
import { foregroundTenant, startForegroundChild } from './foreground-tenant.js'
import { log } from './log.js'
import type { Around, MigrationContext } from './migration-context.js'
import { runOurs } from './migration-runs.js'
import type { MigrationRun, NeighbourCase } from './report.js'
import { setTimeout as sleep } from 'node:timers/promises'
import { round } from './stats.js'

export async function runNeighbourCase(ctx: MigrationContext, size: number): Promise<NeighbourCase> {
  const { cp, http, migratorHttp, bulkProbe, levelOf, sa } = ctx
  const { outDir, foregroundRate, foregroundIdleSeconds, apfShares } = ctx.settings
  const tenant = await foregroundTenant(cp, http, levelOf, foregroundRate)
  const { input, namespace, configMap } = tenant
  const user = { name: tenant.user }
  const foregroundLevel = tenant.priorityLevel
  let fg: ForegroundSamples | undefined
  const withForeground: Around = async (run) => {
    const child = await startForegroundChild(input)
    try {
      return await run()
    } finally {
      fg = await child.stop()
    }
  }
  // The requests sent while the migration ran (migrateCrd, freeze to unfreeze), not
  // while its process loaded its modules: on this machine that is CPU taken from the
  // API server, in a cluster it happens on another node.
  const during = (run: MigrationRun) => {
    const span = run.timeline?.find((x) => x.what === 'migrateCrd')
    return foregroundStats(fg!, span?.from, span?.to)
  }
  // Every foreground request and the migration's timeline, for a closer look than p99
  // (when the slow requests came, against the phases): <out>/neighbour-<run>.json.
  const keepSamples = async (name: string, run: MigrationRun) => {
    await mkdir(outDir, { recursive: true })
    await writeFile(path.join(outDir, `neighbour-${name}.json`), JSON.stringify({ timeline: run.timeline ?? [], foreground: fg }))
  }

  log(`good neighbour: the foreground (${user.name}, ${foregroundLevel}) alone for ${foregroundIdleSeconds} s at ${foregroundRate}/s`)
  const idle = await withForeground(() => sleep(foregroundIdleSeconds * 1000)).then(() => foregroundStats(fg!))
  log(`good neighbour: idle p50 ${idle.p50Ms} ms, p99 ${idle.p99Ms} ms (${idle.requests} requests, ${idle.errors} errors)`)
  if (idle.errors > 0)
    throw new Error(`the foreground client's requests fail (${idle.errors} of ${idle.requests}) with nothing else running`)
  const withoutLevel = await levelOf((await classify(migratorHttp, bulkProbe)).priorityLevelUid)
  const without = await runOurs(ctx, size, 'ours-neighbour', { around: withForeground })
  const fgWithout = during(without)
  await keepSamples('without', without)
  log(`good neighbour: without the FlowSchema, foreground p99 ${fgWithout.p99Ms} ms; migration ${Math.round(without.objectsPerSecond)}/s`)

  const objects = await flowControlObjects({
    name: `crd-migrator-bench-${ctx.runId}`,
    serviceAccount: { namespace: sa.namespace, name: sa.name },
    ...(apfShares !== undefined ? { nominalConcurrencyShares: apfShares } : {}),
  })
  const created = await installFlowControl(http, migratorHttp, objects, bulkProbe)
  const level = created.find((o) => o.kind === 'PriorityLevelConfiguration')!
  let withRun: MigrationRun
  let fgWith: ForegroundStats
  let seats: number | null
  let withLevel: string
  try {
    seats = await nominalSeats(http, level.metadata.name)
    withLevel = await levelOf((await classify(migratorHttp, bulkProbe)).priorityLevelUid)
    withRun = await runOurs(ctx, size, 'ours-neighbour-apf', { around: withForeground })
    fgWith = during(withRun)
    await keepSamples('with', withRun)
  } finally {
    await removeFlowControl(http, migratorHttp, created, bulkProbe)
  }
  log(
    `good neighbour: with the FlowSchema (${seats ?? '?'} seats), foreground p99 ${fgWith.p99Ms} ms; migration ${Math.round(withRun.objectsPerSecond)}/s`,
  )
  const ratio = (a: number | null, b: number | null) => (a !== null && b !== null && b > 0 ? round(a / b, 2) : null)
  return {
    size,
    foreground: {
      user: user.name,
      priorityLevel: foregroundLevel,
      ratePerSecond: foregroundRate,
      what: `reads (GET) and writes (merge PATCH) ${FOREGROUND_CONFIGMAPS} ConfigMaps ${namespace}/${configMap}-N in turn, alternately, open loop,`,
    },
    migrator: { user: sa.username, priorityLevelWithout: withoutLevel, priorityLevelWith: withLevel },
    flowControl: {
      priorityLevel: level.metadata.name,
      nominalConcurrencyShares: (level.spec['limited'] as { nominalConcurrencyShares: number }).nominalConcurrencyShares,
      nominalSeats: seats,
      flowSchemas: created.filter((o) => o.kind === 'FlowSchema').map((o) => o.metadata.name),
    },
    idle,
    without: { foreground: fgWithout, migration: without },
    with: { foreground: fgWith, migration: withRun },
    p99RatioWithout: ratio(fgWithout.p99Ms, idle.p99Ms),
    p99RatioWith: ratio(fgWith.p99Ms, idle.p99Ms),
    throughputLoss: without.objectsPerSecond > 0 ? round(1 - withRun.objectsPerSecond / without.objectsPerSecond, 3) : null,
  }
}
