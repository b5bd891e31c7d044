import type { Logger } from 'pino'
import type { Config } from '../config/schema.js'
import { kubeHttp } from '../kube/client.js'
import type { KubeHttp } from '../kube/http.js'
import { userAgent } from '../version.js'

/**
 * The client of a command that reads (status, check, plan): the kubeconfig and context of
 * the configuration, its --connect-attempts, and retries logged where the command logs.
 */
export function commandHttp(config: Config, command: string, logger: Logger | undefined, maxSockets?: number): KubeHttp {
  return kubeHttp(config.kubeconfig, {
    context: config.context,
    // `plan --measure` writes (dry run) at the migrator's concurrency, and needs its sockets.
    ...(maxSockets ? { maxSockets } : {}),
    userAgent: userAgent(command),
    connectAttempts: config.connectAttempts,
    ...(logger ? { logger } : {}),
  })
}
