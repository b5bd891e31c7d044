/**
 * KSVM's trigger controller (docs/ksvm-and-builtin.md, "The trigger"): a StorageState per resource kept from discovery,
 * and a StorageVersionMigration created when that calls for one (the decisions: ksvm-trigger-state.ts). One item at a
 * time, as KSVM: its discovery and migration handling would otherwise race on the persisted hashes.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import type { Logger } from 'pino'
import { isConflict, isNotFound, unlessNotFound } from '../kube/api-errors.js'
import { apiGroup, apiGroups, preferredResources, storageVersionHash, type DiscoveredResource } from '../kube/discovery.js'
import type { KubeHttp } from '../kube/http.js'
import { listPages } from '../kube/list-pages.js'
import { CRD_API, objectPath } from '../kube/paths.js'
import type { CustomResourceDefinition } from '../kube/types.js'
import { listAndWatch } from '../kube/watch.js'
import { getStorageVersionMigration, hasCondition, KSVM_API, KSVM_RESOURCE, type StorageVersionMigration } from './ksvm-state.js'
import {
  decideDiscovery,
  migrationResource,
  newStorageState,
  nextStatus,
  STORAGE_STATE_API,
  STORAGE_STATE_RESOURCE,
  statusAfterMigration,
  storageStateName,
  type GroupResource,
  type StorageState,
  type StorageStateStatus,
} from './ksvm-trigger-state.js'
import { WorkQueue } from './queue.js'

interface KsvmTriggerDeps {
  http: KubeHttp
  logger: Logger
  /** Discovery is read this often (KSVM: 600 s); a state not seen for twice this long is stale. */
  pollSeconds: number
  /** The resources to keep states for; every one (KSVM) when unset. Tests sharing an API server scope it. */
  scope?: (r: GroupResource) => boolean
}

const ROUND = 'round'
const RESOURCE = 'resource/'
const MIGRATION = 'migration/'
/** A CRD's new storage version reaches discovery within seconds; we look for about four minutes (0.5+1+...+128 s). */
const FLIP_ATTEMPTS = 10

export class KsvmTrigger {
  private queue = new WorkQueue(500, 60_000)
  /** Every StorageVersionMigration, as the watch last showed it (KSVM's informer cache). */
  private readonly migrations = new Map<string, StorageVersionMigration>()
  /** The hash each resource was last processed with, by state name. */
  private readonly known = new Map<string, string>()
  /** CRDs whose storage version changed: the hash discovery should show, and how often we looked. */
  private readonly flips = new Map<string, GroupResource & { hash: string; attempts: number }>()
  private crdWatch: Promise<void> | undefined

  constructor(private readonly deps: KsvmTriggerDeps) {}

  private inScope(r: GroupResource): boolean {
    return this.deps.scope?.(r) ?? true
  }

  async run(signal: AbortSignal): Promise<void> {
    const log = this.deps.logger
    log.info({ pollSeconds: this.deps.pollSeconds }, 'StorageState trigger started')
    this.reset()
    try {
      if (!(await this.apisServed(signal)) || !(await this.listMigrations(signal))) return
      const watching = listAndWatch<StorageVersionMigration>(
        this.deps.http,
        KSVM_API,
        {
          onObject: (svm) => {
            this.migrations.set(svm.metadata.name, svm)
            if (this.inScope(migrationResource(svm)) && hasCondition(svm, 'Succeeded')) this.queue.add(MIGRATION + svm.metadata.name)
          },
          onDeleted: (svm) => this.migrations.delete(svm.metadata.name),
          onError: (err) => log.warn({ err }, 'StorageVersionMigration watch failed; retrying'),
        },
        signal,
      )
      this.queue.add(ROUND)
      try {
        await this.queue.process(
          signal,
          (item) => this.handle(item, signal),
          (item, err, retryInMs) => log.error({ item, err, retryInMs }, 'StorageState trigger failed; retrying'),
        )
      } finally {
        await Promise.all([watching, this.crdWatch])
      }
    } finally {
      log.info('StorageState trigger stopped')
    }
  }

  /** A new leader term starts from nothing: what the last one saw may be out of date. */
  private reset(): void {
    this.queue = new WorkQueue(500, 60_000)
    this.migrations.clear()
    this.known.clear()
    this.flips.clear()
    this.crdWatch = undefined
  }

