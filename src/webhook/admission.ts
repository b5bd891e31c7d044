/**
 * The storage-freeze decision of KEP-2855, as a pure function: no I/O, no clock, no
 * logging, so every rule can be pinned down by a table of cases.
 *
 * Rules, and why:
 * - The freeze is keyed on the OLD object: a CRD is frozen when the object as stored
 *   carries the migrating annotation with exactly the migrating value. So "remove the
 *   annotation and move storage" in one request is judged as a storage change on a
 *   frozen CRD.
 * - The freeze holds for everyone (KEP-2855: no storage change "if the CRD includes the
 *   annotation"). Moving storage or deleting a frozen CRD is refused to every identity,
 *   break-glass groups included: an upgrade applied by an administrator mid-migration is
 *   the accident the freeze exists for. Break-glass users keep the power to remove the
 *   annotation, a deliberate and audited first step, and the refusal tells them so.
 * - Storage changes are compared as the SET of version names with `storage: true`, so a
 *   reordering of spec.versions is not a change, while a flag flipped, a storage
 *   version added (alone or with a new version) or removed is.
 * - Requests through /status are judged like the others: the API server's CRD status
 *   strategy keeps metadata from the NEW object, so annotations sent there are saved.
 *   The spec is reset from the old object there, so storage cannot move through /status.
 * - While frozen, status.storedVersions may be changed by the migrator (it narrows them
 *   before it lifts the freeze) and break-glass groups (who may lift the freeze anyway;
 *   warned and audited), nobody else: a status-only patcher narrowing them mid-run would
 *   declare old-version objects gone. The API server's own condition writes keep
 *   storedVersions as they are and pass.
 * - The state annotations (STATE_PREFIX, state/crd-state.ts) are the migrator's state. Anyone but the migrator
 *   and break-glass is refused setting or changing one, at all times: forged results or
 *   checkpoints must not reach `status` or a resumed run. Removing them is refused while
 *   the CRD is frozen (a resumed run reads them) and allowed otherwise, so installers
 *   that replace a whole CRD object (PUT) keep working between migrations.
 * - Migrator identities may set, change and remove the annotations but are subject to
 *   the storage freeze like everyone else: the migrator never flips storage, so a
 *   migrator identity doing so is a bug or a stolen token. A ServiceAccount name counts
 *   as the migrator only with a ServiceAccount token's proof (config/identities.ts).
 * - CREATE carrying the migrating annotation or a state annotation is treated as
 *   setting it: guarded.
 * - A review that cannot be judged (UPDATE without oldObject, an object that is not an
 *   object, a malformed spec.versions or status.storedVersions on a frozen CRD, a freeze
 *   marker that cannot be read) is denied, break-glass included: the webhook exists to
 *   fail closed, and the API server never sends such a review for a valid CRD. Annotation
 *   values are strings in every object the API server stores, so no real review is
 *   refused for that (found by test/integration/fuzz-webhook.test.ts).
 * - Kubernetes' own migrator (kube-controller-manager, storagemigration.k8s.io) marks a CRD
 *   `StorageMigrating=True` while it migrates it. That freezes the storage version and
 *   deletion exactly like our annotation (judged on the OLD object too), so an upgrade
 *   cannot move storage under either migrator. storedVersions are not guarded then: the
 *   built-in migrator narrows them itself when it is done.
 * - One migrator at a time: while our annotation freezes a CRD, setting its
 *   StorageMigrating condition to True (kube-controller-manager promoting a built-in
 *   migration) is refused, unless our run delegated its storage phase to the built-in
 *   migrator (the `builtin-migration` state annotation, which only the migrator writes).
 *   kube-controller-manager retries, and starts once we lift the freeze.
 * - The StorageMigrating condition is a freeze too, so it is guarded like the annotation:
 *   adding it, removing it or changing its status (any CRD, frozen or not) is refused to
 *   everyone but kube-controller-manager's identities (builtinMigratorUsers), the migrator
 *   and break-glass groups (warned and audited). Otherwise a user who may write only CRD
 *   status could freeze any CRD against everyone (True), or lift a real built-in freeze
 *   for any CRD editor (False). Its reason and message are not guarded: they freeze nothing.
 * - While a CRD is frozen (either way), the versions that hold its objects stay served and
 *   its conversion stays as it is, for everyone, like the storage version: un-serving the
 *   storage version or a version in status.storedVersions would make objects unreadable
 *   mid-migration, and a new spec.conversion would send every object the migration reads
 *   and writes through a webhook of the editor's choosing. Break-glass lifts the freeze first.
 * - Names from the request are shortened in messages: a CRD name is at most 253
 *   characters, and a longer one must not make the answer or the log grow with it.
 */
