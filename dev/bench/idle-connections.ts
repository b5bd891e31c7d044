/**
 * Memory of the webhook under a flood of idle keep-alive TLS connections (issue 34): the
 * built `crd-migrator serve --no-migrator` (dist/cli/main.js, Node's defaults, as the image
 * runs it) listens on 127.0.0.1 only; this process opens N TLS connections to it, sends
 * one small review on each (so each is a keep-alive connection after an answered request,
 * as an API server's are), and holds them idle. It prints the server's RSS before, right
 * after, and every few seconds while holding, with how many connections the server still
 * keeps, and how many it refused (past `webhook.maxConnections`).
 *
 *   npm run build && node dist-dev/dev/bench/idle-connections.js [--connections 5000]
 *     [--hold-seconds 40] [--parallel 100] [--config file.yaml]
 *
 * --config passes a config file to serve (e.g. webhook.maxConnections,
 * webhook.timeouts.keepAliveSeconds). Bounded: at most --connections sockets, for at most
 * --hold-seconds, to 127.0.0.1; everything is closed at the end. Not a test: it prints
 * figures (docs/webhook.md quotes them), it asserts nothing.
 */
import { spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import tls from 'node:tls'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { generateDevCertificates } from '../certs/devcerts.js'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import { memoryOf } from './stats.js'
import { waitFor } from '../wait.js'

const { values } = parseArgs({
  options: {
    connections: { type: 'string', default: '5000' },
    'hold-seconds': { type: 'string', default: '40' },
    parallel: { type: 'string', default: '100' },
    config: { type: 'string' },
  },
})
const connections = Math.min(Number(values.connections), 10_000)
const holdSeconds = Math.min(Number(values['hold-seconds']), 600)
const parallel = Math.max(1, Number(values.parallel))

const root = fileURLToPath(new URL('../../../', import.meta.url))

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.on('error', reject)
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number }
      s.close(() => resolve(port))
    })
  })
}

const review = JSON.stringify({
  apiVersion: 'admission.k8s.io/v1',
  kind: 'AdmissionReview',
  request: {
    uid: '0a0b0c0d-0000-4000-8000-000000000001',
    kind: { group: 'apiextensions.k8s.io', version: 'v1', kind: 'CustomResourceDefinition' },
    resource: { group: 'apiextensions.k8s.io', version: 'v1', resource: 'customresourcedefinitions' },
    name: 'widgets.example.com',
    operation: 'UPDATE',
    userInfo: { username: 'alice', groups: ['system:authenticated'] },
    oldObject: { metadata: { name: 'widgets.example.com', annotations: { [DEFAULT_MIGRATING_ANNOTATION]: 'true' } }, spec: {} },
    object: { metadata: { name: 'widgets.example.com', annotations: { [DEFAULT_MIGRATING_ANNOTATION]: 'true' } }, spec: {} },
  },
})

type Outcome = 'answered' | 'refused'

/** One TLS connection with one answered review on it, left open; 'refused' when the server closed or reset it first. */
function openIdle(port: number, ca: string, open: Set<tls.TLSSocket>): Promise<Outcome> {
  return new Promise((resolve) => {
    let settled = false
    let received = ''
    const done = (outcome: Outcome) => {
      if (settled) return
      settled = true
      resolve(outcome)
    }
    const s = tls.connect({ host: '127.0.0.1', port, ca, servername: 'localhost' }, () => {
      s.write(
        `POST /validate-crd HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(review)}\r\n\r\n${review}`,
      )
    })
    s.setEncoding('utf8')
    s.on('data', (d: string) => {
      received += d
      const end = received.indexOf('\r\n\r\n')
      if (end < 0) return
      const length = Number(/content-length:\s*(\d+)/i.exec(received.slice(0, end))?.[1] ?? 0)
      if (received.length >= end + 4 + length) {
        open.add(s)
        done('answered')
      }
    })
    s.on('error', () => done('refused'))
    s.on('close', () => {
      open.delete(s)
      done('refused')
    })
  })
}

const dir = await mkdtemp(join(tmpdir(), 'crd-migrator-idle-'))
const certs = await generateDevCertificates(join(dir, 'certs'))
const [webhookPort, metricsPort] = [await freePort(), await freePort()]
const args = [
  join(root, 'dist/cli/main.js'),
  'serve',
  '--no-migrator',
  '--tls-cert',
  certs.certFile,
  '--tls-key',
  certs.keyFile,
  '--webhook-host',
  '127.0.0.1',
  '--webhook-port',
  String(webhookPort),
  '--metrics-port',
  String(metricsPort),
  '--log-level',
  'warn',
  ...(values.config ? ['--config', values.config] : []),
]
const child = spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'inherit'], env: { PATH: process.env.PATH, HOME: dir } })
const open = new Set<tls.TLSSocket>()
const rss = () => memoryOf(child.pid!)?.rssMb ?? Number.NaN
try {
  await waitFor(
    'serve ready',
    30_000,
    async () => {
      if (child.exitCode !== null) throw new Error(`serve exited (${child.exitCode})`)
      const ready = await fetch(`http://127.0.0.1:${metricsPort}/readyz`).then(
        (r) => r.status === 200,
        () => false,
      )
      return ready || undefined
    },
    { timedOut: () => new Error('serve did not become ready in 30 s') },
  )
  // Warm up (TLS, the route, the JIT) on a few connections closed again, then settle.
  for (let i = 0; i < 20; i++) {
    const warm = new Set<tls.TLSSocket>()
    await openIdle(webhookPort, certs.caCertPem, warm)
    for (const s of warm) s.destroy()
  }
  await sleep(2000)
  const before = rss()
  console.log(
    `serve (pid ${child.pid}) ready; RSS before: ${before} MiB; opening ${connections} idle TLS connections, ${parallel} at a time`,
  )
  const started = Date.now()
  const outcomes = { answered: 0, refused: 0 }
  let next = 0
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (next < connections) {
        next++
        outcomes[await openIdle(webhookPort, certs.caCertPem, open)]++
      }
    }),
  )
  const after = rss()
  console.log(
    `after ${((Date.now() - started) / 1000).toFixed(1)} s: ${outcomes.answered} answered, ${outcomes.refused} refused; ${open.size} held open; RSS ${after} MiB (+${(after - before).toFixed(1)})`,
  )
  let peak = after
  for (let held = 0; held < holdSeconds;) {
    const step = Math.min(5, holdSeconds - held)
    await sleep(step * 1000)
    held += step
    const now = rss()
    peak = Math.max(peak, now)
    console.log(`  held ${held} s: ${open.size} connections still open; RSS ${now} MiB`)
  }
  console.log(
    JSON.stringify({
      connections,
      answered: outcomes.answered,
      refused: outcomes.refused,
      rssBeforeMb: before,
      rssAfterMb: after,
      rssPeakMb: peak,
      openAtEnd: open.size,
    }),
  )
} finally {
  for (const s of open) s.destroy()
  child.kill('SIGTERM')
  await new Promise((r) => child.once('exit', r))
  await rm(dir, { recursive: true, force: true })
}
