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
 *   connection closed, and the server has read little more than the limit;
 * - ten hostile reviews at a time, each up to the default 3 MiB limit (arrays nested 1.5
 *   million deep, objects nested deep, arrays side by side, 3 and 4 MB names): a real
 *   review sent as their bodies complete waits ~0.1 s, a bounded multiple of its idle
 *   latency (without the nesting guard, JSON.parse of each took ~1 s and it waited ~5 s),
 *   every hostile one gets its 400/413, and no log line grows with the request.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import https from 'node:https'
import net from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { Writable } from 'node:stream'
import tls from 'node:tls'
import { pino } from 'pino'
import t from 'tap'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { generateDevCertificates } from '../../dev/certs/devcerts.js'
import { MAX_JSON_DEPTH } from '../../src/webhook/limits.js'
import { DEFAULT_BODY_LIMIT_BYTES, SERVER_TIMEOUTS, startWebhookServer, type RunningWebhookServer } from '../../src/webhook/server.js'
import { until } from '../helpers/until.js'

const LIMIT = 256 * 1024
const TIMEOUTS = { tlsHandshakeTimeoutMs: 800, headersTimeoutMs: 800, requestTimeoutMs: 1500, connectionsCheckingIntervalMs: 100 }

const dir = await mkdtemp(join(tmpdir(), 'crd-migrator-limits-'))
t.teardown(() => rm(dir, { recursive: true, force: true }))
const certs = await generateDevCertificates(dir)
const server = await startWebhookServer({
  certFile: certs.certFile,
  keyFile: certs.keyFile,
  host: '127.0.0.1',
  port: 0,
  logLevel: 'silent',
  bodyLimitBytes: LIMIT,
  timeouts: TIMEOUTS,
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
  return new Promise((resolve) => {
    let text = ''
    s.on('data', (d: Buffer) => (text += d.toString('utf8')))
    s.on('error', () => {})
    s.on('close', () => resolve({ text, ms: performance.now() - started }))
  })
}

function review(name = 'widgets.example.com'): string {
  return JSON.stringify({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid: 'limits-1',
      kind: { group: 'apiextensions.k8s.io', version: 'v1', kind: 'CustomResourceDefinition' },
      resource: { group: 'apiextensions.k8s.io', version: 'v1', resource: 'customresourcedefinitions' },
      name,
      operation: 'UPDATE',
      userInfo: { username: 'alice', groups: [] },
      oldObject: {
        metadata: { name: 'widgets.example.com', annotations: { [DEFAULT_MIGRATING_ANNOTATION]: 'true' } },
        spec: { versions: [{ name: 'v1', storage: true }] },
      },
      object: {
        metadata: { name: 'widgets.example.com', annotations: { [DEFAULT_MIGRATING_ANNOTATION]: 'true' } },
        spec: { versions: [{ name: 'v1', storage: true }] },
      },
    },
  })
}

function postReview(): Promise<{ status: number; body: string; ms: number }> {
  const started = performance.now()
  return new Promise((resolve, reject) => {
    const body = review()
    const req = https.request(
      new URL('/validate-crd', server.url),
      {
        method: 'POST',
        ca: certs.caCertPem,
        agent: false,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        let text = ''
        res.setEncoding('utf8').on('data', (d: string) => (text += d))
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text, ms: performance.now() - started }))
      },
    )
    req.on('error', reject)
    req.end(body)
  })
}

t.test('the defaults are the documented ones', async (t) => {
  t.match(SERVER_TIMEOUTS, { tlsHandshakeTimeoutMs: 5000, headersTimeoutMs: 5000, requestTimeoutMs: 10_000, keepAliveTimeoutMs: 95_000 })
})

t.test('a connection that never starts TLS is closed after the handshake timeout', async (t) => {
  const started = performance.now()
  const s = net.connect(server.port, '127.0.0.1')
  const { ms } = await untilClosed(s, started)
  t.ok(ms >= TIMEOUTS.tlsHandshakeTimeoutMs - 50 && ms < TIMEOUTS.tlsHandshakeTimeoutMs + 1500, `closed after ${Math.round(ms)} ms`)
})

