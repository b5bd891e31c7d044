/**
 * The admission.k8s.io/v1 AdmissionReview envelope, parsed and answered. A malformed
 * envelope has no uid to echo, so it gets HTTP 400; a well-formed review of something
 * unexpected gets an AdmissionResponse, so the user sees the reason, not "failed calling webhook".
 * Hand-written validation: messages name the exact field, and unknown fields (added by
 * newer API servers) pass through.
 */
import { ADMISSION_OPERATIONS, type AdmissionDecision, type AdmissionOperation, type AdmissionPolicy } from './admission.js'
import { decideAdmission } from './rules.js'
import { CrdMigratorError } from '../errors.js'
import { cutText, headOf } from '../sanitize.js'
import { isObject, type JsonObject } from './json.js'
import type { UserIdentity } from '../config/identities.js'

export const ADMISSION_REVIEW_API_VERSION = 'admission.k8s.io/v1'
export const ADMISSION_REVIEW_KIND = 'AdmissionReview'

/** The resource this webhook judges; matchPolicy: Equivalent converts other versions to it. */
export const CRD_RESOURCE = Object.freeze({
  group: 'apiextensions.k8s.io',
  version: 'v1',
  resource: 'customresourcedefinitions',
})

export type GroupVersionKind = Record<'group' | 'version' | 'kind', string>
export type GroupVersionResource = Record<'group' | 'version' | 'resource', string>
export type AdmissionUserInfo = UserIdentity & { uid?: string }

/** The fields of an admission.k8s.io/v1 AdmissionRequest this webhook reads. */
export interface AdmissionRequest {
  uid: string
  kind: GroupVersionKind
  resource: GroupVersionResource
  subResource?: string
  name?: string
  namespace?: string
  operation: AdmissionOperation
  userInfo: AdmissionUserInfo
  object?: unknown
  oldObject?: unknown
  dryRun?: boolean
}

export interface AdmissionResponse {
  uid: string
  allowed: boolean
  status?: { code?: number; message?: string }
  warnings?: string[]
  auditAnnotations?: Record<string, string>
}

export type ParseReviewResult = { ok: true; request: AdmissionRequest } | { ok: false; error: string }

function describe(value: unknown): string {
  if (value === undefined) return 'nothing'
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'an array'
  if (typeof value === 'string') return JSON.stringify(cutText(value, 60))
  if (typeof value === 'object') return 'an object'
  // Only numbers, booleans, bigints, symbols and functions are left here.
  // eslint-disable-next-line @typescript-eslint/no-base-to-string
  return `${typeof value} ${String(value)}`
}

/** A body that is not a well-formed AdmissionReview; answered with HTTP 400. */
class ReviewError extends CrdMigratorError {
  constructor(message: string) {
    super('CRDM_REVIEW_MALFORMED', message)
  }
}

function fail(path: string, expected: string, value: unknown): never {
  throw new ReviewError(`${path} must be ${expected}, got ${describe(value)}`)
}

function requireString(obj: JsonObject, key: string, path: string, options: { nonEmpty?: boolean } = {}): string {
  const value = obj[key]
  if (typeof value !== 'string' || (options.nonEmpty && value === '')) {
    fail(`${path}.${key}`, options.nonEmpty ? 'a non-empty string' : 'a string', value)
  }
  return value
}

function optionalString(obj: JsonObject, key: string, path: string): string | undefined {
  const value = obj[key]
  if (value === undefined || value === null) return undefined
  if (typeof value !== 'string') fail(`${path}.${key}`, 'a string', value)
  return value
}

function requireObject(obj: JsonObject, key: string, path: string): JsonObject {
  const value = obj[key]
  if (!isObject(value)) fail(`${path}.${key}`, 'an object', value)
  return value
}

function requireStrings<K extends string>(obj: JsonObject, key: string, fields: readonly K[], path: string): Record<K, string> {
  const inner = requireObject(obj, key, path)
  const out = {} as Record<K, string>
  for (const field of fields) out[field] = requireString(inner, field, `${path}.${key}`)
  return out
}

function requireStringArray(value: unknown, path: string): string[] {
  if (!Array.isArray(value)) fail(path, 'an array of strings', value)
  value.forEach((v, i) => {
    if (typeof v !== 'string') fail(`${path}[${i}]`, 'a string', v)
  })
  return value as string[]
}

/** `body` is already JSON-decoded. */
export function parseAdmissionReview(body: unknown): ParseReviewResult {
  try {
    return { ok: true, request: parseOrThrow(body) }
  } catch (err) {
    if (err instanceof ReviewError) return { ok: false, error: err.message }
    throw err
  }
}

