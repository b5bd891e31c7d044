/**
 * The real HTTPS server on an ephemeral port: certificate rotation the way the kubelet
 * does it (a ..data symlink swapped by rename), keep-alive connections surviving it,
 * TLS 1.1 refused, half-written pairs ignored, readiness and graceful close.
 */
import { X509Certificate } from 'node:crypto'
import { mkdir, mkdtemp, readFile, rename, rm, stat, symlink, writeFile } from 'node:fs/promises'
import https from 'node:https'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import tls from 'node:tls'
import t from 'tap'
import { Registry } from 'prom-client'
import { generateDevCertificates, type DevCertificates } from '../../src/devcerts/devcerts.js'
import { startWebhookServer, type RunningWebhookServer, type StartWebhookServerOptions } from '../../src/webhook/server.js'
import { CertificateError, CertificateWatcher, validateCertificatePair, type CertificatePair } from '../../src/webhook/tls.js'
import { capturingLogger } from '../helpers/log-capture.js'

const root = await mkdtemp(join(tmpdir(), 'crd-migrator-tls-'))
t.teardown(() => rm(root, { recursive: true, force: true }))

// Two serving certificates from one CA (the second run reuses the CA), and one from
// another CA for the mismatch cases.
const first = await generateDevCertificates(join(root, 'gen'))
const firstPem = { cert: first.certPem, key: first.keyPem }
const second = await generateDevCertificates(join(root, 'gen'))
const other = await generateDevCertificates(join(root, 'gen-other'))
const fingerprint = (pem: string) => new X509Certificate(pem).fingerprint256

/** Publish a pair the way the kubelet updates a Secret volume: new dir, ..data swapped by rename. */
let generation = 0
async function publish(dir: string, pair: { cert: string; key: string }): Promise<void> {
  const name = `..gen_${++generation}`
  await mkdir(join(dir, name), { recursive: true })
  await writeFile(join(dir, name, 'tls.crt'), pair.cert)
  await writeFile(join(dir, name, 'tls.key'), pair.key)
  await symlink(name, join(dir, '..data_tmp'))
  await rename(join(dir, '..data_tmp'), join(dir, '..data'))
  for (const file of ['tls.crt', 'tls.key']) {
    await symlink(join('..data', file), join(dir, file)).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'EEXIST') throw err
    })
  }
}


async function start(dir: string, options: Partial<StartWebhookServerOptions> = {}) {
  const logs = capturingLogger()
  const registry = new Registry()
  const server = await startWebhookServer({
    certFile: join(dir, 'tls.crt'),
    keyFile: join(dir, 'tls.key'),
    host: '127.0.0.1',
    port: 0,
    certDebounceMs: 50,
    // Polling off by default here, to show the directory watch alone picks up the swap.
    certPollIntervalMs: 0,
    logger: logs.logger,
    registry,
    ...options,
  })
  return { server, logs, registry }
}

function servedCertificate(server: RunningWebhookServer, ca: string, extra: tls.ConnectionOptions = {}): Promise<tls.PeerCertificate> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port: server.port, ca, ...extra }, () => {
      const cert = socket.getPeerCertificate()
      socket.end()
      resolve(cert)
    })
    socket.on('error', reject)
  })
}

interface Got {
  status: number
  body: string
  reusedSocket: boolean
  fingerprint: string
}

function get(server: RunningWebhookServer, path: string, agent: https.Agent): Promise<Got> {
  return new Promise((resolve, reject) => {
    const req = https.request({ host: '127.0.0.1', port: server.port, path, agent }, (res) => {
      // Read now: by 'end' a keep-alive socket is back in the agent's pool, detached.
      const peer = (res.socket as tls.TLSSocket).getPeerCertificate().fingerprint256
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => (body += chunk))
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          body,
          reusedSocket: req.reusedSocket,
          fingerprint: peer,
        }),
      )
    })
    req.on('error', reject)
    req.end()
  })
}

async function eventually<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 5000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await probe().catch(() => undefined)
    if (value !== undefined) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

