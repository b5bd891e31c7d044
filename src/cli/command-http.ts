import type { Logger } from 'pino'
import type { Config } from '../config/schema.js'
import { kubeHttp } from '../kube/client.js'
import type { KubeHttp, KubeHttpOptions } from '../kube/http.js'
import { warningPrinter } from '../kube/warnings.js'
import { userAgent } from '../version.js'
import type { ClientFlags } from './command-kit.js'

/**
 * A command's client, from its config and kubectl's client flags, logging where the command logs.
 * The API server's `Warning:` headers go to stderr as kubectl prints them, once per text.
 */
export function commandHttp(
  config: Config,
  command: string,
  logger: Logger | undefined,
  client: ClientFlags = {},
  options: Omit<KubeHttpOptions, 'userAgent' | 'connectAttempts' | 'logger'> = {},
): KubeHttp {
  return kubeHttp(config.kubeconfig, {
    context: config.context,
    userAgent: userAgent(command),
    connectAttempts: config.connectAttempts,
    ...client,
    onWarning: warningPrinter(process.stderr),
    ...options,
    ...(logger ? { logger } : {}),
  })
}

/** What `use` makes of a client, closed afterwards whatever happens. */
export async function closing<T>(http: KubeHttp, use: (http: KubeHttp) => Promise<T>): Promise<T> {
  try {
    return await use(http)
  } finally {
    http.close()
  }
}
