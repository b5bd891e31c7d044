/**
 * What the webhook says when a rule of rules.ts is broken: the denial, a short summary for the
 * break-glass warning, what to do instead. Request text is bounded first (shorten, listShort):
 * usernames and lists have no limit, and the answer and log must not grow with them.
 */
import { STATE_PREFIX } from '../state/crd-state.js'
import { STORAGE_MIGRATING } from '../kube/builtin-migrations.js'
import { FREEZE_PERMISSION, type UserIdentity } from '../config/identities.js'
import type { AdmissionOperation, AdmissionPolicy, DenialReason } from './admission.js'
import { isObject } from './json.js'
import { NOT_A_STRING } from './readers.js'
import { cutText } from '../sanitize.js'

export interface Violation {
  reason: DenialReason
  message: string
  /** Short form for the break-glass warning (kubectl shows warnings; keep them short). */
  summary: string
}

/** Which migrator froze a CRD: ours (the migrating annotation) or kube-controller-manager's (StorageMigrating=True). */
export type FreezeSource = 'annotation' | 'builtin'

/** What every message may name: the CRD (already shortened), the policy, the requesting user. */
export interface MessageContext {
  crdName: string
  policy: AdmissionPolicy
  user: UserIdentity
}

/** Longest name put into a message: a CRD name is a DNS subdomain (253), a username has no limit. */
const MAX_NAME_IN_MESSAGE = 253

export function shorten(value: string, max = MAX_NAME_IN_MESSAGE): string {
  return cutText(value, max)
}

/** A list from the request, bounded in count and in the length of each item. */
function listShort(items: readonly string[], max = 10): string {
  const shown = items.slice(0, max).map((i) => shorten(i))
  return items.length > max ? `${shown.join(', ')} and ${items.length - max} more` : shown.join(', ')
}

function formatVersions(versions: Set<string>): string {
  if (versions.size === 0) return '(none)'
  return listShort([...versions].sort())
}

function describeUser(user: UserIdentity): string {
  return user.username ? `user "${shorten(user.username)}"` : 'an anonymous user'
}

/** `verb "freeze" on customresourcedefinitions.apiextensions.k8s.io "widgets.example.com"`. */
function freezePermission(crdName: string): string {
  return `verb "${FREEZE_PERMISSION.verb}" on ${FREEZE_PERMISSION.resource}.${FREEZE_PERMISSION.group} "${crdName}"`
}

/** Everyone but the migrator who may lift or repair the freeze: users RBAC allows to freeze the CRD, and break-glass groups. */
function overriders(ctx: MessageContext, article = 'a'): string {
  const groups = ctx.policy.breakGlassGroups
  return (
    `${article === 'a' ? 'a user' : 'users'} RBAC allows ${freezePermission(ctx.crdName)} (cluster-admin holds it) ` +
    `or ${article === 'a' ? 'a member of the break-glass groups' : 'break-glass groups'} (${groups.length > 0 ? listShort(groups) : 'none configured'})`
  )
}

/**
 * The end of a refusal a user with the permission would not get: which rule of the webhook
 * refused, and what to grant (RBAC, not system:masters).
 */
function grantHint(ctx: MessageContext, rule: DenialReason): string {
  const user = ctx.user.username ? shorten(ctx.user.username) : '<user>'
  return (
    ` (crd-migrator webhook rule ${rule}.) To allow ${describeUser(ctx.user)}, grant it ${freezePermission(ctx.crdName)} with RBAC: ` +
    `the chart's ClusterRole <fullname>-freeze has it (crd-migrator-freeze for a release named crd-migrator; ` +
    `helm's notes name it), e.g. kubectl create clusterrolebinding <name> --clusterrole=<fullname>-freeze ` +
    `--user=${user}; membership of system:masters is not needed.`
  )
}

