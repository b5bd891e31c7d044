/**
 * The serving certificate of the HTTPS listener, kept current from its files (tls.ts:
 * CertificateWatcher). loadServingCertificates reads the pair once, before the server
 * exists, so the server starts with it; its plugin, registered on the app, applies every
 * later pair to the app's server, watches the files while the app runs and stops at close.
 *
 * The start-up load is a reload like any other: same checks, log line and metric. A
 * missing, half-written, expired or not yet valid pair does not crash: we start not
 * ready and the watcher picks a usable pair up when it appears (optional Secret volumes,
 * local dev, cert-manager renewing). An expired pair in particular is not served: the
 * API server refuses it anyway ("x509: certificate has expired"), so serving it would
 * answer nothing, while not ready shows the problem on the pod (0/1, a stalled rollout
 * that keeps the old pods) and in the log, instead of as failed webhook calls.
 */
import type { ServerOptions as HttpsServerOptions, Server as HttpsServer } from 'node:https'
import type { FastifyPluginAsync } from 'fastify'
import type { ReadinessCheck } from '../../health/plugin.js'
import type { WebhookMetrics } from '../metrics.js'
import { CertificateWatcher, TLS_CONTEXT_OPTIONS, type WatcherLogger } from '../tls.js'

export interface ServingCertificatesOptions {
  certFile: string
  keyFile: string
  logger: WatcherLogger
  metrics: WebhookMetrics
  /** Fallback re-read of the files; the watcher's default when absent. */
  pollIntervalMs?: number
  /** Quiet time after a directory event; the watcher's default when absent. */
  debounceMs?: number
}

export interface ServingCertificates {
  readonly watcher: CertificateWatcher
  /** The TLS options of the HTTPS server: the context options, and the pair if one was loaded. */
  readonly tlsOptions: Readonly<HttpsServerOptions>
  /** `webhook-certificate`: fails until a usable serving certificate is loaded (nothing is served without one). */
  readonly readiness: ReadinessCheck
  /** Registered on the HTTPS app: later pairs go to its server; watching starts with the app and stops at its close. */
  readonly plugin: FastifyPluginAsync
}

export async function loadServingCertificates(options: ServingCertificatesOptions): Promise<ServingCertificates> {
  const { metrics } = options
  // The app's server, once the plugin is registered; the start-up load comes before it.
  let server: HttpsServer | undefined
  const watcher = new CertificateWatcher({
    certFile: options.certFile,
    keyFile: options.keyFile,
    logger: options.logger,
    ...(options.pollIntervalMs !== undefined ? { pollIntervalMs: options.pollIntervalMs } : {}),
    ...(options.debounceMs !== undefined ? { debounceMs: options.debounceMs } : {}),
    onChange: (pair) => {
      // Applies to handshakes from now on; established connections keep their session.
      // The whole context is replaced, so it must carry the same ciphers and versions.
      server?.setSecureContext({ cert: pair.cert, key: pair.key, ...TLS_CONTEXT_OPTIONS })
      metrics.setCertificate(pair.info)
    },
    onReject: (reason) => metrics.countCertificateRejected(reason),
  })
  await watcher.reload()
  const initial = watcher.current

  const plugin: FastifyPluginAsync = async function certificatesPlugin(app) {
    server = app.server as HttpsServer
    watcher.start()
    app.addHook('preClose', async () => {
      watcher.stop()
    })
  }
  return {
    watcher,
    tlsOptions: { ...TLS_CONTEXT_OPTIONS, ...(initial ? { cert: initial.cert, key: initial.key } : {}) },
    readiness: Object.freeze({
      name: 'webhook-certificate',
      failing: () => (watcher.loaded ? undefined : 'no usable serving certificate loaded yet; see the log'),
    }),
    plugin,
  }
}
