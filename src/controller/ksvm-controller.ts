/**
 * Reconciles StorageVersionMigration objects as docs/ksvm-and-builtin.md describes, reporting as KSVM does: a managed
 * CRD's resource gets migrateCrd, another CRD's migrateCrdUnfrozen (or is refused), a built-in one migrateWithoutCrd;
 * deleting the object stops the run, which lifts the freeze (KEP-2855). One object at a time, oldest first.
 */
import { ContentType } from '../kube/http.js'
import { isNotFound, unlessNotFound } from '../kube/api-errors.js'
import { objectPath, type ResourceRef } from '../kube/paths.js'
import { describeResourceName, resolveResource } from '../kube/resources.js'
import { listAndWatch } from '../kube/watch.js'
import type { MigrationContext, MigrationResult } from '../migrator/context.js'
import { getCrd } from '../kube/crds.js'
import { crdDefining, migrateCrd, migrateCrdUnfrozen, migrateWithoutCrd } from '../migrator/migrate.js'
import { settingsFor } from '../migrator/crd-settings.js'
import { WorkQueue } from './queue.js'
import type { RunLock } from './run-lock.js'
import type { RunDeps } from './controller.js'
import { CrdSelection } from '../select/selector.js'
import {
  condition,
  conditionForResult,
  getStorageVersionMigration,
  isFinished,
  KSVM_API,
  KSVM_RESOURCE,
  resolutionFailure,
  targetOf,
  type StorageVersionMigration,
  type SvmCondition,
} from './ksvm-state.js'

interface KsvmControllerDeps extends RunDeps {
  lock: RunLock
  /** Told about every finished run (tests listen here). */
  onResult?: (svm: string, result: MigrationResult) => void
  /** The objects to reconcile; every one when unset. Tests sharing an API server scope it. */
  scope?: (svm: StorageVersionMigration) => boolean
}

export class KsvmMigrationController {
  private readonly queue = new WorkQueue()
  /** The run in progress: the object's uid, and how to stop it when the object goes. */
  private running: { name: string; uid: string | undefined; stop: AbortController } | undefined
  /** The CRDs the operator handed to crd-migrator: the only ones these objects may freeze. */
  private readonly selection: CrdSelection

  constructor(private readonly deps: KsvmControllerDeps) {
    this.selection = new CrdSelection(deps.config.migrator.selector)
  }

  async run(signal: AbortSignal): Promise<void> {
    const log = this.deps.logger
    log.info('StorageVersionMigration controller started')
    const watching = listAndWatch<StorageVersionMigration>(
      this.deps.http,
      KSVM_API,
      {
        onObject: (svm) => {
          if (!isFinished(svm) && (this.deps.scope?.(svm) ?? true)) this.queue.add(svm.metadata.name)
        },
        onDeleted: (svm) => this.stopIfRunning(svm.metadata.name, svm.metadata.uid),
        onError: (err) =>
          isNotFound(err)
            ? log.warn(
                'StorageVersionMigration objects are not served (migration.k8s.io/v1alpha1): install their CRD (chart: storageVersionMigrations.installCRD) or turn off --storage-version-migrations; retrying',
              )
            : log.warn({ err }, 'StorageVersionMigration watch failed; retrying'),
      },
      signal,
    )
    try {
      await this.queue.process(
        signal,
        (name) => this.reconcile(name, signal),
        (name, err, retryInMs) => log.error({ svm: name, err, retryInMs }, 'StorageVersionMigration reconcile failed'),
      )
    } finally {
      await watching
      log.info('StorageVersionMigration controller stopped')
    }
  }

