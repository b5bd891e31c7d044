#!/usr/bin/env node
/**
 * `npm run bench`: our migrator vs the API server's own ceiling vs kube-storage-version-
 * migrator, on one local control plane, each run from the same starting state (a fresh CRD
 * with N objects stored at v1, storage flipped to v2), each proved in etcd afterwards;
 * the same for ours and the ceiling with a CRD that converts through a conversion webhook
 * (the conversion case, ConversionReviews counted); plus a load test of the webhook.
 * Writes <out>/latest.json and <out>/latest.md.
 *
 * `--help` lists the flags (flags.ts). The runs: migrations.ts (the control plane, then
 * the cases: plain-case.ts, neighbour-case.ts, conversion-case.ts; each run of a migrator
 * in migration-runs.ts, with the steps around it in run-steps.ts); the result:
 * summary.ts and targets.ts.
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { benchSettings, type BenchSettings } from './flags.js'
import { ensureKsvm, type KsvmBuild } from './ksvm.js'
import { log } from './log.js'
import { runMigrations } from './migrations.js'
import { renderMarkdown, type BenchResult } from './report.js'
import { loadAverage, machineInfo, round, sampleLoad } from './stats.js'
import { summarize } from './summary.js'
import { runWebhookBench } from './webhook-load.js'

async function main(settings: BenchSettings): Promise<void> {
  const { sizes, sweep, conversionSizes, conversionDelayMs, outDir } = settings
  const startedAt = new Date().toISOString()
  const before = loadAverage()
  const load = sampleLoad()
  log(
    `sizes ${sizes.join(', ') || 'none'}; sweep ${sweep.join('/')}; conversion case ${conversionSizes.length ? `${conversionSizes.join(', ')} objects, webhook delay 0${conversionDelayMs ? ` and ${conversionDelayMs}` : ''} ms` : 'skipped'}; load average ${before.join(' ')}`,
  )
  // The results record process.version; say so when it is not the project's Node (.node-version).
  const projectNode = `v${(await readFile(fileURLToPath(new URL('../../../.node-version', import.meta.url)), 'utf8')).trim()}`
  log(`Node ${process.version}${process.version === projectNode ? '' : `, not the project's ${projectNode} (source scripts/use-node.sh)`}`)

  let ksvm: KsvmBuild | undefined
  let ksvmNote = ''
  if (!settings.skipKsvm && !settings.skipMigrations && !settings.conversionOnly) {
    ksvm = await ensureKsvm({ check: settings.ksvmIfCached, log })
    if (!ksvm) ksvmNote = 'KSVM skipped: not built yet (scripts/build-ksvm.sh) and --ksvm-if-cached was given.'
    else log(`KSVM ${ksvm.version}: ${ksvm.migrator} (${ksvm.builtNow ? `built in ${round(ksvm.scriptSeconds, 0)} s` : 'cached'})`)
  }

  const machine = machineInfo()
  let webhook: BenchResult['webhook'] = null
  if (!settings.skipWebhook) {
    // First, while nothing else of ours runs: the server gets a core to itself.
    webhook = await runWebhookBench({
      durationSeconds: settings.webhookSeconds,
      fixedRate10k: 2000,
      fixedRate1m: 20,
      pinned: true,
      repeat: settings.repeat,
      log,
    })
  }

  const runs = settings.skipMigrations
    ? { migrations: [], bestConcurrency: null, ceilingConcurrency: null, conversion: null, neighbour: null, identity: null }
    : await runMigrations(settings, machine, ksvm)
  const result = summarize(settings, { startedAt, before, loadDuring: load.stop(), machine, webhook, ksvm, ksvmNote, ...runs })
  await mkdir(outDir, { recursive: true })
  await writeFile(path.join(outDir, 'latest.json'), `${JSON.stringify(result, null, 2)}\n`)
  await writeFile(path.join(outDir, 'latest.md'), renderMarkdown(result))
  process.stdout.write(renderMarkdown(result))
  log(`wrote ${path.join(outDir, 'latest.json')} and latest.md; load average ${result.loadAverage.after.join(' ')}`)
  if (!result.allProvedInEtcd) process.exitCode = 1
}

const settings = benchSettings()

// Ctrl-C / SIGTERM: exit through process.exit so the 'exit' hooks (KSVM child, control
// plane) run.
for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => process.exit(130))

main(settings).catch((err) => {
  log(`failed: ${err instanceof Error ? err.stack : String(err)}`)
  process.exit(1)
})
