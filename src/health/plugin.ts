/**
 * /metrics, /healthz and /readyz as one Fastify plugin, on the plain-HTTP ops listener only.
 * /healthz checks nothing but the event loop on purpose: a restart fixes none of our conditions
 * (and mid-shutdown would cut the unfreeze short). /readyz runs named checks, each owned by its
 * component, and fails "listener-open" once closing, so no keep-alive probe reads "ready" then.
 */
import type { FastifyPluginAsync } from 'fastify'
import type { Registry } from 'prom-client'
import { errorMessage } from '../errors.js'

const HEALTH_PATHS = Object.freeze({ metrics: '/metrics', liveness: '/healthz', readiness: '/readyz' })

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

interface HealthPluginOptions {
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