import { CONFIG_DEFAULTS } from '../config/schema.js'
import { isStateAnnotation, MIGRATING_VALUE, STATE_PREFIX, StateAnnotation } from '../state/crd-state.js'
import { STORAGE_MIGRATING } from '../kube/builtin-migrations.js'
import { isListedUser, type UserIdentity } from '../config/identities.js'
import { isObject, type JsonObject } from './json.js'

export interface AdmissionPolicy {
  migratingAnnotation: string
  migratingValue: string
  migratorUsers: readonly string[]
  migratorGroups: readonly string[]
  breakGlassGroups: readonly string[]
  /** kube-controller-manager's identities, allowed to change the StorageMigrating condition. */
  builtinMigratorUsers: readonly string[]
}

/** The policy of the default configuration: the config schema's defaults (config/schema.ts). */
export const DEFAULT_ADMISSION_POLICY: AdmissionPolicy = Object.freeze({
  migratingAnnotation: CONFIG_DEFAULTS.annotations.migrating,
  migratingValue: MIGRATING_VALUE,
  migratorUsers: CONFIG_DEFAULTS.identities.migratorUsers,
  migratorGroups: CONFIG_DEFAULTS.identities.migratorGroups,
  breakGlassGroups: CONFIG_DEFAULTS.identities.breakGlassGroups,
  builtinMigratorUsers: CONFIG_DEFAULTS.identities.builtinMigratorUsers,
})

export const ADMISSION_OPERATIONS = ['CREATE', 'UPDATE', 'DELETE', 'CONNECT'] as const
export type AdmissionOperation = (typeof ADMISSION_OPERATIONS)[number]

/** Closed set, used as the `reason` label of crd_migrator_admission_denials_total. */
export const DENIAL_REASONS = [
  'storage-version-frozen',
  'served-versions-frozen',
  'conversion-frozen',
  'stored-versions-frozen',
  'annotation-guarded',
  'builtin-condition-guarded',
  'delete-frozen',
  'builtin-migration-deferred',
  'malformed-object',
  'internal-error',
] as const
export type DenialReason = (typeof DENIAL_REASONS)[number]

export function isDenialReason(reason: string): reason is DenialReason {
  return (DENIAL_REASONS as readonly string[]).includes(reason)
}

/** What break-glass groups may still do, with a warning: lift or repair the freeze. Never: move storage, delete. */
const BREAK_GLASS_MAY_OVERRIDE: ReadonlySet<DenialReason> = new Set([
  'annotation-guarded',
  'stored-versions-frozen',
  'builtin-condition-guarded',
])

export const ALLOW_REASONS = ['allowed', 'break-glass-override', 'unexpected-resource'] as const
export type AllowReason = (typeof ALLOW_REASONS)[number]

export type DecisionReason = DenialReason | AllowReason

export interface AdmissionInput {
  operation: AdmissionOperation
  /** request.name; for CRDs always set by the API server. */
  name?: string
  /** request.subResource: 'status' for writes through /status, else absent. */
  subResource?: string
  userInfo: UserIdentity
  /** The new object; null/absent on DELETE. */
  object?: unknown
  /** The stored object; null/absent on CREATE. */
  oldObject?: unknown
}

export interface AdmissionDecision {
  allowed: boolean
  reason: DecisionReason
  message?: string
  /** HTTP status the API server reports to the client on denial. */
  code?: number
  warnings?: string[]
}

interface Violation {
  reason: DenialReason
  message: string
  /** Short form for the break-glass warning (kubectl shows warnings; keep them short). */
  summary: string
}

/** Longest name put into a message: a CRD name is a DNS subdomain (253), a username has no limit. */
const MAX_NAME_IN_MESSAGE = 253

