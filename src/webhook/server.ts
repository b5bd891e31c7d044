/**
 * The webhook's HTTP surface. buildWebhookApp gives a plain Fastify app (tests drive it
 * with app.inject, no TLS); startWebhookServer serves the same app over HTTPS with hot
 * certificate reload and a graceful close.
 *
 * Timeouts, and why (the API server calls us with timeoutSeconds: 5, at most 30):
 * - requestTimeout 10 s: the whole request, headers and body, must arrive within it, so a
 *   slow-loris client holds a socket for 10 s at most (checked every 2 s, see
 *   connectionsCheckingInterval; headersTimeout is kept below it).
 * - connectionTimeout 15 s: socket inactivity while a request is being served.
 * - keepAliveTimeout 120 s: longer than the idle timeout of the API server's HTTP client
 *   (Go's 90 s), so the API server, not us, closes idle connections. If we closed first, a
 *   review sent on a connection we were closing would fail, and with failurePolicy: Fail
 *   a failed call is a denied CRD update.
 * - tlsHandshakeTimeout 5 s: the TLS handshake must finish within it. Node's default is
 *   120 s, and none of the HTTP timeouts runs before the handshake is done, so a client
 *   that opens connections and never says hello would hold each for two minutes.
 * All of these can be lowered through `timeouts` (tests do, to check them quickly).
 */
import { performance } from 'node:perf_hooks'
import type { ServerOptions as HttpsServerOptions, Server as HttpsServer } from 'node:https'
import type { AddressInfo } from 'node:net'
import Fastify, { LogController, type FastifyError, type FastifyInstance } from 'fastify'
import { pino, type Logger } from 'pino'
import { Registry } from 'prom-client'
import {
  DEFAULT_ADMISSION_POLICY,
  crdNameOf,
  isDenialReason,
  type AdmissionDecision,
  type AdmissionPolicy,
} from './admission.js'
import { createWebhookMetrics, type WebhookMetrics } from './metrics.js'
import { parseAdmissionReview, reviewAdmission, toAdmissionReviewResponse } from './review.js'
import { CertificateWatcher, loadCertificatePair, MIN_TLS_VERSION, type CertificatePair } from './tls.js'

export const VALIDATE_PATH = '/validate-crd'

/**
 * Default body limit: the API server sends object AND oldObject, and a CRD can be up to
 * ~1.5 MB (etcd's request limit); 2 x 1.5 MB of JSON plus the envelope is ~3 MB, and JSON
 * re-encoding by the API server can grow it. 8 MiB leaves room without letting one
 * request hold much memory.
 */
export const DEFAULT_BODY_LIMIT_BYTES = 8 * 1024 * 1024

export const SERVER_TIMEOUTS = Object.freeze({
  requestTimeoutMs: 10_000,
  headersTimeoutMs: 5_000,
  connectionTimeoutMs: 15_000,
  keepAliveTimeoutMs: 120_000,
  connectionsCheckingIntervalMs: 2_000,
  tlsHandshakeTimeoutMs: 5_000,
})

export type ServerTimeouts = { -readonly [K in keyof typeof SERVER_TIMEOUTS]: number }

export interface WebhookAppOptions {
  /** Overrides of the default policy (annotation key/value, identities). */
  policy?: Partial<AdmissionPolicy>
  /** Registry for the webhook metrics, served on /metrics. Default: a fresh one. */
  registry?: Registry
  /** A pino logger to use; else one is created at logLevel. */
  logger?: Logger
  /** Level of the created logger when `logger` is not given. Default 'info'. */
  logLevel?: string
  /** Max body of POST /validate-crd in bytes. Default DEFAULT_BODY_LIMIT_BYTES. */
  bodyLimitBytes?: number
  /**
   * Readiness gate: /readyz is 503 while this returns false. Default: always true, since
   * a plain-HTTP app (tests, TLS terminated elsewhere) has no certificate to wait for.
   */
  isCertificateLoaded?: () => boolean
  /** Overrides of SERVER_TIMEOUTS. */
  timeouts?: Partial<ServerTimeouts>
}

interface BuiltApp {
  app: FastifyInstance
  metrics: WebhookMetrics
  registry: Registry
  markShuttingDown: () => void
}

export function buildWebhookApp(options: WebhookAppOptions = {}): FastifyInstance {
  return createApp(options).app
}

