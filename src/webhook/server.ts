/**
 * The webhook's HTTP surface: POST /validate-crd and nothing else. buildWebhookApp gives
 * a plain Fastify app (tests drive it with app.inject, no TLS); startWebhookServer serves
 * the same app over HTTPS with hot certificate reload and a graceful close.
 *
 * Health and metrics are not served here: the webhook's metrics go to the Registry it is
 * given, and its readiness (a certificate loaded, not draining) is a list of checks
 * (RunningWebhookServer.readiness) that the ops listener's /readyz reports
 * (health/plugin.ts, cli/serve.ts). Anyone who can reach the pod can reach this port,
 * so it answers reviews and nothing else.
 *
 * Defaults (body limit, host, port, timeouts, the policy) are the config schema's
 * (config/schema.ts, which says why each timeout is what it is). All timeouts can be
 * lowered through `timeouts` (tests do, to check them quickly).
 */
import { performance } from 'node:perf_hooks'
import type { ServerOptions as HttpsServerOptions, Server as HttpsServer } from 'node:https'
import type { AddressInfo } from 'node:net'
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance } from 'fastify'
import type { Logger } from 'pino'
import { createLogger } from '../log.js'
import { Registry } from 'prom-client'
import { CONFIG_DEFAULTS, type Config } from '../config/schema.js'
import { CrdMigratorError, errorMessage } from '../errors.js'
import type { ReadinessCheck } from '../health/plugin.js'
import { DEFAULT_ADMISSION_POLICY, isDenialReason, type AdmissionDecision, type AdmissionPolicy } from './admission.js'
import { crdNameOf } from './readers.js'
import { checkJsonShape, jsonShapeLimits, LOG_MESSAGE_MAX, truncateForLog, truncateListForLog, type JsonShapeViolation } from './limits.js'
import { createWebhookMetrics, type WebhookMetrics } from './metrics.js'
import { parseAdmissionReview, reviewAdmission, toAdmissionReviewResponse, type AdmissionRequest } from './review.js'
import { RepeatSampler } from './repeat-sampler.js'
import { CertificateWatcher, TLS_CONTEXT_OPTIONS } from './tls.js'

export const VALIDATE_PATH = '/validate-crd'

/** Largest body of POST /validate-crd by default: webhook.bodyLimitBytes of the config schema. */
export const DEFAULT_BODY_LIMIT_BYTES = CONFIG_DEFAULTS.webhook.bodyLimitBytes

export interface ServerTimeouts {
  requestTimeoutMs: number
  headersTimeoutMs: number
  connectionTimeoutMs: number
  keepAliveTimeoutMs: number
  connectionsCheckingIntervalMs: number
  tlsHandshakeTimeoutMs: number
}

/** The config's webhook.timeouts (seconds) as the server's options (milliseconds). */
export function serverTimeouts(timeouts: Config['webhook']['timeouts']): ServerTimeouts {
  const ms = (seconds: number) => Math.round(seconds * 1000)
  return {
    requestTimeoutMs: ms(timeouts.requestSeconds),
    headersTimeoutMs: ms(timeouts.headersSeconds),
    connectionTimeoutMs: ms(timeouts.connectionSeconds),
    keepAliveTimeoutMs: ms(timeouts.keepAliveSeconds),
    connectionsCheckingIntervalMs: ms(timeouts.connectionsCheckingIntervalSeconds),
    tlsHandshakeTimeoutMs: ms(timeouts.tlsHandshakeSeconds),
  }
}

/** The default timeouts: webhook.timeouts of the config schema. */
export const SERVER_TIMEOUTS: Readonly<ServerTimeouts> = Object.freeze(serverTimeouts(CONFIG_DEFAULTS.webhook.timeouts))

