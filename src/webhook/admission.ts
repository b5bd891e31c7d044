/** The storage-freeze decision's types: policy, input, decision and its reasons (rules in rules.ts). */
import { CONFIG_DEFAULTS } from '../config/schema.js'
import { MIGRATING_VALUE } from '../state/crd-state.js'
import type { UserIdentity } from '../config/identities.js'

/** The migrating annotation and the value that freezes, and who is who: config's identities (config/schema.ts). */
export type AdmissionPolicy = { migratingAnnotation: string; migratingValue: string } & (typeof CONFIG_DEFAULTS)['identities']

export const DEFAULT_ADMISSION_POLICY: AdmissionPolicy = Object.freeze({
  migratingAnnotation: CONFIG_DEFAULTS.annotations.migrating,
  migratingValue: MIGRATING_VALUE,
  ...CONFIG_DEFAULTS.identities,
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
  /** null/absent on DELETE. */
  object?: unknown
  /** null/absent on CREATE. */
  oldObject?: unknown
  /** Came through the entry whose matchCondition found FREEZE_PERMISSION (configuration.ts): judged like break-glass. */
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
