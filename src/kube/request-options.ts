/**
 * What a request to the API server is made of, apart from the client that sends it
 * (http.ts): content types, the request and response shapes, the query string, and the
 * options a client is built with (timeouts, impersonation, dry run).
 */
import type { IncomingHttpHeaders } from 'node:http'
import type { Logger } from 'pino'
import { CrdMigratorError } from '../errors.js'
import type { ProxyEnvironment } from './proxy-env.js'
import { flagDuration } from '../duration.js'

export const ContentType = {
  json: 'application/json',
  mergePatch: 'application/merge-patch+json',
  jsonPatch: 'application/json-patch+json',
  applyPatch: 'application/apply-patch+yaml',
} as const

export const Accept = {
  json: 'application/json',
  partialObjectMetadataList: 'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json',
  partialObjectMetadata: 'application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json',
} as const

export interface KubeRequest {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE'
  path: string
  query?: Record<string, string | number | boolean | undefined>
  body?: unknown
  contentType?: string
  accept?: string
  /** Per-request timeout in milliseconds. */
  timeoutMs?: number
  signal?: AbortSignal
}

export interface KubeResponse<T = unknown> {
  status: number
  headers: IncomingHttpHeaders
  body: T
}

/** A response of any status, the body as text: see KubeHttp.requestRaw. */
export interface RawKubeResponse {
  status: number
  headers: IncomingHttpHeaders
  body: string
}

/** kubectl's --as, --as-group, --as-uid: who the API server treats the request as (Impersonate-* headers). */
export interface Impersonation {
  user?: string | undefined
  groups?: readonly string[] | undefined
  uid?: string | undefined
}

export interface KubeHttpOptions {
  /** Upper bound of pooled sockets for requests; the migrator sets this to its write concurrency. Watches have their own. */
  maxSockets?: number
  /** The User-Agent of every request; default `crd-migrator/<version> (library)`. */
  userAgent?: string
  /**
   * Talk to this address instead of the kubeconfig's server, verifying the certificate
   * for the kubeconfig's server name (one API server of several behind one name).
   */
  endpoint?: URL
  /** How often token and client-certificate files are read again (rotation). */
  credentialRefreshMs?: number
  /** How long a request's socket may stay silent (node's socket timeout); default 60 s. */
  defaultTimeoutMs?: number
  /**
   * kubectl's --request-timeout: the whole of each request (connecting, retries of the
   * connection, the answer) must be done within it, else CRDM_REQUEST_TIMEOUT. 0 or unset:
   * no such deadline. Watches (KubeHttp.stream) are not cut by it.
   */
  requestTimeoutMs?: number
  /**
   * Every write (POST, PUT, PATCH, DELETE) is sent with `dryRun=All`: the API server
   * decodes, converts, admits and validates it, and persists nothing (`migrate --dry-run=server`).
   */
  dryRun?: boolean
  /** Where HTTPS_PROXY, HTTP_PROXY and NO_PROXY are read when the kubeconfig has no proxy-url (default process.env). */
  environment?: ProxyEnvironment
  /**
   * Tries to connect while the API server has never answered this client (refused, a name
   * that does not resolve, a timeout), 0.5 s, 1 s, 2 s ... apart; then CRDM_UNREACHABLE,
   * which the migration's own retries do not retry: a cluster that cannot be reached at all
   * fails in seconds. Once it has answered, a failed connection is the migration's to retry
   * (an API server restarting). Default DEFAULT_CONNECT_ATTEMPTS; 1 for a sibling of
   * one address (KubeHttp.forEndpoint), which has its own deadline.
   */
  connectAttempts?: number
  /** How long a new connection may take (TCP and TLS); default 10 s. */
  connectTimeoutMs?: number
  /**
   * Where each connection retry is logged (warn, with the cause), and, when its level is
   * trace, one line per request (method, path, status, milliseconds): `-v 6`.
   */
  logger?: (Pick<Logger, 'warn'> & Partial<Pick<Logger, 'trace' | 'isLevelEnabled'>>) | undefined
  /**
   * Called with the text of each warning the API server sends (`Warning:` headers, code
   * 299: deprecations, admission webhooks' and policies' warnings), whatever the status of
   * the answer. The CLI prints them as kubectl does (kube/warnings.ts warningPrinter).
   */
  onWarning?: ((text: string) => void) | undefined
}

/** A path node:http can send as it is: no character that needs escaping (anything else goes through URL). */
export const PLAIN_PATH = /^\/[A-Za-z0-9\-._~!$&'()*+,;=:@/%]*$/

/** The query parameters that are sent: undefined and empty values are left out. */
export function queryEntries(query: KubeRequest['query']): Array<[string, string]> {
  const entries: Array<[string, string]> = []
  for (const k in query) {
    const v = query[k]
    if (v !== undefined && v !== '') entries.push([k, String(v)])
  }
  return entries
}

/** A request the --request-timeout deadline cut. Not retried: the user asked for the limit. */
export function requestTimedOut(req: Pick<KubeRequest, 'method' | 'path'>, ms: number, cause: unknown): CrdMigratorError {
  return new CrdMigratorError(
    'CRDM_REQUEST_TIMEOUT',
    `${req.method} ${req.path}: no answer from the API server within ${flagDuration(ms)} (--request-timeout)`,
    { cause },
  )
}

/**
 * What sends one request: KubeHttp, or the migrator's run client, which adds the run's
 * retry policy around it (migrator/engine/run-client.ts). Helpers that send one request
 * take this, so a run hands them its client and they retry as the run does.
 */
export interface KubeRequests {
  request<T = unknown>(req: KubeRequest): Promise<KubeResponse<T>>
}