export function decideAdmission(input: AdmissionInput, policy: AdmissionPolicy): AdmissionDecision {
  const crdName = shorten(crdNameOf(input) ?? '(unnamed)')
  const identity = classifyIdentity(input.userInfo, policy)
  const ctx: DecisionContext = { crdName, identity, policy, user: input.userInfo }

  let violations: Violation[]
  switch (input.operation) {
    case 'UPDATE':
      violations = updateViolations(input, ctx)
      break
    case 'CREATE':
      violations = createViolations(input, ctx)
      break
    case 'DELETE':
      violations = deleteViolations(input, ctx)
      break
    default:
      // CONNECT does not exist for CRDs; nothing to freeze.
      violations = []
  }

  const first = violations[0]
  if (first === undefined) return { allowed: true, reason: 'allowed' }
  // Break-glass overrides the guards of the freeze's bookkeeping, never the freeze
  // itself and never a malformed review (with no object to look at there is nothing to
  // override).
  if (identity.breakGlass && violations.every((v) => BREAK_GLASS_MAY_OVERRIDE.has(v.reason))) {
    return {
      allowed: true,
      reason: 'break-glass-override',
      warnings: [`break-glass override by ${describeUser(input.userInfo)}: ${violations.map((v) => v.summary).join('; ')}`],
    }
  }
  const shown = identity.breakGlass ? violations.filter((v) => !BREAK_GLASS_MAY_OVERRIDE.has(v.reason)) : violations
  const main = shown[0] ?? first
  return {
    allowed: false,
    reason: main.reason,
    message: shown.map((v) => v.message).join(' Also: '),
    code: main.reason === 'malformed-object' ? 400 : 403,
  }
}

interface Identity {
  migrator: boolean
  breakGlass: boolean
  /** kube-controller-manager (policy.builtinMigratorUsers). */
  builtinMigrator: boolean
}

interface DecisionContext {
  crdName: string
  identity: Identity
  policy: AdmissionPolicy
  user: UserIdentity
}

function classifyIdentity(user: UserIdentity, policy: AdmissionPolicy): Identity {
  const inAny = (groups: readonly string[]) => user.groups.some((g) => groups.includes(g))
  return {
    migrator: isListedUser(user, policy.migratorUsers) || inAny(policy.migratorGroups),
    breakGlass: inAny(policy.breakGlassGroups),
    builtinMigrator: isListedUser(user, policy.builtinMigratorUsers),
  }
}

function updateViolations(input: AdmissionInput, ctx: DecisionContext): Violation[] {
  const { crdName, policy } = ctx
  const shape =
    objectViolation(input.object, 'object', 'UPDATE', crdName) ??
    objectViolation(input.oldObject, 'oldObject', 'UPDATE', crdName) ??
    unreadableMarker(input.oldObject as JsonObject, 'oldObject', crdName, policy) ??
    unreadableMarker(input.object as JsonObject, 'object', crdName, policy)
  if (shape) return [shape]
  const object = input.object as JsonObject
  const oldObject = input.oldObject as JsonObject
  const frozen = isFrozen(oldObject, policy)
  const builtin = builtinMigrating(oldObject)

  const violations: Violation[] = []
  if (frozen || builtin) {
    const by: FreezeSource = frozen ? 'annotation' : 'builtin'
    const storage = storageViolation(oldObject, object, ctx, by)
    if (storage) violations.push(storage)
    const served = servedViolation(oldObject, object, ctx, by)
    if (served) violations.push(served)
    const conversion = conversionViolation(oldObject, object, ctx, by)
    if (conversion) violations.push(conversion)
  }
  if (!ctx.identity.migrator && !ctx.identity.builtinMigrator) {
    const condition = builtinConditionViolation(oldObject, object, ctx)
    if (condition) violations.push(condition)
  }
  if (frozen && !ctx.identity.migrator) {
    const stored = storedVersionsViolation(oldObject, object, input.subResource, ctx)
    if (stored) violations.push(stored)
    const deferred = builtinDeferredViolation(oldObject, object, ctx)
    if (deferred) violations.push(deferred)
  }
  if (ctx.identity.migrator) return violations
  const oldValue = annotationValue(oldObject, policy.migratingAnnotation)
  const newValue = annotationValue(object, policy.migratingAnnotation)
  if (!sameValue(oldValue, newValue)) violations.push(guardViolation(oldValue, newValue, ctx))
  const state = stateViolation(oldObject, object, frozen, ctx)
  if (state) violations.push(state)
  return violations
}

function createViolations(input: AdmissionInput, ctx: DecisionContext): Violation[] {
  const { crdName, policy } = ctx
  const shape =
    objectViolation(input.object, 'object', 'CREATE', crdName) ?? unreadableMarker(input.object as JsonObject, 'object', crdName, policy)
  if (shape) return [shape]
  if (ctx.identity.migrator) return []
  const object = input.object as JsonObject
  const violations: Violation[] = []
  const value = annotationValue(object, policy.migratingAnnotation)
  if (value !== undefined) violations.push(guardViolation(undefined, value, ctx))
  const state = stateViolation({}, object, false, ctx)
  if (state) violations.push(state)
  return violations
}

