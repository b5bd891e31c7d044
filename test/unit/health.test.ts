/**
 * The health plugin (src/health/plugin.ts): /metrics, /healthz and /readyz with its named
 * readiness checks, as the ops listener serves them.
 */
import Fastify from 'fastify'
import { Counter, Registry } from 'prom-client'
import t, { type Test } from 'tap'
import { healthPlugin, readinessReport, type ReadinessCheck } from '../../src/health/plugin.js'

async function opsApp(t: Test, readiness: readonly ReadinessCheck[], registry = new Registry()) {
  const app = Fastify({ logger: false })
  await app.register(healthPlugin, { registry, readiness })
  t.teardown(() => app.close())
  return app
}

t.test('/readyz: 200 when every check passes, 503 naming the failing ones; /healthz stays 200', async (t) => {
  let certificate = false
  let shuttingDown = false
  const app = await opsApp(t, [
    { name: 'webhook-certificate', failing: () => (certificate ? undefined : 'no certificate') },
    { name: 'not-shutting-down', failing: () => (shuttingDown ? 'shutting down' : undefined) },
  ])

  const first = await app.inject('/readyz')
  t.equal(first.statusCode, 503)
  t.same(first.json(), {
    status: 'not ready',
    failing: ['webhook-certificate'],
    checks: { 'webhook-certificate': 'no certificate', 'not-shutting-down': 'ok', 'listener-open': 'ok' },
  })
  t.equal((await app.inject('/healthz')).statusCode, 200, 'alive all the same')
  t.same((await app.inject('/healthz')).json(), { status: 'ok' })

  certificate = true
  const ready = await app.inject('/readyz')
  t.equal(ready.statusCode, 200)
  t.same(ready.json(), {
    status: 'ready',
    failing: [],
    checks: { 'webhook-certificate': 'ok', 'not-shutting-down': 'ok', 'listener-open': 'ok' },
  })

  shuttingDown = true
  const closing = await app.inject('/readyz')
  t.equal(closing.statusCode, 503)
  t.same(closing.json().failing, ['not-shutting-down'], 'checks are read on every request')
  t.equal((await app.inject('/healthz')).statusCode, 200, 'liveness checks nothing else')
})

t.test('/metrics serves the registry in its content type', async (t) => {
  const registry = new Registry()
  new Counter({ name: 'test_things_total', help: 'things', registers: [registry] }).inc(3)
  const app = await opsApp(t, [], registry)
  const res = await app.inject('/metrics')
  t.equal(res.statusCode, 200)
  t.equal(res.headers['content-type'], registry.contentType)
  t.match(res.body, /^test_things_total 3$/m)
})

t.test('a check that throws fails, with its error', async (t) => {
  const report = readinessReport([
    { name: 'fine', failing: () => undefined },
    {
      name: 'broken',
      failing: () => {
        throw new Error('boom')
      },
    },
  ])
  t.same(report, { ready: false, failing: ['broken'], checks: { fine: 'ok', broken: 'check failed: boom' } })
  t.same(readinessReport([]), { ready: true, failing: [], checks: {} }, 'no checks: ready')
})

t.test('a check name given twice is refused at registration', async (t) => {
  const app = Fastify({ logger: false })
  const same = { name: 'same', failing: () => undefined }
  await t.rejects(async () => {
    await app.register(healthPlugin, { registry: new Registry(), readiness: [same, same] })
  }, /readiness check "same" is registered twice/)
  await app.close()
})

t.test('not ready from the moment its listener starts closing, whatever return503OnClosing says', async (t) => {
  // return503OnClosing: false, as the webhook app has it: the plugin must not rely on
  // Fastify answering 503 for it while the listener closes.
  const app = Fastify({ logger: false, return503OnClosing: false })
  let seen: { status: number; failing: string[] } | undefined
  await app.register(healthPlugin, { registry: new Registry(), readiness: [] })
  // A probe arriving while the listener closes: a preClose hook of a plugin registered
  // after the health plugin runs after its hook, with the server still listening.
  await app.register(async (child) => {
    child.addHook('preClose', async () => {
      const res = await fetch(`http://127.0.0.1:${port}/readyz`)
      seen = { status: res.status, failing: ((await res.json()) as { failing: string[] }).failing }
    })
  })
  await app.listen({ host: '127.0.0.1', port: 0 })
  const port = (app.server.address() as { port: number }).port
  t.equal((await fetch(`http://127.0.0.1:${port}/readyz`)).status, 200, 'ready while open')
  await app.close()
  t.same(seen, { status: 503, failing: ['listener-open'] })
})
