/**
 * KEP-2855's storage-freeze decision, pure (no I/O, clock or logging) so a table of cases pins every rule.
 * The rules are docs/webhook.md's table (#the-webhook); the reasons it does not give:
 * - The freeze holds for break-glass too: an admin's upgrade mid-migration is the accident it
 *   exists for. Break-glass may remove the annotation first, in a request of its own (the freeze
 *   is read from the OLD object), a deliberate, audited step.
 * - /status is judged like the rest: the CRD status strategy keeps the NEW metadata (so
 *   annotations stick) but resets spec, so storage cannot move there.
 * - While frozen, the migrator may change status.storedVersions: it narrows them before it
 *   lifts the freeze.
 * - State annotations are guarded always: forged results or checkpoints must not reach `status`
 *   or a resume.
 * - The migrator is under the storage freeze too: it never flips storage, so doing so is a bug
 *   or a stolen token.
 * - A review that cannot be judged is denied, break-glass included (fail closed); the API server
 *   never sends one for a valid CRD (test/integration/fuzz-webhook.test.ts).
 * - The StorageMigrating condition is guarded on any CRD: else a status-only writer could freeze
 *   any CRD, or lift a real built-in freeze. Reason and message freeze nothing.
 * - Request names are shortened in messages, so a long name cannot grow the answer or the log.
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

type ReviewObject = 'object' | 'oldObject'

/** What each operation must carry, and is then checked for; CONNECT does not exist for CRDs: nothing to freeze. */
const VIOLATIONS: Record<
  AdmissionOperation,
  { carries: ReviewObject[]; check: (input: AdmissionInput, ctx: DecisionContext) => Violation[] }
> = {
  UPDATE: { carries: ['object', 'oldObject'], check: updateViolations },
  CREATE: { carries: ['object'], check: createViolations },
  DELETE: { carries: ['oldObject'], check: deleteViolations },
  CONNECT: { carries: [], check: () => [] },
}