t.test('generateDevCertificates: CA-signed serving certificate with the service names', async (t) => {
  const certs: DevCertificates = first
  const ca = new X509Certificate(certs.caCertPem)
  const leaf = new X509Certificate(certs.certPem)
  t.ok(ca.ca, 'ca.crt is a CA')
  t.notOk(leaf.ca, 'tls.crt is not')
  t.ok(leaf.checkIssued(ca) && leaf.verify(ca.publicKey), 'tls.crt is signed by ca.crt')
  for (const name of ['localhost', 'crd-migrator', 'crd-migrator.crd-migrator', 'crd-migrator.crd-migrator.svc', 'crd-migrator.crd-migrator.svc.cluster.local']) {
    t.ok(leaf.checkHost(name), `valid for ${name}`)
  }
  t.ok(leaf.checkIP('127.0.0.1'), 'valid for 127.0.0.1')
  t.ok(leaf.checkIP('::1'), 'valid for ::1')
  t.match(leaf.publicKey.asymmetricKeyDetails, { modulusLength: 2048 })
  t.equal((await stat(certs.keyFile)).mode & 0o777, 0o600, 'tls.key is 0600')
  t.equal((await stat(certs.caKeyFile)).mode & 0o777, 0o600, 'ca.key is 0600')
  t.equal(await readFile(certs.certFile, 'utf8'), second.certPem, 'files hold the latest pair')
  t.equal(second.caCertPem, first.caCertPem, 'a second run reuses the CA')
  t.ok(second.caReused)
  t.not(second.serialNumber, first.serialNumber, 'with a new serving certificate')
  t.not(other.caCertPem, first.caCertPem, 'another directory gets another CA')

  const custom = await generateDevCertificates(join(root, 'gen-custom'), {
    serviceName: 'svm',
    namespace: 'tools',
    extraHosts: ['webhook.example.test', '10.1.2.3'],
    reuseCa: false,
  })
  const customLeaf = new X509Certificate(custom.certPem)
  t.ok(customLeaf.checkHost('svm.tools.svc.cluster.local'))
  t.ok(customLeaf.checkHost('webhook.example.test'))
  t.ok(customLeaf.checkIP('10.1.2.3'))
  t.notOk(custom.caReused)
})

t.test('validateCertificatePair refuses a key that does not belong to the certificate', async (t) => {
  t.equal(validateCertificatePair(first.certPem, first.keyPem).info.fingerprint256, fingerprint(first.certPem))
  t.throws(() => validateCertificatePair(first.certPem, second.keyPem), CertificateError)
  t.throws(() => validateCertificatePair(first.certPem, second.keyPem), /does not match/)
  t.throws(() => validateCertificatePair(first.certPem.slice(0, 200), first.keyPem), /not a PEM X\.509 certificate/)
  t.throws(() => validateCertificatePair(first.certPem, 'garbage'), /not a PEM private key/)
})

t.test('rotation: new connections get the new certificate, keep-alive connections survive', async (t) => {
  const dir = join(root, 'live-rotate')
  await publish(dir, firstPem)
  const { server, registry, logs } = await start(dir)
  const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: first.caCertPem })
  t.teardown(async () => {
    agent.destroy()
    await server.close()
  })

  t.equal((await servedCertificate(server, first.caCertPem)).fingerprint256, fingerprint(first.certPem), 'serves the first certificate')
  const before = await get(server, '/readyz', agent)
  t.equal(before.status, 200, 'ready')
  t.equal(before.fingerprint, fingerprint(first.certPem))
  t.match(await registry.metrics(), `crd_migrator_webhook_certificate_expiry_timestamp_seconds{serial="${first.serialNumber}"}`)

  await publish(dir, { cert: second.certPem, key: second.keyPem })
  const rotated = await eventually('the new certificate on a new connection', async () => {
    const cert = await servedCertificate(server, first.caCertPem)
    return cert.fingerprint256 === fingerprint(second.certPem) ? cert : undefined
  })
  t.equal(rotated.serialNumber.replace(/^0+/, ''), second.serialNumber.replace(/^0+/, ''), 'new serial')

  const after = await get(server, '/healthz', agent)
  t.equal(after.status, 200, 'the old keep-alive connection still completes requests')
  t.ok(after.reusedSocket, 'on the same socket')
  t.equal(after.fingerprint, fingerprint(first.certPem), 'which still has the old session')

  const metrics = await registry.metrics()
  t.match(metrics, `crd_migrator_webhook_certificate_expiry_timestamp_seconds{serial="${second.serialNumber}"}`)
  t.notMatch(metrics, `serial="${first.serialNumber}"`, 'the old serial is gone from the gauge')
  t.ok(logs.lines().some((l) => l['msg'] === 'serving certificate reloaded' && l['serial'] === second.serialNumber), 'reload logged')
})

t.test('a half-written pair is ignored until a consistent pair is there', async (t) => {
  const dir = join(root, 'live-mismatch')
  await publish(dir, firstPem)
  const { server, logs } = await start(dir)
  t.teardown(() => server.close())

  // New certificate, old key: what a writer renaming tls.crt before tls.key leaves behind.
  await publish(dir, { cert: second.certPem, key: first.keyPem })
  t.equal(await server.certificates.reload(), 'invalid', 'the reloader rejects the pair')
  await new Promise((r) => setTimeout(r, 200))
  t.equal((await servedCertificate(server, first.caCertPem)).fingerprint256, fingerprint(first.certPem), 'still the first certificate')
  t.equal((await server.app.inject('/readyz')).statusCode, 200, 'still ready')
  const warnings = logs.lines().filter((l) => l['level'] === 40 && String(l['error']).includes('does not match'))
  t.equal(warnings.length, 1, 'warned once, not once per event')

  await publish(dir, { cert: second.certPem, key: second.keyPem })
  await eventually('the completed pair', async () =>
    (await servedCertificate(server, first.caCertPem)).fingerprint256 === fingerprint(second.certPem) ? true : undefined,
  )
  t.pass('served once consistent')
})

