/** What a request to the API server is made of, apart from the client that sends it (http.ts). */
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
  timeoutMs?: number
  signal?: AbortSignal
}

export interface KubeResponse<T = unknown> {
  status: number
  headers: IncomingHttpHeaders
  body: T
}

/** A response of any status, the body as text: see KubeHttp.requestRaw. */
export type RawKubeResponse = KubeResponse<string>

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
  /** Talk to this address, verifying the kubeconfig server's name (one API server of several behind it). */
  endpoint?: URL
  /** How often token and client-certificate files are read again (rotation). */
  credentialRefreshMs?: number
  /** How long a request's socket may stay silent (node's socket timeout); default 60 s. */
  defaultTimeoutMs?: number
  /** kubectl's --request-timeout: each whole request, connection retries included, else CRDM_REQUEST_TIMEOUT. 0/unset: none; watches exempt. */
  requestTimeoutMs?: number
  /** Every write carries `dryRun=All`: admitted and validated, persisted nowhere (`migrate --dry-run=server`). */
  dryRun?: boolean
  /** Where HTTPS_PROXY, HTTP_PROXY and NO_PROXY are read when the kubeconfig has no proxy-url (default process.env). */
  environment?: ProxyEnvironment
  /** Tries while the server never answered (docs/configuration.md, `--connect-attempts`); 1 for a forEndpoint sibling (own deadline). */
  connectAttempts?: number
  /** How long a new connection may take (TCP and TLS); default 10 s. */
  connectTimeoutMs?: number
  /** Connection retries are warned here; at trace (`-v 6`) a line per request. */
  logger?: (Pick<Logger, 'warn'> & Partial<Pick<Logger, 'trace' | 'isLevelEnabled'>>) | undefined
  /** Each `Warning:` header (code 299) the API server sends, whatever the status (printed as kubectl does: warnings.ts). */
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

/** KubeHttp or the run's client (migrator/engine/run-client.ts): helpers take this so they retry as the run does. */
export interface KubeRequests {
  request<T = unknown>(req: KubeRequest): Promise<KubeResponse<T>>
}
