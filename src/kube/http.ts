import https from 'node:https'
import { isIP } from 'node:net'
import { checkServerIdentity, type PeerCertificate } from 'node:tls'
import http from 'node:http'
import type { KubeConfig } from '@kubernetes/client-node'
import { CrdMigratorError } from '../errors.js'
import { FIELD_MANAGER, userAgent } from '../version.js'

/**
 * A small keep-alive HTTPS client for the migrator's hot path (metadata-only lists and
 * no-op patches). client-node's generated APIs build a fresh Agent for every request and
 * (de)serialise through their model classes; for tens of thousands of writes we want one
 * pooled connection set and raw JSON. Authentication still comes from client-node's
 * KubeConfig (kubeconfig files, in-cluster service-account tokens, exec plugins).
 */

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
  headers: http.IncomingHttpHeaders
  body: T
}

/** A non-2xx answer from the API server, carrying its Status object when there is one. */
export class KubeApiError extends CrdMigratorError {
  override readonly name = 'KubeApiError'
  readonly status: number
  readonly reason: string | undefined
  readonly retryAfterSeconds: number | undefined
  readonly details: unknown

  constructor(status: number, method: string, path: string, body: unknown, retryAfter: string | undefined) {
    const statusObject = isStatus(body) ? body : undefined
    const message = statusObject?.message ?? (typeof body === 'string' && body !== '' ? body : `HTTP ${status}`)
    super('CRDM_KUBE_API', `${method} ${path}: ${status} ${message}`)
    this.status = status
    this.reason = statusObject?.reason
    this.details = statusObject?.details
    const seconds = retryAfter === undefined ? Number.NaN : Number(retryAfter)
    this.retryAfterSeconds = Number.isFinite(seconds) && seconds >= 0 ? seconds : statusObject?.details?.retryAfterSeconds
  }
}

interface StatusObject {
  kind: 'Status'
  message?: string
  reason?: string
  details?: { retryAfterSeconds?: number }
}

function isStatus(body: unknown): body is StatusObject {
  return typeof body === 'object' && body !== null && (body as { kind?: unknown }).kind === 'Status'
}

export const isNotFound = (err: unknown): boolean => err instanceof KubeApiError && err.status === 404
export const isConflict = (err: unknown): boolean => err instanceof KubeApiError && err.status === 409
export const isGone = (err: unknown): boolean => err instanceof KubeApiError && err.status === 410
export const isTooManyRequests = (err: unknown): boolean => err instanceof KubeApiError && err.status === 429

/** A JSON Patch `test` operation that failed: the API server answers 422 with this text. */
export function isFailedPatchTest(err: unknown): boolean {
  return err instanceof KubeApiError && err.status === 422 && /test operation|testing value/i.test(err.message)
}

/** Network failures and server-side errors worth another try. */
export function isRetryable(err: unknown): boolean {
  if (err instanceof KubeApiError) {
    return (
      err.status === 429 ||
      err.status >= 500 ||
      (err.status === 403 && err.reason === 'Forbidden' && /is being terminated|initializ/i.test(err.message))
    )
  }
  const code = (err as { code?: unknown } | null)?.code
  return (
    (typeof code === 'string' &&
      /^(ECONNRESET|ECONNREFUSED|EPIPE|ETIMEDOUT|EAI_AGAIN|ENOTFOUND|EHOSTUNREACH|ENETUNREACH|ERR_STREAM_PREMATURE_CLOSE|UND_ERR_SOCKET|ECONNABORTED)$/.test(
        code,
      )) ||
    (err instanceof Error && err.name === 'TimeoutError')
  )
}

/** A response of any status, the body as text: see {@link KubeHttp.requestRaw}. */
export interface RawKubeResponse {
  status: number
  headers: http.IncomingHttpHeaders
  body: string
}

/** The TLS settings of a connection to the API server (for an https.Agent). */
export interface KubeTlsOptions {
  ca?: https.AgentOptions['ca']
  cert?: https.AgentOptions['cert']
  key?: https.AgentOptions['key']
  rejectUnauthorized?: boolean
  servername?: string
}

/** How to reach and authenticate to the API server, as client-node's KubeConfig says. */
export interface KubeConnection {
  server: URL
  /** Authentication headers (bearer token, basic auth); empty with client certificates. */
  headers: Record<string, string>
  tls: KubeTlsOptions
}

/**
 * Resolves the current context of `kubeConfig` into a server URL, TLS settings and
 * authentication headers, through client-node (kubeconfig files, in-cluster
 * service-account tokens, exec plugins). Tokens expire: call it again to refresh them.
 */
