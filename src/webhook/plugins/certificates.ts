/**
 * The HTTPS listener's serving certificate, kept current from its files (tls.ts). A missing or
 * unusable pair at start-up does not crash: we start not ready until one appears (optional
 * Secret, cert-manager renewing). Not ready shows on the pod and stalls a rollout, where serving
 * an expired pair would only fail every webhook call.
 */
import type { Server as HttpsServer } from 'node:https'
import type { FastifyPluginAsync } from 'fastify'
import type { ReadinessCheck } from '../../health/plugin.js'
import type { WebhookMetrics } from '../metrics.js'
import { CertificateWatcher, TLS_CONTEXT_OPTIONS, type CertificateWatcherOptions, type WatcherLogger } from '../tls.js'

export type ServingCertificatesOptions = Pick<CertificateWatcherOptions, 'certFile' | 'keyFile' | 'pollIntervalMs' | 'debounceMs'> & {
  logger: WatcherLogger
  metrics: WebhookMetrics
}

export async function loadServingCertificates(options: ServingCertificatesOptions) {
  const { metrics, ...watched } = options
  // The app's server, once the plugin is registered; the start-up load comes before it.
  let server: HttpsServer | undefined
  const watcher = new CertificateWatcher({
    ...watched,
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
    /** `webhook-certificate`: fails until a usable serving certificate is loaded (nothing is served without one). */
    readiness: Object.freeze<ReadinessCheck>({
      name: 'webhook-certificate',
      failing: () => (watcher.loaded ? undefined : 'no usable serving certificate loaded yet; see the log'),
    }),
    plugin,
  }
}
