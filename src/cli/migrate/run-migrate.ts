import os from 'node:os'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Logger } from 'pino'
import type { Config } from '../../config/schema.js'
import type { KubeHttp } from '../../kube/http.js'
import { describeError, errorCode } from '../../errors.js'
import { plainText } from '../../sanitize.js'
import { isData, renderData, renderNames, type OutputFormat } from '../output.js'
import { closing, commandHttp } from '../command-http.js'
import type { ClientFlags } from '../command-kit.js'
import { managedCrds } from '../../select/managed-crds.js'
import { KubeEventRecorder } from '../../kube/events.js'
import { loadCheckpointSeal } from '../../migrator/freeze/checkpoint-seal.js'
import { dryRun, serverDryRun, type DryRunReport, type ServerDryRunPhase, type ServerDryRunReport } from '../../migrator/dry-run.js'
import { refusesRewrite } from '../../migrator/lossless/check.js'
import { losslessLines } from '../../migrator/lossless/report-text.js'
import type { LosslessReport } from '../../migrator/lossless/verdict.js'
import { parseResourceName } from '../../kube/resources.js'
import { migrateCrd, migrateResource, type MigrationResult } from '../../migrator/migrate.js'
import { servedKeptSteps } from '../../migrator/report.js'
import type { Phase } from '../../migrator/plan.js'
import { settingsFor } from '../../migrator/crd-settings.js'
import type { WalkProgress } from '../../migrator/engine/walker.js'
import { WriteBudget } from '../../migrator/engine/budget.js'
import { runInParallel } from '../../migrator/parallel.js'
import { observeStorageSwitchesOf } from '../../migrator/phases/storage-switch.js'
import { resumeHint, type Interrupt } from '../interrupt.js'
import { PlainView, QuietView, type ProgressView } from './progress.js'
import { finishLine } from './progress-text.js'
import { tenthsOfSeconds, wholeSeconds } from '../../duration.js'

export interface MigrateCommandOptions {
  /** Resources named kubectl style (`secrets`, `deployments.apps`), migrated after the CRDs. */
  resources?: string[]
  dryRun: boolean
  /** --force: rewrite every object whatever status.storedVersions says. */
  force?: boolean
  /** --dry-run=server: every write sent with dryRun=All, nothing persisted, no freeze (migrator/dry-run.ts). */
  serverDryRun?: boolean
  /** -l/--selector without names: the CRDs this label selector matches. */
  selector?: string
  /** --request-timeout, --as. */
  client?: ClientFlags
  /** Where the human summary goes. */
  out: NodeJS.WritableStream
  /** live: lines redrawn in place (stderr is a terminal); plain: a line every --progress-every seconds; off (default): none. */
  progress?: ProgressMode
  signal?: AbortSignal
  /** Ctrl-C/SIGTERM handling (interrupt.ts): its signal stops the run; it is told the CRDs in flight. */
  interrupt?: Interrupt
  /** text: a summary per CRD as it finishes; json/yaml: every result (or dry-run report) at the end. */
  format?: OutputFormat
  /** Where progress, "waiting for …" and interrupt lines go (default stderr). */
  status?: NodeJS.WritableStream
}

export type ProgressMode = 'live' | 'plain' | 'off'

/** `migrate --dry-run[=server]`: a real run of some CRD would stop Blocked (its lossless check refuses). */
export const EXIT_WOULD_BLOCK = 4

/** How often a blocked CRD is tried again while `migrate` waits for its conversion webhook. */
const BLOCKED_RETRY_MS = 5_000