  async reconcile(name: string, signal: AbortSignal): Promise<void> {
    const { http, logger, owner, metrics, events, checkpointSeal } = this.deps
    const svm = await getStorageVersionMigration(http, name)
    if (!svm || isFinished(svm) || svm.metadata.deletionTimestamp) return this.queue.forget(name)
    const log = logger.child({ svm: name })
    const target = targetOf(svm)
    if ('invalid' in target) {
      await this.setCondition(svm, condition('Failed', 'True', 'InvalidResource', target.invalid))
      return this.queue.forget(name)
    }
    let ref: ResourceRef
    let crdName: string | undefined
    let unmanaged = false
    try {
      ref = await resolveResource(http, target.resource)
      crdName = await crdDefining(http, ref)
      unmanaged = crdName !== undefined && !this.selection.selects(await getCrd(http, crdName))
    } catch (err) {
      // Not served, or a 403 (discovery or the CRD refused): Failed, never retried forever.
      const failed = resolutionFailure(err)
      if (!failed) throw err
      log.warn({ reason: failed.reason, err }, 'StorageVersionMigration failed: its resource cannot be resolved')
      await this.setCondition(svm, failed)
      return this.queue.forget(name)
    }
    // Whoever may create these objects must not freeze a CRD the operator did not hand to
    // crd-migrator: an unmanaged one is rewritten without a freeze, as KSVM does, or refused.
    if (unmanaged && this.deps.config.migrator.storageVersionMigrationsUnmanaged === 'refuse') {
      const why = `CRD ${crdName} is not managed by crd-migrator (migrator.selector) and migrator.storageVersionMigrationsUnmanaged is refuse; nothing was done`
      log.warn({ crd: crdName }, why)
      await this.setCondition(svm, condition('Failed', 'True', 'NotManaged', why))
      return this.queue.forget(name)
    }

    const stop = new AbortController()
    const onShutdown = () => stop.abort(signal.reason)
    signal.addEventListener('abort', onShutdown, { once: true })
    this.running = { name, uid: svm.metadata.uid, stop }
    const resource = crdName ?? describeResourceName({ ...target.resource, version: undefined })
    try {
      const result = await this.deps.lock.run(crdName ?? `builtin:${resource}`, async () => {
        const how = unmanaged ? ' (not managed: every object rewritten, no freeze)' : ''
        await this.setCondition(svm, condition('Running', 'True', 'Running', `migrating ${resource}${how}`))
        log.info({ resource, unmanaged }, 'StorageVersionMigration running')
        const ctx: MigrationContext = { http, logger, owner, signal: stop.signal, metrics, events, checkpointSeal }
        if (!crdName) return migrateWithoutCrd(resource, ref, settingsFor(this.deps.config, ref.plural), ctx)
        const settings = settingsFor(this.deps.config, crdName)
        return unmanaged ? migrateCrdUnfrozen(crdName, settings, ctx) : migrateCrd(crdName, settings, ctx)
      })
      this.deps.onResult?.(name, result)
      if (stop.signal.aborted && !signal.aborted) {
        log.info({ resource }, 'StorageVersionMigration deleted during its run; the run stopped')
        return this.queue.forget(name)
      }
      if (signal.aborted) return
      const verdict = conditionForResult(result)
      await this.setCondition(svm, verdict.condition)
      if (verdict.finished) this.queue.forget(name)
      else {
        const delay = this.queue.addRateLimited(name)
        log.warn({ resource, reason: result.reason, retryInMs: delay }, 'StorageVersionMigration waiting')
      }
    } finally {
      signal.removeEventListener('abort', onShutdown)
      this.running = undefined
    }
  }

  private stopIfRunning(name: string, uid: string | undefined): void {
    this.queue.forget(name)
    const run = this.running
    if (run && run.name === name && (uid === undefined || run.uid === uid)) {
      this.deps.logger.info({ svm: name }, 'StorageVersionMigration deleted; stopping its run (the freeze is lifted)')
      // An AbortError, so the run reports CRDM_ABORTED with this message.
      run.stop.abort(Object.assign(new Error(`StorageVersionMigration ${name} was deleted`), { name: 'AbortError' }))
    }
  }

  /** Replaces the object's conditions with this one (status subresource; gone objects are fine). */
  private async setCondition(svm: StorageVersionMigration, next: SvmCondition): Promise<void> {
    await unlessNotFound(
      this.deps.http.request({
        method: 'PATCH',
        path: objectPath(KSVM_RESOURCE, undefined, svm.metadata.name, 'status'),
        contentType: ContentType.mergePatch,
        body: { metadata: { uid: svm.metadata.uid }, status: { conditions: [next] } },
      }),
    )
  }
}