function deleteViolations(input: AdmissionInput, ctx: DecisionContext): Violation[] {
  const { crdName, policy } = ctx
  const shape =
    objectViolation(input.oldObject, 'oldObject', 'DELETE', crdName) ??
    unreadableMarker(input.oldObject as JsonObject, 'oldObject', crdName, policy)
  if (shape) return [shape]
  const oldObject = input.oldObject as JsonObject
  const by: FreezeSource | undefined = isFrozen(oldObject, policy) ? 'annotation' : builtinMigrating(oldObject) ? 'builtin' : undefined
  if (by === undefined) return []
  return [
    {
      reason: 'delete-frozen',
      summary: `delete of frozen CRD ${crdName}`,
      message:
        `CustomResourceDefinition "${crdName}" is frozen for a storage version migration ` +
        `(${frozenBy(by, ctx)}); deleting it now ` +
        `would delete all of its custom resources mid-migration, and nobody may. ${whatToDo(ctx, by)}`,
    },
  ]
}

/** Which migrator froze a CRD: ours (the migrating annotation) or kube-controller-manager's (StorageMigrating=True). */
type FreezeSource = 'annotation' | 'builtin'

function frozenBy(by: FreezeSource, ctx: DecisionContext): string {
  return by === 'annotation'
    ? `annotation ${ctx.policy.migratingAnnotation}="${ctx.policy.migratingValue}"`
    : `condition ${STORAGE_MIGRATING}=True: Kubernetes' built-in StorageVersionMigration runs`
}

function storageViolation(oldObject: JsonObject, object: JsonObject, ctx: DecisionContext, by: FreezeSource): Violation | undefined {
  const { crdName } = ctx
  const change = versionSetChange(storageVersions, oldObject, object, crdName, 'storage versions')
  if (change === undefined || 'reason' in change) return change
  const { before, after } = change
  return {
    reason: 'storage-version-frozen',
    summary: `storage version ${formatVersions(before)} -> ${formatVersions(after)} on frozen CRD ${crdName}`,
    message:
      `CustomResourceDefinition "${crdName}" is frozen for a storage version migration ` +
      `(${frozenBy(by, ctx)}): changing the ` +
      `storage version from ${formatVersions(before)} to ${formatVersions(after)} is not allowed ` +
      `while the migration runs, for any user. ${whatToDo(ctx, by)}`,
  }
}

/**
 * A version that holds objects (the storage version, or one in status.storedVersions, of the
 * old object) stops being served while the CRD is frozen. A version removed from
 * spec.versions is not looked at here: a stored version cannot be removed (the API server
 * refuses it) and the storage version's removal is a storage change.
 */
function servedViolation(oldObject: JsonObject, object: JsonObject, ctx: DecisionContext, by: FreezeSource): Violation | undefined {
  const { crdName } = ctx
  const storage = storageVersions(oldObject)
  if (typeof storage === 'string') return malformedFrozen(crdName, `oldObject ${storage}`, 'served versions')
  const stored = storedVersions(oldObject)
  if (typeof stored === 'string') return malformedFrozen(crdName, `oldObject ${stored}`, 'served versions')
  const before = servedVersions(oldObject)
  if (typeof before === 'string') return malformedFrozen(crdName, `oldObject ${before}`, 'served versions')
  const after = servedVersions(object)
  if (typeof after === 'string') return malformedFrozen(crdName, `object ${after}`, 'served versions')
  const holding = new Set([...storage, ...stored])
  const unserved = [...holding].filter((v) => before.get(v) === true && after.has(v) && after.get(v) !== true).sort()
  if (unserved.length === 0) return undefined
  const versions = listShort(unserved)
  return {
    reason: 'served-versions-frozen',
    summary: `version ${versions} unserved on frozen CRD ${crdName}`,
    message:
      `CustomResourceDefinition "${crdName}" is frozen for a storage version migration ` +
      `(${frozenBy(by, ctx)}): version ${versions} holds its objects (the storage version or status.storedVersions ` +
      `${formatVersions(holding)}), and no longer serving it now would make them unreadable mid-migration; ` +
      `not allowed while the migration runs, for any user. ${whatToDo(ctx, by)}`,
  }
}

