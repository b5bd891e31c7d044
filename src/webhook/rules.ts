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
 * - Who may do what break-glass groups may is decided by RBAC: a user the API server's
 *   authorizer allows the verb `freeze` on the CRD (config/identities.ts FREEZE_PERMISSION;
 *   `cluster-admin` through its wildcard) is judged like a break-glass member, warned and
 *   audited the same way. The API server asks its authorizer in the webhook
 *   configuration's matchConditions and sends such a review to the webhook entry of its
 *   own (input.freezeAllowed); the fixed break-glass groups stay as a fallback.
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
 *
 * The rules read the objects through readers.ts (defensive: a review may hold anything)
 * and word their answers through messages.ts; the policy, input and decision types are
 * admission.ts's.
 */
import { StateAnnotation } from '../state/crd-state.js'
import { isListedUser, type UserIdentity } from '../config/identities.js'
import type { AdmissionDecision, AdmissionInput, AdmissionOperation, AdmissionPolicy, DenialReason } from './admission.js'
import { isObject, type JsonObject } from './json.js'
import * as messages from './messages.js'
import type { FreezeSource, MessageContext, Violation } from './messages.js'
import {
  annotationsOf,
  annotationValue,
  builtinMigrating,
  crdNameOf,
  sameJson,
  sameSet,
  sameValue,
  servedVersions,
  specField,
  stateAnnotations,
  storageMigratingStatuses,
  storageVersions,
  storedVersions,
  unreadableAnnotation,
} from './readers.js'

/** What break-glass groups may still do, with a warning: lift or repair the freeze. Never: move storage, delete. */
const BREAK_GLASS_MAY_OVERRIDE: ReadonlySet<DenialReason> = new Set([
  'annotation-guarded',
  'stored-versions-frozen',
  'builtin-condition-guarded',
])

