/**
 * What idle connections may cost the real HTTPS webhook (startWebhookServer), with small
 * values so it takes seconds: an idle keep-alive connection is closed after the keep-alive
 * timeout; at a cap (webhook.maxConnections, maxConnectionsPerPeer) the oldest idle
 * connection is closed for the new one, and with every slot busy the new one is refused
 * (counted, warned once, readiness fails); the API server's addresses get reserved slots;
 * a connection with no valid review within firstReviewMs is closed. The
 * memory the cap bounds is measured by dev/bench/idle-connections.ts, not here.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import net from 'node:net'
import tls from 'node:tls'
import { Registry } from 'prom-client'
import t from 'tap'
import { generateDevCertificates } from '../../dev/certs/devcerts.js'
import { CONFIG_DEFAULTS } from '../../src/config/schema.js'
import { SLOT_WAIT_MS } from '../../src/webhook/connection-policy.js'
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
  /** Sends headers and half a body, and no more: a request in flight. */
  start(): void
  /** Sends the rest of the body start() began; resolves with the status line. */
  finish(): Promise<string>
}

/** A TLS connection (from `from`, a loopback address); rejects when the server closes it before the handshake completes. */
function connect(port: number, from = '127.0.0.1'): Promise<Held> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({
      socket: net.connect({ host: '127.0.0.1', port, localAddress: from }),
      ca: certs.caCertPem,
      servername: 'localhost',
    })
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
        start: () =>
          socket.write(
            `POST /validate-crd HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(review)}\r\n\r\n{`,
          ),
        finish: () =>
          new Promise((answered) => {
            waiting = answered
            socket.write(review.slice(1))
          }),
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

t.test(
  'the defaults: keep-alive just past the API server idle timeout (90 s), 1,000 connections, 100 per peer, 5 s to the first review',
  async (t) => {
    t.equal(SERVER_TIMEOUTS.keepAliveTimeoutMs, 95_000)
    t.equal(SERVER_TIMEOUTS.firstReviewMs, 5000)
    t.equal(CONFIG_DEFAULTS.webhook.maxConnections, 1000)
    t.equal(CONFIG_DEFAULTS.webhook.maxConnectionsPerPeer, 100)
    t.equal(CONFIG_DEFAULTS.webhook.reservedConnections, 100)
    t.same(CONFIG_DEFAULTS.webhook.apiServerAddresses, [])
  },
)

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

/**
 * Refused: closed before its handshake (no slot and none may wait), or closed unasked once
 * SLOT_WAIT_MS passed with every connection still busy.
 */
async function refused(connecting: Promise<Held>): Promise<string> {
  const started = performance.now()
  const held = await connecting.catch(() => undefined)
  if (!held) return 'before its handshake'
  const closedAt = await Promise.race([held.closed, new Promise<number>((r) => setTimeout(() => r(-1), SLOT_WAIT_MS + 5000))])
  if (closedAt < 0) {
    held.socket.destroy()
    throw new Error('a connection over the cap was kept')
  }
  return `after ${Math.round(closedAt - started)} ms waiting for a slot`
}

const connections = (server: { app: { server: { getConnections(cb: (err: Error | null, n: number) => void): void } } }) =>
  new Promise<number>((r, j) => server.app.server.getConnections((err, n) => (err ? j(err) : r(n))))