t.test('headers sent one line every 200 ms: 408 and closed after the headers timeout', async (t) => {
  const s = await connectTls()
  const started = performance.now()
  const closed = untilClosed(s, started)
  s.write('POST /validate-crd HTTP/1.1\r\nHost: localhost\r\n')
  const drip = setInterval(() => {
    if (!s.destroyed) s.write(`X-Drip-${Math.round(performance.now())}: x\r\n`)
  }, 200)
  const { text, ms } = await closed
  clearInterval(drip)
  t.match(text, /^HTTP\/1\.1 408 /, 'answered 408 Request Timeout')
  t.ok(ms < TIMEOUTS.headersTimeoutMs + 1000, `closed after ${Math.round(ms)} ms, though the client kept sending`)
})

t.test('a body sent one byte every 200 ms: 408 and closed after the request timeout', async (t) => {
  const s = await connectTls()
  const started = performance.now()
  const closed = untilClosed(s, started)
  s.write(`POST /validate-crd HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${LIMIT}\r\n\r\n`)
  const drip = setInterval(() => {
    if (!s.destroyed) s.write('{')
  }, 200)
  const { text, ms } = await closed
  clearInterval(drip)
  t.match(text, /^HTTP\/1\.1 408 /, 'answered 408 Request Timeout')
  t.ok(ms >= TIMEOUTS.requestTimeoutMs - 100 && ms < TIMEOUTS.requestTimeoutMs + 1000, `closed after ${Math.round(ms)} ms`)
})

t.test('50 slow-loris connections held open do not keep a review from being answered', async (t) => {
  const sockets = await Promise.all(Array.from({ length: 50 }, () => connectTls()))
  const started = performance.now()
  const closed = sockets.map((s) => untilClosed(s, started))
  for (const s of sockets) s.write('POST /validate-crd HTTP/1.1\r\nHost: localhost\r\n')
  const drip = setInterval(() => {
    for (const s of sockets) if (!s.destroyed) s.write('X-Drip: x\r\n')
  }, 200)
  const answer = await postReview()
  t.equal(answer.status, 200, 'a real review is answered meanwhile')
  t.match(JSON.parse(answer.body), { response: { uid: 'limits-1', allowed: true } })
  t.ok(answer.ms < 1000, `in ${Math.round(answer.ms)} ms`)
  const results = await Promise.all(closed)
  clearInterval(drip)
  t.equal(results.filter((r) => /^HTTP\/1\.1 408 /.test(r.text)).length, 50, 'every slow connection got its 408')
  t.ok(Math.max(...results.map((r) => r.ms)) < TIMEOUTS.headersTimeoutMs + 1500, 'and was closed in time')
})

t.test('Content-Length over the limit: 413 at once, without waiting for the body', async (t) => {
  const s = await connectTls()
  const started = performance.now()
  const closed = untilClosed(s, started)
  s.write(
    `POST /validate-crd HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${100 * 1024 * 1024}\r\n\r\n{"apiVersion":`,
  )
  const { text, ms } = await closed
  t.match(text, /^HTTP\/1\.1 413 /, '413 Payload Too Large')
  t.match(text, new RegExp(`\\{"error":"request body exceeds the limit of ${LIMIT} bytes"\\}`), 'with a JSON error naming the limit')
  t.ok(ms < 1000, `answered and closed in ${Math.round(ms)} ms with 100 MiB announced and a few bytes sent`)
})

t.test('a chunked body growing past the limit: 413, closed, and not buffered whole', async (t) => {
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
    if (!s.write(frame))
      await new Promise((resolve) => {
        s.once('drain', resolve)
        s.once('close', resolve)
      })
  }
  await new Promise((resolve) => (closed ? resolve(undefined) : s.once('close', resolve)))
  const ms = performance.now() - started
  t.match(answer, /^HTTP\/1\.1 413 /, '413 Payload Too Large')
  t.ok(sent < 16 * 1024 * 1024, `the client got the answer after sending ${(sent / 1024).toFixed(0)} KiB of an endless body`)
  const serverSide = serverSockets[before]
  t.ok(serverSide, 'the server-side socket was seen')
  t.ok(
    (serverSide?.bytesRead ?? Infinity) < LIMIT + 256 * 1024,
    `the server read ${((serverSide?.bytesRead ?? 0) / 1024).toFixed(0)} KiB for a limit of ${LIMIT / 1024} KiB`,
  )
  t.ok(ms < 3000, `over in ${Math.round(ms)} ms`)
})

interface Answer {
  status: number
  body: string
  ms: number
}

