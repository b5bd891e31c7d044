/**
 * What an API server's refusal says, read from its structure: status code, `reason`,
 * `details.causes`. Never from its message text, which differs between releases (see the
 * README's "API behaviour we rely on"). The one owner of these checks.
 */
import { CrdMigratorError } from '../errors.js'

/** A non-2xx answer from the API server, carrying its Status object when there is one. */
export class KubeApiError extends CrdMigratorError {
  override readonly name = 'KubeApiError'
  readonly status: number
  readonly reason: string | undefined
  readonly retryAfterSeconds: number | undefined
  readonly details: StatusDetails | undefined

  constructor(status: number, method: string, path: string, body: unknown, retryAfter: string | undefined) {
    const statusObject = isStatus(body) ? body : undefined
    const message = statusObject?.message ?? (typeof body === 'string' && body !== '' ? body : `HTTP ${status}`)
    super('CRDM_KUBE_API', `${method} ${path}: ${status} ${message}`)
    this.status = status
    this.reason = statusObject?.reason
    this.details = typeof statusObject?.details === 'object' && statusObject.details !== null ? statusObject.details : undefined
    const seconds = retryAfter === undefined ? Number.NaN : Number(retryAfter)
    this.retryAfterSeconds = Number.isFinite(seconds) && seconds >= 0 ? seconds : statusObject?.details?.retryAfterSeconds
  }
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

/** The causes an API error carries (`details.causes`), each with the fields it has as strings. */
export function statusCauses(err: unknown): StatusCause[] {
  const causes = err instanceof KubeApiError ? err.details?.causes : undefined
  if (!Array.isArray(causes)) return []
  const text = (v: unknown) => (typeof v === 'string' ? v : undefined)
  return causes.flatMap((c: unknown) => {
    if (typeof c !== 'object' || c === null) return []
    const { type, message, field } = c as Record<string, unknown>
    return [
      {
        ...(text(type) ? { type: text(type) } : {}),
        ...(text(message) ? { message: text(message) } : {}),
        ...(text(field) ? { field: text(field) } : {}),
      },
    ]
  })
}

/**
 * 422 Unprocessable Entity: the request itself was refused (validation, a JSON Patch that
 * does not apply). A failed JSON Patch `test` operation answers a bare 422 whose message
 * says nothing of the test (1.30-1.37): whoever sends one decides by reading the object
 * again, never by the message.
 */
export const isUnprocessable = (err: unknown): boolean => err instanceof KubeApiError && err.status === 422

/**
 * Network failures and server-side errors worth another try: 429, 5xx and connection
 * errors. A 403 never is: RBAC's and an admission plugin's refusals look alike (reason
 * Forbidden), and neither changes by asking again.
 */
export function isRetryable(err: unknown): boolean {
  if (err instanceof KubeApiError) return err.status === 429 || err.status >= 500
  const code = (err as { code?: unknown } | null)?.code
  return (
    (typeof code === 'string' &&
      /^(ECONNRESET|ECONNREFUSED|EPIPE|ETIMEDOUT|EAI_AGAIN|ENOTFOUND|EHOSTUNREACH|ENETUNREACH|ERR_STREAM_PREMATURE_CLOSE|UND_ERR_SOCKET|ECONNABORTED)$/.test(
        code,
      )) ||
    (err instanceof Error && err.name === 'TimeoutError')
  )
}
