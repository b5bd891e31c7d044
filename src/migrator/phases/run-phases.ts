/**
 * The phases of a run, each `(run) => Promise<void>`: tells the CRD its phase, works through its own file, records
 * in `run.result`, throws a coded error when the run must stop. workBeforeFreeze runs before the freeze.
 */
import type { CustomResourceDefinition } from '../../kube/types.js'
import { writeUpToDate } from '../../state/crd-record.js'
import type { MigrationSettings, RunContext } from '../context.js'
import type { RunPlan } from '../decide.js'
import type { MigrationRun } from '../run.js'
import { Phase } from '../plan.js'
import { scanManagedFields } from './managed-fields-scan.js'
import { runBuiltinStoragePhase } from './builtin-storage.js'
import { failOnObjects, failOnStashes } from './failures.js'
import { runPhase } from './object-phase.js'
import { runStashPhase } from './stashes/stash-phase.js'
import { STORAGE_SETTLE_MS, waitForStorageEverywhere, type StorageSwitchReport } from './storage-switch.js'
import { narrowStoredVersions } from './stored-versions.js'
import { proveLossless } from '../lossless/check.js'

type RunPhase = (run: MigrationRun) => Promise<void>

/**
 * Why a run without a storage phase has nothing to do, or undefined: stashes and managedFields counted
 * (read only) before any freeze. Nothing at all: said on the CRD (for `status` only, never read back).
 */
export async function workBeforeFreeze(
  crd: CustomResourceDefinition,
  plan: RunPlan,
  settings: MigrationSettings,
  ctx: RunContext,
): Promise<string | undefined> {
  const { storageVersion, stashRules, runCleanup } = plan
  const stashes = stashRules.length ? await runStashPhase(crd, storageVersion, stashRules, ctx, { dryRun: true }) : undefined
  const stashWork = stashes ? stashes.counts.seen - stashes.counts.current : 0
  if (!runCleanup && stashWork === 0) return `nothing to do: status.storedVersions is [${storageVersion}]`
  const cleanupWork = runCleanup ? (await scanManagedFields(ctx.client, crd, storageVersion, settings)).objects : 0
  if (cleanupWork > 0 || stashWork > 0) return undefined
  await writeUpToDate(ctx.http, crd)
  return `nothing to do: status.storedVersions is [${storageVersion}] and no managedFields entry of an unserved version${stashes ? ', no stashed copy at another version' : ''}`
}

/** Every object in the storage version, once every API server stores it: by our writer or by kube-controller-manager's. */
export const storagePhase: RunPhase = async (run) => {
  run.state.phase(Phase.StorageVersionMigration)
  run.result.apiServers = await storageSwitched(run, run.settings.storageSettleMs ?? STORAGE_SETTLE_MS)
  // Every object proven to keep its content before the first is written (a loss: Blocked), whichever engine writes.
  await losslessCheck(run)
  if (run.settings.engine === 'builtin') {
    // kube-controller-manager rewrites the objects; everything around it stays ours.
    run.result.builtin = await runBuiltinStoragePhase(run.crd, run.settings, run.ctx, run.state)
    run.log.info(
      { builtinMigration: run.result.builtin.name, durationMs: run.result.builtin.durationMs },
      'built-in StorageVersionMigration succeeded',
    )
    return
  }
  run.result.storage = await objectPhase(run, Phase.StorageVersionMigration, 'storage', run.frozen.resumeAfter)
  failOnObjects(run.result.storage, 'could not be rewritten')
}

/** Copies stashed in other objects, before storedVersions says the old version can go. */
export const stashPhase: RunPhase = async (run) => {
  run.state.phase(Phase.StashedObjectMigration)
  run.result.stashes = await runStashPhase(run.crd, run.plan.storageVersion, run.plan.stashRules, run.ctx)
  failOnStashes(run.result.stashes)
}

/** status.storedVersions := [storage], after asking every API server once more. */
export const storedVersionsPhase: RunPhase = async (run) => {
  run.state.phase('UpdatingStoredVersions')
  // The report is the last check's: a run whose second check fails must not say every server stores it.
  run.result.apiServers = undefined
  run.result.apiServers = await storageSwitched(run, 0)
  run.guard.signal.throwIfAborted()
  const { name, plan, settings, frozen } = run
  run.crd = await narrowStoredVersions(
    run.ctx,
    name,
    plan.storageVersion,
    frozen.frozenGeneration,
    run.ctx.client,
    settings.migratingAnnotation,
    run.state.lastCrd ?? run.crd,
  )
  run.result.storedVersionsAfter = run.crd.status?.storedVersions ?? []
  run.log.info({ storedVersions: run.result.storedVersionsAfter }, 'status.storedVersions updated')
}

/** managedFields entries of unserved versions: removed, or relabelled to the storage version. */
export const cleanupPhase: RunPhase = async (run) => {
  run.state.phase(Phase.CleanupManagedFields)
  run.result.cleanup = await objectPhase(run, Phase.CleanupManagedFields, 'cleanup')
  failOnObjects(run.result.cleanup, 'kept managedFields of unserved versions')
}

/** A phase over every object of the run's CRD (object-phase.ts); a run stopped mid-phase keeps its counts so far in `result[key]`. */
function objectPhase(run: MigrationRun, phase: Phase, key: 'storage' | 'cleanup', resumeAfter?: string) {
  const { crd, plan, settings, ctx, state, conversion, rewrite } = run
  return runPhase(phase, { kind: 'crd', crd, storageVersion: plan.storageVersion }, settings, ctx, {
    state,
    conversion,
    rewrite,
    resumeAfter,
    onStopped: (partial) => (run.result[key] = partial),
  })
}

/** The lossless check of every object (lossless/check.ts), its report kept on the result whatever it found. */
async function losslessCheck(run: MigrationRun): Promise<void> {
  // The check before the freeze saw every object (one page held them all) through the same CRD (the freeze's
  // resourceVersion precondition). Listing again proves nothing more: objects written after either check are frozen by
  // neither. Webhook conversions are asked again (the webhook may have changed in between).
  const first = run.checkedBeforeFreeze
  if (first?.complete && first.method === 'list') {
    run.result.lossless = first
    run.log.debug('lossless check: the check before the freeze covered every object')
    return
  }
  await proveLossless(run.crd, run.plan.storageVersion, run.settings, run.ctx, { conversion: run.conversion, result: run.result })
}

/** Waits until every API server stores the storage version (storage-switch.ts), telling the CRD and metrics. */
async function storageSwitched(run: MigrationRun, settleMs: number): Promise<StorageSwitchReport> {
  const { crd, ctx, plan, settings, state } = run
  const report = await waitForStorageEverywhere(ctx.http, crd, plan.storageVersion, settings, {
    settleMs,
    signal: ctx.signal,
    logger: run.log,
    onWaiting: (servers) => void state.waiting(`waiting for API server(s) ${servers.join(', ')} to store ${plan.storageVersion}`),
  })
  ctx.metrics?.apiServers.set({ state: 'listed' }, report.listed)
  ctx.metrics?.apiServers.set({ state: 'checked' }, report.checked)
  return report
}
