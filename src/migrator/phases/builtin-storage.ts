/**
 * Living with Kubernetes' own storage version migrator (kube/builtin-migrations.ts): a CRD it works on
 * is not frozen; with `engine: builtin` our storage phase is one of its StorageVersionMigrations, inside
 * our freeze and checks; after our freeze, the migrations it held back are nudged to run now.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import {
  builtinMigrationApi,
  builtinMigrationMessage,
  builtinMigrationState,
  BUILTIN_MIGRATION_GROUP,
  conditionText,
  createBuiltinMigration,
  deleteBuiltinMigration,
  getBuiltinMigration,
  isActive,
  listBuiltinMigrations,
  migrationsFor,
  nudgeBuiltinMigration,
  storageMigratingCondition,
  STORAGE_MIGRATING,
  type BuiltinMigration,
} from '../../kube/builtin-migrations.js'
import type { CrdCondition, CustomResourceDefinition } from '../../kube/types.js'
import { CrdMigratorError } from '../../errors.js'
import { isForbidden } from '../../kube/api-errors.js'
import { STATE_PREFIX } from '../../state/crd-state.js'
import { writeBuiltinMigration } from '../../state/crd-record.js'
import type { BuiltinPhaseReport, MigrationContext, MigrationSettings } from '../context.js'
import type { StateWriter } from '../freeze/state-writer.js'
import { wholeSeconds } from '../../duration.js'

/** What builtinBusyReason looks at; `migrations` undefined: they could not be listed (RBAC). */
type BuiltinEvidence = { condition: CrdCondition | undefined; migrations: readonly BuiltinMigration[] | undefined }

/**
 * What the built-in migrator is doing with a CRD's resource: the served version of storagemigration.k8s.io
 * (`api`; undefined: the API is absent, no migrations), the CRD's StorageMigrating condition, when it has
 * one, and the resource's StorageVersionMigrations, oldest first.
 */
export async function builtinActivity(http: MigrationContext['http'], crd: CustomResourceDefinition) {
  const condition = storageMigratingCondition(crd)
  const api = await builtinMigrationApi(http)
  if (api === undefined) return { api, condition, migrations: [] as BuiltinMigration[] }
  const migrations = migrationsFor(await listBuiltinMigrations(http, api), crd.spec.group, crd.spec.names.plural)
  return { api, condition, migrations }
}

/**
 * Why our run must not start now: a pending or running built-in StorageVersionMigration for the resource.
 * The StorageMigrating condition alone proves nothing (a deleted migration leaves it True, and without the
 * webhook anyone who may write CRD status can set it), so it counts only when migrations cannot be listed.
 * `ours`: a migration this run created itself (a resumed `engine: builtin` run).
 */
export function builtinBusyReason(activity: BuiltinEvidence, ours?: string): string | undefined {
  if (activity.migrations === undefined) {
    if (activity.condition?.status !== 'True' || ours !== undefined) return undefined
    return (
      `the CRD says ${STORAGE_MIGRATING}=True (${describeCondition(activity.condition)}) and its built-in ` +
      `StorageVersionMigrations cannot be listed to check it`
    )
  }
  const others = activity.migrations.filter((m) => isActive(m) && m.metadata.name !== ours)
  const running = others.find((m) => builtinMigrationState(m) === 'Running')
  if (running) return `the built-in StorageVersionMigration ${running.metadata.name} runs on this resource`
  const pending = others[0]
  if (pending) return `the built-in StorageVersionMigration ${pending.metadata.name} waits to run on this resource`
  return undefined
}

/** For a log line: a StorageMigrating=True condition no active built-in migration stands behind (a deleted one's, or forged). */
export function unbackedConditionText(activity: BuiltinEvidence, ours?: string): string | undefined {
  if (activity.condition?.status !== 'True' || activity.migrations === undefined) return undefined
  if (activity.migrations.some((m) => isActive(m) && m.metadata.name !== ours)) return undefined
  return describeCondition(activity.condition)
}

/** The condition's message, else its reason, cut and cleaned. */
function describeCondition(condition: CrdCondition): string {
  return conditionText(condition.message || condition.reason || 'no message')
}

const POLL_MS = 1_000

/**
 * Phase StorageVersionMigration through kube-controller-manager: a built-in StorageVersionMigration, named
 * on the CRD first so the webhook lets kube-controller-manager mark the CRD StorageMigrating under our freeze. Aborting deletes it.
 */
