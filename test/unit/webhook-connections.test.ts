/**
 * What idle connections may cost the real HTTPS webhook (startWebhookServer), with small
 * values so it takes seconds: an idle keep-alive connection is closed after the keep-alive
 * timeout, and a connection past webhook.maxConnections is closed as soon as it is
 * accepted (counted, warned once), while those already open keep being answered. The
 * memory the cap bounds is measured by dev/bench/idle-connections.ts, not here.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import tls from 'node:tls'
import { Registry } from 'prom-client'
import t from 'tap'
import { generateDevCertificates } from '../../dev/certs/devcerts.js'
import { CONFIG_DEFAULTS } from '../../src/config/schema.js'
import { SERVER_TIMEOUTS, startWebhookServer } from '../../src/webhook/server.js'
import { capturingLogger } from '../helpers/log-capture.js'
import { until } from '../helpers/until.js'

const dir = await mkdtemp(join(tmpdir(), 'crd-migrator-connections-'))
t.teardown(() => rm(dir, { recursive: true, force: true }))
const certs = await generateDevCertificates(dir)

const KEEP_ALIVE_MS = 1000
const MAX_CONNECTIONS = 3

const review = JSON.stringify({
  apiVersion: 'admission.k8s.io/v1',
  kind: 'AdmissionReview',
  request: {
    uid: 'connections-1',
    kind: { group: 'apiextensions.k8s.io', version: 'v1', kind: 'CustomResourceDefinition' },
    resource: { group: 'apiextensions.k8s.io', version: 'v1', resource: 'customresourcedefinitions' },
    name: 'widgets.example.com',
    operation: 'UPDATE',
    userInfo: { username: 'alice', groups: [] },
    oldObject: { metadata: { name: 'widgets.example.com' }, spec: {} },
    object: { metadata: { name: 'widgets.example.com' }, spec: {} },
  },
})

interface Held {
  socket: tls.TLSSocket
  closed: Promise<number>
  /** Sends a review on this connection; resolves with the status line. */
  ask(): Promise<string>
}

/** A TLS connection; rejects when the server closes it before the handshake completes. */
function connect(port: number): Promise<Held> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, ca: certs.caCertPem, servername: 'localhost' })
    let received = ''
    let waiting: ((statusLine: string) => void) | undefined
    socket.setEncoding('utf8')
    socket.on('data', (d: string) => {
      received += d
      const end = received.indexOf('\r\n\r\n')
      if (end < 0) return
      const length = Number(/content-length:\s*(\d+)/i.exec(received.slice(0, end))?.[1] ?? 0)
      if (received.length < end + 4 + length) return
      const statusLine = received.slice(0, received.indexOf('\r\n'))
      received = received.slice(end + 4 + length)
      waiting?.(statusLine)
    })
    const closed = new Promise<number>((r) => socket.once('close', () => r(performance.now())))
    socket.once('error', reject)
    socket.once('close', () => reject(new Error('closed before the TLS handshake completed')))
    socket.once('secureConnect', () => {
      socket.removeListener('error', reject)
      socket.on('error', () => {})
      resolve({
        socket,
        closed,
        ask: () =>
          new Promise((answered) => {
            waiting = answered
            socket.write(
              `POST /validate-crd HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(review)}\r\n\r\n${review}`,
            )
          }),
      })
    })
  })
}

t.test('the defaults: keep-alive just past the API server idle timeout (90 s), 1,000 connections', async (t) => {
  t.equal(SERVER_TIMEOUTS.keepAliveTimeoutMs, 95_000)
  t.equal(CONFIG_DEFAULTS.webhook.maxConnections, 1000)
})

t.test('an idle keep-alive connection is closed after the keep-alive timeout', async (t) => {
  const server = await startWebhookServer({
    certFile: certs.certFile,
    keyFile: certs.keyFile,
    host: '127.0.0.1',
    port: 0,
    logLevel: 'silent',
    timeouts: { keepAliveTimeoutMs: KEEP_ALIVE_MS },
  })
  t.teardown(() => server.close())
  const held = await connect(server.port)
  t.teardown(() => held.socket.destroy())
  t.equal(await held.ask(), 'HTTP/1.1 200 OK', 'a review is answered')
  const idleFrom = performance.now()
  t.equal(await held.ask(), 'HTTP/1.1 200 OK', 'and another on the same connection: it is kept alive')
  const closedAt = await held.closed
  const idle = closedAt - idleFrom
  // Node adds its keepAliveTimeoutBuffer (1 s) to the socket's timeout; the upper bound only says "closed, not held".
  t.ok(idle >= KEEP_ALIVE_MS - 50, `not closed before the timeout (${Math.round(idle)} ms idle)`)
  t.ok(idle < KEEP_ALIVE_MS + 20_000, `closed by the server after ${Math.round(idle)} ms idle`)
})

t.test('past maxConnections a connection is closed at once, counted and warned; those open are still answered', async (t) => {
  const registry = new Registry()
  const { logger, lines } = capturingLogger('info')
  const server = await startWebhookServer({
    certFile: certs.certFile,
    keyFile: certs.keyFile,
    host: '127.0.0.1',
    port: 0,
    logger,
    registry,
    maxConnections: MAX_CONNECTIONS,
  })
  t.teardown(() => server.close())
  t.equal(server.app.server.maxConnections, MAX_CONNECTIONS)
  const held: Held[] = []
  t.teardown(() => held.forEach((h) => h.socket.destroy()))
  for (let i = 0; i < MAX_CONNECTIONS; i++) {
    held.push(await connect(server.port))
    t.equal(await held[i]!.ask(), 'HTTP/1.1 200 OK', `connection ${i + 1} answered, then idle`)
  }
  await t.rejects(connect(server.port), 'one more is closed before its TLS handshake')
  await t.rejects(connect(server.port), 'and the next')
  t.match(await registry.metrics(), /^crd_migrator_webhook_connections_refused_total 2$/m, 'each refusal counted')
  const warnings = lines().filter((l) => l['msg']?.toString().startsWith('webhook connection refused'))
  t.equal(warnings.length, 1, 'warned once, not once per refusal')
  t.match(warnings[0], { level: 40, maxConnections: MAX_CONNECTIONS, remoteAddress: '127.0.0.1' })
  t.equal(await held[0]!.ask(), 'HTTP/1.1 200 OK', 'a connection already open is still answered')

  held.shift()!.socket.destroy()
  await until(
    'the server to count one connection less',
    10_000,
    () => new Promise<number>((r, j) => server.app.server.getConnections((err, n) => (err ? j(err) : r(n)))),
    (n) => n < MAX_CONNECTIONS,
  )
  held.push(await connect(server.port))
  t.equal(await held.at(-1)!.ask(), 'HTTP/1.1 200 OK', 'below the cap again, a new connection is served')
})
