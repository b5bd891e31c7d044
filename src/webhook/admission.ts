/**
 * The storage-freeze decision of KEP-2855, as a pure function: no I/O, no clock, no
 * logging, so every rule can be pinned down by a table of cases.
 *
 * Decisions taken here (the issue leaves them open):
 * - The freeze is keyed on the OLD object: a CRD is frozen when the object as stored
 *   carries the migrating annotation with exactly the migrating value. A request that
 *   sets the annotation and flips storage in one go is judged by the annotation guard
 *   only (the migrator never does that; anyone else is denied by the guard anyway).
 * - Storage changes are compared as the SET of version names with `storage: true`, so a
 *   reordering of spec.versions is not a change, while a flag flipped, a storage
 *   version added (alone or with a new version) or removed is.
 * - Migrator identities may set, change and remove the annotation but are subject to
 *   the storage freeze like everyone else: the migrator itself never flips storage, so
 *   a migrator identity doing so is a bug or a stolen token.
 * - Break-glass groups may do anything; the decision is still "allowed" but carries the
 *   reason `break-glass-override` and a warning so the override shows up in logs, in
 *   kubectl output and (via auditAnnotations) in the audit log.
 * - CREATE carrying the annotation (any value) is treated as setting it: guarded.
 * - DELETE of a frozen CRD is denied except for break-glass groups, because deleting a
 *   CRD deletes every custom resource of it, mid-migration. Not even the migrator may:
 *   it never deletes CRDs. The shipped webhook configuration registers UPDATE only;
 *   these CREATE/DELETE rules apply once an operator adds those operations.
 * - A review that cannot be judged (UPDATE without oldObject, an object that is not an
 *   object, a malformed spec.versions on a frozen CRD) is denied: the webhook exists to
 *   fail closed, and the API server never sends such a review for a valid CRD.
 * - While a CRD is frozen, the annotations a resumed run trusts (owner, heartbeat,
 *   checkpoint, target-storage-version, frozen-generation) are guarded like the freeze
 *   itself: a checkpoint moved forward by hand would make the next run skip objects still
 *   stored in an old version and narrow storedVersions over them; an owner removed would
 *   turn the freeze into a "foreign" one that is never lifted.
 * - So is an object whose freeze marker cannot be read: metadata missing or not an object,
 *   metadata.annotations not an object, or the migrating annotation not a string. Such an
 *   object may or may not be frozen; guessing "not frozen" would let a storage change
 *   through (found by test/integration/fuzz-webhook.test.ts). Annotation values are
 *   strings in every object the API server stores, so no real review is refused by this.
 */
import {
  DEFAULT_BREAK_GLASS_GROUPS,
  DEFAULT_MIGRATING_ANNOTATION,
  DEFAULT_MIGRATOR_USERS,
  MIGRATING_VALUE,
  STATE_PREFIX,
  StateAnnotation,
} from '../config/annotations.js'

export interface AdmissionPolicy {
  migratingAnnotation: string
  migratingValue: string
  migratorUsers: readonly string[]
  migratorGroups: readonly string[]
  breakGlassGroups: readonly string[]
}

export const DEFAULT_ADMISSION_POLICY: AdmissionPolicy = Object.freeze({
  migratingAnnotation: DEFAULT_MIGRATING_ANNOTATION,
  migratingValue: MIGRATING_VALUE,
  migratorUsers: DEFAULT_MIGRATOR_USERS,
  migratorGroups: [],
  breakGlassGroups: DEFAULT_BREAK_GLASS_GROUPS,
})

export const ADMISSION_OPERATIONS = ['CREATE', 'UPDATE', 'DELETE', 'CONNECT'] as const
export type AdmissionOperation = (typeof ADMISSION_OPERATIONS)[number]

/** Closed set, used as the `reason` label of crd_migrator_admission_denials_total. */
export const DENIAL_REASONS = [
  'storage-version-frozen',
  'annotation-guarded',
  'delete-frozen',
  'malformed-object',
  'internal-error',
] as const
export type DenialReason = (typeof DENIAL_REASONS)[number]

export function isDenialReason(reason: string): reason is DenialReason {
  return (DENIAL_REASONS as readonly string[]).includes(reason)
}

export const ALLOW_REASONS = ['allowed', 'break-glass-override', 'unexpected-resource'] as const
export type AllowReason = (typeof ALLOW_REASONS)[number]

export type DecisionReason = DenialReason | AllowReason