t.test('TLS 1.1 is refused, TLS 1.2 accepted', async (t) => {
  const dir = join(root, 'live-versions')
  await publish(dir, firstPem)
  const { server } = await start(dir)
  t.teardown(() => server.close())

  const tls12 = await servedCertificate(server, first.caCertPem, { minVersion: 'TLSv1.2', maxVersion: 'TLSv1.2' })
  t.equal(tls12.fingerprint256, fingerprint(first.certPem), 'TLS 1.2 works')
  // SECLEVEL=0 lets the client offer TLS 1.1 at all; the server must still refuse it.
  await t.rejects(
    servedCertificate(server, first.caCertPem, { minVersion: 'TLSv1.1', maxVersion: 'TLSv1.1', ciphers: 'DEFAULT:@SECLEVEL=0' }),
    /alert protocol version/i,
  )
})

t.test('starts without a certificate: not ready, then ready when one appears', async (t) => {
  const dir = join(root, 'live-late')
  await mkdir(dir, { recursive: true })
  const { server, logs } = await start(dir, { certPollIntervalMs: 200 })
  t.teardown(() => server.close())

  t.equal(server.certificates.loaded, false)
  const notReady = await server.app.inject('/readyz')
  t.equal(notReady.statusCode, 503)
  t.same(notReady.json(), { status: 'no serving certificate loaded' })
  await t.rejects(servedCertificate(server, first.caCertPem), 'no handshake without a certificate')
  t.ok(logs.lines().some((l) => l['level'] === 40 && l['msg'] === 'no usable serving certificate at startup; waiting for one (not ready)'))

  await publish(dir, firstPem)
  await eventually('a loaded certificate', async () => (server.certificates.loaded ? true : undefined))
  t.equal((await server.app.inject('/readyz')).statusCode, 200)
  t.equal((await servedCertificate(server, first.caCertPem)).fingerprint256, fingerprint(first.certPem))
})

t.test('close: not ready during the drain delay, reviews still answered, idle keep-alive does not hold it', async (t) => {
  const dir = join(root, 'live-close')
  await publish(dir, firstPem)
  const { server } = await start(dir, { shutdownDelayMs: 300 })
  const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: first.caCertPem })
  t.teardown(() => agent.destroy())

  t.equal((await get(server, '/healthz', agent)).status, 200, 'an idle keep-alive connection exists')
  const started = Date.now()
  const closed = server.close()
  const during = await get(server, '/readyz', agent)
  t.equal(during.status, 503, 'not ready while draining')
  t.equal(JSON.parse(during.body).status, 'shutting down')
  await closed
  t.ok(Date.now() - started < 5000, 'close did not wait for keepAliveTimeout')
  t.equal(server.close(), server.close(), 'close is idempotent')
  await t.rejects(servedCertificate(server, first.caCertPem), 'no longer accepting')
})

t.test('CertificateWatcher: polling finds files in a directory that did not exist at start', async (t) => {
  const dir = join(root, 'late-dir', 'certs')
  const changes: CertificatePair[] = []
  const { logger, lines } = capturingLogger()
  const watcher = new CertificateWatcher({
    certFile: join(dir, 'tls.crt'),
    keyFile: join(dir, 'tls.key'),
    pollIntervalMs: 100,
    logger,
    onChange: (pair) => changes.push(pair),
  })
  t.teardown(() => watcher.stop())
  watcher.start()
  t.equal(await watcher.reload(), 'invalid', 'nothing there yet')
  t.equal(await watcher.reload(), 'invalid')
  t.equal(lines().filter((l) => l['level'] === 40).length, 1, 'the missing files are warned about once')
  await publish(dir, firstPem)
  await eventually('the poll to load the pair', async () => (watcher.loaded ? true : undefined))
  t.equal(changes.length, 1)
  t.equal(watcher.current?.info.fingerprint256, fingerprint(first.certPem))
  t.equal(await watcher.reload(), 'unchanged')
})

t.test('CertificateWatcher: a pair that cannot be applied is not taken as current', async (t) => {
  const dir = join(root, 'apply-fails')
  await publish(dir, firstPem)
  let fail = true
  const watcher = new CertificateWatcher({
    certFile: join(dir, 'tls.crt'),
    keyFile: join(dir, 'tls.key'),
    pollIntervalMs: 0,
    onChange: () => {
      if (fail) throw new Error('setSecureContext failed')
    },
  })
  t.equal(await watcher.reload(), 'invalid')
  t.equal(watcher.loaded, false)
  fail = false
  const [a, b] = await Promise.all([watcher.reload(), watcher.reload()])
  t.equal(a, 'changed', 'concurrent reloads coalesce')
  t.equal(b, 'changed')
  t.equal(watcher.loaded, true)
})

t.test('startWebhookServer rejects when the port is taken, and cleans up', async (t) => {
  const dir = join(root, 'live-port')
  await publish(dir, firstPem)
  const { server } = await start(dir)
  t.teardown(() => server.close())
  await t.rejects(start(dir, { port: server.port }), { code: 'EADDRINUSE' })
})
