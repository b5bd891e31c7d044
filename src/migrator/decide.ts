/**
 * Whether a run goes ahead, and with which phases, from reads only (the CRD, the built-in migrator's activity). Every
 * mode starts with readRun; a run without a storage phase counts its work next (run-phases.ts workBeforeFreeze).
 */
import { isForbidden } from '../kube/api-errors.js'
import { conversionStrategy } from '../kube/conversion.js'
import { getNamedCrd } from '../kube/crds.js'
import type { KubeRequests } from '../kube/http.js'
import { storageMigratingCondition } from '../kube/builtin-migrations.js'
import type { CustomResourceDefinition } from '../kube/types.js'
import { decideFreeze, readCrdState, type FreezeVerdict } from '../state/crd-state.js'
import { startingResult, type MigrationContext, type MigrationResult, type MigrationSettings, type SkipReason } from './context.js'
import type { RewriteWrite } from './phases/object-writes.js'
import { builtinActivity, builtinBusyReason, unbackedConditionText } from './phases/builtin-storage.js'
import { rulesForGroup, type StashRule } from './phases/stashes/rules.js'
import { Phase, planCrd, storagePhaseRuns, versionHasStatusSubresource, type CrdPlan } from './plan.js'

/** What every mode of a run reads first: the CRD, its plan, how its objects are rewritten, why nothing can be done (blocked). */
export type RunStart = { crd: CustomResourceDefinition; plan: CrdPlan; base: MigrationResult; rewrite: RewriteWrite } & (
  { blocked: string; storageVersion?: string | undefined } | { blocked?: undefined; storageVersion: string }
)
export type ReadyStart = RunStart & { storageVersion: string }

/** The prologue of every run: the CRD read and planned; `base` is the result of a run that does nothing. */
export async function readRun(name: string, client: KubeRequests): Promise<RunStart> {
  const crd = await getNamedCrd(client, name)
  const plan = planCrd(crd)
  const rewrite: RewriteWrite = conversionStrategy(crd) === 'Webhook' ? 'apply' : 'merge-patch'
  const read = { crd, plan, base: startingResult(name, crd, plan), rewrite }
  if (plan.blockedReason || !plan.storageVersion) return { ...read, blocked: plan.blockedReason ?? 'no storage version' }
  return { ...read, storageVersion: plan.storageVersion }
}

/** What a run will do once it holds the freeze. */
export interface RunPlan {
  storageVersion: string
  verdict: Extract<FreezeVerdict, { action: 'freeze' | 'resume' }>
  runStorage: boolean
  /** Stash rules of this CRD's group (phase StashedObjectMigration); empty: the phase does not run. */
  stashRules: StashRule[]
  runCleanup: boolean
}

/** Whether to run at all, and which phases (a resumed freeze's storage phase: plan.ts storagePhaseRuns). */
export async function decideRun(
  { crd, plan, storageVersion }: ReadyStart,
  settings: MigrationSettings,
  ctx: MigrationContext,
): Promise<RunPlan | { skip: SkipReason; reason: string }> {
  const verdict = decideFreeze(readCrdState(crd, settings.migratingAnnotation), ctx.owner, storageVersion, settings.takeoverAfterMs)
  if (verdict.action === 'foreign') return { skip: 'frozen-by-another', reason: verdict.reason }
  if (verdict.action === 'wait') return { skip: 'in-progress', reason: verdict.reason }
  if (verdict.action === 'freeze') {
    const busy = await builtinBusy(crd, ctx)
    if (busy) return { skip: 'builtin-migration', reason: busy }
  }

  const { runStorage, stashRules, runCleanup } = phasesToRun(crd, plan, settings, verdict.action === 'resume')
  if (settings.useStatusSubresource && runStorage && !versionHasStatusSubresource(crd, storageVersion)) {
    return { skip: 'blocked', reason: `useStatusSubresource is set but version ${storageVersion} has no status subresource` }
  }
  return { storageVersion, verdict, runStorage, stashRules, runCleanup }
}

/** Which phases a run of `crd` runs (the dry runs' too, never resumed); `resume`: a freeze of ours taken up again. */
export function phasesToRun(crd: CustomResourceDefinition, plan: CrdPlan, settings: MigrationSettings, resume: boolean) {
  const { phases } = settings
  return {
    runStorage: storagePhaseRuns({ phases, storageMigrationNeeded: plan.storageMigrationNeeded, resume, force: settings.force === true }),
    stashRules: phases.includes(Phase.StashedObjectMigration) ? rulesForGroup(settings.stashes ?? [], crd.spec.group) : [],
    runCleanup: phases.includes(Phase.CleanupManagedFields),
  }
}

/**
 * Why Kubernetes' own migrator keeps us off this CRD now (one migrator at a time): a pending or running built-in
 * StorageVersionMigration of its resource. A StorageMigrating=True condition without one is logged, not waited for.
 */
async function builtinBusy(crd: CustomResourceDefinition, ctx: MigrationContext): Promise<string | undefined> {
  let activity
  try {
    activity = await builtinActivity(ctx.http, crd)
  } catch (err) {
    if (!isForbidden(err)) throw err
    ctx.logger.warn(
      { crd: crd.metadata.name, err },
      'cannot list storagemigration.k8s.io StorageVersionMigrations (RBAC); only the CRD condition tells whether the built-in migrator runs',
    )
    return builtinBusyReason({ condition: storageMigratingCondition(crd), migrations: undefined })
  }
  if (activity.api === undefined) return undefined
  const unbacked = unbackedConditionText(activity)
  if (unbacked !== undefined) {
    ctx.logger.warn(
      { crd: crd.metadata.name, condition: unbacked },
      'the CRD says StorageMigrating=True but no built-in StorageVersionMigration of its resource is pending or running (one was deleted mid-run, or someone else wrote it); not waiting for it',
    )
  }
  return builtinBusyReason(activity)
}
