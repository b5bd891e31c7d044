/**
 * Migrates a resource named the way StorageVersionMigration objects and
 * `migrate --resource` name it. A custom resource is a CRD migration (migrate.ts). A
 * built-in resource has no CRD, no freeze and no storedVersions: every object is
 * rewritten once, which is what re-encrypts Secrets after an encryption-at-rest key
 * rotation (a no-op write of an object read with an old key is never skipped as
 * unchanged: the API server marks it stale).
 */
import { CrdMigratorError } from '../errors.js'
import { getCrd } from '../kube/crds.js'
import { type KubeHttp } from '../kube/http.js'
import { isNotFound } from '../kube/api-errors.js'
import type { ResourceRef } from '../kube/paths.js'
import { describeResourceName, resolveResource, type ResourceName } from '../kube/resources.js'
import { accessDenied } from './access-preflight.js'
import { runContext, type MigrationContext, type MigrationResult, type MigrationSettings } from './context.js'
import { migrateCrd } from './migrate.js'
import { rewriteEveryObject, runWithoutFreeze } from './migrate-unfrozen.js'
import { RunReporter } from './reporter.js'

/** `plural.group`, the CRD's name, when the resource is a custom resource; undefined for a built-in one. */
export async function crdDefining(http: KubeHttp, ref: ResourceRef): Promise<string | undefined> {
  if (ref.group === '') return undefined
  const name = `${ref.plural}.${ref.group}`
  try {
    await getCrd(http, name)
    return name
  } catch (err) {
    if (isNotFound(err)) return undefined
    throw err
  }
}

export async function migrateResource(
  resource: ResourceName,
  settingsFor: (name: string) => MigrationSettings,
  ctx: MigrationContext,
): Promise<MigrationResult> {
  const ref = await resolveResource(ctx.http, resource)
  const crdName = await crdDefining(ctx.http, ref)
  if (crdName) return migrateCrd(crdName, settingsFor(crdName), ctx)
  return migrateWithoutCrd(describeResourceName({ ...resource, version: undefined }), ref, settingsFor(ref.plural), ctx)
}

export async function migrateWithoutCrd(
  name: string,
  ref: ResourceRef,
  settings: MigrationSettings,
  caller: MigrationContext,
): Promise<MigrationResult> {
  const started = Date.now()
  const ctx = runContext(caller, settings)
  const report = new RunReporter(name, ctx, { resource: name })
  const result: MigrationResult = {
    crd: name,
    outcome: 'Failed',
    reason: '',
    storageVersion: ref.version,
    crdUid: undefined,
    generation: 0,
    storedVersionsBefore: [],
    storedVersionsAfter: [],
    durationMs: 0,
    leftFrozen: false,
  }
  report.log.info({ version: ref.version }, 'rewriting every object of a built-in resource')
  return runWithoutFreeze(report, result, started, ctx.signal, async () => {
    // Before the first list: a resource outside the migrator's RBAC fails here, named (access-preflight.ts).
    const denied = await accessDenied({ group: ref.group, plural: ref.plural, version: ref.version }, false, ctx, ctx.client)
    if (denied) throw new CrdMigratorError('CRDM_FORBIDDEN', `${denied}; nothing was written`)
    // Merge patches: built-in resources have no conversion webhooks, and their
    // managedFields are never of a version the API server cannot convert.
    const how = `through ${ref.group ? `${ref.group}/` : ''}${ref.version}`
    return rewriteEveryObject({ kind: 'resource', name, ref }, { ...settings, useStatusSubresource: false }, ctx, result, how)
  })
}