export function decideAdmission(input: AdmissionInput, policy: AdmissionPolicy): AdmissionDecision {
  const crdName = messages.shorten(crdNameOf(input) ?? '(unnamed)')
  const identity = classifyIdentity(input.userInfo, policy, input.freezeAllowed === true)
  const ctx: DecisionContext = { crdName, identity, policy, user: input.userInfo }

  const { carries, check } = VIOLATIONS[input.operation]
  const shape = shapeViolation(input, carries, ctx)
  const violations = shape ? [shape] : check(input, ctx)
  const first = violations[0]
  if (first === undefined) return { allowed: true, reason: 'allowed' }
  // Break-glass overrides the freeze's bookkeeping guards, never the freeze nor a malformed review.
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

interface DecisionContext extends MessageContext {
  identity: ReturnType<typeof classifyIdentity>
}

function classifyIdentity(user: UserIdentity, policy: AdmissionPolicy, freezeAllowed: boolean) {
  const inAny = (groups: readonly string[]) => user.groups.some((g) => groups.includes(g))
  const breakGlassGroup = inAny(policy.breakGlassGroups)
  return {
    migrator: isListedUser(user, policy.migratorUsers) || inAny(policy.migratorGroups),
    /** May override what break-glass may: a member of a break-glass group, or allowed FREEZE_PERMISSION by RBAC. */
    breakGlass: breakGlassGroup || freezeAllowed,
    /** A member of a break-glass group (the fixed fallback, also without RBAC). */
    breakGlassGroup,
    /** kube-controller-manager (policy.builtinMigratorUsers). */
    builtinMigrator: isListedUser(user, policy.builtinMigratorUsers),
  }
}

/** updateViolations, createViolations, deleteViolations: request.object and oldObject as VIOLATIONS says, already checked. */
function updateViolations(input: AdmissionInput, ctx: DecisionContext): Violation[] {
  const { policy } = ctx
  const object = input.object as JsonObject
  const oldObject = input.oldObject as JsonObject
  const frozen = isFrozen(oldObject, policy)
  const builtin = builtinMigrating(oldObject)

  const found: Array<Violation | undefined> = []
  if (frozen || builtin) {
    const by: FreezeSource = frozen ? 'annotation' : 'builtin'
    found.push(
      storageViolation(oldObject, object, ctx, by),
      servedViolation(oldObject, object, ctx, by),
      conversionViolation(oldObject, object, ctx, by),
    )
  }
  if (!ctx.identity.migrator && !ctx.identity.builtinMigrator) found.push(builtinConditionViolation(oldObject, object, ctx))
  if (frozen && !ctx.identity.migrator) {
    found.push(storedVersionsViolation(oldObject, object, input.subResource, ctx), builtinDeferredViolation(oldObject, object, ctx))
  }
  if (!ctx.identity.migrator) {
    const oldValue = annotationValue(oldObject, policy.migratingAnnotation)
    const newValue = annotationValue(object, policy.migratingAnnotation)
    if (!sameValue(oldValue, newValue)) found.push(messages.migratingGuarded(ctx, oldValue, newValue))
    found.push(stateViolation(oldObject, object, frozen, ctx))
  }
  return found.filter((v) => v !== undefined)
}

function createViolations(input: AdmissionInput, ctx: DecisionContext): Violation[] {
  if (ctx.identity.migrator) return []
  const object = input.object as JsonObject
  const value = annotationValue(object, ctx.policy.migratingAnnotation)
  const migrating = value === undefined ? undefined : messages.migratingGuarded(ctx, undefined, value)
  return [migrating, stateViolation({}, object, false, ctx)].filter((v) => v !== undefined)
}

function deleteViolations(input: AdmissionInput, ctx: DecisionContext): Violation[] {
  const oldObject = input.oldObject as JsonObject
  const by: FreezeSource | undefined = isFrozen(oldObject, ctx.policy) ? 'annotation' : builtinMigrating(oldObject) ? 'builtin' : undefined
  if (by === undefined) return []
  return [messages.deleteFrozen(ctx, by)]
}

function storageViolation(oldObject: JsonObject, object: JsonObject, ctx: DecisionContext, by: FreezeSource): Violation | undefined {
  const change = versionSetChange(storageVersions, oldObject, object, ctx.crdName, 'storage versions')
  if (change === undefined || 'reason' in change) return change
  return messages.storageFrozen(ctx, by, change.before, change.after)
}

/**
 * A version holding objects (old storage or storedVersions) stops being served. Removal from
 * spec.versions is not looked at: the API server refuses removing a stored version, and the
 * storage version's removal is a storage change.
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

/** A StorageMigrating condition added, removed or re-statused (see the header). */
function builtinConditionViolation(oldObject: JsonObject, object: JsonObject, ctx: DecisionContext): Violation | undefined {
  const before = storageMigratingStatuses(oldObject)
  const after = storageMigratingStatuses(object)
  if (before.length === after.length && before.every((s, i) => sameValue(s, after[i]))) return undefined
  return messages.builtinConditionGuarded(ctx, before, after)
}

/** kube-controller-manager marking StorageMigrating under our freeze, unless our run delegated to it. */
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

/** State annotations set or changed, or removed while frozen (see the header). */
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

/** undefined when equal, a malformed-object violation when either side is unreadable, else both sets. */
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

/** A review that cannot be judged: request.`fields` not objects, else a freeze marker unreadable (the old object's first). */
function shapeViolation(input: AdmissionInput, fields: readonly ReviewObject[], ctx: DecisionContext): Violation | undefined {
  for (const field of fields) {
    if (!isObject(input[field])) return messages.malformedReview(input.operation, field, ctx.crdName, input[field])
  }
  for (const field of ['oldObject', 'object'] as const) {
    const problem = fields.includes(field) ? unreadableAnnotation(input[field] as JsonObject, ctx.policy.migratingAnnotation) : undefined
    if (problem !== undefined) return messages.unreadableMarker(field, ctx.crdName, problem)
  }
  return undefined
}

function isFrozen(crd: JsonObject, policy: AdmissionPolicy): boolean {
  return annotationValue(crd, policy.migratingAnnotation) === policy.migratingValue
}