/** Any change of spec.conversion while the CRD is frozen (compared as JSON: the API server defaults both sides). */
function conversionViolation(oldObject: JsonObject, object: JsonObject, ctx: DecisionContext, by: FreezeSource): Violation | undefined {
  const before = specField(oldObject, 'conversion')
  const after = specField(object, 'conversion')
  if (sameJson(before, after)) return undefined
  const { crdName } = ctx
  const describe = (c: unknown) => {
    const strategy = isObject(c) && typeof c['strategy'] === 'string' ? c['strategy'] : undefined
    return strategy === undefined ? '(none)' : JSON.stringify(shorten(strategy, 32))
  }
  return {
    reason: 'conversion-frozen',
    summary: `spec.conversion changed on frozen CRD ${crdName}`,
    message:
      `CustomResourceDefinition "${crdName}" is frozen for a storage version migration ` +
      `(${frozenBy(by, ctx)}): changing spec.conversion (strategy ${describe(before)} -> ${describe(after)}, or its webhook) ` +
      `would send every object the migration reads and writes through another converter; not allowed while the ` +
      `migration runs, for any user. ${whatToDo(ctx, by)}`,
  }
}

/**
 * A change of the StorageMigrating condition (added, removed, its status changed) by
 * anyone but kube-controller-manager, the migrator and break-glass groups (see the header).
 */
function builtinConditionViolation(oldObject: JsonObject, object: JsonObject, ctx: DecisionContext): Violation | undefined {
  const before = storageMigratingStatuses(oldObject)
  const after = storageMigratingStatuses(object)
  if (before.length === after.length && before.every((s, i) => sameValue(s, after[i]))) return undefined
  const { crdName, policy } = ctx
  const show = (statuses: string[]) =>
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
      `${describeGroups('break-glass groups', policy.breakGlassGroups)} may. A condition left True by a deleted ` +
      `StorageVersionMigration is set to False by a break-glass user (README: "crd-migrator and the built-in StorageVersionMigration").`,
  }
}

/**
 * kube-controller-manager marking the CRD StorageMigrating while our freeze holds: two
 * migrators at once. Refused unless our run handed its storage phase to it.
 */
function builtinDeferredViolation(oldObject: JsonObject, object: JsonObject, ctx: DecisionContext): Violation | undefined {
  if (builtinMigrating(oldObject) || !builtinMigrating(object)) return undefined
  const delegated = annotationsOf(oldObject)?.[StateAnnotation.builtinMigration]
  if (typeof delegated === 'string' && delegated !== '') return undefined
  const { crdName, policy } = ctx
  return {
    reason: 'builtin-migration-deferred',
    summary: `${STORAGE_MIGRATING}=True on CRD ${crdName} frozen by crd-migrator`,
    message:
      `CustomResourceDefinition "${crdName}" is being migrated by crd-migrator (annotation ` +
      `${policy.migratingAnnotation}="${policy.migratingValue}"); ${describeUser(ctx.user)} may not start another ` +
      `storage version migration of it (condition ${STORAGE_MIGRATING}=True) until that one is done. ` +
      `The built-in StorageVersionMigration is retried by kube-controller-manager and runs after it.`,
  }
}

/** The statuses of the StorageMigrating conditions, in order (a condition list that cannot be read has none). */
function storageMigratingStatuses(crd: JsonObject): string[] {
  const status = crd['status']
  if (!isObject(status)) return []
  const conditions = status['conditions']
  if (!Array.isArray(conditions)) return []
  return conditions.filter((c) => isObject(c) && c['type'] === STORAGE_MIGRATING).map((c) => asAnnotationValue((c as JsonObject)['status']))
}

/** The old object's StorageMigrating condition is True (a condition list that cannot be read counts as not). */
function builtinMigrating(crd: JsonObject): boolean {
  const status = crd['status']
  if (!isObject(status)) return false
  const conditions = status['conditions']
  if (!Array.isArray(conditions)) return false
  return conditions.some((c) => isObject(c) && c['type'] === STORAGE_MIGRATING && c['status'] === 'True')
}

