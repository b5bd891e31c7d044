import os from 'node:os'
import Fastify, { type FastifyInstance } from 'fastify'
import type { Logger } from 'pino'
import { collectDefaultMetrics, Registry } from 'prom-client'
import type { Config } from '../../config/schema.js'
import { LeaderElector } from '../../controller/leader.js'
import { MigrationController, type ControllerDeps } from '../../controller/controller.js'
import { RunLock } from '../../controller/run-lock.js'
import { KsvmMigrationController } from '../../controller/ksvm-controller.js'
import { KsvmTrigger } from '../../controller/ksvm-trigger.js'
import { kubeHttp } from '../../kube/client.js'
import { userAgent } from '../../version.js'
import { KubeEventRecorder } from '../../kube/events.js'
import { loadCheckpointSeal } from '../../migrator/freeze/checkpoint-seal.js'
import { HandOff } from '../../migrator/freeze/hand-off.js'
import { createMigratorMetrics } from '../../migrator/metrics.js'
import type { MigrationResult } from '../../migrator/migrate.js'
import { createProcessMetrics, type ProcessMetrics } from '../../health/process-metrics.js'
import { healthPlugin, readinessReport, type ReadinessCheck, type ReadinessReport } from '../../health/plugin.js'
import { serverTimeouts, startWebhookServer, type RunningWebhookServer } from '../../webhook/server.js'

export interface ServeHandle {
  webhook: RunningWebhookServer | undefined
  /** The ops listener (health/plugin.ts) on metrics.host:metrics.port; undefined with metrics.port 0. */
  opsServer: FastifyInstance | undefined
  registry: Registry
  /** What /readyz reports, also without an ops listener. */
  readiness(): ReadinessReport
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

/** `serve`: every replica serves the webhook; the one holding the Lease also runs the migration controller. */
export async function serve(config: Config, logger: Logger, options: ServeOptions = {}): Promise<ServeHandle> {
  const registry = new Registry()
  if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: registry })
  const processMetrics = createProcessMetrics(registry)
  const identity = options.identity ?? process.env.POD_NAME ?? os.hostname()

  const webhook = config.webhook.enabled ? await startWebhook(config, registry, logger) : undefined

  const stop = new AbortController()
  // Started before anything listens: a state key file that cannot be read fails serve itself.
  const stopped = config.migrator.enabled
    ? (await startMigrator(config, logger, registry, identity, processMetrics, stop.signal, options)).stopped
    : Promise.resolve()

  // /readyz: the webhook's checks and ours. `not-shutting-down` fails only once the freeze is handed
  // off: that is a CRD update the API server may send to this webhook, so until then we keep serving.
  let shuttingDown = false
  const readiness: ReadinessCheck[] = [
    ...(webhook?.readiness ?? []),
    { name: 'not-shutting-down', failing: () => (shuttingDown ? 'shutting down; the migrator has handed its freeze off' : undefined) },
  ]

  const opsServer = await startOps(config, registry, readiness, logger)

  let closing: Promise<void> | undefined
  return {
    webhook,
    opsServer,
    registry,
    readiness: () => readinessReport(readiness),
    stopped,
    close() {
      closing ??= (async () => {
        // Runs stop writing and hand their freezes off to the next leader, never lifting them
        // (freeze/hand-off.ts); the Lease is released after, so the next leader resumes at once.
        stop.abort(new HandOff('shutting down'))
        const stopping = Date.now()
        await stopped
        logger.info({ ms: Date.now() - stopping }, 'migrator stopped; freezes handed off, Lease released')
        shuttingDown = true
        await webhook?.close()
        // Last, so the probes read "not ready" while the webhook drains.
        await opsServer?.close()
      })()
      return closing
    },
  }
}

