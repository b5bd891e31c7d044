import { setTimeout as sleep } from 'node:timers/promises'
import type { Config } from '../config/schema.js'
import { getCrd } from '../kube/crds.js'
import { unlessNotFound } from '../kube/api-errors.js'
import { listPages } from '../kube/list-pages.js'
import { listAndWatch } from '../kube/watch.js'
import { CRD_API } from '../kube/paths.js'
import type { CustomResourceDefinition } from '../kube/types.js'
import type { MigrationContext } from '../migrator/context.js'
import { migrateCrd, type MigrationResult } from '../migrator/migrate.js'
import { planCrd, type Phase } from '../migrator/plan.js'
import { settingsFor } from '../migrator/crd-settings.js'
import { observeStorageSwitches } from '../migrator/phases/storage-switch.js'
import type { WalkProgress } from '../migrator/engine/walker.js'
import { WorkQueue } from './queue.js'
import { WriteBudget } from '../migrator/engine/budget.js'
import type { RunLock } from './run-lock.js'
import { CrdSelection } from '../select/selector.js'
import { readCrdState } from '../state/crd-state.js'
import { storageMigratingCondition } from '../kube/builtin-migrations.js'

/** What a controller hands each of its runs (migrator/context.ts), and the configuration it runs by. */
export interface RunDeps extends Pick<MigrationContext, 'http' | 'logger' | 'owner' | 'metrics' | 'events' | 'checkpointSeal'> {
  config: Config
}

export interface ControllerDeps extends RunDeps {
  /** Told about every finished migration (tests and the demo listen here). */
  onResult?: (result: MigrationResult) => void
  /** Shared with the StorageVersionMigration controller: one run per CRD at a time. */
  lock?: RunLock
  /** Told about progress of the running migration (the demo draws a bar). */
  onProgress?: (crd: string, phase: Phase, progress: WalkProgress) => void
}

/**
 * Watches CRDs; runs a migration for each selected one whose generation is not handled yet, or
 * resumes a freeze of ours left by a dead run. Up to maxParallelCrds at once under one write
 * budget (engine/budget.ts), so many CRDs cost the API server what one costs.
 */
export class MigrationController {
  private readonly queue: WorkQueue
  private readonly selection: CrdSelection
  /** One write budget for the CRDs migrated at once (none when one at a time: each phase its own). */
  private readonly budget: WriteBudget | undefined
  private readonly reportedForeign = new Set<string>()
  /** CRDs queued since the last first look at their storage switch (lookAtStorageSwitch). */
  private toLookAt: CustomResourceDefinition[] = []
  /**
   * Last queued key per CRD: our own annotation writes must not re-trigger us, but the end of a
   * built-in migration (StorageMigrating True -> False, storedVersions narrowed) must.
   */
  private readonly seenGeneration = new Map<string, string>()
  /**
   * CRD uid/generation this process found needing nothing. In memory on purpose: the CRD's
   * result annotations are for people, and a forged "Succeeded" must never make us skip a CRD.
   */
  private readonly upToDate = new Map<string, string>()

  constructor(private readonly deps: ControllerDeps) {
    this.selection = new CrdSelection(deps.config.migrator.selector)
    this.queue = new WorkQueue(undefined, undefined, (queued) => deps.metrics?.crdsQueued.set(queued))
    this.budget = deps.config.migrator.maxParallelCrds > 1 ? new WriteBudget(deps.config.migrator) : undefined
  }

  selects(crd: CustomResourceDefinition): boolean {
    return this.selection.selects(crd)
  }

  /** Runs until `signal` aborts (leadership lost or shutdown). */
  async run(signal: AbortSignal): Promise<void> {
    const log = this.deps.logger
    log.info({ selector: this.deps.config.migrator.selector }, 'migration controller started')
    const watching = this.watchLoop(signal)
    const resync = this.resyncLoop(signal)
    try {
      await this.queue.process(
        signal,
        (name) => this.reconcile(name, signal),
        (name, err, retryInMs) => log.error({ crd: name, err, retryInMs }, 'reconcile failed'),
        this.deps.config.migrator.maxParallelCrds,
      )
    } finally {
      await Promise.allSettled([watching, resync])
      log.info('migration controller stopped')
    }
  }

  async reconcile(name: string, signal: AbortSignal): Promise<MigrationResult | undefined> {
    const { config, logger } = this.deps
    const crd = await unlessNotFound(getCrd(this.deps.http, name))
    if (!crd) {
      this.queue.forget(name)
      this.deps.metrics?.frozen.remove({ crd: name, owner: 'foreign' })
      return undefined
    }
    if (!this.selects(crd)) return undefined
    const freeze = readCrdState(crd, config.annotations.migrating)
    this.reportFrozen(crd, freeze.frozen, freeze.owner)
    if (freeze.frozen && !freeze.owner) return undefined
    // Skip only on what the plan shows (storedVersions) and what we checked ourselves
    // (managedFields of this generation), never on annotations others could have written.
    if (
      !freeze.frozen &&
      !planCrd(crd).storageMigrationNeeded &&
      this.upToDate.get(name) === upToDateKey(crd.metadata.uid, crd.metadata.generation)
    ) {
      this.queue.forget(name)
      return undefined
    }
    const { http, owner, metrics, events, onProgress, checkpointSeal } = this.deps
    const context: MigrationContext = { http, owner, logger, signal, metrics, events, checkpointSeal }
    if (this.budget) context.budget = this.budget
    if (onProgress) context.onProgress = (phase, p) => onProgress(name, phase, p)
    const migrate = () => migrateCrd(name, settingsFor(config, name), context)
    metrics?.crdsInFlight.inc()
    let result: MigrationResult
    try {
      result = this.deps.lock ? await this.deps.lock.run(name, migrate) : await migrate()
    } finally {
      metrics?.crdsInFlight.dec()
    }
    this.deps.onResult?.(result)
    if (result.outcome === 'Succeeded' || result.skipReason === 'up-to-date')
      this.upToDate.set(name, upToDateKey(result.crdUid, result.generation))
    else this.upToDate.delete(name)
    if (result.outcome === 'Failed' || result.outcome === 'Blocked') {
      const delay = this.queue.addRateLimited(name)
      logger.warn({ crd: name, reason: result.reason, retryInMs: delay }, `migration ${result.outcome.toLowerCase()}; will retry`)
    } else if (result.skipReason === 'in-progress' || result.skipReason === 'builtin-migration') {
      // A built-in migration's end also re-queues it through the watch (its condition changes).
      this.queue.addAfter(name, config.migrator.takeoverAfterSeconds * 1000)
    } else {
      this.queue.forget(name)
    }
    return result
  }