/** `crd-migrator migrate CRD...`: at most `migrator.maxParallelCrds` at once (one write budget if several); returns the exit code. */
export async function runMigrateCommand(names: string[], config: Config, logger: Logger, options: MigrateCommandOptions): Promise<number> {
  // With -l the names are known only once listed: plan for the most that may run at once.
  const planned = options.selector !== undefined && names.length === 0 ? Infinity : names.length + (options.resources?.length ?? 0)
  let parallel = Math.max(1, Math.min(config.migrator.maxParallelCrds, planned))
  const http = commandHttp(config, 'migrate', logger, options.client, {
    // The budget's writes, plus the reads (lists, CRD reads, state writes) of every CRD in flight.
    maxSockets: (Math.max(config.migrator.concurrency, 4) + parallel - 1) * 2,
    ...(options.serverDryRun ? { dryRun: true } : {}),
  })
  const format = options.format ?? 'text'
  const overrides = { force: options.force === true }
  return closing(http, async () => {
    if (options.selector !== undefined && names.length === 0) {
      // Exactly what the selector matches, as kubectl -l (not the config's --crds names).
      names = (await managedCrds(http, { labelSelector: options.selector, names: [] })).map((c) => c.metadata.name)
      if (names.length === 0) {
        process.stderr.write(`crd-migrator: no CRDs match -l ${JSON.stringify(options.selector)}\n`)
        if (!options.resources?.length) return 0
      }
      parallel = Math.max(1, Math.min(config.migrator.maxParallelCrds, names.length + (options.resources?.length ?? 0)))
    }
    if (options.serverDryRun)
      return await dryRunAll(names, options, format, {
        run: (name) => serverDryRun(http, name, settingsFor(config, name), { logger, signal: options.signal }),
        text: formatServerDryRun,
        refused: (r) => (r.storageVersionMigration?.failed ?? 0) + (r.cleanupManagedFields?.failed ?? 0) > 0 || Boolean(r.blockedReason),
        namesAsChecked: true,
        cannot: '',
      })
    if (options.dryRun)
      return await dryRunAll(names, options, format, {
        run: (name) => dryRun(http, name, settingsFor(config, name, overrides), logger),
        text: formatDryRun,
        refused: () => false,
        namesAsChecked: false,
        cannot: 'cannot plan: ',
      })
    return await migrateAll({ http, names, parallel, format, overrides }, config, logger, options)
  })
}

/** The real run: each CRD (then each resource) migrated, `parallel` at once, a summary as each finishes; returns the exit code. */
async function migrateAll(
  run: { http: KubeHttp; names: string[]; parallel: number; format: OutputFormat; overrides: { force: boolean } },
  config: Config,
  logger: Logger,
  options: MigrateCommandOptions,
): Promise<number> {
  const { http, names, parallel, format, overrides } = run
  const owner = `cli:${os.userInfo().username}@${os.hostname()}`
  let failed = 0
  const status = options.status ?? process.stderr
  const view = await progressView(options.progress ?? 'off', status, config.progressEvery)
  const say = (text: string) => view.print(status, text)
  const interrupt = options.interrupt
  const signal = interrupt?.signal ?? options.signal
  if (interrupt) interrupt.write = say
  const annotation = config.annotations.migrating
  const checkpointSeal = await loadCheckpointSeal(config.migrator.stateKeyFile, logger, { strict: config.migrator.strictStateKeyFile })
  const targets = [...names.map((name) => ({ name, crd: true })), ...(options.resources ?? []).map((name) => ({ name, crd: false }))]
  const budget = parallel > 1 ? new WriteBudget(config.migrator) : undefined
  const migrateOne = async ({ name, crd }: { name: string; crd: boolean }): Promise<MigrationResult | { crd: string; error: string }> => {
    // Interrupted before its turn: nothing of it is touched.
    if (signal?.aborted) {
      say(`${name}: not started (interrupted)\n`)
      return { crd: name, error: 'not started: interrupted' }
    }
    view.start(name)
    interrupt?.inFlight.add(name)
    try {
      const ctx = {
        http,
        logger,
        owner,
        checkpointSeal,
        events: new KubeEventRecorder(http, 'crd-migrator', owner),
        signal,
        ...(budget ? { budget } : {}),
        onProgress: (phase: Phase, p: WalkProgress) => view.update(name, phase, p),
      }
      const migrate = () =>
        crd
          ? migrateCrd(name, settingsFor(config, name, overrides), ctx)
          : migrateResource(parseResourceName(name), (n) => settingsFor(config, n, overrides), ctx)
      const result = await migrateWaitingForWebhook(migrate, name, config.migrator.conversionWaitSeconds, say, signal)
      interrupt?.inFlight.delete(name)
      view.finish(name, finishLine(name, result, view.progressOf(name), annotation), result.errorCode === 'CRDM_ABORTED')
      // One write per summary: summaries of CRDs finishing together never interleave.
      if (format === 'text') view.print(options.out, formatResult(result))
      if (result.outcome === 'Failed' || result.outcome === 'Blocked') failed++
      return result
    } catch (err) {
      interrupt?.inFlight.delete(name)
      const stopped = signal?.aborted === true
      view.finish(
        name,
        finishLine(name, { error: stopped ? 'stopped' : `failed (${errorCode(err)})` }, view.progressOf(name), annotation),
        stopped,
      )
      failed++
      if (!isData(format)) view.print(format === 'name' ? process.stderr : options.out, `${name}: ${plainText(describeError(err))}\n`)
      return { crd: name, error: describeError(err) }
    }
  }
  // Summaries as each CRD finishes; data (-o json/yaml) in the order the CRDs were named.
  const firstLook = names.length > parallel ? firstLookAtStorageSwitches(http, names, config, logger) : undefined
  const results = await runInParallel(targets, parallel, migrateOne).finally(() => view.close())
  await firstLook
  if (isData(format)) options.out.write(renderData(results, format))
  else if (format === 'name') options.out.write(renderNames(actedOn(results)))
  if (interrupt?.exitCode !== undefined) {
    const unfinished = targets.filter((_, i) => !isDone(results[i]!)).map((t) => t.name)
    status.write(resumeHint(unfinished))
    return interrupt.exitCode
  }
  return failed ? 1 : 0
}