export interface AdmissionInput {
  operation: AdmissionOperation
  /** request.name; for CRDs always set by the API server. */
  name?: string
  userInfo: { username: string; groups: readonly string[] }
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

type JsonObject = Record<string, unknown>

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

export function decideAdmission(input: AdmissionInput, policy: AdmissionPolicy): AdmissionDecision {
  const crdName = crdNameOf(input) ?? '(unnamed)'
  const identity = classifyIdentity(input.userInfo, policy)

  let violations: Violation[]
  switch (input.operation) {
    case 'UPDATE':
      violations = updateViolations(input, crdName, identity, policy)
      break
    case 'CREATE':
      violations = createViolations(input, crdName, identity, policy)
      break
    case 'DELETE':
      violations = deleteViolations(input, crdName, policy)
      break
    default:
      // CONNECT does not exist for CRDs; nothing to freeze.
      violations = []
  }

  const first = violations[0]
  if (first === undefined) return { allowed: true, reason: 'allowed' }

  const message = violations.map((v) => v.message).join(' Also: ')
  // Break-glass overrides policy, never a malformed review: with no object to look at
  // there is nothing to override.
  if (identity.breakGlass && first.reason !== 'malformed-object') {
    return {
      allowed: true,
      reason: 'break-glass-override',
      warnings: [
        `break-glass override by ${describeUser(input.userInfo)}: ${violations.map((v) => v.summary).join('; ')}`,
      ],
    }
  }
  return {
    allowed: false,
    reason: first.reason,
    message,
    code: first.reason === 'malformed-object' ? 400 : 403,
  }
}

interface Identity {
  migrator: boolean
  breakGlass: boolean
}

function classifyIdentity(user: AdmissionInput['userInfo'], policy: AdmissionPolicy): Identity {
  const inAny = (groups: readonly string[]) => user.groups.some((g) => groups.includes(g))
  return {
    migrator: policy.migratorUsers.includes(user.username) || inAny(policy.migratorGroups),
    breakGlass: inAny(policy.breakGlassGroups),
  }
}

function updateViolations(
  input: AdmissionInput,
  crdName: string,
  identity: Identity,
  policy: AdmissionPolicy,
): Violation[] {
  const shape =
    requireObject(input.object, 'object', 'UPDATE', crdName) ??
    requireObject(input.oldObject, 'oldObject', 'UPDATE', crdName) ??
    unreadableMarker(input.oldObject as JsonObject, 'oldObject', crdName, policy) ??
    unreadableMarker(input.object as JsonObject, 'object', crdName, policy)
  if (shape) return [shape]
  const object = input.object as JsonObject
  const oldObject = input.oldObject as JsonObject

  const violations: Violation[] = []
  if (isFrozen(oldObject, policy)) {
    const storage = storageViolation(oldObject, object, crdName, policy)
    if (storage) violations.push(storage)
  }
  const oldValue = annotationValue(oldObject, policy.migratingAnnotation)
  const newValue = annotationValue(object, policy.migratingAnnotation)
  if (!sameValue(oldValue, newValue) && !identity.migrator) {
    violations.push(guardViolation(oldValue, newValue, crdName, input.userInfo, policy))
  }
  if (isFrozen(oldObject, policy) && !identity.migrator) {
    const changed = RESUME_STATE_ANNOTATIONS.filter((key) => !sameValue(annotationValue(oldObject, key), annotationValue(object, key)))
    if (changed.length > 0) violations.push(stateViolation(changed, crdName, input.userInfo, policy))
  }
  return violations
}

function createViolations(
  input: AdmissionInput,
  crdName: string,
  identity: Identity,
  policy: AdmissionPolicy,
): Violation[] {
  const shape = requireObject(input.object, 'object', 'CREATE', crdName) ??
    unreadableMarker(input.object as JsonObject, 'object', crdName, policy)
  if (shape) return [shape]
  const value = annotationValue(input.object as JsonObject, policy.migratingAnnotation)
  if (value === undefined || identity.migrator) return []
  return [guardViolation(undefined, value, crdName, input.userInfo, policy)]
}

function deleteViolations(input: AdmissionInput, crdName: string, policy: AdmissionPolicy): Violation[] {
  const shape = requireObject(input.oldObject, 'oldObject', 'DELETE', crdName) ??
    unreadableMarker(input.oldObject as JsonObject, 'oldObject', crdName, policy)
  if (shape) return [shape]
  if (!isFrozen(input.oldObject as JsonObject, policy)) return []
  return [
    {
      reason: 'delete-frozen',
      summary: `delete of frozen CRD ${crdName}`,
      message:
        `CustomResourceDefinition "${crdName}" is frozen for a storage version migration ` +
        `(annotation ${policy.migratingAnnotation}="${policy.migratingValue}"); deleting it now ` +
        `would delete all of its custom resources mid-migration. ${whatToDo(crdName)} ` +
        `Only ${describeGroups('break-glass groups', policy.breakGlassGroups)} may delete a frozen CRD.`,
    },
  ]
}

function storageViolation(
  oldObject: JsonObject,
  object: JsonObject,
  crdName: string,
  policy: AdmissionPolicy,
): Violation | undefined {
  const before = storageVersions(oldObject)
  const after = storageVersions(object)
  if (typeof before === 'string' || typeof after === 'string') {
    const problem = typeof before === 'string' ? `oldObject ${before}` : `object ${after}`
    return {
      reason: 'malformed-object',
      summary: `unreadable storage versions of frozen CRD ${crdName}`,
      message:
        `CustomResourceDefinition "${crdName}" is frozen for a storage version migration but its ` +
        `${problem}, so the storage version cannot be checked; refusing the update.`,
    }
  }
  if (sameSet(before, after)) return undefined
  return {
    reason: 'storage-version-frozen',
    summary: `storage version ${formatVersions(before)} -> ${formatVersions(after)} on frozen CRD ${crdName}`,
    message:
      `CustomResourceDefinition "${crdName}" is frozen for a storage version migration ` +
      `(annotation ${policy.migratingAnnotation}="${policy.migratingValue}"): changing the ` +
      `storage version from ${formatVersions(before)} to ${formatVersions(after)} is not allowed ` +
      `while the migration runs. ${whatToDo(crdName)}`,
  }
}

/** What a resumed run reads from the CRD; see the header. */
const RESUME_STATE_ANNOTATIONS: readonly string[] = [
  StateAnnotation.owner,
  StateAnnotation.heartbeat,
  StateAnnotation.checkpoint,
  StateAnnotation.targetStorageVersion,
  StateAnnotation.frozenGeneration,
]

function stateViolation(changed: string[], crdName: string, user: AdmissionInput['userInfo'], policy: AdmissionPolicy): Violation {
  return {
    reason: 'annotation-guarded',
    summary: `${changed.join(', ')} changed on frozen CRD ${crdName}`,
    message:
      `CustomResourceDefinition "${crdName}" is frozen for a storage version migration, and ${changed.join(', ')} ` +
      `record where that migration stands (a resumed run trusts them); ${describeUser(user)} may not change them ` +
      `while it is frozen. Only the migrator and ${describeGroups('break-glass groups', policy.breakGlassGroups)} may.`,
  }
}

function guardViolation(
  oldValue: string | undefined,
  newValue: string | undefined,
  crdName: string,
  user: AdmissionInput['userInfo'],
  policy: AdmissionPolicy,
): Violation {
  const key = policy.migratingAnnotation
  const attempted =
    oldValue === undefined
      ? `set it to "${newValue}"`
      : newValue === undefined
        ? `remove it (was "${oldValue}")`
        : `change it from "${oldValue}" to "${newValue}"`
  const attemptedShort =
    oldValue === undefined ? 'set' : newValue === undefined ? 'removed' : 'changed'
  const migrator = [
    ...policy.migratorUsers.map((u) => `user ${u}`),
    ...policy.migratorGroups.map((g) => `group ${g}`),
  ]
  return {
    reason: 'annotation-guarded',
    summary: `${key} ${attemptedShort} on CRD ${crdName}`,
    message:
      `The annotation ${key} on CustomResourceDefinition "${crdName}" freezes its storage version ` +
      `during a migration and is managed by the crd-migrator; ${describeUser(user)} may not ` +
      `${attempted}. Only the migrator (${migrator.length > 0 ? migrator.join(', ') : 'no identity configured'}) ` +
      `and ${describeGroups('break-glass groups', policy.breakGlassGroups)} may set, change or remove it.`,
  }
}

function requireObject(
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
function unreadableMarker(
  crd: JsonObject,
  field: 'object' | 'oldObject',
  crdName: string,
  policy: AdmissionPolicy,
): Violation | undefined {
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

function annotationValue(crd: JsonObject, key: string): string | undefined {
  const metadata = crd['metadata']
  if (!isObject(metadata)) return undefined
  const annotations = metadata['annotations']
  if (!isObject(annotations) || !Object.hasOwn(annotations, key)) return undefined
  const value = annotations[key]
  // Annotation values are strings in any object the API server accepted. Anything else is
  // not looked into (no JSON.stringify: a deeply nested value would overflow the stack,
  // found by the fuzz test) and counts as changed whatever it is compared with.
  return typeof value === 'string' ? value : NOT_A_STRING
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

function sameSet(a: Set<string>, b: Set<string>): boolean {
  return a.size === b.size && [...a].every((x) => b.has(x))
}

function formatVersions(versions: Set<string>): string {
  if (versions.size === 0) return '(none)'
  return [...versions].sort().join(', ')
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

function whatToDo(crdName: string): string {
  return (
    `Wait for the migration to finish (the migrator removes the annotation), or see its state in ` +
    `the CRD's ${STATE_PREFIX}* annotations: kubectl get crd ${crdName} -o jsonpath='{.metadata.annotations}'.`
  )
}

function describeUser(user: AdmissionInput['userInfo']): string {
  return user.username ? `user "${user.username}"` : 'an anonymous user'
}

function describeGroups(label: string, groups: readonly string[]): string {
  return groups.length > 0 ? `${label} (${groups.join(', ')})` : `${label} (none configured)`
}
