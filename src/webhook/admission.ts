/**
 * What the storage-freeze decision is made from and of: the policy (annotation, identities),
 * the input read from an AdmissionReview, the decision and the closed sets of its reasons.
 * The rules themselves are in rules.ts, the texts of their answers in messages.ts.
 */
import { CONFIG_DEFAULTS } from '../config/schema.js'
import { MIGRATING_VALUE } from '../state/crd-state.js'
import type { UserIdentity } from '../config/identities.js'

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
  /**
   * The API server's authorizer allows the requester FREEZE_PERMISSION on this CRD: the
   * review came through the webhook entry whose matchCondition checked it (configuration.ts).
   * Such a user may do what break-glass groups may.
   */
  freezeAllowed?: boolean
}

export interface AdmissionDecision {
  allowed: boolean
  reason: DecisionReason
  message?: string
  /** HTTP status the API server reports to the client on denial. */
  code?: number
  warnings?: string[]
}
