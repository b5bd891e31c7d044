/**
 * Slow-loris and oversized bodies against the real HTTPS webhook (startWebhookServer),
 * with its timeouts lowered through `timeouts` so the test takes seconds, not minutes
 * (defaults: TLS handshake 5 s, headers 5 s, whole request 10 s; see SERVER_TIMEOUTS):
 *
 * - a TCP connection that never starts TLS is closed after the handshake timeout (Node's
 *   own default would keep it two minutes);
 * - headers dribbled in one line at a time: 408 and closed after the headers timeout;
 * - a body dribbled in: 408 and closed after the request timeout;
 * - 50 such connections held open do not keep a real review from being answered;
 * - a Content-Length over the limit: 413 at once, before the body is sent;
 * - a chunked body that grows past the limit: 413 once the limit is crossed, the
 *   connection closed, and the server has read little more than the limit.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import https from 'node:https'
import net from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import tls from 'node:tls'
import t from 'tap'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { generateDevCertificates } from '../../src/devcerts/devcerts.js'
import { SERVER_TIMEOUTS, startWebhookServer } from '../../src/webhook/server.js'

const LIMIT = 256 * 1024
const TIMEOUTS = { tlsHandshakeTimeoutMs: 800, headersTimeoutMs: 800, requestTimeoutMs: 1500, connectionsCheckingIntervalMs: 100 }

const dir = await mkdtemp(join(tmpdir(), 'crd-migrator-limits-'))
t.teardown(() => rm(dir, { recursive: true, force: true }))
const certs = await generateDevCertificates(dir)
const server = await startWebhookServer({
  certFile: certs.certFile, keyFile: certs.keyFile, host: '127.0.0.1', port: 0, logLevel: 'silent',
  bodyLimitBytes: LIMIT, timeouts: TIMEOUTS,
})
t.teardown(() => server.close())
const serverSockets: tls.TLSSocket[] = []
server.app.server.on('secureConnection', (s: tls.TLSSocket) => serverSockets.push(s))

function connectTls(): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', port: server.port, ca: certs.caCertPem, servername: 'localhost' }, () => resolve(s))
    s.once('error', reject)
  })
}

/** Collects what the server sends until it closes; resolves with the text and the time. */
function untilClosed(s: net.Socket, started: number): Promise<{ text: string; ms: number }> {
  return new Promise(resolve => {
    let text = ''
    s.on('data', (d: Buffer) => (text += d.toString('utf8')))
    s.on('error', () => {})
    s.on('close', () => resolve({ text, ms: performance.now() - started }))
  })
}

function review(): string {
  return JSON.stringify({
    apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview',
    request: {
      uid: 'limits-1', kind: { group: 'apiextensions.k8s.io', version: 'v1', kind: 'CustomResourceDefinition' },
      resource: { group: 'apiextensions.k8s.io', version: 'v1', resource: 'customresourcedefinitions' },
      name: 'widgets.example.com', operation: 'UPDATE', userInfo: { username: 'alice', groups: [] },
      oldObject: { metadata: { name: 'widgets.example.com', annotations: { [DEFAULT_MIGRATING_ANNOTATION]: 'true' } }, spec: { versions: [{ name: 'v1', storage: true }] } },
      object: { metadata: { name: 'widgets.example.com', annotations: { [DEFAULT_MIGRATING_ANNOTATION]: 'true' } }, spec: { versions: [{ name: 'v1', storage: true }] } },
    },
  })
}

function postReview(): Promise<{ status: number; body: string; ms: number }> {
  const started = performance.now()
  return new Promise((resolve, reject) => {
    const body = review()
    const req = https.request(new URL('/validate-crd', server.url), {
      method: 'POST', ca: certs.caCertPem, agent: false,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    }, res => {
      let text = ''
      res.setEncoding('utf8').on('data', (d: string) => (text += d))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text, ms: performance.now() - started }))
    })
    req.on('error', reject)
    req.end(body)
  })
}

t.test('the defaults are the documented ones', async t => {
  t.match(SERVER_TIMEOUTS, { tlsHandshakeTimeoutMs: 5000, headersTimeoutMs: 5000, requestTimeoutMs: 10_000, keepAliveTimeoutMs: 120_000 })
})

t.test('a connection that never starts TLS is closed after the handshake timeout', async t => {
  const started = performance.now()
  const s = net.connect(server.port, '127.0.0.1')
  const { ms } = await untilClosed(s, started)
  t.ok(ms >= TIMEOUTS.tlsHandshakeTimeoutMs - 50 && ms < TIMEOUTS.tlsHandshakeTimeoutMs + 1500, `closed after ${Math.round(ms)} ms`)
})