/**
 * One POST on `agent`. With `holdLastByte`, everything but the last byte is sent now and
 * `finish()` sends it: the server has the whole body but one byte, so it finishes
 * receiving, and parses, the moment the test chooses.
 */
function post(
  target: RunningWebhookServer,
  agent: https.Agent,
  body: Buffer,
  holdLastByte = false,
): { answer: Promise<Answer>; finish: () => void } {
  let started = performance.now()
  let req!: ReturnType<typeof https.request>
  const answer = new Promise<Answer>((resolve) => {
    let answered = false
    req = https.request(
      new URL('/validate-crd', target.url),
      {
        method: 'POST',
        agent,
        timeout: 60_000,
        headers: { 'content-type': 'application/json', 'content-length': body.length },
      },
      (res) => {
        answered = true
        const chunks: Buffer[] = []
        res.on('data', (d: Buffer) => chunks.push(d))
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8'), ms: performance.now() - started }),
        )
        res.on('error', (err) => resolve({ status: 0, body: String(err), ms: performance.now() - started }))
      },
    )
    req.on('timeout', () => req.destroy(new Error('timed out')))
    // A 413 is answered, and the connection closed, while the body may still be on its way.
    req.on('error', (err) => {
      if (!answered) resolve({ status: 0, body: String(err), ms: performance.now() - started })
    })
  })
  if (holdLastByte) req.write(body.subarray(0, -1))
  else req.end(body)
  return {
    answer,
    finish: () => {
      started = performance.now()
      req.end(body.subarray(-1))
    },
  }
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!

