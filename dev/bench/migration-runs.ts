/**
 * One migration run of each migrator, from a fresh CRD to the proof in etcd: ours and the
 * ceiling in a child process (child.js), kube-storage-version-migrator as its own binary.
 * Each returns the run's MigrationRun and logs a line about it.
 */
import os from 'node:os'
import path from 'node:path'
import { kubeConnection } from '../../src/kube/http.js'
import { ceilingConnection, type CeilingOptions } from './ceiling.js'
import type { CeilingChildOutput, OursChildInput, OursChildOutput } from './child.js'
import { KIND, PLURAL } from './fixtures.js'
import { runKsvm, type KsvmBuild } from './ksvm.js'
import { log } from './log.js'
import type { Around, Conv, MigrationContext } from './migration-context.js'
import type { MigrationRun, Tool } from './report.js'
import { measurePlan, withActual } from './plan-estimate.js'
import { runChild } from './run-child.js'
import { conversionOf, counted, dropConversionCrd, dropCrd, prepare, prove, reviewsText, timeoutFor, writeOf } from './run-steps.js'
import { round } from './stats.js'

/** KSVM "unthrottled": its client-side rate limiter out of the way (it still writes one object at a time). */
export const KSVM_UNTHROTTLED = { qps: 100_000, burst: 100_000 }
/** The flags of KSVM's own manifests/migrator.yaml Deployment. */
export const KSVM_MANIFEST = { qps: 40, burst: 1000 }

export interface OursRunOptions {
  /** None: the product's default. */
  concurrency?: number
  /** None: the product's default; 0 = no client-side limit. */
  qps?: number
  /** Through the conversion webhook, counted. */
  conv?: Conv
  around?: Around
  /** Plan the CRD with `plan --measure` first, and keep its estimate beside the run's time. */
  planEstimate?: boolean
}

/** Ours (the product's migrateCrd in child.js) on a fresh CRD of `size` objects. */
export async function runOurs(ctx: MigrationContext, size: number, tool: Tool, options: OursRunOptions = {}): Promise<MigrationRun> {
  const { concurrency, qps, conv, around = (run) => run() } = options
  const { group, createMs, setup } = await prepare(ctx, size, tool, conv)
  const estimate = options.planEstimate ? await measurePlan(ctx, group) : undefined
  const input: OursChildInput = {
    kubeconfigPath: ctx.sa.kubeconfigPath,
    crd: `${PLURAL}.${group}`,
    ...(concurrency !== undefined ? { concurrency } : {}),
    ...(qps !== undefined ? { qps } : {}),
    ...(conv ? { countRequests: true } : {}),
  }
  const loadStart = os.loadavg()[0]!
  const c = await counted(size, () => around(() => runChild<OursChildOutput>(ctx.settings, 'ours', input, timeoutFor(size, conv))), conv)
  const r = c.r
  const rewriteMs = r.storagePhaseMs ?? r.wallMs
  const run: MigrationRun = {
    size,
    tool,
    group,
    createMs,
    rewriteMs,
    wallMs: r.wallMs,
    settings: `concurrency ${r.settings.concurrency}, qps ${r.settings.qps}`,
    objectsPerSecond: size / (rewriteMs / 1000),
    p50Ms: r.latency.p50Ms,
    p99Ms: r.latency.p99Ms,
    peakRssMb: r.peakRssMb,
    baselineRssMb: r.baselineRssMb,
    cpuMsPer1000: round((r.cpuMs / size) * 1000, 0),
    rewriteCpuMsPer1000: r.storagePhaseCpuMs === null ? null : round((r.storagePhaseCpuMs / size) * 1000, 0),
    failedWrites: r.counts['failed'] ?? null,
    outcome: r.outcome,
    load: { start: round(loadStart)!, end: round(os.loadavg()[0]!)! },
    concurrencyLimit: r.concurrencyLimit,
    throttled: r.throttled,
    timeline: r.timeline,
    ...(r.lossless ? { lossless: r.lossless } : {}),
    ...(estimate ? { planEstimate: withActual(estimate, r.wallMs) } : {}),
    etcd: await prove(ctx, group, size, conv),
    notes: `storedVersions after: ${JSON.stringify(r.storedVersionsAfter)}; counts ${JSON.stringify(r.counts)}; throttled ${r.throttled}; managedFields phase ${round((r.cleanupPhaseMs ?? 0) / 1000, 2)} s`,
  }
  if (conv && setup) {
    run.conversion = await conversionOf(ctx, group, size, conv, setup, c, writeOf(r.requests), {
      requests: r.requests,
      ...(r.conversion ? { productReport: r.conversion } : {}),
    })
    await dropConversionCrd(ctx, group, size, conv)
  } else {
    await dropCrd(ctx, group, size)
  }
  log(
    `${tool} N=${size}${conv ? ` (conversion, webhook delay ${conv.delayMs} ms)` : ''}: ${r.outcome}, storage phase ${round(rewriteMs / 1000, 2)} s = ${Math.round(run.objectsPerSecond)}/s, whole run ${round(r.wallMs / 1000, 2)} s${run.planEstimate ? ` (plan --measure estimated ${round(run.planEstimate.estimateMs / 1000, 2)} s: ${run.planEstimate.ratio}×)` : ''}, p50 ${r.latency.p50Ms} ms p99 ${r.latency.p99Ms} ms, peak RSS ${r.peakRssMb} MB, etcd v2 ${run.etcd.allV2}${reviewsText(run)}`,
  )
  return run
}