t.test('headers sent one line every 200 ms: 408 and closed after the headers timeout', async t => {
  const s = await connectTls()
  const started = performance.now()
  const closed = untilClosed(s, started)
  s.write('POST /validate-crd HTTP/1.1\r\nHost: localhost\r\n')
  const drip = setInterval(() => { if (!s.destroyed) s.write(`X-Drip-${Math.round(performance.now())}: x\r\n`) }, 200)
  const { text, ms } = await closed
  clearInterval(drip)
  t.match(text, /^HTTP\/1\.1 408 /, 'answered 408 Request Timeout')
  t.ok(ms < TIMEOUTS.headersTimeoutMs + 1000, `closed after ${Math.round(ms)} ms, though the client kept sending`)
})

t.test('a body sent one byte every 200 ms: 408 and closed after the request timeout', async t => {
  const s = await connectTls()
  const started = performance.now()
  const closed = untilClosed(s, started)
  s.write(`POST /validate-crd HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${LIMIT}\r\n\r\n`)
  const drip = setInterval(() => { if (!s.destroyed) s.write('{') }, 200)
  const { text, ms } = await closed
  clearInterval(drip)
  t.match(text, /^HTTP\/1\.1 408 /, 'answered 408 Request Timeout')
  t.ok(ms >= TIMEOUTS.requestTimeoutMs - 100 && ms < TIMEOUTS.requestTimeoutMs + 1000, `closed after ${Math.round(ms)} ms`)
})

t.test('50 slow-loris connections held open do not keep a review from being answered', async t => {
  const sockets = await Promise.all(Array.from({ length: 50 }, () => connectTls()))
  const started = performance.now()
  const closed = sockets.map(s => untilClosed(s, started))
  for (const s of sockets) s.write('POST /validate-crd HTTP/1.1\r\nHost: localhost\r\n')
  const drip = setInterval(() => { for (const s of sockets) if (!s.destroyed) s.write('X-Drip: x\r\n') }, 200)
  const answer = await postReview()
  t.equal(answer.status, 200, 'a real review is answered meanwhile')
  t.match(JSON.parse(answer.body), { response: { uid: 'limits-1', allowed: true } })
  t.ok(answer.ms < 1000, `in ${Math.round(answer.ms)} ms`)
  const results = await Promise.all(closed)
  clearInterval(drip)
  t.equal(results.filter(r => /^HTTP\/1\.1 408 /.test(r.text)).length, 50, 'every slow connection got its 408')
  t.ok(Math.max(...results.map(r => r.ms)) < TIMEOUTS.headersTimeoutMs + 1500, 'and was closed in time')
})

t.test('Content-Length over the limit: 413 at once, without waiting for the body', async t => {
  const s = await connectTls()
  const started = performance.now()
  const closed = untilClosed(s, started)
  s.write(`POST /validate-crd HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${100 * 1024 * 1024}\r\n\r\n{"apiVersion":`)
  const { text, ms } = await closed
  t.match(text, /^HTTP\/1\.1 413 /, '413 Payload Too Large')
  t.match(text, new RegExp(`\\{"error":"request body exceeds the limit of ${LIMIT} bytes"\\}`), 'with a JSON error naming the limit')
  t.ok(ms < 1000, `answered and closed in ${Math.round(ms)} ms with 100 MiB announced and a few bytes sent`)
})

t.test('a chunked body growing past the limit: 413, closed, and not buffered whole', async t => {
  const s = await connectTls()
  const started = performance.now()
  const before = serverSockets.length
  let answer = ''
  let closed = false
  s.on('data', (d: Buffer) => (answer += d.toString('utf8')))
  s.on('error', () => {})
  s.on('close', () => (closed = true))
  s.write('POST /validate-crd HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n')
  const chunk = Buffer.alloc(16 * 1024, 'a')
  const frame = Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n')])
  let sent = 0
  while (!closed && answer === '' && sent < 64 * 1024 * 1024) {
    sent += chunk.length
    if (!s.write(frame)) await new Promise(resolve => { s.once('drain', resolve); s.once('close', resolve) })
  }
  await new Promise(resolve => (closed ? resolve(undefined) : s.once('close', resolve)))
  const ms = performance.now() - started
  t.match(answer, /^HTTP\/1\.1 413 /, '413 Payload Too Large')
  t.ok(sent < 16 * 1024 * 1024, `the client got the answer after sending ${(sent / 1024).toFixed(0)} KiB of an endless body`)
  const serverSide = serverSockets[before]
  t.ok(serverSide, 'the server-side socket was seen')
  t.ok((serverSide?.bytesRead ?? Infinity) < LIMIT + 256 * 1024, `the server read ${(((serverSide?.bytesRead ?? 0)) / 1024).toFixed(0)} KiB for a limit of ${LIMIT / 1024} KiB`)
  t.ok(ms < 3000, `over in ${Math.round(ms)} ms`)
})