export async function runBuiltinStoragePhase(
  crd: CustomResourceDefinition,
  settings: MigrationSettings,
  ctx: MigrationContext,
  state: StateWriter,
): Promise<BuiltinPhaseReport> {
  const name = crd.metadata.name
  const log = ctx.logger.child({ crd: name })
  const api = await builtinMigrationApi(ctx.http)
  if (api === undefined) {
    throw new CrdMigratorError(
      'CRDM_BUILTIN_UNAVAILABLE',
      `engine builtin: the API server serves no ${BUILTIN_MIGRATION_GROUP} (Kubernetes 1.37, or 1.35–1.36 with the StorageVersionMigrator feature gate and the v1beta1 API enabled)`,
    )
  }
  const migrationName = builtinMigrationName(name, crd.metadata.generation ?? 0)
  // Named on the CRD before it exists: kube-controller-manager may promote it at once.
  await writeBuiltinMigration(ctx.http, name, migrationName)
  const created = await createBuiltinMigration(
    ctx.http,
    api,
    { group: crd.spec.group, resource: crd.spec.names.plural },
    { name: migrationName, labels: { 'app.kubernetes.io/managed-by': 'crd-migrator', [`${STATE_PREFIX}crd`]: crdLabel(name) } },
  )
  const createdAt = Date.now()
  log.info({ builtinMigration: migrationName, api }, 'built-in StorageVersionMigration created; waiting for kube-controller-manager')
  await state.waiting(`built-in StorageVersionMigration ${migrationName}: waiting for kube-controller-manager`)
  let lastMessage: string | undefined
  const failed = (why: string) =>
    new CrdMigratorError('CRDM_BUILTIN_FAILED', `the built-in StorageVersionMigration ${migrationName} ${why}`)
  try {
    for (;;) {
      ctx.signal?.throwIfAborted()
      const current = await getBuiltinMigration(ctx.http, api, migrationName)
      if (current === undefined || current.metadata.uid !== created.metadata.uid) throw failed('was deleted before it finished')
      const phase = builtinMigrationState(current)
      const message = builtinMigrationMessage(current)
      if (phase === 'Succeeded') return { name: migrationName, message, durationMs: Date.now() - createdAt }
      if (phase === 'Failed') throw failed(`failed: ${message ?? 'no message'}`)
      if (phase === 'Pending' && Date.now() - createdAt > settings.builtinStartTimeoutMs) {
        throw new CrdMigratorError(
          'CRDM_BUILTIN_UNAVAILABLE',
          `kube-controller-manager did not start the built-in StorageVersionMigration ${migrationName} within ` +
            `${wholeSeconds(settings.builtinStartTimeoutMs)}: is its storage-version-migrator-controller running?`,
        )
      }
      if (message !== lastMessage && message !== undefined) {
        lastMessage = message
        await state.waiting(`built-in StorageVersionMigration ${migrationName}: ${message}`)
      }
      await sleep(POLL_MS, undefined, ctx.signal ? { signal: ctx.signal } : {})
    }
  } catch (err) {
    // Not finished: take it away, so kube-controller-manager does not start it after our freeze is gone.
    await deleteBuiltinMigration(ctx.http, api, migrationName).catch((e: unknown) =>
      log.warn({ err: e, builtinMigration: migrationName }, 'could not delete the unfinished built-in StorageVersionMigration'),
    )
    throw err
  }
}

/**
 * kube-controller-manager retries the starts our freeze refused with a growing backoff; a touch makes it
 * look now. A courtesy: the chart grants the patch only with engine builtin.
 */
export async function releaseHeldBuiltinMigrations(ctx: MigrationContext, crd: CustomResourceDefinition): Promise<void> {
  try {
    const activity = await builtinActivity(ctx.http, crd)
    if (activity.api === undefined) return
    for (const m of activity.migrations.filter((x) => builtinMigrationState(x) === 'Pending')) {
      await nudgeBuiltinMigration(ctx.http, activity.api, m.metadata.name, `${STATE_PREFIX}released-at`)
      ctx.logger.info({ crd: crd.metadata.name, builtinMigration: m.metadata.name }, 'built-in StorageVersionMigration may start now')
    }
  } catch (err) {
    if (isForbidden(err))
      return ctx.logger.info(
        { crd: crd.metadata.name, err },
        'a built-in StorageVersionMigration our freeze held back was not woken (no patch on storagemigration.k8s.io storageversionmigrations: the chart grants it with engine builtin); kube-controller-manager starts it after its own backoff',
      )
    ctx.logger.warn({ crd: crd.metadata.name, err }, 'could not look for built-in StorageVersionMigrations waiting for this CRD')
  }
}

/** `crd-migrator-<crd>-g<generation>-<random>`, within the 253 characters of a name. */
export function builtinMigrationName(crdName: string, generation: number, random = Math.random().toString(36).slice(2, 7)): string {
  const suffix = `-g${generation}-${random}`
  return `crd-migrator-${crdName.slice(0, 253 - 'crd-migrator-'.length - suffix.length)}${suffix}`
}

/** A label value (63 characters at most, alphanumeric at both ends) naming the CRD. */
function crdLabel(crdName: string): string {
  return crdName.slice(0, 63).replace(/[^A-Za-z0-9]+$/, '')
}