/** The ceiling (list + no-op writes, nothing else; ceiling.ts) at `concurrency` on a fresh CRD. */
export async function runCeilingOnce(
  ctx: MigrationContext,
  size: number,
  concurrency: number,
  tool: Tool = 'ceiling',
  conv?: Conv,
): Promise<MigrationRun> {
  const { group, createMs, setup } = await prepare(ctx, size, tool, conv)
  const write = tool === 'ceiling-apply' ? 'apply' : 'merge-patch'
  // Resolved per run (a token may expire), the way every KubeHttp resolves it.
  const connection = ceilingConnection(await kubeConnection(ctx.migratorKc))
  const input: CeilingOptions = { connection, group, version: 'v2', plural: PLURAL, kind: KIND, concurrency, pageSize: 500, write }
  const loadStart = os.loadavg()[0]!
  const c = await counted(size, () => runChild<CeilingChildOutput>(ctx.settings, 'ceiling', input, timeoutFor(size, conv)), conv)
  const r = c.r
  const run: MigrationRun = {
    size,
    tool,
    group,
    createMs,
    rewriteMs: r.wallMs,
    wallMs: r.wallMs,
    settings: `concurrency ${concurrency}, no limit`,
    objectsPerSecond: size / (r.wallMs / 1000),
    p50Ms: r.latency.p50Ms,
    p99Ms: r.latency.p99Ms,
    peakRssMb: r.peakRssMb,
    baselineRssMb: r.baselineRssMb,
    cpuMsPer1000: round((r.cpuMs / size) * 1000, 0),
    rewriteCpuMsPer1000: round((r.cpuMs / size) * 1000, 0),
    failedWrites: r.failed,
    outcome: r.failed ? 'Failed' : 'Succeeded',
    load: { start: round(loadStart)!, end: round(os.loadavg()[0]!)! },
    etcd: await prove(ctx, group, size, conv),
    notes: `listed ${r.listed}, retries ${r.retries}`,
  }
  if (conv && setup) {
    run.conversion = await conversionOf(ctx, group, size, conv, setup, c, write)
    await dropConversionCrd(ctx, group, size, conv)
  } else {
    await dropCrd(ctx, group, size)
  }
  log(
    `${tool} N=${size}${conv ? ` (conversion, webhook delay ${conv.delayMs} ms)` : ''} concurrency ${concurrency}: ${round(r.wallMs / 1000, 2)} s = ${Math.round(run.objectsPerSecond)}/s, p50 ${r.latency.p50Ms} ms p99 ${r.latency.p99Ms} ms, peak RSS ${r.peakRssMb} MB, etcd v2 ${run.etcd.allV2}${reviewsText(run)}`,
  )
  return run
}

/** kube-storage-version-migrator with these client-side limits (none: its binary's defaults) on a fresh CRD. */
export async function runKsvmOnce(
  ctx: MigrationContext,
  ksvm: KsvmBuild,
  size: number,
  tool: Tool,
  limits: { qps?: number; burst?: number },
): Promise<MigrationRun> {
  const { group, createMs } = await prepare(ctx, size, tool)
  const loadStart = os.loadavg()[0]!
  const r = await runKsvm(ctx.http, {
    migrator: ksvm.migrator,
    kubeconfigPath: ctx.sa.kubeconfigPath,
    group,
    version: 'v2',
    resource: PLURAL,
    ...limits,
    logFile: path.join(ctx.logsDir, `${group}.ksvm.log`),
    timeoutMs: timeoutFor(size) * 10,
  })
  const run: MigrationRun = {
    size,
    tool,
    group,
    createMs,
    rewriteMs: r.rewriteMs,
    wallMs: r.wallMs,
    settings:
      limits.qps === undefined
        ? 'binary defaults (qps 5, burst 10)'
        : limits.qps >= KSVM_UNTHROTTLED.qps
          ? `qps ${limits.qps}, burst ${limits.burst} (unthrottled)`
          : `qps ${limits.qps}, burst ${limits.burst} (its manifests)`,
    objectsPerSecond: size / (r.rewriteMs / 1000),
    p50Ms: null,
    p99Ms: null,
    peakRssMb: r.peakRssMb,
    baselineRssMb: r.baselineRssMb,
    cpuMsPer1000: r.cpuMs === null ? null : round((r.cpuMs / size) * 1000, 0),
    failedWrites: r.outcome === 'Succeeded' ? 0 : null,
    outcome: r.outcome,
    load: { start: round(loadStart)!, end: round(os.loadavg()[0]!)! },
    etcd: await prove(ctx, group, size),
    notes: `${r.message}; flags ${r.flags.join(' ')}`,
  }
  await dropCrd(ctx, group, size)
  log(
    `${tool} N=${size}: ${r.outcome}, rewrite ${round(r.rewriteMs / 1000, 2)} s = ${Math.round(run.objectsPerSecond)}/s (created->Succeeded ${round(r.wallMs / 1000, 2)} s), peak RSS ${r.peakRssMb} MB, etcd v2 ${run.etcd.allV2}`,
  )
  return run
}