export async function kubeConnection(kubeConfig: KubeConfig): Promise<KubeConnection> {
  const cluster = kubeConfig.getCurrentCluster()
  if (!cluster) throw new CrdMigratorError('CRDM_KUBECONFIG', 'kubeconfig has no current cluster: set a current-context')
  const opts: https.RequestOptions = { headers: {} }
  await kubeConfig.applyToHTTPSOptions(opts)
  const headers: Record<string, string> = {}
  for (const [k, v] of Object.entries(opts.headers ?? {})) if (typeof v === 'string') headers[k] = v
  if (opts.auth) headers.Authorization = `Basic ${Buffer.from(opts.auth).toString('base64')}`
  return {
    server: new URL(cluster.server),
    headers,
    tls: {
      ca: opts.ca,
      cert: opts.cert,
      key: opts.key,
      ...(opts.rejectUnauthorized !== undefined ? { rejectUnauthorized: opts.rejectUnauthorized } : {}),
      ...(opts.servername ? { servername: opts.servername } : {}),
    },
  }
}

export interface KubeHttpOptions {
  /** Upper bound of pooled sockets; the migrator sets this to its write concurrency. */
  maxSockets?: number
  /** The User-Agent of every request; default `crd-migrator/<version> (library)`. */
  userAgent?: string
  /**
   * Talk to this address instead of the kubeconfig's server, verifying the certificate
   * for the kubeconfig's server name (one API server of several behind one name).
   */
  endpoint?: URL
  /** How often credentials (tokens from files or exec plugins) are re-read. */
  credentialRefreshMs?: number
  defaultTimeoutMs?: number
}

export class KubeHttp {
  readonly server: URL
  private readonly kubeConfig: KubeConfig
  private agent: https.Agent | http.Agent | undefined
  private authHeaders: Record<string, string> = {}
  private credentialsLoadedAt = 0
  private readonly options: Required<Omit<KubeHttpOptions, 'endpoint'>>
  /** Set for a client of one API server by address: the name its certificate is checked against. */
  private readonly identityHost: string | undefined

  constructor(kubeConfig: KubeConfig, options: KubeHttpOptions = {}) {
    const cluster = kubeConfig.getCurrentCluster()
    if (!cluster) throw new CrdMigratorError('CRDM_KUBECONFIG', 'kubeconfig has no current cluster: set a current-context')
    this.kubeConfig = kubeConfig
    const configured = new URL(cluster.server)
    this.server = options.endpoint ?? configured
    this.identityHost = options.endpoint ? configured.hostname.replace(/^\[|\]$/g, '') : undefined
    this.options = {
      maxSockets: options.maxSockets ?? 64,
      credentialRefreshMs: options.credentialRefreshMs ?? 60_000,
      defaultTimeoutMs: options.defaultTimeoutMs ?? 60_000,
      userAgent: options.userAgent ?? userAgent('library'),
    }
  }

  private async ensureCredentials(): Promise<void> {
    if (this.agent && Date.now() - this.credentialsLoadedAt < this.options.credentialRefreshMs) return
    const connection = await kubeConnection(this.kubeConfig)
    this.authHeaders = connection.headers
    if (!this.agent) {
      const common = { keepAlive: true, maxSockets: this.options.maxSockets, maxFreeSockets: this.options.maxSockets }
      const identity = this.identityHost
      this.agent =
        this.server.protocol === 'http:'
          ? new http.Agent(common)
          : new https.Agent({
              ...common,
              ...connection.tls,
              ...(identity !== undefined
                ? {
                    ...(isIP(identity) ? {} : { servername: connection.tls.servername ?? identity }),
                    checkServerIdentity: (_host: string, cert: PeerCertificate) =>
                      checkServerIdentity(connection.tls.servername ?? identity, cert),
                  }
                : {}),
            })
    }
    this.credentialsLoadedAt = Date.now()
  }

  /** A client of the same cluster and credentials that talks to one API server by address. */
  forEndpoint(endpoint: URL, options: Omit<KubeHttpOptions, 'endpoint'> = {}): KubeHttp {
    return new KubeHttp(this.kubeConfig, { ...this.options, ...options, endpoint })
  }