export interface WebhookAppOptions {
  /** Overrides of the default policy (annotation key/value, identities). */
  policy?: Partial<AdmissionPolicy>
  /**
   * Registry for the webhook metrics (served by the ops listener's /metrics, not here).
   * Default: a fresh one.
   */
  registry?: Registry
  /** A pino logger to use; else one is created at logLevel. */
  logger?: Logger
  /** Level of the created logger when `logger` is not given. Default: the config's logLevel. */
  logLevel?: string
  /** Max body of POST /validate-crd in bytes. Default DEFAULT_BODY_LIMIT_BYTES. */
  bodyLimitBytes?: number
  /** Overrides of SERVER_TIMEOUTS. */
  timeouts?: Partial<ServerTimeouts>
  /** Which repeated review lines are left out of the log (tests pass one with a short window). */
  repeatSampler?: RepeatSampler
}

interface BuiltApp {
  app: FastifyInstance
  metrics: WebhookMetrics
  registry: Registry
  markShuttingDown: () => void
  isShuttingDown: () => boolean
}

export function buildWebhookApp(options: WebhookAppOptions = {}): FastifyInstance {
  return createApp(options).app
}

function createApp(options: WebhookAppOptions, https?: HttpsServerOptions, webhookMetrics?: WebhookMetrics): BuiltApp {
  const policy: AdmissionPolicy = { ...DEFAULT_ADMISSION_POLICY, ...options.policy }
  const registry = options.registry ?? new Registry()
  const metrics = webhookMetrics ?? createWebhookMetrics(registry)
  const bodyLimit = options.bodyLimitBytes ?? DEFAULT_BODY_LIMIT_BYTES
  const shapeLimits = jsonShapeLimits(bodyLimit)
  const logger = options.logger ?? createLogger({ level: options.logLevel ?? CONFIG_DEFAULTS.logLevel })
  const timeouts: ServerTimeouts = { ...SERVER_TIMEOUTS, ...options.timeouts }
  let shuttingDown = false
  const repeats = options.repeatSampler ?? new RepeatSampler()

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
  // here because parsed bodies are only read, never merged into other objects. JSON.parse
  // cannot be interrupted, so the body's nesting and number of objects/arrays are checked
  // first, by a linear scan (limits.ts): a hostile body must not hold the event loop.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_request, body, done) => {
    const violation = checkJsonShape(body as Buffer, shapeLimits)
    if (violation) return done(badRequest(describeShapeViolation(violation)), undefined)
    const text = (body as Buffer).toString('utf8')
    if (text.trim() === '') return done(badRequest('body is empty; expected an AdmissionReview as JSON'), undefined)
    try {
      done(null, JSON.parse(text))
    } catch (err) {
      done(badRequest(`body is not valid JSON: ${truncateForLog(errorMessage(err), LOG_MESSAGE_MAX)}`), undefined)
    }
  })

  app.addHook('preClose', async () => {
    shuttingDown = true
  })
  // Callback style, like the handler below: an async hook costs a promise per review.
  app.addHook('onSend', (_request, reply, payload, done) => {
    // Responses finishing during shutdown close their connection so close() is not held.
    if (shuttingDown) reply.header('connection', 'close')
    done(null, payload)
  })

  app.setErrorHandler((error: FastifyError, request, reply) => {
    const status = error.statusCode ?? 500
    if (status >= 500 || status < 400) {
      request.log.error({ err: error }, 'unhandled error')
      return reply.code(500).send({ error: 'internal server error' })
    }
    const message = describeHttpError(error, request.headers['content-type'], bodyLimit)
    if (request.url.startsWith(VALIDATE_PATH)) metrics.countBadRequest(status)
    request.log.warn({ status, error: truncateForLog(message, LOG_MESSAGE_MAX), url: truncateForLog(request.url) }, 'bad request')
    return reply.code(status).send({ error: message })
  })

  app.setNotFoundHandler((request, reply) => reply.code(404).send({ error: `no route for ${request.method} ${request.url}` }))

  /** The review's log line, if it gets one (level, repeats). */
  const logReview = (log: FastifyBaseLogger, review: AdmissionRequest, decision: AdmissionDecision, seconds: number) => {
    // Denials and allowances with warnings (break-glass) are logged at info; a plain
    // allowance at debug: it is most of what a busy webhook answers, the API server's
    // audit log has it, and formatting its line cost more than the decision (npm run bench).
    const level = decision.allowed && !decision.warnings ? 'debug' : 'info'
    if (!logger.isLevelEnabled(level)) return
    // Everything from the request is cut for the log: a 7 MB name logged in full, in three
    // fields, made one review a 21 MB log line.
    const crdName = crdNameOf(review)
    const crd = crdName === undefined ? undefined : truncateForLog(crdName)
    const user = truncateForLog(review.userInfo.username)
    // The same refusal of the same user over and over is one line per window (repeat-sampler.ts).
    const leftOut = repeats.admit(`${review.operation}\n${decision.reason}\n${user}\n${crd ?? ''}`)
    if (leftOut === undefined) return
    log[level](
      {
        uid: truncateForLog(review.uid),
        crd,
        user,
        groups: truncateListForLog(review.userInfo.groups),
        operation: review.operation,
        ...(review.subResource ? { subResource: truncateForLog(review.subResource) } : {}),
        dryRun: review.dryRun ?? false,
        decision: decision.allowed ? 'allowed' : 'denied',
        reason: decision.reason,
        ...(decision.message ? { detail: truncateForLog(decision.message, LOG_MESSAGE_MAX) } : {}),
        ...(decision.warnings ? { warnings: truncateListForLog(decision.warnings, undefined, LOG_MESSAGE_MAX) } : {}),
        durationMs: Math.round(seconds * 1e6) / 1e3,
        ...(leftOut > 0 ? { repeatsNotLogged: leftOut } : {}),
      },
      decision.allowed ? 'admission allowed' : 'admission denied',
    )
  }

  // Not async: the answer is ready when the handler returns, so it is sent at once
  // (reply.send) instead of through a promise per review. A throw still reaches the error
  // handler (Fastify catches it).
  app.post(VALIDATE_PATH, (request, reply) => {
    const started = performance.now()
    const parsed = parseAdmissionReview(request.body)
    if (!parsed.ok) {
      metrics.countBadRequest(400)
      request.log.warn(
        { error: truncateForLog(parsed.error, LOG_MESSAGE_MAX) },
        'rejected request that is not a well-formed AdmissionReview',
      )
      return reply.code(400).send({ error: parsed.error })
    }
    const review = parsed.request
    let decision: AdmissionDecision
    try {
      decision = reviewAdmission(review, policy)
    } catch (err) {
      // The decision is total; this is a bug. Fail closed with an answer, not a 500.
      request.log.error({ err, uid: truncateForLog(review.uid) }, 'admission decision threw')
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
    logReview(request.log, review, decision, seconds)
    return reply.send(toAdmissionReviewResponse(review.uid, decision))
  })

  return {
    app,
    metrics,
    registry,
    markShuttingDown: () => {
      shuttingDown = true
    },
    isShuttingDown: () => shuttingDown,
  }
}