function startWebhook(config: Config, registry: Registry, logger: Logger): Promise<RunningWebhookServer> {
  // Every other setting of config.webhook is the server's own: files, address, body limit, connection caps.
  const { enabled: _enabled, timeouts, ...listener } = config.webhook
  return startWebhookServer({
    ...listener,
    timeouts: serverTimeouts(timeouts),
    registry,
    logger: logger.child({ component: 'webhook' }),
    shutdownDelayMs: process.env.KUBERNETES_SERVICE_HOST ? 5000 : 0,
    policy: { migratingAnnotation: config.annotations.migrating, ...config.identities },
  })
}

/**
 * The migration controllers, on the Lease holder (this replica without leader election), until
 * `stop` aborts; `stopped` settles once they stopped and handed their freezes off.
 */
async function startMigrator(
  config: Config,
  logger: Logger,
  registry: Registry,
  identity: string,
  processMetrics: ProcessMetrics,
  stop: AbortSignal,
  options: ServeOptions,
): Promise<{ stopped: Promise<void> }> {
  const http = kubeHttp(config.kubeconfig, {
    context: config.context,
    maxSockets: Math.max(config.migrator.concurrency, 4) * 2,
    userAgent: userAgent('serve'),
    connectAttempts: config.connectAttempts,
    logger,
  })
  const log = logger.child({ component: 'migrator' })
  const shared = {
    http,
    config,
    owner: identity,
    lock: new RunLock(),
    checkpointSeal: await loadCheckpointSeal(config.migrator.stateKeyFile, log, { strict: config.migrator.strictStateKeyFile }),
    metrics: createMigratorMetrics(registry),
    events: new KubeEventRecorder(http, 'crd-migrator', identity, (err) => log.warn({ err }, 'could not record an Event')),
  }
  const crdController = new MigrationController({ ...shared, logger: log, onResult: options.onResult, onProgress: options.onProgress })
  const svmController = config.migrator.storageVersionMigrations
    ? new KsvmMigrationController({ ...shared, logger: logger.child({ component: 'storage-version-migrations' }) })
    : undefined
  const trigger = config.migrator.ksvmTrigger.enabled
    ? new KsvmTrigger({ http, logger: logger.child({ component: 'ksvm-trigger' }), pollSeconds: config.migrator.ksvmTrigger.pollSeconds })
    : undefined
  if (trigger && !svmController)
    log.info('ksvmTrigger is on and storageVersionMigrations off: the StorageVersionMigrations it creates are left to another migrator')
  // One leader term's controllers: CRDs, StorageVersionMigrations, and the trigger creating those.
  const runControllers = async (signal: AbortSignal) => {
    await Promise.all([crdController.run(signal), svmController?.run(signal), trigger?.run(signal)])
  }
  let stopped: Promise<void>
  if (config.leaderElection.enabled) {
    const elector = new LeaderElector(
      http,
      {
        ...config.leaderElection,
        namespace: config.leaderElection.namespace ?? process.env.POD_NAMESPACE ?? 'default',
        name: config.leaderElection.leaseName,
        identity,
      },
      log,
      (leading) => processMetrics.setLeader(leading),
    )
    // Losing the lease ends this term; campaign again until shutdown.
    stopped = (async () => {
      while (!stop.aborted) await elector.run(stop, runControllers)
    })()
  } else {
    processMetrics.setLeader(true)
    stopped = runControllers(stop).finally(() => processMetrics.setLeader(false))
  }
  return { stopped: stopped.catch((err) => log.error({ err }, 'migration controller crashed')).finally(() => http.close()) }
}

/** The ops listener: /metrics, /healthz and /readyz. */
async function startOps(
  config: Config,
  registry: Registry,
  readiness: ReadinessCheck[],
  logger: Logger,
): Promise<FastifyInstance | undefined> {
  // metrics.port 0 means "off" (tests, several local processes): the webhook port answers reviews
  // only, and a free port would hide the probes at an address nobody knows. The chart refuses 0.
  if (config.metrics.port === 0) {
    logger.info('metrics.port is 0: no /metrics, /healthz or /readyz is served')
    return undefined
  }
  const opsServer = Fastify({ logger: false })
  await opsServer.register(healthPlugin, { registry, readiness })
  await opsServer.listen({ host: config.metrics.host, port: config.metrics.port })
  return opsServer
}