/** One dry run mode of `migrate` (migrator/dry-run.ts): its run of one CRD, and how its report is told. */
interface DryRunMode<R> {
  run: (name: string) => Promise<R>
  text: (report: R) => string
  /** Whether the report fails the command (a write refused, nothing can be done). */
  refused: (report: R) => boolean
  /** -o name: each CRD not refused, as it is checked; otherwise every CRD named, at the end. */
  namesAsChecked: boolean
  /** What a failed CRD's error line says first. */
  cannot: string
}

/** `migrate --dry-run[=server]`: each CRD's dry run, one CRD after another. */
async function dryRunAll<R extends { crd: string; lossless?: LosslessReport | undefined }>(
  names: readonly string[],
  options: MigrateCommandOptions,
  format: OutputFormat,
  mode: DryRunMode<R>,
): Promise<number> {
  let failed = 0
  let blocked = 0
  const reports: Array<R | { crd: string; error: string }> = []
  for (const name of names) {
    try {
      const report = await mode.run(name)
      const refused = mode.refused(report)
      if (refused) failed++
      else if (report.lossless && refusesRewrite(report.lossless)) blocked++
      reports.push(report)
      if (!isData(format) && format !== 'name') options.out.write(mode.text(report))
      else if (format === 'name' && mode.namesAsChecked && !refused) options.out.write(renderNames([name]))
    } catch (err) {
      failed++
      reports.push({ crd: name, error: describeError(err) })
      if (!isData(format))
        (format === 'name' ? process.stderr : options.out).write(`${name}: ${mode.cannot}${plainText(describeError(err))}\n`)
    }
  }
  if (isData(format)) options.out.write(renderData(reports, format))
  else if (format === 'name' && !mode.namesAsChecked) options.out.write(renderNames(names))
  return failed ? 1 : blocked ? EXIT_WOULD_BLOCK : 0
}

/** A webhook that does not answer blocks the run before any freeze: wait for it (a certificate rotation takes a minute or two). */
async function migrateWaitingForWebhook(
  migrate: () => Promise<MigrationResult>,
  name: string,
  waitSeconds: number,
  say: (text: string) => void,
  signal: AbortSignal | undefined,
): Promise<MigrationResult> {
  const waitUntil = Date.now() + waitSeconds * 1000
  let result = await migrate()
  while (result.errorCode === 'CRDM_CONVERSION_OUTAGE' && result.outcome === 'Blocked' && Date.now() + BLOCKED_RETRY_MS <= waitUntil) {
    say(
      `${name}: waiting for ${plainText(result.reason).replace(/ does not answer: /, ' (')}) — ${wholeSeconds(waitUntil - Date.now())} left\n`,
    )
    await sleep(BLOCKED_RETRY_MS, undefined, signal ? { signal } : undefined)
    result = await migrate()
  }
  return result
}

/** More CRDs than run at once: a first look at their storage switch, so queued ones count their settle time from it. */
function firstLookAtStorageSwitches(http: KubeHttp, names: readonly string[], config: Config, logger: Logger): Promise<void> {
  return observeStorageSwitchesOf(http, [...names], { endpoints: config.migrator.apiServerEndpoints }).then(
    (answers) => logger.debug({ crds: names.length, answers }, 'first look at the storage switch of the batch'),
    (err: unknown) => logger.debug({ err }, 'first look at the storage switch of the batch failed; each run asks for itself'),
  )
}