function storedVersionsViolation(
  oldObject: JsonObject,
  object: JsonObject,
  subResource: string | undefined,
  ctx: DecisionContext,
): Violation | undefined {
  const { crdName, policy } = ctx
  const change = versionSetChange(storedVersions, oldObject, object, crdName, 'status.storedVersions')
  if (change === undefined || 'reason' in change) return change
  const { before, after } = change
  const via = subResource ? ` (through /${shorten(subResource)})` : ''
  return {
    reason: 'stored-versions-frozen',
    summary: `status.storedVersions ${formatVersions(before)} -> ${formatVersions(after)} on frozen CRD ${crdName}`,
    message:
      `CustomResourceDefinition "${crdName}" is frozen for a storage version migration ` +
      `(annotation ${policy.migratingAnnotation}="${policy.migratingValue}"): ${describeUser(ctx.user)} may not change ` +
      `status.storedVersions from ${formatVersions(before)} to ${formatVersions(after)}${via}; the migrator sets them ` +
      `once every object is stored in the storage version. Only the migrator and ` +
      `${describeGroups('break-glass groups', policy.breakGlassGroups)} may.`,
  }
}

/**
 * A non-migrator's change to the migrator's state annotations: setting or changing any
 * of them at all times, removing any of them while frozen (see the header).
 */
function stateViolation(oldObject: JsonObject, object: JsonObject, frozen: boolean, ctx: DecisionContext): Violation | undefined {
  const before = stateAnnotations(oldObject)
  const after = stateAnnotations(object)
  const changed: string[] = []
  for (const [key, value] of after) {
    if (!before.has(key) || !sameValue(before.get(key), value)) changed.push(key)
  }
  if (frozen) for (const key of before.keys()) if (!after.has(key)) changed.push(key)
  if (changed.length === 0) return undefined
  const keys = listShort(changed.sort())
  const { crdName, policy } = ctx
  return {
    reason: 'annotation-guarded',
    summary: `${keys} changed on CRD ${crdName}`,
    message:
      `The ${STATE_PREFIX}* annotations of CustomResourceDefinition "${crdName}" record the migrator's state ` +
      `(what \`crd-migrator status\` shows, where a resumed run stands); ${describeUser(ctx.user)} may not ` +
      `${frozen ? 'set, change or remove' : 'set or change'} ${keys}${frozen ? ' while the CRD is frozen' : ''}. ` +
      `Only the migrator and ${describeGroups('break-glass groups', policy.breakGlassGroups)} may.`,
  }
}

function guardViolation(oldValue: string | undefined, newValue: string | undefined, ctx: DecisionContext): Violation {
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
      `and ${describeGroups('break-glass groups', policy.breakGlassGroups)} may set, change or remove it.`,
  }
}

/**
 * A set of version names read from both objects: undefined when equal, a malformed-object
 * violation when either cannot be read, else both sets.
 */
function versionSetChange(
  read: (crd: JsonObject) => Set<string> | string,
  oldObject: JsonObject,
  object: JsonObject,
  crdName: string,
  what: string,
): Violation | { before: Set<string>; after: Set<string> } | undefined {
  const before = read(oldObject)
  if (typeof before === 'string') return malformedFrozen(crdName, `oldObject ${before}`, what)
  const after = read(object)
  if (typeof after === 'string') return malformedFrozen(crdName, `object ${after}`, what)
  return sameSet(before, after) ? undefined : { before, after }
}

function malformedFrozen(crdName: string, problem: string, what: string): Violation {
  return {
    reason: 'malformed-object',
    summary: `unreadable ${what} of frozen CRD ${crdName}`,
    message:
      `CustomResourceDefinition "${crdName}" is frozen for a storage version migration but its ` +
      `${problem}, so its ${what} cannot be checked; refusing the update.`,
  }
}

function objectViolation(
  value: unknown,
  field: 'object' | 'oldObject',
  operation: AdmissionOperation,
  crdName: string,
): Violation | undefined {
  if (isObject(value)) return undefined
  const got = value === undefined || value === null ? 'none' : Array.isArray(value) ? 'an array' : `a ${typeof value}`
  return {
    reason: 'malformed-object',
    summary: `malformed ${operation} review`,
    message:
      `${operation} review of CustomResourceDefinition "${crdName}" must carry request.${field} as an ` +
      `object, got ${got}; refusing (fail closed) because the storage freeze cannot be checked without it.`,
  }
}