  /** Waits until the StorageState API answers (its CRD installed); false when stopped first. */
  private apisServed(signal: AbortSignal): Promise<boolean> {
    return this.retryUntilDone(
      signal,
      () => this.deps.http.request({ method: 'GET', path: STORAGE_STATE_API, query: { limit: 1 } }),
      'StorageState objects are not served (migration.k8s.io/v1alpha1): install their CRD (chart: storageVersionMigrations.installCRD); retrying',
      'could not list StorageStates; retrying',
    )
  }

  /** KSVM waits for its informer's first list before its first discovery; false when stopped first. */
  private listMigrations(signal: AbortSignal): Promise<boolean> {
    return this.retryUntilDone(
      signal,
      async () => {
        for await (const page of listPages<StorageVersionMigration>(this.deps.http, KSVM_API, { signal, pageSize: 500 })) {
          for (const svm of page.items) this.migrations.set(svm.metadata.name, svm)
        }
      },
      'StorageVersionMigration objects are not served (migration.k8s.io/v1alpha1): install their CRD; retrying',
      'could not list StorageVersionMigrations; retrying',
    )
  }

  /** Runs `step` until it succeeds (true) or `signal` stops it (false), backing off to 30 s; a 404 says what to install. */
  private async retryUntilDone(signal: AbortSignal, step: () => Promise<unknown>, notServed: string, failed: string): Promise<boolean> {
    for (let failures = 0; !signal.aborted; failures++) {
      try {
        await step()
        return true
      } catch (err) {
        if (signal.aborted) break
        this.deps.logger.warn({ err }, isNotFound(err) ? notServed : failed)
        await sleep(Math.min(30_000, 1000 * 2 ** failures), undefined, { signal }).catch(() => {})
      }
    }
    return false
  }

  private async handle(item: string, signal: AbortSignal): Promise<void> {
    if (item === ROUND) {
      await this.round()
      this.queue.forget(ROUND)
      this.queue.addAfter(ROUND, this.deps.pollSeconds * 1000)
      // After the first round, so the CRDs listed at its start are compared with what it saw.
      this.crdWatch ??= this.watchCrds(signal)
    } else if (item.startsWith(RESOURCE)) {
      await this.recheck(item.slice(RESOURCE.length))
    } else if (item.startsWith(MIGRATION)) {
      await this.migrationChanged(item.slice(MIGRATION.length))
    }
  }

  /** KSVM's processDiscovery: every preferred resource; a group version that cannot be read is left for the next round. */
  private async round(): Promise<void> {
    const { http, logger } = this.deps
    const heartbeat = new Date()
    const { resources, failed } = await preferredResources(http, await apiGroups(http))
    for (const f of failed)
      logger.warn({ groupVersion: f.groupVersion, err: f.err }, 'discovery failed for a group version; it is left for the next round')
    let errors = 0
    for (const r of resources) {
      try {
        await this.processResource(r, heartbeat)
      } catch (err) {
        errors++
        logger.error({ resource: storageStateName(r), err }, 'StorageState not updated; the next round tries again')
      }
    }
    logger.debug({ resources: resources.length, errors }, 'discovery round done')
  }

  private watchCrds(signal: AbortSignal): Promise<void> {
    return listAndWatch<CustomResourceDefinition>(
      this.deps.http,
      CRD_API,
      {
        onObject: (crd) => this.crdSeen(crd),
        onError: (err) => this.deps.logger.warn({ err }, 'CRD watch failed; retrying'),
      },
      signal,
    )
  }

  /** A CRD whose storage version is not the one last processed: look at its discovery now, not at the next round. */
  private crdSeen(crd: CustomResourceDefinition): void {
    const storage = crd.spec.versions.find((v) => v.storage)
    const r = { group: crd.spec.group, resource: crd.spec.names.plural }
    if (!storage || !this.inScope(r)) return
    const name = storageStateName(r)
    const hash = storageVersionHash(r.group, storage.name, crd.spec.names.kind)
    if (this.known.get(name) === hash) return
    this.flips.set(name, { ...r, hash, attempts: 0 })
    this.queue.forget(RESOURCE + name)
    this.queue.add(RESOURCE + name)
  }