t.test('ten hostile reviews at a time do not hold up a real one; each gets its 400/413; logs stay short', async (t) => {
  let longestLogLine = 0
  let logLines = 0
  let cutLines = 0
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      logLines++
      longestLogLine = Math.max(longestLogLine, chunk.length)
      if (/… \(\d+ characters\)/.test(chunk.toString('utf8'))) cutLines++
      done()
    },
  })
  // The default body limit, and logging on (every review, allowed ones too): both are part
  // of what is under test.
  const target = await startWebhookServer({
    certFile: certs.certFile,
    keyFile: certs.keyFile,
    host: '127.0.0.1',
    port: 0,
    logger: pino({ level: 'debug' }, sink),
  })
  const received: tls.TLSSocket[] = []
  target.app.server.on('secureConnection', (s: tls.TLSSocket) => received.push(s))
  const bytesReceived = () => received.reduce((n, s) => n + s.bytesRead, 0)
  const normalAgent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: certs.caCertPem })
  const attackAgent = new https.Agent({ keepAlive: false, maxSockets: 10, ca: certs.caCertPem })
  t.teardown(async () => {
    normalAgent.destroy()
    attackAgent.destroy()
    await target.close()
  })

  // Each body fills the limit but for a little room; the text is built, never nested in JS.
  const room = DEFAULT_BODY_LIMIT_BYTES - review().length - 1024
  const withObject = (object: string) => Buffer.from(review().replace(/"object":\{.*\}\}\}$/, `"object":${object}}}`))
  const deepArrays = Math.floor(room / 2)
  const deepObjects = Math.floor(room / 6)
  const side = '['.repeat(500) + ']'.repeat(500)
  const nested = [
    {
      kind: 'arrays nested 1.5 million deep',
      body: withObject(`${'['.repeat(deepArrays)}${']'.repeat(deepArrays)}`),
      status: 400,
      error: new RegExp(`deeper than ${MAX_JSON_DEPTH} levels`),
    },
    {
      kind: 'objects nested 500,000 deep',
      body: withObject(`${'{"a":'.repeat(deepObjects)}0${'}'.repeat(deepObjects)}`),
      status: 400,
      error: /deeper than/,
    },
    {
      kind: 'arrays 500 deep side by side',
      body: withObject(
        `[${Array(Math.floor(room / (side.length + 1)))
          .fill(side)
          .join(',')}]`,
      ),
      status: 400,
      error: /more than 262144 JSON objects and arrays/,
    },
    { kind: 'a 3 MB name', body: Buffer.from(review('n'.repeat(room))), status: 200, error: /"uid":"limits-1"/ },
  ]
  const tooBig = {
    kind: 'a 4 MB name',
    body: Buffer.from(review('n'.repeat(4_000_000))),
    status: 413,
    error: /exceeds the limit of 3145728 bytes/,
  }
  for (const a of nested) t.ok(a.body.length <= DEFAULT_BODY_LIMIT_BYTES, `${a.kind}: ${a.body.length} bytes, within the limit`)
  const normal = Buffer.from(review())
  const sample = async () => {
    const answer = await post(target, normalAgent, normal).answer
    if (answer.status !== 200) t.fail(`the real review got ${answer.status}: ${answer.body.slice(0, 200)}`)
    else t.match(JSON.parse(answer.body), { response: { uid: 'limits-1', allowed: true } }, 'the real review is answered')
    return answer.ms
  }

  for (let i = 0; i < 10; i++) await sample() // warm-up: JIT, TLS session, keep-alive connection
  const idle: number[] = []
  for (let i = 0; i < 15; i++) idle.push(await sample())

  // Each round: ten in parallel, eight of them (two of each kind above) held at their last
  // byte and two 4 MB names answered 413 meanwhile. Once the server holds the eight bodies
  // but a byte, their last bytes and a real review go out together: whatever the server
  // does with the eight it does while the real review waits. The first round warms up.
  const answers: Array<{ kind: string; expected: number; error: RegExp; answer: Answer }> = []
  const attacked: number[] = []
  for (let round = 0; round < 4; round++) {
    const before = bytesReceived()
    const held = Array.from({ length: 8 }, (_, i) => ({
      ...nested[i % nested.length]!,
      sent: post(target, attackAgent, nested[i % nested.length]!.body, true),
    }))
    const over = [0, 1].map(() => ({ ...tooBig, sent: post(target, attackAgent, tooBig.body) }))
    for (const o of over) answers.push({ kind: o.kind, expected: o.status, error: o.error, answer: await o.sent.answer })
    const expected = held.reduce((n, h) => n + h.body.length - 1, 0)
    // Until the server has read it all (TLS adds bytes: at least that many, then quiet
    // between two reads).
    let last = -1
    await until(
      `the server to have read the ${expected} bytes of the held bodies`,
      60_000,
      async () => {
        const now = bytesReceived() - before
        const quiet = now === last
        last = now
        return { now, quiet }
      },
      ({ now, quiet }) => now >= expected && quiet,
      { everyMs: 50 },
    )
    for (const h of held) h.sent.finish()
    const ms = await sample()
    if (round > 0) attacked.push(ms)
    for (const h of held) answers.push({ kind: h.kind, expected: h.status, error: h.error, answer: await h.sent.answer })
  }

  // Idle is ~1 ms; not less than that, so a quick machine does not inflate the ratio.
  const ratio = median(attacked) / Math.max(median(idle), 1)
  t.comment(
    `real review: idle median ${median(idle).toFixed(1)} ms; while the server takes eight hostile bodies: ` +
      `${attacked.map((ms) => ms.toFixed(1)).join(', ')} ms, ${ratio.toFixed(1)}x idle`,
  )
  // Generous, for two shared cores: with the guard the eight cost little more than
  // receiving them, plus two 3 MB reviews parsed like any (~80x idle here, ~100 ms); without
  // it JSON.parse of each nested body held the event loop ~1 s, and the real review waited
  // ~5 s, the API server's timeout (~2,800x).
  t.ok(ratio < 500, `a real review, while the server takes hostile bodies, is ${ratio.toFixed(1)}x its idle latency (limit 500x)`)

  const wrong = answers.filter((a) => a.answer.status !== a.expected || !a.error.test(a.answer.body.slice(0, 300)))
  t.same(
    wrong.slice(0, 5).map((a) => ({ kind: a.kind, status: a.answer.status, body: a.answer.body.slice(0, 200) })),
    [],
    'every hostile request got its expected answer',
  )
  for (const a of [...nested, tooBig])
    t.equal(answers.filter((x) => x.kind === a.kind && x.answer.status === a.status).length, 8, `${a.kind}: ${a.status}, each of 8 times`)
  // Every refused request is logged; the same review over and over is one line per window
  // (repeat-sampler.ts), so the 3 MB names show in at least one line, cut.
  const refused = answers.filter((a) => a.answer.status >= 400).length
  t.ok(logLines >= refused, `${logLines} log lines written for ${refused} refused requests`)
  t.ok(cutLines > 0, `${cutLines} log line(s) name a request's 3 MB name, cut`)
  t.ok(longestLogLine < 8 * 1024, `the longest log line is ${longestLogLine} bytes, with 3 MB names in the requests`)
})