/** A malformed-object violation when the object's migrating annotation cannot be read. */
function unreadableMarker(crd: JsonObject, field: 'object' | 'oldObject', crdName: string, policy: AdmissionPolicy): Violation | undefined {
  const metadata = crd['metadata']
  let problem: string | undefined
  if (!isObject(metadata)) {
    problem = metadata === undefined || metadata === null ? 'has no metadata' : 'has metadata that is not an object'
  } else {
    const annotations = metadata['annotations']
    if (annotations !== undefined && annotations !== null) {
      if (!isObject(annotations)) problem = 'has metadata.annotations that is not an object'
      else if (Object.hasOwn(annotations, policy.migratingAnnotation) && typeof annotations[policy.migratingAnnotation] !== 'string') {
        problem = `has an annotation ${policy.migratingAnnotation} that is not a string`
      }
    }
  }
  if (problem === undefined) return undefined
  return {
    reason: 'malformed-object',
    summary: `unreadable freeze marker on CRD ${crdName}`,
    message:
      `request.${field} of CustomResourceDefinition "${crdName}" ${problem}, so whether it is frozen ` +
      `for a storage version migration cannot be read; refusing (fail closed).`,
  }
}

function isFrozen(crd: JsonObject, policy: AdmissionPolicy): boolean {
  return annotationValue(crd, policy.migratingAnnotation) === policy.migratingValue
}

/** Stands for an annotation value that is not a string; never the same as anything (see sameValue). */
const NOT_A_STRING = '\u0000(not a string)'

function annotationsOf(crd: JsonObject): JsonObject | undefined {
  const metadata = crd['metadata']
  if (!isObject(metadata)) return undefined
  const annotations = metadata['annotations']
  return isObject(annotations) ? annotations : undefined
}

function annotationValue(crd: JsonObject, key: string): string | undefined {
  const annotations = annotationsOf(crd)
  if (annotations === undefined || !Object.hasOwn(annotations, key)) return undefined
  return asAnnotationValue(annotations[key])
}

// Annotation values are strings in any object the API server accepted. Anything else is
// not looked into (no JSON.stringify: a deeply nested value would overflow the stack,
// found by the fuzz test) and counts as changed whatever it is compared with.
const asAnnotationValue = (value: unknown): string => (typeof value === 'string' ? value : NOT_A_STRING)

/** The object's annotations under the state prefix. */
function stateAnnotations(crd: JsonObject): Map<string, string> {
  const out = new Map<string, string>()
  const annotations = annotationsOf(crd)
  if (annotations === undefined) return out
  for (const key of Object.keys(annotations)) {
    if (isStateAnnotation(key)) out.set(key, asAnnotationValue(annotations[key]))
  }
  return out
}

function sameValue(a: string | undefined, b: string | undefined): boolean {
  return a === b && a !== NOT_A_STRING
}

/** Names of the versions with `storage: true`, or a description of why they cannot be read. */
function storageVersions(crd: JsonObject): Set<string> | string {
  const spec = crd['spec']
  if (spec === undefined) return new Set()
  if (!isObject(spec)) return 'has a spec that is not an object'
  const versions = spec['versions']
  // A CRD without versions has no storage version; the API server rejects it anyway.
  if (versions === undefined || versions === null) return new Set()
  if (!Array.isArray(versions)) return 'has spec.versions that is not an array'
  const names = new Set<string>()
  for (const [index, version] of versions.entries()) {
    if (!isObject(version)) return `has spec.versions[${index}] that is not an object`
    if (version['storage'] !== true) continue
    const name = version['name']
    if (typeof name !== 'string') return `has spec.versions[${index}].name that is not a string`
    names.add(name)
  }
  return names
}

/** Whether each version of spec.versions is served (`served: true`), or why they cannot be read. */
function servedVersions(crd: JsonObject): Map<string, boolean> | string {
  const spec = crd['spec']
  if (spec === undefined) return new Map()
  if (!isObject(spec)) return 'has a spec that is not an object'
  const versions = spec['versions']
  if (versions === undefined || versions === null) return new Map()
  if (!Array.isArray(versions)) return 'has spec.versions that is not an array'
  const served = new Map<string, boolean>()
  for (const [index, version] of versions.entries()) {
    if (!isObject(version)) return `has spec.versions[${index}] that is not an object`
    const name = version['name']
    if (typeof name !== 'string') return `has spec.versions[${index}].name that is not a string`
    served.set(name, version['served'] === true)
  }
  return served
}

function specField(crd: JsonObject, field: string): unknown {
  const spec = crd['spec']
  return isObject(spec) ? spec[field] : undefined
}

