/**
 * The migrator's own RBAC on a resource's objects (and on the CRD a run freezes), asked
 * before anything is frozen or listed (kube/access-review.ts): a run that may not list or patch them would freeze the
 * CRD against everyone, system:masters included, only to fail at its first list. Such a
 * run fails with CRDM_FORBIDDEN instead, nothing frozen and no state annotation written.
 */
import { describeCheck, migrationAccess, type CrdWrites } from '../kube/access-review.js'
import { resourceRef } from '../kube/paths.js'
import type { CustomResourceDefinition } from '../kube/types.js'
import type { MigrationSettings, RunContext } from './context.js'
import type { RunPlan } from './decide.js'

/** How to grant it, for the failure's text. */
export const GRANT_HINT = 'grant it (chart: rbac.managedGroups, migrator.names or migrator.crds; or rbac.allGroups)'

/**
 * Why the migrator may not migrate this resource's objects, or undefined. `statusSubresource`:
 * writes go through `/status` (useStatusSubresource). Unverifiable checks are logged, not refused.
 */
export async function accessDenied(
  resource: { group: string; plural: string; version: string },
  statusSubresource: boolean,
  { client, logger }: Pick<RunContext, 'client' | 'logger'>,
  crd?: CrdWrites,
): Promise<string | undefined> {
  // Reads only: a 429 or a restarting API server is ridden out like any request of a run;
  // the reviews are retried together, so a retry asks every one again.
  const options = { statusSubresource, ...(crd ? { crd } : {}) }
  const verdict = await client.retry(() => migrationAccess(client.http, resource, options))
  if (verdict.unverified.length > 0) {
    logger.warn(
      { resource: `${resource.plural}.${resource.group}`, unverified: verdict.unverified.map(describeCheck) },
      'SelfSubjectAccessReviews cannot be created (RBAC): these permissions are not checked before the run',
    )
  }
  return verdict.allowed ? undefined : `${verdict.reason}; ${GRANT_HINT}`
}

/**
 * migrateCrd's check, after the decision and before the freeze: only a new freeze is
 * checked (a freeze of ours being resumed is held already; its run fails and lifts it).
 * Besides the objects, the CRD itself: a run that may set the freeze but not write its
 * heartbeat, lift it or narrow status.storedVersions would leave the CRD frozen against
 * everyone (issue 44, item 5).
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
