import os from 'node:os'
import Fastify, { type FastifyInstance } from 'fastify'
import type { Logger } from 'pino'
import { collectDefaultMetrics, Registry } from 'prom-client'
import type { Config } from '../config/schema.js'
import { LeaderElector } from '../controller/leader.js'
import { MigrationController, type ControllerDeps } from '../controller/controller.js'
import { kubeHttp } from '../kube/client.js'
import { KubeEventRecorder } from '../kube/events.js'
import { loadCheckpointSeal } from '../migrator/checkpoint-seal.js'
import { MigratorMetrics } from '../migrator/metrics.js'
import type { MigrationResult } from '../migrator/migrate.js'
import { startWebhookServer, type RunningWebhookServer } from '../webhook/server.js'

export interface ServeHandle {
  webhook: RunningWebhookServer | undefined
  /** Plain-HTTP /metrics, /healthz, /readyz. */
  metricsServer: FastifyInstance | undefined
  registry: Registry
  /** Resolves when the controller loop has ended. */
  stopped: Promise<void>
  close(): Promise<void>
}

export interface ServeOptions {
  identity?: string
  onResult?: (result: MigrationResult) => void
  onProgress?: ControllerDeps['onProgress']
  /** Process-wide default metrics (event loop, heap); off in tests that start several. */
  defaultMetrics?: boolean
}

/**
 * `crd-migrator serve`: every replica serves the webhook; the one holding the Lease also
 * runs the migration controller.
 */
export async function serve(config: Config, logger: Logger, options: ServeOptions = {}): Promise<ServeHandle> {
  const registry = new Registry()
  if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: registry })
  const identity = options.identity ?? process.env.POD_NAME ?? os.hostname()

  let webhook: RunningWebhookServer | undefined
  if (config.webhook.enabled) {
    webhook = await startWebhookServer({
      certFile: config.webhook.certFile,
      keyFile: config.webhook.keyFile,
      host: config.webhook.host,
      port: config.webhook.port,
      bodyLimitBytes: config.webhook.bodyLimitBytes,
      registry,
      logger: logger.child({ component: 'webhook' }),
      shutdownDelayMs: process.env.KUBERNETES_SERVICE_HOST ? 5000 : 0,
      policy: {
        migratingAnnotation: config.annotations.migrating,
        migratorUsers: config.identities.migratorUsers,
        migratorGroups: config.identities.migratorGroups,
        breakGlassGroups: config.identities.breakGlassGroups,
      },
    })
  }

  const stop = new AbortController()
  let stopped: Promise<void> = Promise.resolve()
  if (config.migrator.enabled) {
    const http = kubeHttp(config.kubeconfig, { maxSockets: Math.max(config.migrator.concurrency, 4) * 2 })
    const log = logger.child({ component: 'migrator' })
    const controller = new MigrationController({
      http,
      config,
      logger: log,
      owner: identity,
      checkpointSeal: await loadCheckpointSeal(config.migrator.stateKeyFile, log),
      metrics: new MigratorMetrics(registry),
      events: new KubeEventRecorder(http, 'crd-migrator', identity, err => log.warn({ err: String(err) }, 'could not record an Event')),
      ...(options.onResult ? { onResult: options.onResult } : {}),
      ...(options.onProgress ? { onProgress: options.onProgress } : {}),
    })
    if (config.leaderElection.enabled) {
      const elector = new LeaderElector(http, {
        namespace: config.leaderElection.namespace ?? process.env.POD_NAMESPACE ?? 'default',
        name: config.leaderElection.leaseName,
        identity,
        leaseDurationSeconds: config.leaderElection.leaseDurationSeconds,
        renewDeadlineSeconds: config.leaderElection.renewDeadlineSeconds,
        retryPeriodSeconds: config.leaderElection.retryPeriodSeconds,
      }, log)
      // Losing the lease ends this term; campaign again until shutdown.
      stopped = (async () => {
        while (!stop.signal.aborted) await elector.run(stop.signal, signal => controller.run(signal))
      })()
    } else {
      stopped = controller.run(stop.signal)
    }
    stopped = stopped.catch(err => log.error({ err }, 'migration controller crashed')).finally(() => http.close())
  }

  // Stays false until the controller has unfrozen its CRD: lifting the freeze is itself a
  // CRD update the API server sends to this webhook, so we must keep receiving traffic.
  let webhookClosing = false
  let metricsServer: FastifyInstance | undefined
  if (config.metrics.port > 0) {
    metricsServer = Fastify({ logger: false })
    metricsServer.get('/metrics', async (_req, reply) => reply.type(registry.contentType).send(await registry.metrics()))
    metricsServer.get('/healthz', async () => ({ status: 'ok' }))
    metricsServer.get('/readyz', async (_req, reply) => {
      const ready = !webhookClosing && (webhook ? webhook.certificates.loaded : true)
      return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not ready' })
    })
    await metricsServer.listen({ host: config.metrics.host, port: config.metrics.port })
  }

  let closing: Promise<void> | undefined
  return {
    webhook,
    metricsServer,
    registry,
    stopped,
    close() {
      closing ??= (async () => {
        stop.abort(new Error('shutting down'))
        // The controller unfreezes the CRD it is migrating before it returns.
        await stopped
        webhookClosing = true
        await webhook?.close()
        await metricsServer?.close()
      })()
      return closing
    },
  }
}