/** kubectl -o name: the objects it acted on; a CRD whose migration failed is not one. */
function actedOn(results: ReadonlyArray<MigrationResult | { crd: string; error: string }>): string[] {
  return results.filter((r) => 'outcome' in r && r.outcome !== 'Failed' && r.outcome !== 'Blocked').map((r) => r.crd)
}

/** A target that needs no further run: done now, or already. */
function isDone(r: MigrationResult | { crd: string; error: string }): boolean {
  return 'outcome' in r && (r.outcome === 'Succeeded' || r.outcome === 'Skipped')
}

/** The view of `mode`; the live one (and its terminal codes) is loaded only on a terminal. */
async function progressView(mode: ProgressMode, status: NodeJS.WritableStream, everySeconds: number): Promise<ProgressView> {
  if (mode === 'live') return new (await import('./progress-live.js')).LiveView(status as NodeJS.WriteStream)
  if (mode === 'plain' && everySeconds > 0) return new PlainView(status, everySeconds * 1000)
  return new QuietView(status)
}

export function formatResult(r: MigrationResult): string {
  // A skipped CRD did nothing: no duration to tell ("Skipped in 0.0s").
  const took = r.outcome === 'Skipped' ? '' : ` in ${tenthsOfSeconds(r.durationMs)}`
  const lines = [`${r.crd}: ${r.outcome}${r.errorCode ? ` (${r.errorCode})` : ''}${took} — ${r.reason}`]
  if (r.lossless) lines.push(...losslessLines(r.crd, r.lossless))
  if (r.storage) {
    const c = r.storage.counts
    lines.push(
      `  storage version ${r.storageVersion}: ${c.seen} listed, ${c.rewritten} rewritten, ${c.current} already current, ${c.conflict} written by others, ${c.gone} deleted, ${c.failed} failed${c.resumed ? `, ${c.resumed} done by an earlier run${r.resumedFrom ? ` (resumed after ${r.resumedFrom})` : ''}` : ''}`,
    )
    for (const f of r.storage.failures.slice(0, 5)) lines.push(`    failed ${f.key}: ${f.error}`)
  }
  // Only what is true at the end: a run whose storage check failed says so in its reason.
  if (r.apiServers && r.errorCode !== 'CRDM_STORAGE_NOT_SWITCHED')
    lines.push(
      r.apiServers.mode === 'all-servers'
        ? `  storage switch: all ${r.apiServers.checked} API servers store ${r.storageVersion} (each asked by address)`
        : `  storage switch: checked on the API server in use only, plus the settle time (${r.apiServers.fallbackReason})`,
    )
  // A built-in resource has no CRD, so no storedVersions.
  if (r.crdUid !== undefined && (r.storage || r.storedVersionsBefore.join() !== r.storedVersionsAfter.join())) {
    lines.push(`  status.storedVersions: ${JSON.stringify(r.storedVersionsBefore)} -> ${JSON.stringify(r.storedVersionsAfter)}`)
  }
  if (r.stashes) {
    const c = r.stashes.counts
    lines.push(
      `  stashed copies: ${c.seen} found, ${c.migrated} moved to ${r.storageVersion} (${c.repointed} referrer pointer(s) moved), ${c.current} already current, ${c.failed} failed`,
    )
    for (const f of r.stashes.failures.slice(0, 5)) lines.push(`    failed ${f.key}: ${f.error}`)
  }
  if (r.cleanup) {
    lines.push(
      `  managedFields: ${r.cleanup.entriesRemoved} entries of unserved versions removed${r.cleanup.entriesRelabelled ? `, ${r.cleanup.entriesRelabelled} relabelled to ${r.storageVersion}` : ''} from ${r.cleanup.counts.rewritten} of ${r.cleanup.counts.seen} objects, ${r.cleanup.counts.failed} failed`,
    )
    for (const f of r.cleanup.failures.slice(0, 5)) lines.push(`    failed ${f.key}: ${f.error}`)
    for (const step of servedKeptSteps(r.cleanup.servedEntriesKept)) lines.push(`  next: ${step}`)
  }
  if (r.conversion && (r.conversion.outages > 0 || r.outcome !== 'Succeeded'))
    lines.push(
      `  conversion webhook ${r.conversion.webhook}: ${r.conversion.outages} outage(s), writes paused ${r.conversion.outageSeconds}s in all`,
    )
  if (r.outcome === 'Blocked' && r.errorCode === 'CRDM_DATA_LOSS')
    lines.push(
      '  nothing was written and status.storedVersions is unchanged; fix the schema or conversion webhook, or accept the changes on purpose (the line above)',
    )
  else if (r.outcome === 'Blocked')
    lines.push('  nothing was frozen; run migrate again once the webhook answers (the controller retries by itself)')
  if (r.leftFrozen)
    lines.push('  WARNING: the migrating annotation could not be removed; run migrate again or see the README (unfreezing by hand)')
  // Reasons and failures may quote a webhook or an API server: one line each, no escapes.
  return `${lines.map(plainText).join('\n')}\n`
}

