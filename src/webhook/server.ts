/**
 * The webhook's HTTP surface: POST /validate-crd (and /validate-crd/freeze-allowed) and nothing
 * else, since anyone reaching the pod reaches this port; metrics and /readyz are the ops
 * listener's (health/plugin.ts). buildWebhookApp is the plain app (tests inject into it);
 * startWebhookServer serves it over HTTPS. Defaults and why: config/schema.ts.
 */
import type { ServerOptions as HttpsServerOptions } from 'node:https'
import type { AddressInfo } from 'node:net'
import Fastify, { LogController, type FastifyInstance } from 'fastify'
import type { Logger } from 'pino'
import { createLogger } from '../log.js'
import { Registry } from 'prom-client'
import { CONFIG_DEFAULTS, type Config } from '../config/schema.js'
import { DEFAULT_ADMISSION_POLICY, type AdmissionPolicy } from './admission.js'
import { createWebhookMetrics, type WebhookMetrics } from './metrics.js'
import { RepeatSampler } from './repeat-sampler.js'
import { ConnectionGuard } from './connections.js'
import { loadServingCertificates } from './plugins/certificates.js'
import { Drain, drainPlugin } from './plugins/drain.js'
import { requestsPlugin } from './plugins/requests.js'
import { validatePlugin } from './plugins/validate.js'

export const DEFAULT_BODY_LIMIT_BYTES = CONFIG_DEFAULTS.webhook.bodyLimitBytes

export type ServerTimeouts = ReturnType<typeof serverTimeouts>

export function serverTimeouts(timeouts: Config['webhook']['timeouts']) {
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

export const SERVER_TIMEOUTS: Readonly<ServerTimeouts> = Object.freeze(serverTimeouts(CONFIG_DEFAULTS.webhook.timeouts))

export interface WebhookAppOptions {
  policy?: Partial<AdmissionPolicy>
  /** Served by the ops listener's /metrics, not here. Default: a fresh one. */
  registry?: Registry
  logger?: Logger
  logLevel?: string
  bodyLimitBytes?: number
  timeouts?: Partial<ServerTimeouts>
  /** Which repeated review lines are left out of the log (tests pass one with a short window). */
  repeatSampler?: RepeatSampler
}

export function buildWebhookApp(options: WebhookAppOptions = {}): FastifyInstance {
  return createApp(options).app
}

/** Plugins in order: requests.ts and drain.ts apply to the whole app, so they come before the route (validate.ts) that inherits them. */
function createApp(
  options: WebhookAppOptions,
  https?: HttpsServerOptions,
  webhookMetrics?: WebhookMetrics,
): { app: FastifyInstance; drain: Drain } {
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

/** The settings of config.webhook (the certificate files required, the others defaulting to the config's), and: */
export interface StartWebhookServerOptions
  extends
    WebhookAppOptions,
    Pick<Config['webhook'], 'certFile' | 'keyFile'>,
    Partial<Omit<Config['webhook'], 'enabled' | 'timeouts' | 'certFile' | 'keyFile'>> {
  /** Fallback re-read of the certificate files. Default 30 s. */
  certPollIntervalMs?: number
  /** Quiet time after a certificate directory event. Default 200 ms. */
  certDebounceMs?: number
  /** Serving kept after `webhook-open` fails, so endpoints stop sending connections first. Default 0; in a cluster ~5 s. */
  shutdownDelayMs?: number
}

export type RunningWebhookServer = Awaited<ReturnType<typeof startWebhookServer>>

export async function startWebhookServer(options: StartWebhookServerOptions) {
  const host = options.host ?? CONFIG_DEFAULTS.webhook.host
  const logger = options.logger ?? createLogger({ level: options.logLevel ?? CONFIG_DEFAULTS.logLevel })
  const registry = options.registry ?? new Registry()
  const metrics = createWebhookMetrics(registry)

  const certificates = await loadServingCertificates({
    certFile: options.certFile,
    keyFile: options.keyFile,
    logger,
    metrics,
    pollIntervalMs: options.certPollIntervalMs,
    debounceMs: options.certDebounceMs,
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
  const maxConnections = options.maxConnections ?? defaults.maxConnections
  const guard = new ConnectionGuard(app.server, {
    caps: {
      maxConnections,
      maxPerPeer: Math.min(options.maxConnectionsPerPeer ?? defaults.maxConnectionsPerPeer, maxConnections),
      reserved: options.reservedConnections ?? defaults.reservedConnections,
    },
    apiServerAddresses: options.apiServerAddresses ?? defaults.apiServerAddresses,
    firstReviewMs: timeouts.firstReviewMs,
    metrics,
    logger,
  })
  app.addHook('onClose', async () => guard.stop())

  try {
    await app.listen({ host, port: options.port ?? defaults.port })
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
    /** The webhook's part of /readyz: `webhook-certificate` (none loaded yet), `webhook-open` (closing), `webhook-connections`. */
    readiness: Object.freeze([certificates.readiness, drain.readiness, guard.readiness]),
    /** The connection caps in force (connection-policy.ts; reserved is 0 without apiServerAddresses). */
    connectionCaps: guard.caps,
    host: address.address,
    port: address.port,
    /** e.g. https://127.0.0.1:9443 */
    url: `https://${urlHost}:${address.port}`,
    /** Fail `webhook-open`, wait shutdownDelayMs, stop accepting, finish in-flight reviews. */
    close(): Promise<void> {
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
