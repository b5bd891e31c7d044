/**
 * The process's health and metrics surface, as one Fastify plugin, in the shape of
 * @fastify/under-pressure: the plugin owns its routes and what they need at close. It is
 * registered on one listener only, the plain-HTTP ops listener (`metrics.port`, see
 * cli/serve/run-serve.ts); the HTTPS webhook listener serves POST /validate-crd and nothing else.
 *
 * - GET /metrics: the prom-client Registry every component registers into (webhook,
 *   migrator, Node's process metrics).
 * - GET /healthz: liveness. 200 whenever the event loop answers. It checks nothing else on
 *   purpose: a failing liveness probe restarts the container, and no condition here is
 *   fixed by a restart (a missing certificate is not; a restart mid-shutdown would cut
 *   the unfreeze short).
 * - GET /readyz: readiness, one notion for the whole process: a list of named checks
 *   (ReadinessCheck), each owned by the component it describes (the webhook server: its
 *   certificate and its drain; serve: shutdown). 200 when every check passes, 503 naming
 *   those that fail and why; the body lists every check either way.
 *
 * At close, the plugin answers /readyz 503 ("listener-open") from the moment its listener
 * starts closing, whatever the app's own return503OnClosing says, so a probe on a
 * keep-alive connection never reads "ready" from a listener on its way out.
 */
import type { FastifyPluginAsync } from 'fastify'
import type { Registry } from 'prom-client'
import { errorMessage } from '../errors.js'

export const HEALTH_PATHS = Object.freeze({ metrics: '/metrics', liveness: '/healthz', readiness: '/readyz' })

export interface ReadinessCheck {
  /** Short kebab-case name, shown by /readyz, e.g. `webhook-certificate`. */
  readonly name: string
  /** undefined when the check passes; otherwise why not, in a few words. */
  readonly failing: () => string | undefined
}

export interface ReadinessReport {
  ready: boolean
  /** Names of the failing checks, in the order given. */
  failing: string[]
  /** Every check by name: `ok`, or why not. */
  checks: Record<string, string>
}

/** Runs every check once. A check that throws fails, with its error as the reason. */
export function readinessReport(checks: Iterable<ReadinessCheck>): ReadinessReport {
  const report: ReadinessReport = { ready: true, failing: [], checks: {} }
  for (const check of checks) {
    let why: string | undefined
    try {
      why = check.failing()
    } catch (err) {
      why = `check failed: ${errorMessage(err)}`
    }
    report.checks[check.name] = why ?? 'ok'
    if (why !== undefined) {
      report.ready = false
      report.failing.push(check.name)
    }
  }
  return report
}

export interface HealthPluginOptions {
  /** The process's one Registry, served on /metrics. */
  registry: Registry
  /** What /readyz checks, every time it is asked. Names must be unique. */
  readiness: readonly ReadinessCheck[]
}

export const healthPlugin: FastifyPluginAsync<HealthPluginOptions> = async (app, options) => {
  const { registry } = options
  const names = options.readiness.map((c) => c.name)
  const twice = names.find((n, i) => names.indexOf(n) !== i)
  if (twice !== undefined) throw new Error(`readiness check ${JSON.stringify(twice)} is registered twice`)

  let closing = false
  const checks: readonly ReadinessCheck[] = [
    ...options.readiness,
    { name: 'listener-open', failing: () => (closing ? 'this listener is closing' : undefined) },
  ]
  app.addHook('preClose', async () => {
    closing = true
  })

  app.get(HEALTH_PATHS.metrics, async (_request, reply) => {
    const body = await registry.metrics()
    return reply.type(registry.contentType).send(body)
  })

  app.get(HEALTH_PATHS.liveness, async () => ({ status: 'ok' }))

  app.get(HEALTH_PATHS.readiness, async (_request, reply) => {
    const report = readinessReport(checks)
    return reply
      .code(report.ready ? 200 : 503)
      .send({ status: report.ready ? 'ready' : 'not ready', failing: report.failing, checks: report.checks })
  })
}
