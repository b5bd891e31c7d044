/**
 * The webhook's HTTP surface: POST /validate-crd (and /validate-crd/freeze-allowed, the same
 * review from a requester RBAC allows to freeze the CRD) and nothing else. buildWebhookApp gives
 * a plain Fastify app (tests drive it with app.inject, no TLS); startWebhookServer serves
 * the same app over HTTPS with hot certificate reload and a graceful close.
 *
 * The app is Fastify plugins, each owning its routes, hooks and cleanup (plugins/):
 * requests.ts (JSON bodies within limits; 415, 413, 400, 404 answers), drain.ts (close
 * without failing a review; the `webhook-open` readiness check), validate.ts (POST
 * /validate-crd and /validate-crd/freeze-allowed), and on HTTPS certificates.ts (the serving pair, reloaded; the
 * `webhook-certificate` check).
 *
 * Health and metrics are not served here: the webhook's metrics go to the Registry it is
 * given, and its readiness (a certificate loaded, not draining) is a list of checks
 * (RunningWebhookServer.readiness) that the ops listener's /readyz reports
 * (health/plugin.ts, cli/serve.ts). Anyone who can reach the pod can reach this port,
 * so it answers reviews and nothing else.
 *
 * Which connections are kept when they run short (per-peer cap, eviction of the oldest
 * idle one, slots for the API server, the first-review deadline) is connection-policy.ts's
 * decision and connections.ts's I/O; their `webhook-connections` check joins readiness.
 *
 * Defaults (body limit, host, port, timeouts, the connection caps, the policy) are the
 * config schema's (config/schema.ts, which says why each timeout and the cap are what they
 * are). All timeouts can be lowered through `timeouts` (tests do, to check them quickly).
 */
import type { ServerOptions as HttpsServerOptions } from 'node:https'
import type { AddressInfo } from 'node:net'
import Fastify, { LogController, type FastifyInstance } from 'fastify'
import type { Logger } from 'pino'
import { createLogger } from '../log.js'
import { Registry } from 'prom-client'
import { CONFIG_DEFAULTS, type Config } from '../config/schema.js'
import type { ReadinessCheck } from '../health/plugin.js'
import { DEFAULT_ADMISSION_POLICY, type AdmissionPolicy } from './admission.js'
import { createWebhookMetrics, type WebhookMetrics } from './metrics.js'
import { RepeatSampler } from './repeat-sampler.js'
import type { CertificateWatcher } from './tls.js'
import type { ConnectionCaps } from './connection-policy.js'
import { ConnectionGuard } from './connections.js'
import { loadServingCertificates } from './plugins/certificates.js'
import { Drain, drainPlugin } from './plugins/drain.js'
import { requestsPlugin } from './plugins/requests.js'
import { validatePlugin } from './plugins/validate.js'

/** Largest body of POST /validate-crd by default: webhook.bodyLimitBytes of the config schema. */
export const DEFAULT_BODY_LIMIT_BYTES = CONFIG_DEFAULTS.webhook.bodyLimitBytes

export interface ServerTimeouts {
  requestTimeoutMs: number
  headersTimeoutMs: number
  connectionTimeoutMs: number
  keepAliveTimeoutMs: number
  connectionsCheckingIntervalMs: number
  tlsHandshakeTimeoutMs: number
  /** A connection with no valid AdmissionReview this long after it was accepted is closed. */
  firstReviewMs: number
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
    firstReviewMs: ms(timeouts.firstReviewSeconds),
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
  drain: Drain
}

export function buildWebhookApp(options: WebhookAppOptions = {}): FastifyInstance {
  return createApp(options).app
}

/**
 * The listener's options (limits, timeouts, logging), then its plugins, in this order:
 * which requests reach a route (requests.ts: 415, 413, 400, 404), the drain at close
 * (drain.ts), the admission route (validate.ts). The first two apply to the whole app, so
 * they come before the route that inherits them.
 */
