import https from 'node:https'
import { setTimeout as sleep } from 'node:timers/promises'
import { urlToHttpOptions } from 'node:url'
import type { Agent, OutgoingHttpHeaders } from 'node:http'
import { KubeApiError } from './api-errors.js'
import { FIELD_MANAGER, userAgent } from '../version.js'
import { Credentials, type ClientCertificate, type CredentialSnapshot } from './credentials.js'
import { parseKubeconfig, resolveContext, urlHost, type KubeContext } from './kubeconfig.js'
import { http } from './node-http.js'
import { proxyFromEnvironment, type ProxyEnvironment } from './proxy-env.js'
import { createAgent, limitConnect, retireAgent, roundTrip, tlsOptions, type RoundTripAnswer, type KubeTlsOptions } from './transport.js'
import { explainConnectionError, KubeUnreachableError } from './connection-errors.js'
import { requestAttributes } from './request-info.js'
import { parseWarningHeader } from './warnings.js'

import {
  Accept,
  ContentType,
  PLAIN_PATH,
  queryEntries,
  requestTimedOut,
  type KubeHttpOptions,
  type KubeRequest,
  type KubeResponse,
  type RawKubeResponse,
} from './request-options.js'

export type { KubeTlsOptions } from './transport.js'
export { Accept, ContentType }
export type { Impersonation, KubeHttpOptions, KubeRequest, KubeRequests, KubeResponse, RawKubeResponse } from './request-options.js'

/** The product's one keep-alive HTTPS client to the API server: pooled sockets and raw JSON for tens of thousands of writes. */

/** How to reach and authenticate to the API server, as the kubeconfig says. */
export interface KubeConnection {
  server: URL
  /** Authentication headers (bearer token, basic auth); empty with client certificates. */
  headers: Record<string, string>
  tls: KubeTlsOptions
}

/** A resolved kubeconfig context, or anything exporting one (client-node's KubeConfig, in tooling and tests). */
export type KubeconfigSource = KubeContext | { exportConfig(): string }

export function kubeContextOf(source: KubeconfigSource): KubeContext {
  return 'exportConfig' in source ? resolveContext(parseKubeconfig(source.exportConfig())) : source
}

/** `source`'s current context for a client of its own (the bench's ceiling); tokens expire: call again to refresh. */
export async function kubeConnection(source: KubeconfigSource): Promise<KubeConnection> {
  const context = kubeContextOf(source)
  const credentials = await new Credentials(context, { refreshMs: 0 }).current()
  const headers: Record<string, string> = {}
  for (const [k, v] of Object.entries(credentials.headers)) headers[k] = typeof v === 'string' ? v : v.join(', ')
  return { server: context.cluster.server, headers, tls: tlsOptions(context.cluster, credentials.clientCertificate) }
}

/** Connection tries before a cluster that has never answered is given up (the `connectAttempts` setting's default). */
export const DEFAULT_CONNECT_ATTEMPTS = 3
const CONNECT_RETRY_BASE_MS = 500

/** The pools of one set of credentials: requests share `requests`; each watch holds a socket of `streams`. */
interface Pools {
  requests: Agent
  streams: Agent
  clientCertificate: ClientCertificate | undefined
}

/** The credentials of a request and the pools holding its client certificate. */
type Connected = CredentialSnapshot & { pools: Pools }