function parseOrThrow(body: unknown): AdmissionRequest {
  if (!isObject(body)) fail('body', 'a JSON object (an AdmissionReview)', body)
  if (body['apiVersion'] !== ADMISSION_REVIEW_API_VERSION) {
    fail('apiVersion', `"${ADMISSION_REVIEW_API_VERSION}" (set admissionReviewVersions: [v1])`, body['apiVersion'])
  }
  if (body['kind'] !== ADMISSION_REVIEW_KIND) fail('kind', `"${ADMISSION_REVIEW_KIND}"`, body['kind'])
  const request = requireObject(body, 'request', 'AdmissionReview')
  const path = 'request'

  const uid = requireString(request, 'uid', path, { nonEmpty: true })

  const kind: GroupVersionKind = requireStrings(request, 'kind', ['group', 'version', 'kind'], path)
  const resource: GroupVersionResource = requireStrings(request, 'resource', ['group', 'version', 'resource'], path)

  const operation = request['operation']
  if (typeof operation !== 'string' || !(ADMISSION_OPERATIONS as readonly string[]).includes(operation)) {
    fail(`${path}.operation`, `one of ${ADMISSION_OPERATIONS.join(', ')}`, operation)
  }

  const userInfoObj = requireObject(request, 'userInfo', path)
  // username and groups are omitempty in the API types, so absent means empty.
  const username = optionalString(userInfoObj, 'username', `${path}.userInfo`) ?? ''
  const groups = requireStringArray(userInfoObj['groups'] ?? [], `${path}.userInfo.groups`)
  const userInfo: AdmissionUserInfo = { username, groups }
  const userUid = optionalString(userInfoObj, 'uid', `${path}.userInfo`)
  if (userUid !== undefined) userInfo.uid = userUid
  const extra = parseExtra(userInfoObj['extra'], `${path}.userInfo.extra`)
  if (extra !== undefined) userInfo.extra = extra

  const parsed: AdmissionRequest = { uid, kind, resource, operation: operation as AdmissionOperation, userInfo }
  for (const key of ['subResource', 'name', 'namespace'] as const) {
    const value = optionalString(request, key, path)
    if (value) parsed[key] = value
  }
  const dryRun = request['dryRun'] ?? undefined
  if (dryRun !== undefined && typeof dryRun !== 'boolean') fail(`${path}.dryRun`, 'a boolean', dryRun)
  if (dryRun !== undefined) parsed.dryRun = dryRun
  // object/oldObject stay unknown: their shape is judged by the decision, which answers
  // with an AdmissionResponse rather than a 400.
  if (request['object'] !== undefined) parsed.object = request['object']
  if (request['oldObject'] !== undefined) parsed.oldObject = request['oldObject']
  return parsed
}

/** userInfo.extra: a map of string lists (omitempty, so absent means none). */
function parseExtra(value: unknown, path: string): Record<string, string[]> | undefined {
  if (value === undefined || value === null) return undefined
  if (!isObject(value)) fail(path, 'an object of string lists', value)
  const extra: Record<string, string[]> = Object.create(null) as Record<string, string[]>
  for (const [key, values] of Object.entries(value)) {
    if (values === null) continue
    extra[key] = requireStringArray(values, `${path}[${JSON.stringify(headOf(key, 60))}]`)
  }
  return extra
}

/**
 * A review of another resource is ALLOWED with a warning: only a misconfiguration sends one,
 * and denying (failurePolicy: Fail) would make it an outage of an unrelated resource.
 */
/** `freezeAllowed`: the review came through the webhook entry for users RBAC allows to freeze (configuration.ts). */
export function reviewAdmission(request: AdmissionRequest, policy: AdmissionPolicy, freezeAllowed = false): AdmissionDecision {
  const r = request.resource
  if (r.group !== CRD_RESOURCE.group || r.version !== CRD_RESOURCE.version || r.resource !== CRD_RESOURCE.resource) {
    const got = `${r.group || 'core'}/${r.version} ${r.resource}`
    return {
      allowed: true,
      reason: 'unexpected-resource',
      warnings: [`crd-migrator storage-freeze webhook called for ${got}: allowed unchecked, check its rules`],
    }
  }
  const { operation, name, subResource, object, oldObject } = request
  const { username, groups, extra } = request.userInfo
  const userInfo = { username, groups, ...(extra ? { extra } : {}) }
  return decideAdmission({ operation, name, subResource, userInfo, object, oldObject, freezeAllowed }, policy)
}

/** The uid must be the request's. */
export function toAdmissionReviewResponse(uid: string, decision: AdmissionDecision) {
  const response: AdmissionResponse = { uid, allowed: decision.allowed }
  if (!decision.allowed) {
    response.status = { code: decision.code ?? 403, message: decision.message ?? 'denied' }
  }
  if (decision.warnings && decision.warnings.length > 0) response.warnings = decision.warnings
  // The API server prefixes the key with the webhook name in the audit log
  // (<webhook name>/reason=...), so denials and overrides are auditable.
  if (decision.reason !== 'allowed') response.auditAnnotations = { reason: decision.reason }
  return { apiVersion: ADMISSION_REVIEW_API_VERSION, kind: ADMISSION_REVIEW_KIND, response }
}