/**
 * Deep equality of two JSON values (key order ignored). Iterative, with a budget: a value
 * nested or sized past what a CRD can hold counts as changed, so a hostile review cannot
 * overflow the stack (the fuzz test sends 200,000 levels) or spin.
 */
function sameJson(a: unknown, b: unknown): boolean {
  const stack: Array<[unknown, unknown]> = [[a, b]]
  let budget = 200_000
  while (stack.length > 0) {
    if (--budget < 0) return false
    const [x, y] = stack.pop()!
    if (x === y) continue
    if (Array.isArray(x)) {
      if (!Array.isArray(y) || x.length !== y.length) return false
      for (let i = 0; i < x.length; i++) stack.push([x[i], y[i]])
      continue
    }
    if (isObject(x)) {
      if (!isObject(y)) return false
      const keys = Object.keys(x)
      if (keys.length !== Object.keys(y).length) return false
      for (const k of keys) {
        if (!Object.hasOwn(y, k)) return false
        stack.push([x[k], y[k]])
      }
      continue
    }
    return false
  }
  return true
}

/** status.storedVersions as a set, or a description of why it cannot be read. */
function storedVersions(crd: JsonObject): Set<string> | string {
  const status = crd['status']
  if (status === undefined || status === null) return new Set()
  if (!isObject(status)) return 'has a status that is not an object'
  const stored = status['storedVersions']
  if (stored === undefined || stored === null) return new Set()
  if (!Array.isArray(stored)) return 'has status.storedVersions that is not an array'
  const names = new Set<string>()
  for (const [index, name] of stored.entries()) {
    if (typeof name !== 'string') return `has status.storedVersions[${index}] that is not a string`
    names.add(name)
  }
  return names
}

function sameSet(a: Set<string>, b: Set<string>): boolean {
  return a.size === b.size && [...a].every((x) => b.has(x))
}

function formatVersions(versions: Set<string>): string {
  if (versions.size === 0) return '(none)'
  return listShort([...versions].sort())
}

/** request.name, else metadata.name of the new or old object. */
export function crdNameOf(input: Pick<AdmissionInput, 'name' | 'object' | 'oldObject'>): string | undefined {
  if (input.name) return input.name
  for (const candidate of [input.object, input.oldObject]) {
    if (isObject(candidate) && isObject(candidate['metadata'])) {
      const name = candidate['metadata']['name']
      if (typeof name === 'string' && name !== '') return name
    }
  }
  return undefined
}

/** A name from the request, cut to a bounded length for messages. */
export function shorten(value: string, max = MAX_NAME_IN_MESSAGE): string {
  return value.length > max ? `${value.slice(0, max)}…(${value.length} characters)` : value
}

/** A list from the request, bounded in count and in the length of each item. */
function listShort(items: readonly string[], max = 10): string {
  const shown = items.slice(0, max).map((i) => shorten(i))
  return items.length > max ? `${shown.join(', ')} and ${items.length - max} more` : shown.join(', ')
}

function whatToDo(ctx: DecisionContext, by: FreezeSource = 'annotation'): string {
  const { crdName, policy } = ctx
  if (by === 'builtin') {
    return (
      `Wait for the migration to finish (kubectl get storageversionmigrations.storagemigration.k8s.io); ` +
      `kube-controller-manager sets ${STORAGE_MIGRATING}=False then. If none runs any more (a StorageVersionMigration ` +
      `deleted mid-run leaves the condition behind), ${describeGroups('a member of the break-glass groups', policy.breakGlassGroups)} ` +
      `sets the condition to False in a request of its own, as the README shows ("crd-migrator and the built-in StorageVersionMigration").`
    )
  }
  return (
    `Wait for the migration to finish (the migrator removes the annotation), or see its state in ` +
    `the CRD's ${STATE_PREFIX}* annotations: kubectl get crd ${crdName} -o jsonpath='{.metadata.annotations}'. ` +
    `To stop the migration on purpose, ${describeGroups('a member of the break-glass groups', policy.breakGlassGroups)} ` +
    `first removes the annotation in a request of its own (kubectl annotate crd ${crdName} ${policy.migratingAnnotation}-), ` +
    `then makes the change.`
  )
}

function describeUser(user: UserIdentity): string {
  return user.username ? `user "${shorten(user.username)}"` : 'an anonymous user'
}

function describeGroups(label: string, groups: readonly string[]): string {
  return groups.length > 0 ? `${label} (${listShort(groups)})` : `${label} (none configured)`
}
