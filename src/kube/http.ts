import https from 'node:https'
import { urlToHttpOptions } from 'node:url'
import type { Agent, IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http'
import { KubeApiError } from './api-errors.js'
import { FIELD_MANAGER, userAgent } from '../version.js'
import { Credentials, type AuthHeaders, type ClientCertificate } from './credentials.js'
import { parseKubeconfig, resolveContext, urlHost, type KubeContext } from './kubeconfig.js'
import { http } from './node-http.js'
import { proxyFromEnvironment, type ProxyEnvironment } from './proxy-env.js'
import { createAgent, explainTlsError, retireAgent, roundTrip, tlsOptions, type RoundTripAnswer, type KubeTlsOptions } from './transport.js'

export type { KubeTlsOptions } from './transport.js'

/**
 * A small keep-alive HTTPS client, the one transport of the product: one pooled connection
 * set and raw JSON for tens of thousands of writes. Who it talks to and as whom comes from
 * a kubeconfig context (kubeconfig.ts, client.ts); credentials.ts keeps the credentials
 * current (token and certificate files re-read, exec plugins run again), transport.ts
 * builds the pools (CA, tls-server-name, proxy-url).
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

/** A path node:http can send as it is: no character that needs escaping (anything else goes through URL). */
const PLAIN_PATH = /^\/[A-Za-z0-9\-._~!$&'()*+,;=:@/%]*$/

/** The query parameters that are sent: undefined and empty values are left out. */
function queryEntries(query: KubeRequest['query']): Array<[string, string]> {
  const entries: Array<[string, string]> = []
  for (const k in query) {
    const v = query[k]
    if (v !== undefined && v !== '') entries.push([k, String(v)])
  }
  return entries
}

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

/** A response of any status, the body as text: see {@link KubeHttp.requestRaw}. */
export interface RawKubeResponse {
  status: number
  headers: IncomingHttpHeaders
  body: string
}

/** How to reach and authenticate to the API server, as the kubeconfig says. */
export interface KubeConnection {
  server: URL
  /** Authentication headers (bearer token, basic auth); empty with client certificates. */
  headers: Record<string, string>
  tls: KubeTlsOptions
}

/**
 * A resolved kubeconfig context (src/kube/client.ts loadKubeConfig), or anything that
 * exports a kubeconfig: @kubernetes/client-node's KubeConfig, which the tooling and the
 * tests build, qualifies.
 */
export type KubeconfigSource = KubeContext | { exportConfig(): string }

export function kubeContextOf(source: KubeconfigSource): KubeContext {
  return 'exportConfig' in source ? resolveContext(parseKubeconfig(source.exportConfig())) : source
}

/**
 * The current context of `source` as a server URL, TLS settings and authentication
 * headers, for a client of its own (the bench's ceiling). Tokens expire: call it again to
 * refresh them.
 */
export async function kubeConnection(source: KubeconfigSource): Promise<KubeConnection> {
  const context = kubeContextOf(source)
  const credentials = await new Credentials(context, { refreshMs: 0 }).current()
  const headers: Record<string, string> = {}
  for (const [k, v] of Object.entries(credentials.headers)) headers[k] = typeof v === 'string' ? v : v.join(', ')
  return { server: context.cluster.server, headers, tls: tlsOptions(context.cluster, credentials.clientCertificate) }
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
  defaultTimeoutMs?: number
  /** Where HTTPS_PROXY, HTTP_PROXY and NO_PROXY are read when the kubeconfig has no proxy-url (default process.env). */
  environment?: ProxyEnvironment
}

/** The pools of one set of credentials: requests share `requests`; each watch holds a socket of `streams`. */
interface Pools {
  requests: Agent
  streams: Agent
  clientCertificate: ClientCertificate | undefined
}

interface Connected {
  pools: Pools
  headers: AuthHeaders
  generation: number
}

export class KubeHttp {
  readonly server: URL
  readonly context: KubeContext
  private readonly credentials: Credentials
  private pools: Pools | undefined
  private readonly retired = new Set<Agent>()
  private readonly options: Required<Omit<KubeHttpOptions, 'endpoint' | 'environment'>>
  private readonly environment: ProxyEnvironment
  /** Set for a client of one API server by address: the name its certificate is checked against. */
  private readonly identityHost: string | undefined
  /** The proxy every connection to `server` tunnels through, if any. */
  readonly proxy: URL | undefined
  /** Where every request goes, as node:http options (worked out once, not per request). */
  private readonly origin: Pick<https.RequestOptions, 'protocol' | 'hostname' | 'port' | 'auth'>
  /** The server URL's own path (a proxy's prefix, e.g. /k8s/clusters/c-1), without its trailing slash. */
  private readonly basePath: string

  /** `shared`: the credentials of the client this one is a sibling of (see {@link forEndpoint}). */
  constructor(source: KubeconfigSource, options: KubeHttpOptions = {}, shared?: Credentials) {
    this.context = kubeContextOf(source)
    const configured = this.context.cluster.server
    this.server = options.endpoint ?? configured
    this.identityHost = options.endpoint ? urlHost(configured) : undefined
    this.environment = options.environment ?? process.env
    // As client-go: the kubeconfig's proxy-url, else the environment's for this server.
    this.proxy = this.context.cluster.proxyUrl ?? proxyFromEnvironment(this.server, this.environment)
    this.options = {
      maxSockets: options.maxSockets ?? 64,
      credentialRefreshMs: options.credentialRefreshMs ?? 60_000,
      defaultTimeoutMs: options.defaultTimeoutMs ?? 60_000,
      userAgent: options.userAgent ?? userAgent('library'),
    }
    this.credentials = shared ?? new Credentials(this.context, { refreshMs: this.options.credentialRefreshMs })
    const { protocol, hostname, port, auth } = urlToHttpOptions(this.server)
    this.origin = { protocol, hostname, port, ...(auth ? { auth } : {}) }
    this.basePath = this.server.pathname.replace(/\/$/, '')
  }

  /** Credentials as they are now, and pools holding the current client certificate (new pools when it changed). */
  private async connect(): Promise<Connected> {
    const credentials = await this.credentials.current()
    if (!this.pools || this.pools.clientCertificate !== credentials.clientCertificate) {
      const make = (maxSockets: number) =>
        createAgent(this.server, this.context.cluster, credentials.clientCertificate, {
          maxSockets,
          identityHost: this.identityHost,
          proxy: this.proxy,
        })
      const next = { requests: make(this.options.maxSockets), streams: make(Infinity), clientCertificate: credentials.clientCertificate }
      if (this.pools) {
        // Forget retired pools whose last socket has closed; close() ends the others.
        for (const agent of this.retired) if (Object.keys(agent.sockets).length === 0) this.retired.delete(agent)
        for (const agent of [this.pools.requests, this.pools.streams]) {
          retireAgent(agent)
          this.retired.add(agent)
        }
      }
      this.pools = next
    }
    return { pools: this.pools, headers: credentials.headers, generation: credentials.generation }
  }

  /** connect() without waiting, when the credentials need no reload and the pools hold them. */
  private connectedNow(): Connected | undefined {
    const credentials = this.credentials.fresh()
    if (!credentials || !this.pools || this.pools.clientCertificate !== credentials.clientCertificate) return undefined
    return { pools: this.pools, headers: credentials.headers, generation: credentials.generation }
  }

  /** A client of the same cluster and credentials that talks to one API server by address. */
  forEndpoint(endpoint: URL, options: Omit<KubeHttpOptions, 'endpoint'> = {}): KubeHttp {
    return new KubeHttp(this.context, { ...this.options, environment: this.environment, ...options, endpoint }, this.credentials)
  }

  url(path: string, query?: KubeRequest['query']): URL {
    const url = new URL(this.basePath + path, this.server)
    for (const [k, v] of queryEntries(query)) url.searchParams.set(k, v)
    return url
  }

  /**
   * The request line's path and query, built as a string: parsing a URL per request and
   * having node:http take it apart again is work the bench's ceiling client never does
   * (npm run bench, client CPU). Paths with characters that need escaping go through URL.
   */
  private target(path: string, query?: KubeRequest['query']): { path: string; pathname: string } {
    if (!PLAIN_PATH.test(path)) {
      const url = this.url(path, query)
      return { path: url.pathname + url.search, pathname: url.pathname }
    }
    const pathname = this.basePath + path
    const params = new URLSearchParams(queryEntries(query))
    return { path: params.size ? `${pathname}?${params.toString()}` : pathname, pathname }
  }

  async request<T = unknown>(req: KubeRequest): Promise<KubeResponse<T>> {
    const { pathname, status, headers, text } = await this.exchange(req)
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
      throw new KubeApiError(status, req.method, pathname, body, typeof retryAfter === 'string' ? retryAfter : undefined)
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

  private async exchange(req: KubeRequest): Promise<RoundTripAnswer & { pathname: string }> {
    // Every write names its field manager (the writes that set their own keep theirs).
    const write = req.method === 'POST' || req.method === 'PUT' || req.method === 'PATCH'
    const target = this.target(
      req.path,
      write && req.query?.['fieldManager'] === undefined ? { ...req.query, fieldManager: FIELD_MANAGER } : req.query,
    )
    // A string: node:http then sends headers and body as one string, in one write.
    const payload = req.body === undefined ? undefined : typeof req.body === 'string' ? req.body : JSON.stringify(req.body)
    for (let attempt = 1; ; attempt++) {
      const connected = this.connectedNow() ?? (await this.connect())
      const answer = await this.send(target.path, req, payload, connected)
      if (this.retryUnauthorized(answer.status, attempt, connected)) continue
      return { pathname: target.pathname, ...answer }
    }
  }

  /**
   * A 401 to credentials that can change (a token file, an exec plugin, certificate files):
   * load them again and send the request once more, as client-go does for exec plugins.
   */
  private retryUnauthorized(status: number, attempt: number, connected: Connected): boolean {
    if (status !== 401 || attempt > 1 || !this.credentials.renewable) return false
    this.credentials.refused(connected.generation)
    return true
  }

  private headersFor(connected: Connected, accept: string | undefined): OutgoingHttpHeaders {
    return { ...connected.headers, Accept: accept ?? Accept.json, 'User-Agent': this.options.userAgent }
  }

  private send(path: string, req: KubeRequest, payload: string | undefined, connected: Connected): Promise<RoundTripAnswer> {
    const headers = this.headersFor(connected, req.accept)
    if (payload !== undefined) {
      headers['Content-Type'] = req.contentType ?? ContentType.json
      headers['Content-Length'] = Buffer.byteLength(payload)
    }
    return roundTrip(
      {
        ...this.origin,
        path,
        method: req.method,
        headers,
        agent: connected.pools.requests,
        signal: req.signal,
        timeout: req.timeoutMs ?? this.options.defaultTimeoutMs,
      },
      payload,
      {
        timedOut: () => Object.assign(new Error(`${req.method} ${req.path}: timed out`), { name: 'TimeoutError', code: 'ETIMEDOUT' }),
        explain: (err) => explainTlsError(err, this.server, this.context.cluster),
      },
    )
  }

  /**
   * Opens a streaming request (a watch) and hands each newline-delimited JSON value to
   * `onEvent`. Resolves when the server ends the stream. Streams have a pool of their own,
   * so watches never wait for (or hold) a socket of the request pool.
   */
  async stream(req: Omit<KubeRequest, 'body'>, onEvent: (event: unknown) => void): Promise<void> {
    const target = this.target(req.path, req.query)
    for (let attempt = 1; ; attempt++) {
      const connected = await this.connect()
      const status = await this.openStream(target, req, connected, onEvent)
      if (this.retryUnauthorized(status.unauthorized ? 401 : 0, attempt, connected)) continue
      if (status.error) throw status.error
      return
    }
  }

  private openStream(
    target: { path: string; pathname: string },
    req: Omit<KubeRequest, 'body'>,
    connected: Connected,
    onEvent: (event: unknown) => void,
  ): Promise<{ unauthorized?: boolean; error?: KubeApiError }> {
    const lib = this.origin.protocol === 'http:' ? http : https
    return new Promise((resolve, reject) => {
      const r = lib.request(
        {
          ...this.origin,
          path: target.path,
          method: req.method,
          headers: this.headersFor(connected, req.accept),
          agent: connected.pools.streams,
          signal: req.signal,
        },
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
              resolve({ unauthorized: status === 401, error: new KubeApiError(status, req.method, target.pathname, body, undefined) })
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
          res.on('end', () => resolve({}))
          res.on('close', () => resolve({}))
        },
      )
      r.on('error', (err) => (req.signal?.aborted ? resolve({}) : reject(explainTlsError(err, this.server, this.context.cluster))))
      r.end()
    })
  }

  close(): void {
    for (const agent of [this.pools?.requests, this.pools?.streams, ...this.retired]) agent?.destroy()
    this.retired.clear()
    this.pools = undefined
  }
}