t.test('at a cap the oldest idle connection is closed for the new one, counted and warned; the others are still answered', async (t) => {
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
    maxConnectionsPerPeer: 2,
  })
  t.teardown(() => server.close())
  const held: Held[] = []
  t.teardown(() => held.forEach((h) => h.socket.destroy()))
  for (let i = 0; i < 2; i++) {
    held.push(await connect(server.port))
    t.equal(await held[i]!.ask(), 'HTTP/1.1 200 OK', `connection ${i + 1} answered, then idle`)
  }
  held.push(await connect(server.port))
  t.equal(await held[2]!.ask(), 'HTTP/1.1 200 OK', 'a third from the same peer is served')
  await held[0]!.closed
  t.pass("and the peer's longest idle one was closed for it")
  t.match(await registry.metrics(), /^crd_migrator_webhook_connections_evicted_total\{reason="peer"\} 1$/m, 'counted')
  held.push(await connect(server.port, '127.0.0.2'))
  t.equal(await held[3]!.ask(), 'HTTP/1.1 200 OK', 'another peer gets the last slot')
  held.push(await connect(server.port, '127.0.0.3'))
  t.equal(
    await held[4]!.ask(),
    'HTTP/1.1 200 OK',
    'and a third peer one past the total cap, by closing an idle one of the peer holding most',
  )
  await held[1]!.closed
  t.match(await registry.metrics(), /^crd_migrator_webhook_connections_evicted_total\{reason="shared"\} 1$/m)
  t.match(await registry.metrics(), /^crd_migrator_webhook_connections_refused_total\{reason="shared"\} 0$/m, 'nothing refused')
  const warnings = lines().filter((l) => /^webhook connection closed at the/.test(String(l['msg'])))
  t.equal(warnings.length, 2, 'warned once per cap')
  t.match(warnings[0], { level: 40, remoteAddress: '127.0.0.1', newRemoteAddress: '127.0.0.1', reason: 'peer' })
  t.equal(await held[2]!.ask(), 'HTTP/1.1 200 OK', 'a connection left open is still answered')
  t.equal(readiness(server), 'ok', 'evictions alone leave the webhook ready')
})

function readiness(server: { readiness: readonly { name: string; failing(): string | undefined }[] }): string {
  return server.readiness.find((c) => c.name === 'webhook-connections')?.failing() ?? 'ok'
}

t.test('every slot busy: a new connection is refused, counted, warned, and readiness says so', async (t) => {
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
    maxConnectionsPerPeer: 2,
  })
  t.teardown(() => server.close())
  const held: Held[] = []
  t.teardown(() => held.forEach((h) => h.socket.destroy()))
  for (const from of ['127.0.0.1', '127.0.0.1', '127.0.0.2']) {
    const h = await connect(server.port, from)
    h.start()
    held.push(h)
  }
  await until(
    'three requests in flight',
    5000,
    async () => (await registry.metrics()).match(/^crd_migrator_webhook_connections\{peer="other"\} (\d+)$/m)?.[1],
    (n) => n === '3',
  )
  await new Promise((r) => setTimeout(r, 300)) // and their headers parsed: requests in flight
  t.match(
    await refused(connect(server.port)),
    /^after \d+ ms waiting/,
    'a third of one peer is refused at its cap once it waited for its own to go idle',
  )
  t.equal(readiness(server), 'ok', 'a peer refused at its own cap leaves the webhook ready')
  const [first, second] = await Promise.all([refused(connect(server.port, '127.0.0.3')), refused(connect(server.port, '127.0.0.3'))])
  t.same(
    [first, second].map((how) => how.replace(/\d+/, 'N')).sort(),
    ['after N ms waiting for a slot', 'before its handshake'],
    'a new peer is refused at the total cap: one connection after waiting, a second at once (one waits per address)',
  )
  const metrics = await registry.metrics()
  t.match(metrics, /^crd_migrator_webhook_connections_refused_total\{reason="peer"\} 1$/m)
  t.match(metrics, /^crd_migrator_webhook_connections_refused_total\{reason="shared"\} 2$/m)
  t.match(readiness(server), /2 connection\(s\) refused in the last 30 s at the shared cap/, 'readiness fails, saying why')
  const warnings = lines().filter((l) => /^webhook connection refused/.test(String(l['msg'])))
  t.match(warnings.at(-1), { level: 40, remoteAddress: '127.0.0.3', reason: 'shared', maxConnections: MAX_CONNECTIONS })
})