function frozenBy(by: FreezeSource, ctx: MessageContext): string {
  return by === 'annotation'
    ? `annotation ${ctx.policy.migratingAnnotation}="${ctx.policy.migratingValue}"`
    : `condition ${STORAGE_MIGRATING}=True: Kubernetes' built-in StorageVersionMigration runs`
}

function frozenCrd(ctx: MessageContext, by: FreezeSource): string {
  return `CustomResourceDefinition "${ctx.crdName}" is frozen for a storage version migration (${frozenBy(by, ctx)})`
}

function whatToDo(ctx: MessageContext, by: FreezeSource): string {
  const { crdName, policy } = ctx
  if (by === 'builtin') {
    return (
      `Wait for the migration to finish (kubectl get storageversionmigrations.storagemigration.k8s.io); ` +
      `kube-controller-manager sets ${STORAGE_MIGRATING}=False then. If none runs any more (a StorageVersionMigration ` +
      `deleted mid-run leaves the condition behind), ${overriders(ctx)} ` +
      `sets the condition to False in a request of its own, as the README shows ("crd-migrator and the built-in StorageVersionMigration").`
    )
  }
  return (
    `Wait for the migration to finish (the migrator removes the annotation), or see its state in ` +
    `the CRD's ${STATE_PREFIX}* annotations: kubectl get crd ${crdName} -o jsonpath='{.metadata.annotations}'. ` +
    `To stop the migration on purpose, ${overriders(ctx)} ` +
    `first removes the annotation in a request of its own (kubectl annotate crd ${crdName} ${policy.migratingAnnotation}-), ` +
    `then makes the change.`
  )
}

/** Who was let through by break-glass, why (group or RBAC `freeze`), and each guard overridden. */
export function breakGlassWarning(user: UserIdentity, overridden: readonly Violation[], byRbac = false, crdName = ''): string {
  const why = byRbac ? ` (RBAC allows ${freezePermission(crdName)})` : ''
  return `break-glass override by ${describeUser(user)}${why}: ${overridden.map((v) => v.summary).join('; ')}`
}

export function deleteFrozen(ctx: MessageContext, by: FreezeSource): Violation {
  const { crdName } = ctx
  return {
    reason: 'delete-frozen',
    summary: `delete of frozen CRD ${crdName}`,
    message:
      `${frozenCrd(ctx, by)}; deleting it now ` +
      `would delete all of its custom resources mid-migration, and nobody may. ${whatToDo(ctx, by)}`,
  }
}

export function storageFrozen(ctx: MessageContext, by: FreezeSource, before: Set<string>, after: Set<string>): Violation {
  const { crdName } = ctx
  return {
    reason: 'storage-version-frozen',
    summary: `storage version ${formatVersions(before)} -> ${formatVersions(after)} on frozen CRD ${crdName}`,
    message:
      `${frozenCrd(ctx, by)}: changing the ` +
      `storage version from ${formatVersions(before)} to ${formatVersions(after)} is not allowed ` +
      `while the migration runs, for any user. ${whatToDo(ctx, by)}`,
  }
}

/** `unserved`: the versions that hold objects (`holding`) and would no longer be served. */
export function servedFrozen(ctx: MessageContext, by: FreezeSource, unserved: readonly string[], holding: Set<string>): Violation {
  const { crdName } = ctx
  const versions = listShort(unserved)
  return {
    reason: 'served-versions-frozen',
    summary: `version ${versions} unserved on frozen CRD ${crdName}`,
    message:
      `${frozenCrd(ctx, by)}: version ${versions} holds its objects (the storage version or status.storedVersions ` +
      `${formatVersions(holding)}), and no longer serving it now would make them unreadable mid-migration; ` +
      `not allowed while the migration runs, for any user. ${whatToDo(ctx, by)}`,
  }
}