export function decideAdmission(input: AdmissionInput, policy: AdmissionPolicy): AdmissionDecision {
  const crdName = messages.shorten(crdNameOf(input) ?? '(unnamed)')
  const identity = classifyIdentity(input.userInfo, policy, input.freezeAllowed === true)
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
    const byRbac = !identity.breakGlassGroup
    return {
      allowed: true,
      reason: 'break-glass-override',
      warnings: [messages.breakGlassWarning(input.userInfo, violations, byRbac, crdName)],
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
  /** May override what break-glass may: a member of a break-glass group, or allowed FREEZE_PERMISSION by RBAC. */
  breakGlass: boolean
  /** A member of a break-glass group (the fixed fallback, also without RBAC). */
  breakGlassGroup: boolean
  /** kube-controller-manager (policy.builtinMigratorUsers). */
  builtinMigrator: boolean
}

interface DecisionContext extends MessageContext {
  identity: Identity
}

function classifyIdentity(user: UserIdentity, policy: AdmissionPolicy, freezeAllowed: boolean): Identity {
  const inAny = (groups: readonly string[]) => user.groups.some((g) => groups.includes(g))
  const breakGlassGroup = inAny(policy.breakGlassGroups)
  return {
    migrator: isListedUser(user, policy.migratorUsers) || inAny(policy.migratorGroups),
    breakGlass: breakGlassGroup || freezeAllowed,
    breakGlassGroup,
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
  if (!sameValue(oldValue, newValue)) violations.push(messages.migratingGuarded(ctx, oldValue, newValue))
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
  if (value !== undefined) violations.push(messages.migratingGuarded(ctx, undefined, value))
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
  return [messages.deleteFrozen(ctx, by)]
}

function storageViolation(oldObject: JsonObject, object: JsonObject, ctx: DecisionContext, by: FreezeSource): Violation | undefined {
  const change = versionSetChange(storageVersions, oldObject, object, ctx.crdName, 'storage versions')
  if (change === undefined || 'reason' in change) return change
  return messages.storageFrozen(ctx, by, change.before, change.after)
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
  if (typeof storage === 'string') return messages.malformedFrozen(crdName, `oldObject ${storage}`, 'served versions')
  const stored = storedVersions(oldObject)
  if (typeof stored === 'string') return messages.malformedFrozen(crdName, `oldObject ${stored}`, 'served versions')
  const before = servedVersions(oldObject)
  if (typeof before === 'string') return messages.malformedFrozen(crdName, `oldObject ${before}`, 'served versions')
  const after = servedVersions(object)
  if (typeof after === 'string') return messages.malformedFrozen(crdName, `object ${after}`, 'served versions')
  const holding = new Set([...storage, ...stored])
  const unserved = [...holding].filter((v) => before.get(v) === true && after.has(v) && after.get(v) !== true).sort()
  if (unserved.length === 0) return undefined
  return messages.servedFrozen(ctx, by, unserved, holding)
}

/** Any change of spec.conversion while the CRD is frozen (compared as JSON: the API server defaults both sides). */
function conversionViolation(oldObject: JsonObject, object: JsonObject, ctx: DecisionContext, by: FreezeSource): Violation | undefined {
  const before = specField(oldObject, 'conversion')
  const after = specField(object, 'conversion')
  if (sameJson(before, after)) return undefined
  return messages.conversionFrozen(ctx, by, before, after)
}

/**
 * A change of the StorageMigrating condition (added, removed, its status changed) by
 * anyone but kube-controller-manager, the migrator and break-glass groups (see the header).
 */
function builtinConditionViolation(oldObject: JsonObject, object: JsonObject, ctx: DecisionContext): Violation | undefined {
  const before = storageMigratingStatuses(oldObject)
  const after = storageMigratingStatuses(object)
  if (before.length === after.length && before.every((s, i) => sameValue(s, after[i]))) return undefined
  return messages.builtinConditionGuarded(ctx, before, after)
}

/**
 * kube-controller-manager marking the CRD StorageMigrating while our freeze holds: two
 * migrators at once. Refused unless our run handed its storage phase to it.
 */
function builtinDeferredViolation(oldObject: JsonObject, object: JsonObject, ctx: DecisionContext): Violation | undefined {
  if (builtinMigrating(oldObject) || !builtinMigrating(object)) return undefined
  const delegated = annotationsOf(oldObject)?.[StateAnnotation.builtinMigration]
  if (typeof delegated === 'string' && delegated !== '') return undefined
  return messages.builtinMigrationDeferred(ctx)
}

function storedVersionsViolation(
  oldObject: JsonObject,
  object: JsonObject,
  subResource: string | undefined,
  ctx: DecisionContext,
): Violation | undefined {
  const change = versionSetChange(storedVersions, oldObject, object, ctx.crdName, 'status.storedVersions')
  if (change === undefined || 'reason' in change) return change
  return messages.storedVersionsFrozen(ctx, change.before, change.after, subResource)
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
  return messages.stateGuarded(ctx, changed, frozen)
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
  if (typeof before === 'string') return messages.malformedFrozen(crdName, `oldObject ${before}`, what)
  const after = read(object)
  if (typeof after === 'string') return messages.malformedFrozen(crdName, `object ${after}`, what)
  return sameSet(before, after) ? undefined : { before, after }
}

function objectViolation(
  value: unknown,
  field: 'object' | 'oldObject',
  operation: AdmissionOperation,
  crdName: string,
): Violation | undefined {
  return isObject(value) ? undefined : messages.malformedReview(operation, field, crdName, value)
}

/** A malformed-object violation when the object's migrating annotation cannot be read. */
function unreadableMarker(crd: JsonObject, field: 'object' | 'oldObject', crdName: string, policy: AdmissionPolicy): Violation | undefined {
  const problem = unreadableAnnotation(crd, policy.migratingAnnotation)
  return problem === undefined ? undefined : messages.unreadableMarker(field, crdName, problem)
}

function isFrozen(crd: JsonObject, policy: AdmissionPolicy): boolean {
  return annotationValue(crd, policy.migratingAnnotation) === policy.migratingValue
}
