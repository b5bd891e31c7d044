/** What an API server's refusal says, read from its structure, never its message text, which differs between releases. */
import { CrdMigratorError, type ErrorCode } from '../errors.js'
import { sanitizeText } from '../sanitize.js'
import { codeOf, unreachableErrno, KubeUnreachableError } from './connection-errors.js'
import { describeAttributes, type RequestAttributes } from './request-info.js'

/** Who asked, for the messages of a 401 and a 403. */
export interface Requester {
  server: string
  context: string
  /** The kubeconfig user's name ('' for none). */
  user: string
  /** Where the kubeconfig came from: `kubeconfig /home/me/.kube/config`. */
  origin: string
  /** The user impersonated (--as, or the kubeconfig user's `as`): RBAC judged that user. */
  impersonating?: string
  /** What RBAC saw: verb, resource, namespace. */
  attributes?: RequestAttributes
}

/** A non-2xx answer, with its Status object when there is one. */
export class KubeApiError extends CrdMigratorError {
  override readonly name = 'KubeApiError'
  readonly status: number
  readonly reason: string | undefined
  readonly retryAfterSeconds: number | undefined
  readonly details: StatusDetails | undefined

  constructor(status: number, method: string, path: string, body: unknown, retryAfter: string | undefined, who?: Requester) {
    const statusObject = isStatus(body) ? body : undefined
    // Webhooks' words are not ours: cleaned and cut before any message, annotation, Event or terminal.
    const said = statusObject?.message ?? (typeof body === 'string' && body !== '' ? body : undefined)
    const message = said === undefined ? `HTTP ${status}` : sanitizeText(String(said))
    super(
      codeFor(status),
      `${method} ${path}: ${status} ${message}${who ? explanation(status, who, statusObject?.details?.kind, statusObject !== undefined && method !== 'GET') : ''}`,
    )
    this.status = status
    this.reason = statusObject?.reason
    this.details = typeof statusObject?.details === 'object' && statusObject.details !== null ? statusObject.details : undefined
    const seconds = retryAfter === undefined ? Number.NaN : Number(retryAfter)
    this.retryAfterSeconds = Number.isFinite(seconds) && seconds >= 0 ? seconds : statusObject?.details?.retryAfterSeconds
  }
}

function codeFor(status: number): ErrorCode {
  return status === 401 ? 'CRDM_UNAUTHORIZED' : status === 403 ? 'CRDM_FORBIDDEN' : 'CRDM_KUBE_API'
}

/** What a 403 names when the refusal is of the impersonation itself (the Impersonate-* headers), not of the request. */
const IMPERSONATED_KINDS = new Set(['users', 'groups', 'uids', 'userextras', 'serviceaccounts'])

/** What a 401 or 403 means for this user, in the terms of its kubeconfig and of RBAC. */
function explanation(status: number, who: Requester, detailsKind?: string, admissible = false): string {
  const user = who.user
    ? `user ${JSON.stringify(who.user)} of context ${JSON.stringify(who.context)}`
    : `context ${JSON.stringify(who.context)}`
  if (status === 403 && who.impersonating && detailsKind !== undefined && IMPERSONATED_KINDS.has(detailsKind)) {
    return ` — ${user} may not impersonate ${JSON.stringify(who.impersonating)} (--as, or the kubeconfig user's as): grant it the impersonate verb with RBAC`
  }
  if (status === 403 && who.attributes && who.impersonating) {
    return ` — ${JSON.stringify(who.impersonating)} (impersonated by ${user}) may not use ${describeAttributes(who.attributes)}: grant it with RBAC, or impersonate a user who may`
  }
  if (status === 401) {
    return (
      ` — the API server at ${who.server} does not accept the credentials of ${user} (${who.origin}): ` +
      'a token expired or revoked, a client certificate signed by another CA, or no credentials at all'
    )
  }
  // The authorizer's 403 names details.kind (apierrors.NewForbidden); an admission refusal
  // does not, and "grant it with RBAC" would be wrong there. Only writes go through admission.
  if (status === 403 && admissible && detailsKind === undefined) {
    return ` — refused by admission control (a webhook or policy), not by RBAC: its message says which rule and what to do`
  }
  if (status === 403 && who.attributes) {
    return ` — ${user} may not use ${describeAttributes(who.attributes)}: grant it with RBAC`
  }
  return ''
}

/** One cause of a Status (metav1.StatusCause): for a list of undecodable objects, `field` is each one's storage key. */
export interface StatusCause {
  type?: string
  message?: string
  field?: string
}

/** A Status's `details` (metav1.StatusDetails), as far as we read it. */
export interface StatusDetails {
  name?: string
  group?: string
  kind?: string
  uid?: string
  causes?: StatusCause[]
  retryAfterSeconds?: number
}

interface StatusObject {
  kind: 'Status'
  message?: string
  reason?: string
  details?: StatusDetails
}

function isStatus(body: unknown): body is StatusObject {
  return typeof body === 'object' && body !== null && (body as { kind?: unknown }).kind === 'Status'
}

export const isNotFound = (err: unknown): boolean => err instanceof KubeApiError && err.status === 404
export const isConflict = (err: unknown): boolean => err instanceof KubeApiError && err.status === 409
export const isGone = (err: unknown): boolean => err instanceof KubeApiError && err.status === 410
export const isTooManyRequests = (err: unknown): boolean => err instanceof KubeApiError && err.status === 429
export const isForbidden = (err: unknown): boolean => err instanceof KubeApiError && err.status === 403

/** What `request` resolves to, or undefined when it fails as `refusal` says (a 404, a 403). */
const unless =
  (refusal: (err: unknown) => boolean) =>
  <T>(request: Promise<T>): Promise<T | undefined> =>
    request.catch((err: unknown) => {
      if (refusal(err)) return undefined
      throw err
    })

export const unlessNotFound = unless(isNotFound)
export const unlessForbidden = unless(isForbidden)

/** The causes an API error carries (`details.causes`), each with the fields it has as strings. */
export function statusCauses(err: unknown): StatusCause[] {
  const causes = err instanceof KubeApiError ? err.details?.causes : undefined
  if (!Array.isArray(causes)) return []
  return causes.flatMap((c: unknown) => {
    if (typeof c !== 'object' || c === null) return []
    const cause: StatusCause = {}
    for (const key of ['type', 'message', 'field'] as const) {
      const value = (c as Record<string, unknown>)[key]
      if (typeof value === 'string' && value !== '') cause[key] = value
    }
    return [cause]
  })
}

/** 422: the request itself was refused. A failed JSON Patch `test` is a bare 422 (1.30-1.37): read the object again, never the message. */
export const isUnprocessable = (err: unknown): boolean => err instanceof KubeApiError && err.status === 422

/** 429, 5xx and connection errors; not TLS failures or a 403, which asking again does not change. */
export function isRetryable(err: unknown): boolean {
  if (err instanceof KubeApiError) return err.status === 429 || err.status >= 500
  // Our client's verdict: retryable once the API server has answered (a restart passes);
  // one never reached was tried `connectAttempts` times already (http.ts).
  if (err instanceof KubeUnreachableError) return err.retryable
  const code = codeOf(err)
  return (
    unreachableErrno(err) !== undefined || (code !== undefined && /^(ERR_STREAM_PREMATURE_CLOSE|UND_ERR_SOCKET|ECONNABORTED)$/.test(code))
  )
}