/** `before`, `after`: spec.conversion of the old and the new object, as found. */
export function conversionFrozen(ctx: MessageContext, by: FreezeSource, before: unknown, after: unknown): Violation {
  const { crdName } = ctx
  const describe = (c: unknown) => {
    const strategy = isObject(c) && typeof c['strategy'] === 'string' ? c['strategy'] : undefined
    return strategy === undefined ? '(none)' : JSON.stringify(shorten(strategy, 32))
  }
  return {
    reason: 'conversion-frozen',
    summary: `spec.conversion changed on frozen CRD ${crdName}`,
    message:
      `${frozenCrd(ctx, by)}: changing spec.conversion (strategy ${describe(before)} -> ${describe(after)}, or its webhook) ` +
      `would send every object the migration reads and writes through another converter; not allowed while the ` +
      `migration runs, for any user. ${whatToDo(ctx, by)}`,
  }
}

/** `before`, `after`: the statuses of the StorageMigrating conditions of the old and the new object. */
export function builtinConditionGuarded(ctx: MessageContext, before: readonly string[], after: readonly string[]): Violation {
  const { crdName, policy } = ctx
  const show = (statuses: readonly string[]) =>
    statuses.length === 0
      ? 'none'
      : statuses.map((s) => (s === NOT_A_STRING ? '(not a string)' : JSON.stringify(shorten(s, 32)))).join(', ')
  const attempted =
    before.length === 0 ? 'add it' : after.length === 0 ? 'remove it' : `change its status from ${show(before)} to ${show(after)}`
  const allowed = policy.builtinMigratorUsers.map((u) => `user ${shorten(u)}`)
  return {
    reason: 'builtin-condition-guarded',
    summary: `${STORAGE_MIGRATING} condition ${before.length === 0 ? 'added' : after.length === 0 ? 'removed' : 'changed'} on CRD ${crdName}`,
    message:
      `The condition ${STORAGE_MIGRATING} of CustomResourceDefinition "${crdName}" says that Kubernetes' built-in ` +
      `storage version migrator (kube-controller-manager) migrates it, and while it is True nobody may change its ` +
      `storage version or delete it; ${describeUser(ctx.user)} may not ${attempted}. Only kube-controller-manager ` +
      `(${allowed.length > 0 ? listShort(allowed) : 'no identity configured'}), the migrator and ` +
      `${overriders(ctx, 'users')} may. A condition left True by a deleted ` +
      `StorageVersionMigration is set to False by one of them (README: "crd-migrator and the built-in StorageVersionMigration").` +
      grantHint(ctx, 'builtin-condition-guarded'),
  }
}

export function builtinMigrationDeferred(ctx: MessageContext): Violation {
  const { crdName } = ctx
  return {
    reason: 'builtin-migration-deferred',
    summary: `${STORAGE_MIGRATING}=True on CRD ${crdName} frozen by crd-migrator`,
    message:
      `CustomResourceDefinition "${crdName}" is being migrated by crd-migrator (${frozenBy('annotation', ctx)}); ` +
      `${describeUser(ctx.user)} may not start another ` +
      `storage version migration of it (condition ${STORAGE_MIGRATING}=True) until that one is done. ` +
      `The built-in StorageVersionMigration is retried by kube-controller-manager and runs after it.`,
  }
}

export function storedVersionsFrozen(
  ctx: MessageContext,
  before: Set<string>,
  after: Set<string>,
  subResource: string | undefined,
): Violation {
  const via = subResource ? ` (through /${shorten(subResource)})` : ''
  return {
    reason: 'stored-versions-frozen',
    summary: `status.storedVersions ${formatVersions(before)} -> ${formatVersions(after)} on frozen CRD ${ctx.crdName}`,
    message:
      `${frozenCrd(ctx, 'annotation')}: ${describeUser(ctx.user)} may not change ` +
      `status.storedVersions from ${formatVersions(before)} to ${formatVersions(after)}${via}; the migrator sets them ` +
      `once every object is stored in the storage version. Only the migrator and ` +
      `${overriders(ctx, 'users')} may.` +
      grantHint(ctx, 'stored-versions-frozen'),
  }
}