  /** The API server publishes a flip asynchronously: until discovery shows the new hash, look again later. */
  private async recheck(name: string): Promise<void> {
    const flip = this.flips.get(name)
    if (!flip) return
    const group = await apiGroup(this.deps.http, flip.group)
    const discovered = group
      ? (await preferredResources(this.deps.http, [group])).resources.find((r) => r.resource === flip.resource)
      : undefined
    if (discovered?.storageVersionHash !== flip.hash && ++flip.attempts < FLIP_ATTEMPTS) {
      this.queue.addRateLimited(RESOURCE + name)
      return
    }
    this.flips.delete(name)
    this.queue.forget(RESOURCE + name)
    if (discovered) await this.processResource(discovered, new Date())
  }

  /** KSVM's processDiscoveryResource. */
  private async processResource(discovered: DiscoveredResource, heartbeat: Date): Promise<void> {
    if (!discovered.storageVersionHash || !this.inScope(discovered)) return
    const { http, logger } = this.deps
    const name = storageStateName(discovered)
    const decision = decideDiscovery({
      discovered,
      state: await this.getState(name),
      migrations: [...this.migrations.values()],
      heartbeat,
      staleAfterMs: 2 * this.deps.pollSeconds * 1000,
    })
    if (!decision) return
    if (decision.deleteState)
      await unlessNotFound(http.request({ method: 'DELETE', path: objectPath(STORAGE_STATE_RESOURCE, undefined, name) }))
    if (decision.createMigration) {
      for (const old of decision.deleteMigrations) {
        await unlessNotFound(http.request({ method: 'DELETE', path: objectPath(KSVM_RESOURCE, undefined, old) }))
        this.migrations.delete(old)
      }
      const created = (await http.request<StorageVersionMigration>({ method: 'POST', path: KSVM_API, body: decision.createMigration })).body
      // Known at once, so a recheck right after does not launch another (the watch catches up later).
      this.migrations.set(created.metadata.name, created)
      logger.info(
        {
          resource: name,
          reason: decision.reason,
          hash: discovered.storageVersionHash,
          migration: created.metadata.name,
          deleted: decision.deleteMigrations,
        },
        'StorageVersionMigration created',
      )
    }
    await this.writeStatus(discovered, (state) => nextStatus(state, discovered.storageVersionHash, heartbeat))
    this.known.set(name, discovered.storageVersionHash)
  }

  /** KSVM's processMigration: a Succeeded migration leaves only the current hash persisted. */
  private async migrationChanged(svmName: string): Promise<void> {
    const svm = await getStorageVersionMigration(this.deps.http, svmName)
    if (!svm) return // deleted by a relaunch: the next discovery decides
    const r = migrationResource(svm)
    await this.writeStatus(r, (state) => (state ? statusAfterMigration(state, svm) : undefined), { create: false })
    this.deps.logger.debug({ resource: storageStateName(r), migration: svmName }, 'StorageVersionMigration Succeeded seen')
  }

  private async getState(name: string): Promise<StorageState | undefined> {
    const path = objectPath(STORAGE_STATE_RESOURCE, undefined, name)
    return (await unlessNotFound(this.deps.http.request<StorageState>({ method: 'GET', path })))?.body
  }

  /**
   * Reads the state (creating it unless told not to; the API server drops status on create), then
   * replaces its status through /status, again on a conflict. `next` returning undefined writes nothing.
   */
  private async writeStatus(
    r: GroupResource,
    next: (state: StorageState | undefined) => StorageStateStatus | undefined,
    options: { create: boolean } = { create: true },
  ): Promise<void> {
    const { http } = this.deps
    const name = storageStateName(r)
    for (let attempt = 1; ; attempt++) {
      let state = await this.getState(name)
      if (!state) {
        if (!options.create) return
        try {
          state = (await http.request<StorageState>({ method: 'POST', path: STORAGE_STATE_API, body: newStorageState(r) })).body
        } catch (err) {
          if (isConflict(err) && attempt < 5) continue // created meanwhile
          throw err
        }
      }
      const status = next(state)
      if (!status) return
      try {
        await http.request({
          method: 'PUT',
          path: objectPath(STORAGE_STATE_RESOURCE, undefined, name, 'status'),
          body: { ...state, status },
        })
        return
      } catch (err) {
        if (!isConflict(err) || attempt >= 5) throw err
      }
    }
  }
}