t.test('every slot busy for a moment: a new connection waits, and takes the slot of the first to go idle', async (t) => {
  const registry = new Registry()
  const server = await startWebhookServer({
    certFile: certs.certFile,
    keyFile: certs.keyFile,
    host: '127.0.0.1',
    port: 0,
    logLevel: 'silent',
    registry,
    maxConnections: MAX_CONNECTIONS,
    maxConnectionsPerPeer: 2,
  })
  t.teardown(() => server.close())
  const held: Held[] = []
  t.teardown(() => held.forEach((h) => h.socket.destroy()))
  for (const from of ['127.0.0.1', '127.0.0.2', '127.0.0.2']) {
    const h = await connect(server.port, from)
    h.start()
    held.push(h)
  }
  await until(
    'three requests in flight',
    5000,
    async () => (await registry.metrics()).match(/^crd_migrator_webhook_connections\{peer="other"\} (\d+)$/m)?.[1],
    (n) => n === '3',
  )
  await new Promise((r) => setTimeout(r, 300)) // and their headers parsed: requests in flight
  const late = await connect(server.port, '127.0.0.3')
  held.push(late)
  t.equal(await held[1]!.finish(), 'HTTP/1.1 200 OK', 'one busy request is answered')
  await held[1]!.closed
  t.pass('and, idle now, its connection is closed for the waiting one')
  t.match(await registry.metrics(), /^crd_migrator_webhook_connections_evicted_total\{reason="shared"\} 1$/m, 'counted as an eviction')
  await new Promise((r) => setTimeout(r, SLOT_WAIT_MS + 300))
  t.equal(await late.ask(), 'HTTP/1.1 200 OK', 'the waiting connection holds the slot past the wait and is answered')
  t.match(await registry.metrics(), /^crd_migrator_webhook_connections_refused_total\{reason="shared"\} 0$/m, 'nothing refused')
  t.equal(readiness(server), 'ok')
})

t.test("the API server's addresses: a reserved slot, no per-peer cap, never evicted", async (t) => {
  const registry = new Registry()
  const server = await startWebhookServer({
    certFile: certs.certFile,
    keyFile: certs.keyFile,
    host: '127.0.0.1',
    port: 0,
    logLevel: 'silent',
    registry,
    maxConnections: 4,
    maxConnectionsPerPeer: 2,
    reservedConnections: 1,
    apiServerAddresses: ['127.0.0.1/32'],
  })
  t.teardown(() => server.close())
  const held: Held[] = []
  t.teardown(() => held.forEach((h) => h.socket.destroy()))
  for (const from of ['127.0.0.2', '127.0.0.2', '127.0.0.3']) {
    const h = await connect(server.port, from)
    h.start()
    held.push(h)
  }
  await until(
    'three requests in flight',
    5000,
    async () => (await registry.metrics()).match(/^crd_migrator_webhook_connections\{peer="other"\} (\d+)$/m)?.[1],
    (n) => n === '3',
  )
  await new Promise((r) => setTimeout(r, 300)) // and their headers parsed: requests in flight
  t.ok(await refused(connect(server.port, '127.0.0.4')), 'other peers hold the shared part (4 - 1): refused')
  const api = await connect(server.port, '127.0.0.1')
  held.push(api)
  t.equal(await api.ask(), 'HTTP/1.1 200 OK', "the API server's address gets the reserved slot")
  t.match(await registry.metrics(), /^crd_migrator_webhook_connections\{peer="apiserver"\} 1$/m)
})

t.test('a connection with no valid AdmissionReview within firstReviewMs is closed', async (t) => {
  const registry = new Registry()
  const server = await startWebhookServer({
    certFile: certs.certFile,
    keyFile: certs.keyFile,
    host: '127.0.0.1',
    port: 0,
    logLevel: 'silent',
    registry,
    timeouts: { firstReviewMs: 500 },
  })
  t.teardown(() => server.close())
  const silent = await connect(server.port)
  const answered = await connect(server.port)
  t.teardown(() => [silent, answered].forEach((h) => h.socket.destroy()))
  t.equal(await answered.ask(), 'HTTP/1.1 200 OK')
  const started = performance.now()
  const closedAt = await silent.closed
  t.ok(closedAt - started < 2000, `the silent one was closed (${Math.round(closedAt - started)} ms after the other's review)`)
  t.match(await registry.metrics(), /^crd_migrator_webhook_connections_evicted_total\{reason="no-review"\} 1$/m, 'counted')
  t.equal(await answered.ask(), 'HTTP/1.1 200 OK', 'the one that carried a review is kept')
  t.ok((await connections(server)) >= 1)
})