/** `changed`: the state annotations set, changed or (when `frozen`) removed. */
export function stateGuarded(ctx: MessageContext, changed: string[], frozen: boolean): Violation {
  const keys = listShort(changed.sort())
  const { crdName } = ctx
  return {
    reason: 'annotation-guarded',
    summary: `${keys} changed on CRD ${crdName}`,
    message:
      `The ${STATE_PREFIX}* annotations of CustomResourceDefinition "${crdName}" record the migrator's state ` +
      `(what \`crd-migrator status\` shows, where a resumed run stands); ${describeUser(ctx.user)} may not ` +
      `${frozen ? 'set, change or remove' : 'set or change'} ${keys}${frozen ? ' while the CRD is frozen' : ''}. ` +
      `Only the migrator and ${overriders(ctx, 'users')} may.` +
      grantHint(ctx, 'annotation-guarded'),
  }
}

/** The migrating annotation set (`oldValue` undefined), removed (`newValue` undefined) or changed. */
export function migratingGuarded(ctx: MessageContext, oldValue: string | undefined, newValue: string | undefined): Violation {
  const { crdName, policy } = ctx
  const key = policy.migratingAnnotation
  const show = (v: string | undefined) => JSON.stringify(shorten(v ?? ''))
  const attempted =
    oldValue === undefined
      ? `set it to ${show(newValue)}`
      : newValue === undefined
        ? `remove it (was ${show(oldValue)})`
        : `change it from ${show(oldValue)} to ${show(newValue)}`
  const attemptedShort = oldValue === undefined ? 'set' : newValue === undefined ? 'removed' : 'changed'
  const migrator = [...policy.migratorUsers.map((u) => `user ${u}`), ...policy.migratorGroups.map((g) => `group ${g}`)]
  return {
    reason: 'annotation-guarded',
    summary: `${key} ${attemptedShort} on CRD ${crdName}`,
    message:
      `The annotation ${key} on CustomResourceDefinition "${crdName}" freezes its storage version ` +
      `during a migration and is managed by the crd-migrator; ${describeUser(ctx.user)} may not ` +
      `${attempted}. Only the migrator (${migrator.length > 0 ? migrator.join(', ') : 'no identity configured'}) ` +
      `and ${overriders(ctx, 'users')} may set, change or remove it.` +
      grantHint(ctx, 'annotation-guarded'),
  }
}

/** `problem`: what could not be read, e.g. "oldObject has spec.versions that is not an array"; `what`: what it was needed for. */
export function malformedFrozen(crdName: string, problem: string, what: string): Violation {
  return {
    reason: 'malformed-object',
    summary: `unreadable ${what} of frozen CRD ${crdName}`,
    message:
      `CustomResourceDefinition "${crdName}" is frozen for a storage version migration but its ` +
      `${problem}, so its ${what} cannot be checked; refusing the update.`,
  }
}

/** request.object or request.oldObject is missing or not an object; `value` is what was found. */
export function malformedReview(operation: AdmissionOperation, field: 'object' | 'oldObject', crdName: string, value: unknown): Violation {
  const got = value === undefined || value === null ? 'none' : Array.isArray(value) ? 'an array' : `a ${typeof value}`
  return {
    reason: 'malformed-object',
    summary: `malformed ${operation} review`,
    message:
      `${operation} review of CustomResourceDefinition "${crdName}" must carry request.${field} as an ` +
      `object, got ${got}; refusing (fail closed) because the storage freeze cannot be checked without it.`,
  }
}

/** The migrating annotation of request.`field` cannot be read; `problem` says why (readers.ts: unreadableAnnotation). */
export function unreadableMarker(field: 'object' | 'oldObject', crdName: string, problem: string): Violation {
  return {
    reason: 'malformed-object',
    summary: `unreadable freeze marker on CRD ${crdName}`,
    message:
      `request.${field} of CustomResourceDefinition "${crdName}" ${problem}, so whether it is frozen ` +
      `for a storage version migration cannot be read; refusing (fail closed).`,
  }
}
