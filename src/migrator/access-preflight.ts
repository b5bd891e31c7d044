/**
 * The migrator's own RBAC on a resource's objects (and the CRD it freezes), asked before anything is frozen or
 * listed: a run that may not list or patch them would freeze the CRD against everyone, system:masters included, only
 * to fail at its first list.
 */
import { describeCheck, migrationAccess, type CrdWrites } from '../kube/access-review.js'
import { resourceRef } from '../kube/paths.js'
import type { CustomResourceDefinition } from '../kube/types.js'
import type { MigrationSettings, RunContext } from './context.js'
import type { RunPlan } from './decide.js'

const GRANT_HINT = 'grant it (chart: rbac.managedGroups, migrator.names or migrator.crds; or rbac.allGroups)'

/** Why the migrator may not migrate these objects, or undefined; unverifiable checks are logged, not refused. */
export async function accessDenied(
  resource: { group: string; plural: string; version: string },
  statusSubresource: boolean,
  { client, logger }: Pick<RunContext, 'client' | 'logger'>,
  crd?: CrdWrites,
): Promise<string | undefined> {
  // Reads only, through the run's client: a 429 or a restarting API server is ridden out like any request of a run.
  const verdict = await migrationAccess(client, resource, { statusSubresource, ...(crd ? { crd } : {}) })
  if (verdict.unverified.length > 0) {
    logger.warn(
      { resource: `${resource.plural}.${resource.group}`, unverified: verdict.unverified.map(describeCheck) },
      'SelfSubjectAccessReviews cannot be created (RBAC): these permissions are not checked before the run',
    )
  }
  return verdict.allowed ? undefined : `${verdict.reason}; ${GRANT_HINT}`
}

/**
 * migrateCrd's check before a new freeze (a resumed one is held already; its run fails and lifts it). The CRD too:
 * a run that may freeze it but not heartbeat, lift or narrow storedVersions would leave it frozen.
 */
export async function forbiddenToMigrate(
  crd: CustomResourceDefinition,
  plan: RunPlan,
  settings: MigrationSettings,
  ctx: RunContext,
): Promise<string | undefined> {
  if (plan.verdict.action !== 'freeze') return undefined
  const denied = await accessDenied(resourceRef(crd, plan.storageVersion), settings.useStatusSubresource && plan.runStorage, ctx, {
    name: crd.metadata.name,
    storedVersions: plan.runStorage,
  })
  return denied && `${denied}; nothing was frozen`
}