function createApp(options: WebhookAppOptions, https?: HttpsServerOptions): BuiltApp {
  const policy: AdmissionPolicy = { ...DEFAULT_ADMISSION_POLICY, ...options.policy }
  const registry = options.registry ?? new Registry()
  const metrics = createWebhookMetrics(registry)
  const bodyLimit = options.bodyLimitBytes ?? DEFAULT_BODY_LIMIT_BYTES
  const isCertificateLoaded = options.isCertificateLoaded ?? (() => true)
  const logger = options.logger ?? pino({ level: options.logLevel ?? 'info' })
  const timeouts: ServerTimeouts = { ...SERVER_TIMEOUTS, ...options.timeouts }
  let shuttingDown = false

  const app = Fastify({
    loggerInstance: logger,
    // One line per review is logged by the handler; per-request access lines would double it.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit,
    requestTimeout: timeouts.requestTimeoutMs,
    connectionTimeout: timeouts.connectionTimeoutMs,
    keepAliveTimeout: timeouts.keepAliveTimeoutMs,
    // Idle keep-alive sockets must not hold close() open for keepAliveTimeout.
    forceCloseConnections: 'idle',
    // A review arriving while we close is still answered (with Connection: close): a 503
    // would be a failed webhook call, i.e. a denied CRD update under failurePolicy: Fail.
    return503OnClosing: false,
    ...(https ? { https } : {}),
    // The https variant has its own generic parameters; callers only need the common API.
  }) as unknown as FastifyInstance
  if (app.server && 'headersTimeout' in app.server) {
    app.server.headersTimeout = timeouts.headersTimeoutMs
  }

  // Only application/json is an AdmissionReview: with no other parser Fastify answers
  // every other media type with 415 before the handler runs. Our own JSON parser keeps
  // the parser's reason (Fastify's says only "not valid JSON"); plain JSON.parse is safe
  // here because parsed bodies are only read, never merged into other objects.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => {
    const text = body as string
    if (text.trim() === '') return done(badRequest('body is empty; expected an AdmissionReview as JSON'), undefined)
    try {
      done(null, JSON.parse(text))
    } catch (err) {
      done(badRequest(`body is not valid JSON: ${(err as Error).message}`), undefined)
    }
  })

  app.addHook('preClose', async () => {
    shuttingDown = true
  })
  app.addHook('onSend', async (_request, reply) => {
    // Responses finishing during shutdown close their connection so close() is not held.
    if (shuttingDown) reply.header('connection', 'close')
  })

  app.setErrorHandler((error: FastifyError, request, reply) => {
    const status = error.statusCode ?? 500
    if (status >= 500 || status < 400) {
      request.log.error({ err: error }, 'unhandled error')
      return reply.code(500).send({ error: 'internal server error' })
    }
    const message = describeHttpError(error, request.headers['content-type'], bodyLimit)
    if (request.url.startsWith(VALIDATE_PATH)) metrics.countBadRequest(status)
    request.log.warn({ status, error: message, url: request.url }, 'bad request')
    return reply.code(status).send({ error: message })
  })

  app.setNotFoundHandler((request, reply) =>
    reply.code(404).send({ error: `no route for ${request.method} ${request.url}` }),
  )

  app.post(VALIDATE_PATH, async (request, reply) => {
    const started = performance.now()
    const parsed = parseAdmissionReview(request.body)
    if (!parsed.ok) {
      metrics.countBadRequest(400)
      request.log.warn({ error: parsed.error }, 'rejected request that is not a well-formed AdmissionReview')
      return reply.code(400).send({ error: parsed.error })
    }
    const review = parsed.request
    let decision: AdmissionDecision
    try {
      decision = reviewAdmission(review, policy)
    } catch (err) {
      // The decision is total; this is a bug. Fail closed with an answer, not a 500.
      request.log.error({ err, uid: review.uid }, 'admission decision threw')
      decision = {
        allowed: false,
        reason: 'internal-error',
        code: 500,
        message: 'crd-migrator webhook failed to evaluate this request and denies it (fail closed); see its logs.',
      }
    }
    const seconds = (performance.now() - started) / 1000
    metrics.observeReview(
      review.operation,
      decision.allowed ? 'allowed' : 'denied',
      seconds,
      isDenialReason(decision.reason) ? decision.reason : undefined,
    )
    request.log.info(
      {
        uid: review.uid,
        crd: crdNameOf(review),
        user: review.userInfo.username,
        groups: review.userInfo.groups,
        operation: review.operation,
        dryRun: review.dryRun ?? false,
        decision: decision.allowed ? 'allowed' : 'denied',
        reason: decision.reason,
        ...(decision.message ? { detail: decision.message } : {}),
        ...(decision.warnings ? { warnings: decision.warnings } : {}),
        durationMs: Math.round(seconds * 1e6) / 1e3,
      },
      decision.allowed ? 'admission allowed' : 'admission denied',
    )
    return toAdmissionReviewResponse(review.uid, decision)
  })

  app.get('/healthz', async () => ({ status: 'ok' }))

  app.get('/readyz', async (_request, reply) => {
    if (shuttingDown) return reply.code(503).send({ status: 'shutting down' })
    if (!isCertificateLoaded()) return reply.code(503).send({ status: 'no serving certificate loaded' })
    return { status: 'ready' }
  })

  app.get('/metrics', async (_request, reply) => {
    const body = await registry.metrics()
    return reply.type(registry.contentType).send(body)
  })

  return {
    app,
    metrics,
    registry,
    markShuttingDown: () => {
      shuttingDown = true
    },
  }
}