const entries = (n: number) => `${n} managedFields entr${n === 1 ? 'y' : 'ies'}`

export function formatDryRun(r: DryRunReport): string {
  if (r.blockedReason) return `${r.crd}: nothing can be done: ${plainText(r.blockedReason)}\n`
  const lines = [
    `${r.crd}: dry run (nothing written)`,
    `  storage version ${r.storageVersion}, status.storedVersions ${JSON.stringify(r.storedVersions)}`,
    `  StorageVersionMigration: ${r.objectsToRewrite ? `would rewrite ${r.objectsToRewrite} object(s), then set storedVersions to ${JSON.stringify(r.storedVersionsAfter)}` : 'nothing to do'}`,
    ...(r.stashes
      ? [
          `  StashedObjectMigration: ${r.stashes.planned.length ? `would move ${r.stashes.planned.length} stashed cop${r.stashes.planned.length === 1 ? 'y' : 'ies'}` : 'nothing to do'}${r.stashes.failed ? `; ${r.stashes.failed} cannot be moved` : ''}`,
          ...r.stashes.planned.map((p) => `    ${p}`),
          ...r.stashes.failures.map((f) => `    cannot move ${f.key}: ${f.error}`),
        ]
      : []),
    ...(r.lossless
      ? [...losslessLines(r.crd, r.lossless), ...(refusesRewrite(r.lossless) ? ['  the run would stop Blocked (CRDM_DATA_LOSS)'] : [])]
      : []),
    `  CleanupManagedFields: ${r.objectsToClean ? `would remove ${entries(r.managedFieldsEntriesToRemove)}${r.managedFieldsEntriesToRelabel ? ` and relabel ${entries(r.managedFieldsEntriesToRelabel)} to ${r.storageVersion}` : ''} from ${r.objectsToClean} object(s)${r.objectsToSeed ? ` (${r.objectsToSeed} seeded)` : ''}` : 'nothing to do'}`,
    // The step plan, check and migrate name too: entries of a served old version stay by design.
    ...servedKeptSteps(r.servedKept).map((step) => `  next: ${step}`),
    '',
  ]
  return lines.map(plainText).join('\n')
}

export function formatServerDryRun(r: ServerDryRunReport): string {
  if (r.blockedReason) return `${plainText(`${r.crd}: nothing can be done: ${r.blockedReason}`)}\n`
  const lines = [`${r.crd}: server dry run (dryRun=All: checked by the API server, nothing persisted, no freeze)`]
  const phase = (label: string, p: ServerDryRunPhase | undefined, none: string) => {
    if (!p) return lines.push(`  ${label}: ${none}`)
    lines.push(
      `  ${label}: ${p.accepted} of ${p.objects} object(s) would be written${p.skipped ? `, ${p.skipped} need nothing` : ''}, ${p.failed} refused`,
    )
    for (const f of p.failures.slice(0, 5)) lines.push(`    refused ${f.key}: ${f.error}`)
  }
  phase('StorageVersionMigration', r.storageVersionMigration, `nothing to do (status.storedVersions ${JSON.stringify(r.storedVersions)})`)
  if (r.lossless) {
    lines.push(...losslessLines(r.crd, r.lossless))
    if (refusesRewrite(r.lossless)) lines.push('  the run would stop Blocked (CRDM_DATA_LOSS) before its first write')
  }
  phase('CleanupManagedFields', r.cleanupManagedFields, 'skipped')
  // Failures may quote a webhook or the API server: one line each, no escapes.
  return `${lines.map(plainText).join('\n')}\n`
}