function badRequest(message: string): FastifyError {
  return Object.assign(new CrdMigratorError('CRDM_REVIEW_MALFORMED', message), { statusCode: 400 })
}

function describeShapeViolation(violation: JsonShapeViolation): string {
  return violation.limit === 'depth'
    ? `body nests JSON objects and arrays deeper than ${violation.max} levels, the limit; refused before parsing`
    : `body holds more than ${violation.max} JSON objects and arrays, the limit; refused before parsing`
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
  /** Default: the config's webhook.host. */
  host?: string
  /** Default: the config's webhook.port; 0 picks a free port. */
  port?: number
  /** Fallback re-read of the certificate files. Default 30 s. */
  certPollIntervalMs?: number
  /** Quiet time after a certificate directory event. Default 200 ms. */
  certDebounceMs?: number
  /**
   * How long close() keeps serving after the `webhook-open` readiness check started
   * failing, so endpoints and the API server stop sending us new connections first.
   * Default 0; in a cluster ~5 s.
   */
  shutdownDelayMs?: number
}

export interface RunningWebhookServer {
  app: FastifyInstance
  registry: Registry
  certificates: CertificateWatcher
  /**
   * The webhook's part of /readyz: `webhook-certificate` fails until a usable serving
   * certificate is loaded (nothing is served without one), `webhook-open` once close()
   * has begun. Whoever serves /readyz (cli/serve.ts) reports them.
   */
  readiness: readonly ReadinessCheck[]
  host: string
  port: number
  /** e.g. https://127.0.0.1:9443 */
  url: string
  /** Fail `webhook-open`, wait shutdownDelayMs, stop accepting, finish in-flight reviews. */
  close(): Promise<void>
}