function badRequest(message: string): FastifyError {
  return Object.assign(new Error(message), { statusCode: 400, code: 'CRD_MIGRATOR_BAD_REQUEST', name: 'BadRequest' })
}

function describeHttpError(error: FastifyError, contentType: string | undefined, bodyLimit: number): string {
  switch (error.code) {
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return `content-type must be application/json, got ${contentType ? JSON.stringify(contentType) : 'none'}`
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return `request body exceeds the limit of ${bodyLimit} bytes`
    default:
      return error.message
  }
}

export interface StartWebhookServerOptions extends WebhookAppOptions {
  certFile: string
  keyFile: string
  /** Default '0.0.0.0'. */
  host?: string
  /** Default 9443; 0 picks a free port. */
  port?: number
  /** Fallback re-read of the certificate files. Default 30 s. */
  certPollIntervalMs?: number
  /** Quiet time after a certificate directory event. Default 200 ms. */
  certDebounceMs?: number
  /**
   * How long close() keeps serving after /readyz turned 503, so endpoints and the API
   * server stop sending us new connections first. Default 0; in a cluster ~5 s.
   */
  shutdownDelayMs?: number
}

export interface RunningWebhookServer {
  app: FastifyInstance
  registry: Registry
  certificates: CertificateWatcher
  host: string
  port: number
  /** e.g. https://127.0.0.1:9443 */
  url: string
  /** Mark not ready, wait shutdownDelayMs, stop accepting, finish in-flight reviews. */
  close(): Promise<void>
}

export async function startWebhookServer(options: StartWebhookServerOptions): Promise<RunningWebhookServer> {
  const host = options.host ?? '0.0.0.0'
  const logger = options.logger ?? pino({ level: options.logLevel ?? 'info' })

  // A missing or half-written pair at startup does not crash: we start not ready and the
  // watcher picks the pair up when it appears (optional Secret volumes, local dev). A
  // wrong path therefore shows as a never-ready pod with a warning, not a crash loop.
  let initial: CertificatePair | undefined
  try {
    initial = await loadCertificatePair(options.certFile, options.keyFile)
  } catch (err) {
    logger.warn({ certFile: options.certFile, keyFile: options.keyFile, error: (err as Error).message },
      'no usable serving certificate at startup; waiting for one (not ready)')
  }

  let watcher: CertificateWatcher | undefined
  const timeouts: ServerTimeouts = { ...SERVER_TIMEOUTS, ...options.timeouts }
  const https: HttpsServerOptions = {
    minVersion: MIN_TLS_VERSION,
    ...(initial ? { cert: initial.cert, key: initial.key } : {}),
    // How often Node enforces requestTimeout/headersTimeout (default 30 s is too coarse).
    connectionsCheckingInterval: timeouts.connectionsCheckingIntervalMs,
    handshakeTimeout: timeouts.tlsHandshakeTimeoutMs,
  } as HttpsServerOptions
  const built = createApp(
    { ...options, logger, isCertificateLoaded: () => watcher?.loaded ?? false },
    https,
  )
  const { app, metrics, registry } = built
  const server = app.server as HttpsServer

  watcher = new CertificateWatcher({
    certFile: options.certFile,
    keyFile: options.keyFile,
    logger,
    ...(options.certPollIntervalMs !== undefined ? { pollIntervalMs: options.certPollIntervalMs } : {}),
    ...(options.certDebounceMs !== undefined ? { debounceMs: options.certDebounceMs } : {}),
    ...(initial ? { initial } : {}),
    onChange: (pair) => {
      // Applies to handshakes from now on; established connections keep their session.
      server.setSecureContext({ cert: pair.cert, key: pair.key, minVersion: MIN_TLS_VERSION })
      metrics.setCertificate(pair.info)
    },
  })
  metrics.setCertificate(initial?.info)
  watcher.start()

  try {
    await app.listen({ host, port: options.port ?? 9443 })
  } catch (err) {
    watcher.stop()
    await app.close()
    throw err
  }
  const address = server.address() as AddressInfo
  const urlHost = address.family === 'IPv6' ? `[${address.address}]` : address.address
  logger.info({ host: address.address, port: address.port, certificateLoaded: watcher.loaded }, 'webhook listening')

  let closing: Promise<void> | undefined
  const activeWatcher = watcher
  return {
    app,
    registry,
    certificates: activeWatcher,
    host: address.address,
    port: address.port,
    url: `https://${urlHost}:${address.port}`,
    close() {
      closing ??= (async () => {
        built.markShuttingDown()
        if (options.shutdownDelayMs) await new Promise((r) => setTimeout(r, options.shutdownDelayMs))
        activeWatcher.stop()
        await app.close()
        logger.info('webhook stopped')
      })()
      return closing
    },
  }
}