export class KubeHttp {
  readonly server: URL
  readonly context: KubeContext
  private readonly credentials: Credentials
  private pools: Pools | undefined
  private readonly retired = new Set<Agent>()
  private readonly options: Required<Omit<KubeHttpOptions, 'endpoint' | 'environment' | 'logger' | 'onWarning'>>
  private readonly logger: KubeHttpOptions['logger']
  private readonly onWarning: KubeHttpOptions['onWarning']
  /** -v 6 and up: a trace line per request. */
  private readonly traceRequests: boolean
  /** Set by the first answer of the API server, whatever its status: from then on a failed connection is a passing outage. */
  private reached = false
  private connectWarnedAttempt = 0
  private readonly environment: ProxyEnvironment
  /** Set for a client of one API server by address: the name its certificate is checked against. */
  private readonly identityHost: string | undefined
  readonly proxy: URL | undefined
  /** node:http options, worked out once, not per request. */
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
      connectAttempts: Math.max(1, options.connectAttempts ?? (options.endpoint ? 1 : DEFAULT_CONNECT_ATTEMPTS)),
      connectTimeoutMs: options.connectTimeoutMs ?? 10_000,
      requestTimeoutMs: Math.max(0, options.requestTimeoutMs ?? 0),
      dryRun: options.dryRun ?? false,
    }
    this.logger = options.logger
    this.onWarning = options.onWarning
    this.traceRequests = options.logger?.isLevelEnabled?.('trace') === true
    this.credentials = shared ?? new Credentials(this.context, { refreshMs: this.options.credentialRefreshMs })
    const { protocol, hostname, port, auth } = urlToHttpOptions(this.server)
    this.origin = { protocol, hostname, port, ...(auth ? { auth } : {}) }
    this.basePath = this.server.pathname.replace(/\/$/, '')
  }

  get dryRun(): boolean {
    return this.options.dryRun
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
    return { ...credentials, pools: this.pools }
  }

  /** connect() without waiting, when the credentials need no reload and the pools hold them. */
  private connectedNow(): Connected | undefined {
    const credentials = this.credentials.fresh()
    if (!credentials || !this.pools || this.pools.clientCertificate !== credentials.clientCertificate) return undefined
    return { ...credentials, pools: this.pools }
  }

  /** A client of the same cluster and credentials that talks to one API server by address. */
  forEndpoint(endpoint: URL, options: Omit<KubeHttpOptions, 'endpoint'> = {}): KubeHttp {
    const { connectAttempts: _ownDefault, ...inherited } = this.options
    return this.sibling({ ...inherited, ...options, endpoint })
  }

  /** A client of the same server, credentials and options whose every write carries dryRun=All; close it when done. */
  asDryRun(): KubeHttp {
    return this.sibling({ ...this.options, ...(this.identityHost ? { endpoint: this.server } : {}), dryRun: true })
  }

  private sibling(options: KubeHttpOptions): KubeHttp {
    return new KubeHttp(
      this.context,
      { environment: this.environment, logger: this.logger, onWarning: this.onWarning, ...options },
      this.credentials,
    )
  }

  url(path: string, query?: KubeRequest['query']): URL {
    const url = new URL(this.basePath + path, this.server)
    for (const [k, v] of queryEntries(query)) url.searchParams.set(k, v)
    return url
  }

  /** Path and query built as a string: a URL per request cost client CPU (npm run bench); paths needing escapes go through URL. */
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
    const body = text !== '' && (headers['content-type'] ?? '').includes('json') ? jsonOrText(text) : text
    if (status < 200 || status >= 300) {
      const retryAfter = headers['retry-after']
      throw this.apiError(status, req.method, pathname, req.query, body, typeof retryAfter === 'string' ? retryAfter : undefined)
    }
    return { status, headers, body: body as T }
  }

  /** Answered whatever its status (never a KubeApiError), for callers that judge refusals themselves (tooling, tests). */
  async requestRaw(req: KubeRequest): Promise<RawKubeResponse> {
    const { status, headers, text } = await this.exchange(req)
    return { status, headers, body: text }
  }

  private async exchange(req: KubeRequest): Promise<RoundTripAnswer & { pathname: string }> {
    const write = req.method !== 'GET'
    const query =
      write && req.method !== 'DELETE' && req.query?.['fieldManager'] === undefined
        ? { ...req.query, fieldManager: FIELD_MANAGER }
        : req.query
    const target = this.target(req.path, write && this.options.dryRun ? { ...query, dryRun: 'All' } : query)
    // A string: node:http then sends headers and body as one string, in one write.
    const payload = req.body === undefined ? undefined : typeof req.body === 'string' ? req.body : JSON.stringify(req.body)
    // --request-timeout: one deadline for the whole exchange, connection retries included.
    const limit = this.options.requestTimeoutMs
    const deadline = limit > 0 ? AbortSignal.timeout(limit) : undefined
    const signal = deadline ? (req.signal ? AbortSignal.any([req.signal, deadline]) : deadline) : req.signal
    const started = this.traceRequests ? performance.now() : 0
    try {
      for (let attempt = 1, connecting = 1; ; attempt++) {
        const connected = this.connectedNow() ?? (await this.connect())
        let answer: RoundTripAnswer
        try {
          answer = await this.send(target.path, { ...req, signal }, payload, connected, connecting)
        } catch (err) {
          if (!this.retryConnect(err, connecting)) throw err
          await sleep(CONNECT_RETRY_BASE_MS * 2 ** (connecting - 1), undefined, signal ? { signal } : undefined)
          connecting++
          attempt--
          continue
        }
        this.reached = true
        if (this.traceRequests)
          this.logger?.trace?.(
            { method: req.method, path: target.path, status: answer.status, ms: Math.round(performance.now() - started) },
            'request',
          )
        if (this.retryUnauthorized(answer.status, attempt, connected)) continue
        if (this.onWarning && answer.headers.warning !== undefined)
          for (const text of parseWarningHeader(answer.headers.warning)) this.onWarning(text)
        return { pathname: target.pathname, ...answer }
      }
    } catch (err) {
      if (deadline?.aborted && !req.signal?.aborted) throw requestTimedOut(req, limit, err)
      throw err
    }
  }

  /** A connection failure to a server that has never answered, with tries left: logged, to be tried again. */
  private retryConnect(err: unknown, attempt: number): boolean {
    if (!(err instanceof KubeUnreachableError) || err.retryable || this.reached || attempt >= this.options.connectAttempts) return false
    // Requests sent together fail together: one line per attempt, not one per request.
    if (attempt <= this.connectWarnedAttempt) return true
    this.connectWarnedAttempt = attempt
    this.logger?.warn(
      { server: err.server, errno: err.errno, attempt, of: this.options.connectAttempts, context: this.context.name },
      `cannot reach the API server (${err.errno}); trying again`,
    )
    return true
  }

  private explain(err: unknown, attempt: number): unknown {
    return explainConnectionError(err, this.server, this.context.cluster, this.reached, attempt)
  }

  /** A non-2xx answer as an error naming who asked what (a 401 and a 403 say which user, and what it may not do). */
  private apiError(status: number, method: string, pathname: string, query: KubeRequest['query'], body: unknown, retryAfter?: string) {
    const attributes = status === 401 || status === 403 ? requestAttributes(method, pathname.slice(this.basePath.length), query) : undefined
    return new KubeApiError(status, method, pathname, body, retryAfter, {
      server: this.server.href.replace(/\/$/, ''),
      context: this.context.name,
      user: this.context.user.name,
      origin: this.context.origin,
      ...(this.context.user.impersonate?.user ? { impersonating: this.context.user.impersonate.user } : {}),
      ...(attributes ? { attributes } : {}),
    })
  }

  /** A 401 to credentials that can change (files, exec): reload and send once more, as client-go does for exec plugins. */
  private retryUnauthorized(status: number, attempt: number, connected: Connected): boolean {
    if (status !== 401 || attempt > 1 || !this.credentials.renewable) return false
    this.credentials.refused(connected.generation)
    return true
  }

  private headersFor(connected: Connected, accept: string | undefined): OutgoingHttpHeaders {
    return { ...connected.headers, Accept: accept ?? Accept.json, 'User-Agent': this.options.userAgent }
  }

  private send(
    path: string,
    req: KubeRequest,
    payload: string | undefined,
    connected: Connected,
    attempt: number,
  ): Promise<RoundTripAnswer> {
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
        explain: (err) => this.explain(err, attempt),
        connectTimeoutMs: this.options.connectTimeoutMs,
      },
    )
  }

  /** A watch: each newline-delimited JSON value to `onEvent`, resolved at the stream's end. Own pool, so watches never hold request sockets. */
  async stream(req: Omit<KubeRequest, 'body'>, onEvent: (event: unknown) => void): Promise<void> {
    const target = this.target(req.path, req.query)
    for (let attempt = 1; ; attempt++) {
      const connected = await this.connect()
      const refused = await this.openStream(target, req, connected, onEvent)
      if (refused && this.retryUnauthorized(refused.status, attempt, connected)) continue
      if (refused) throw refused
      return
    }
  }

  private openStream(
    target: { path: string; pathname: string },
    req: Omit<KubeRequest, 'body'>,
    connected: Connected,
    onEvent: (event: unknown) => void,
  ): Promise<KubeApiError | undefined> {
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
          this.reached = true
          if (status < 200 || status >= 300) {
            const chunks: Buffer[] = []
            res.on('data', (c: Buffer) => chunks.push(c))
            res.on('end', () => {
              const body = jsonOrText(Buffer.concat(chunks).toString('utf8'))
              resolve(this.apiError(status, req.method, target.pathname, { ...req.query, watch: true }, body))
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
          res.on('end', () => resolve(undefined))
          res.on('close', () => resolve(undefined))
        },
      )
      r.on('error', (err) => (req.signal?.aborted ? resolve(undefined) : reject(this.explain(err, 1))))
      limitConnect(r, this.options.connectTimeoutMs)
      r.end()
    })
  }

  close(): void {
    for (const agent of [this.pools?.requests, this.pools?.streams, ...this.retired]) agent?.destroy()
    this.retired.clear()
    this.pools = undefined
  }
}

function jsonOrText(text: string): unknown {
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}