function createApp(options: WebhookAppOptions, https?: HttpsServerOptions, webhookMetrics?: WebhookMetrics): BuiltApp {
  const registry = options.registry ?? new Registry()
  const metrics = webhookMetrics ?? createWebhookMetrics(registry)
  const bodyLimit = options.bodyLimitBytes ?? DEFAULT_BODY_LIMIT_BYTES
  const logger = options.logger ?? createLogger({ level: options.logLevel ?? CONFIG_DEFAULTS.logLevel })
  const timeouts: ServerTimeouts = { ...SERVER_TIMEOUTS, ...options.timeouts }

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

  const drain = new Drain()
  void app.register(requestsPlugin, { bodyLimit, metrics })
  void app.register(drainPlugin, { drain })
  void app.register(validatePlugin, {
    policy: { ...DEFAULT_ADMISSION_POLICY, ...options.policy },
    metrics,
    logger,
    repeats: options.repeatSampler ?? new RepeatSampler(),
  })
  return { app, drain }
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
   * Caps and reserved addresses of the connection policy (connection-policy.ts). Defaults:
   * the config's webhook.maxConnections, maxConnectionsPerPeer, reservedConnections,
   * apiServerAddresses.
   */
  maxConnections?: number
  maxConnectionsPerPeer?: number
  reservedConnections?: number
  apiServerAddresses?: readonly string[]
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
  /** The connection caps in force (connection-policy.ts; reserved is 0 without apiServerAddresses). */
  connectionCaps: Readonly<ConnectionCaps>
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

  const certificates = await loadServingCertificates({
    certFile: options.certFile,
    keyFile: options.keyFile,
    logger,
    metrics,
    ...(options.certPollIntervalMs !== undefined ? { pollIntervalMs: options.certPollIntervalMs } : {}),
    ...(options.certDebounceMs !== undefined ? { debounceMs: options.certDebounceMs } : {}),
  })
  const timeouts: ServerTimeouts = { ...SERVER_TIMEOUTS, ...options.timeouts }
  const https: HttpsServerOptions = {
    ...certificates.tlsOptions,
    // How often Node enforces requestTimeout/headersTimeout (default 30 s is too coarse).
    connectionsCheckingInterval: timeouts.connectionsCheckingIntervalMs,
    handshakeTimeout: timeouts.tlsHandshakeTimeoutMs,
  }
  const { app, drain } = createApp({ ...options, logger, registry }, https, metrics)
  void app.register(certificates.plugin)
  const defaults = CONFIG_DEFAULTS.webhook
  const guard = new ConnectionGuard(app.server, {
    caps: {
      maxConnections: options.maxConnections ?? defaults.maxConnections,
      maxPerPeer: Math.min(
        options.maxConnectionsPerPeer ?? defaults.maxConnectionsPerPeer,
        options.maxConnections ?? defaults.maxConnections,
      ),
      reserved: options.reservedConnections ?? defaults.reservedConnections,
    },
    apiServerAddresses: options.apiServerAddresses ?? defaults.apiServerAddresses,
    firstReviewMs: timeouts.firstReviewMs,
    metrics,
    logger,
  })
  app.addHook('onClose', async () => guard.stop())

  try {
    await app.listen({ host, port: options.port ?? CONFIG_DEFAULTS.webhook.port })
  } catch (err) {
    await app.close()
    throw err
  }
  const address = app.server.address() as AddressInfo
  const urlHost = address.family === 'IPv6' ? `[${address.address}]` : address.address
  logger.info({ host: address.address, port: address.port, certificateLoaded: certificates.watcher.loaded }, 'webhook listening')

  let closing: Promise<void> | undefined
  return {
    app,
    registry,
    certificates: certificates.watcher,
    readiness: Object.freeze([certificates.readiness, drain.readiness, guard.readiness]),
    connectionCaps: guard.caps,
    host: address.address,
    port: address.port,
    url: `https://${urlHost}:${address.port}`,
    close() {
      closing ??= (async () => {
        drain.begin()
        if (options.shutdownDelayMs) await new Promise((r) => setTimeout(r, options.shutdownDelayMs))
        // Closing stops the certificate watcher (its plugin) and waits for in-flight reviews.
        await app.close()
        logger.info('webhook stopped')
      })()
      return closing
    },
  }
}