  /** A freeze we did not set is never lifted by us; say so once, loudly. */
  private reportFrozen(crd: CustomResourceDefinition, frozen: boolean, owner: string | undefined): void {
    const name = crd.metadata.name
    if (frozen && !owner) {
      this.deps.metrics?.frozen.set({ crd: name, owner: 'foreign' }, 1)
      if (!this.reportedForeign.has(name)) {
        this.reportedForeign.add(name)
        const message = `CRD carries ${this.deps.config.annotations.migrating}=true without a crd-migrator owner; not migrating it. If no migrator is running, remove the annotation: kubectl annotate crd ${name} ${this.deps.config.annotations.migrating}-`
        this.deps.logger.warn({ crd: name }, message)
        void this.deps.events?.record(crd, 'Warning', 'FrozenByAnotherMigrator', message)
      }
    } else {
      this.deps.metrics?.frozen.remove({ crd: name, owner: 'foreign' })
      this.reportedForeign.delete(name)
    }
  }

  private onChange(crd: CustomResourceDefinition): void {
    const name = crd.metadata.name
    const key = `${crd.metadata.generation ?? 0}/${storageMigratingCondition(crd)?.status ?? '-'}/${(crd.status?.storedVersions ?? []).join(',')}`
    if (this.seenGeneration.get(name) === key) return
    this.seenGeneration.set(name, key)
    this.queue.add(name)
    this.lookAtStorageSwitch(crd)
  }

  /**
   * CRDs queued together (first list, an operator upgrade): one shared first look at their storage
   * switch, so each counts its settle time from it instead of waiting its own (storage-agreement.ts).
   */
  private lookAtStorageSwitch(crd: CustomResourceDefinition): void {
    if (this.deps.config.migrator.maxParallelCrds === 1 || !planCrd(crd).storageMigrationNeeded) return
    this.toLookAt.push(crd)
    if (this.toLookAt.length > 1) return
    setImmediate(() => {
      const batch = this.toLookAt
      this.toLookAt = []
      observeStorageSwitches(this.deps.http, batch, { endpoints: this.deps.config.migrator.apiServerEndpoints }).then(
        (answers) => this.deps.logger.debug({ crds: batch.length, answers }, 'first look at the storage switch of the queued CRDs'),
        (err: unknown) => this.deps.logger.debug({ err }, 'first look at the storage switch failed; each run asks for itself'),
      )
    })
  }

  private async resyncLoop(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      await sleep(this.deps.config.migrator.resyncSeconds * 1000, undefined, { signal }).catch(() => {})
      if (signal.aborted) return
      try {
        for (const filter of this.selection.watchFilters()) {
          const pages = listPages<CustomResourceDefinition>(this.deps.http, CRD_API, {
            query: { labelSelector: filter.labelSelector, fieldSelector: filter.fieldSelector },
            pageSize: CRD_PAGE_SIZE,
            signal,
          })
          for await (const page of pages) for (const crd of page.items) if (this.selects(crd)) this.queue.add(crd.metadata.name)
        }
      } catch (err) {
        if (signal.aborted) return
        this.deps.logger.warn({ err }, 'resync list of CRDs failed')
      }
    }
  }

  /**
   * A list-and-watch per selection filter, so the API server sends only our CRDs; `selects` still
   * applies for the one unfiltered watch that replaces many name watches.
   */
  private async watchLoop(signal: AbortSignal): Promise<void> {
    await Promise.all(
      this.selection.watchFilters().map((filter) =>
        listAndWatch<CustomResourceDefinition>(
          this.deps.http,
          CRD_API,
          {
            onObject: (crd) => {
              if (this.selects(crd)) this.onChange(crd)
            },
            onDeleted: (crd) => this.seenGeneration.delete(crd.metadata.name),
            onError: (err) => this.deps.logger.warn({ err, filter }, 'CRD watch failed; retrying'),
          },
          signal,
          { ...filter, pageSize: CRD_PAGE_SIZE },
        ),
      ),
    )
  }
}

/** CRDs per list page: a CRD with a big schema is hundreds of kilobytes, so fewer than the default 500. */
const CRD_PAGE_SIZE = 50

const upToDateKey = (uid: string | undefined, generation: number | undefined) => `${uid ?? ''}/${generation ?? 0}`