  url(path: string, query?: KubeRequest['query']): URL {
    const base = this.server.pathname.replace(/\/$/, '')
    const url = new URL(base + path, this.server)
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined && v !== '') url.searchParams.set(k, String(v))
    return url
  }

  async request<T = unknown>(req: KubeRequest): Promise<KubeResponse<T>> {
    const { url, status, headers, text } = await this.exchange(req)
    let body: unknown = text
    if (text !== '' && (headers['content-type'] ?? '').includes('json')) {
      try {
        body = JSON.parse(text)
      } catch {
        body = text
      }
    }
    if (status < 200 || status >= 300) {
      const retryAfter = headers['retry-after']
      throw new KubeApiError(status, req.method, url.pathname, body, typeof retryAfter === 'string' ? retryAfter : undefined)
    }
    return { status, headers, body: body as T }
  }

  /**
   * The same request, answered whatever its status (never a KubeApiError), the body as
   * text: for callers that look at refusals themselves (the development tooling and the
   * tests act as other users and expect 403s and webhook denials).
   */
  async requestRaw(req: KubeRequest): Promise<RawKubeResponse> {
    const { status, headers, text } = await this.exchange(req)
    return { status, headers, body: text }
  }

  private async exchange(req: KubeRequest): Promise<{ url: URL; status: number; headers: http.IncomingHttpHeaders; text: string }> {
    await this.ensureCredentials()
    // Every write names its field manager (the writes that set their own keep theirs).
    const write = req.method === 'POST' || req.method === 'PUT' || req.method === 'PATCH'
    const url = this.url(
      req.path,
      write && req.query?.['fieldManager'] === undefined ? { ...req.query, fieldManager: FIELD_MANAGER } : req.query,
    )
    const payload = req.body === undefined ? undefined : Buffer.from(typeof req.body === 'string' ? req.body : JSON.stringify(req.body))
    const headers: Record<string, string | number> = {
      ...this.authHeaders,
      Accept: req.accept ?? Accept.json,
      'User-Agent': this.options.userAgent,
    }
    if (payload) {
      headers['Content-Type'] = req.contentType ?? ContentType.json
      headers['Content-Length'] = payload.length
    }
    const lib = url.protocol === 'http:' ? http : https
    return await new Promise((resolve, reject) => {
      const r = lib.request(
        url,
        { method: req.method, headers, agent: this.agent, signal: req.signal, timeout: req.timeoutMs ?? this.options.defaultTimeoutMs },
        (res) => {
          const chunks: Buffer[] = []
          res.on('data', (c: Buffer) => chunks.push(c))
          res.on('error', reject)
          res.on('end', () =>
            resolve({ url, status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }),
          )
        },
      )
      r.on('timeout', () =>
        r.destroy(Object.assign(new Error(`${req.method} ${url.pathname}: timed out`), { name: 'TimeoutError', code: 'ETIMEDOUT' })),
      )
      r.on('error', reject)
      if (payload) r.write(payload)
      r.end()
    })
  }

  /**
   * Opens a streaming request (a watch) and hands each newline-delimited JSON value to
   * `onEvent`. Resolves when the server ends the stream.
   */
  async stream(req: Omit<KubeRequest, 'body'>, onEvent: (event: unknown) => void): Promise<void> {
    await this.ensureCredentials()
    const url = this.url(req.path, req.query)
    const lib = url.protocol === 'http:' ? http : https
    await new Promise<void>((resolve, reject) => {
      const r = lib.request(
        url,
        { method: req.method, headers: { ...this.authHeaders, Accept: req.accept ?? Accept.json }, agent: this.agent, signal: req.signal },
        (res) => {
          const status = res.statusCode ?? 0
          if (status < 200 || status >= 300) {
            const chunks: Buffer[] = []
            res.on('data', (c: Buffer) => chunks.push(c))
            res.on('end', () => {
              const text = Buffer.concat(chunks).toString('utf8')
              let body: unknown = text
              try {
                body = JSON.parse(text)
              } catch {
                /* not JSON */
              }
              reject(new KubeApiError(status, req.method, url.pathname, body, undefined))
            })
            return
          }
          let buffered = ''
          res.setEncoding('utf8')
          res.on('data', (chunk: string) => {
            buffered += chunk
            let nl: number
            while ((nl = buffered.indexOf('\n')) >= 0) {
              const line = buffered.slice(0, nl).trim()
              buffered = buffered.slice(nl + 1)
              if (line === '') continue
              try {
                onEvent(JSON.parse(line))
              } catch (err) {
                r.destroy(err as Error)
                return
              }
            }
          })
          res.on('error', reject)
          res.on('end', resolve)
          res.on('close', resolve)
        },
      )
      r.on('error', (err) => (req.signal?.aborted ? resolve() : reject(err)))
      r.end()
    })
  }

  close(): void {
    this.agent?.destroy()
    this.agent = undefined
  }
}