export async function startWebhookServer(options: StartWebhookServerOptions): Promise<RunningWebhookServer> {
  const host = options.host ?? CONFIG_DEFAULTS.webhook.host
  const logger = options.logger ?? createLogger({ level: options.logLevel ?? CONFIG_DEFAULTS.logLevel })

  const registry = options.registry ?? new Registry()
  const metrics = createWebhookMetrics(registry)
  // Assigned once the app exists; the watcher's callback reads it before that.
  // eslint-disable-next-line prefer-const
  let server: HttpsServer | undefined

  const watcher = new CertificateWatcher({
    certFile: options.certFile,
    keyFile: options.keyFile,
    logger,
    ...(options.certPollIntervalMs !== undefined ? { pollIntervalMs: options.certPollIntervalMs } : {}),
    ...(options.certDebounceMs !== undefined ? { debounceMs: options.certDebounceMs } : {}),
    onChange: (pair) => {
      // Applies to handshakes from now on; established connections keep their session.
      // The whole context is replaced, so it must carry the same ciphers and versions.
      server?.setSecureContext({ cert: pair.cert, key: pair.key, ...TLS_CONTEXT_OPTIONS })
      metrics.setCertificate(pair.info)
    },
    onReject: (reason) => metrics.countCertificateRejected(reason),
  })
  // The start-up load is a reload like any other: same checks, log line and metric. A
  // missing, half-written, expired or not yet valid pair does not crash: we start not
  // ready and the watcher picks a usable pair up when it appears (optional Secret volumes,
  // local dev, cert-manager renewing). An expired pair in particular is not served: the
  // API server refuses it anyway ("x509: certificate has expired"), so serving it would
  // answer nothing, while not ready shows the problem on the pod (0/1, a stalled rollout
  // that keeps the old pods) and in the log, instead of as failed webhook calls.
  await watcher.reload()
  const initial = watcher.current

  const timeouts: ServerTimeouts = { ...SERVER_TIMEOUTS, ...options.timeouts }
  const https: HttpsServerOptions = {
    ...TLS_CONTEXT_OPTIONS,
    ...(initial ? { cert: initial.cert, key: initial.key } : {}),
    // How often Node enforces requestTimeout/headersTimeout (default 30 s is too coarse).
    connectionsCheckingInterval: timeouts.connectionsCheckingIntervalMs,
    handshakeTimeout: timeouts.tlsHandshakeTimeoutMs,
  }
  const built = createApp({ ...options, logger, registry }, https, metrics)
  const { app } = built
  server = app.server as HttpsServer
  watcher.start()

  try {
    await app.listen({ host, port: options.port ?? CONFIG_DEFAULTS.webhook.port })
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
  const readiness: readonly ReadinessCheck[] = Object.freeze([
    {
      name: 'webhook-certificate',
      failing: () => (activeWatcher.loaded ? undefined : 'no usable serving certificate loaded yet; see the log'),
    },
    {
      name: 'webhook-open',
      failing: () => (built.isShuttingDown() ? 'draining: answering in-flight reviews, then closing' : undefined),
    },
  ])
  return {
    app,
    registry,
    certificates: activeWatcher,
    readiness,
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
