/**
 * The real HTTPS server on an ephemeral port: certificate rotation the way the kubelet
 * does it (a ..data symlink swapped by rename), keep-alive connections surviving it,
 * TLS 1.1 and weak TLS 1.2 suites refused, half-written, expired and not yet valid pairs
 * ignored, readiness (the server's checks, which the ops listener's /readyz reports) and
 * graceful close.
 */
import { execFileSync } from 'node:child_process'
import { X509Certificate } from 'node:crypto'
import { mkdir, mkdtemp, readFile, rename, rm, stat, symlink, writeFile } from 'node:fs/promises'
import https from 'node:https'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import tls from 'node:tls'
import t from 'tap'
import { Registry } from 'prom-client'
import { generate } from 'selfsigned'
import { generateDevCertificates, type DevCertificates } from '../../dev/certs/devcerts.js'
import { readinessReport } from '../../src/health/plugin.js'
import { startWebhookServer, type RunningWebhookServer, type StartWebhookServerOptions } from '../../src/webhook/server.js'
import {
  CertificateError,
  CertificateWatcher,
  loadCertificatePair,
  TLS12_CIPHERS,
  validateCertificatePair,
  type CertificatePair,
} from '../../src/webhook/tls.js'
import { capturingLogger } from '../helpers/log-capture.js'
import { consistently, until } from '../helpers/until.js'

const root = await mkdtemp(join(tmpdir(), 'crd-migrator-tls-'))
t.teardown(() => rm(root, { recursive: true, force: true }))

// Two serving certificates from one CA (the second run reuses the CA), and one from
// another CA for the mismatch cases.
const first = await generateDevCertificates(join(root, 'gen'))
const firstPem = { cert: first.certPem, key: first.keyPem }
const second = await generateDevCertificates(join(root, 'gen'))
const other = await generateDevCertificates(join(root, 'gen-other'))
const fingerprint = (pem: string) => new X509Certificate(pem).fingerprint256
const caKey = await readFile(first.caKeyFile, 'utf8')
const DAY = 24 * 3600 * 1000

/** A serving pair signed by the first CA, valid from notBefore to notAfter. */
async function servingPair(notBefore: Date, notAfter: Date): Promise<{ cert: string; key: string }> {
  const made = await generate([{ name: 'commonName', value: 'crd-migrator.crd-migrator.svc' }], {
    algorithm: 'sha256',
    keySize: 2048,
    notBeforeDate: notBefore,
    notAfterDate: notAfter,
    ca: { cert: first.caCertPem, key: caKey },
    extensions: [
      { name: 'basicConstraints', cA: false, critical: true },
      { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
      { name: 'extKeyUsage', serverAuth: true },
      {
        name: 'subjectAltName',
        altNames: [
          { type: 2, value: 'localhost' },
          { type: 7, ip: '127.0.0.1' },
        ],
      },
    ],
  })
  return { cert: made.cert, key: made.private }
}
const expired = await servingPair(new Date(Date.now() - 30 * DAY), new Date(Date.now() - DAY))

const rejected = (metrics: string, reason: string) =>
  Number(new RegExp(`crd_migrator_webhook_certificate_reload_rejected_total\\{reason="${reason}"\\} (\\d+)`).exec(metrics)?.[1])

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

/** A review of an unfrozen CRD: allowed. */
const REVIEW = JSON.stringify({
  apiVersion: 'admission.k8s.io/v1',
  kind: 'AdmissionReview',
  request: {
    uid: 'c0ffee00-0000-4000-8000-000000000001',
    kind: { group: 'apiextensions.k8s.io', version: 'v1', kind: 'CustomResourceDefinition' },
    resource: { group: 'apiextensions.k8s.io', version: 'v1', resource: 'customresourcedefinitions' },
    name: 'widgets.example.com',
    operation: 'UPDATE',
    userInfo: { username: 'alice', groups: ['system:authenticated'] },
    oldObject: { metadata: { name: 'widgets.example.com' }, spec: { versions: [{ name: 'v1', storage: true }] } },
    object: { metadata: { name: 'widgets.example.com' }, spec: { versions: [{ name: 'v1', storage: true }] } },
  },
})

/** POSTs REVIEW to /validate-crd (the only route the webhook serves) through the agent. */
function postReview(server: RunningWebhookServer, agent: https.Agent): Promise<Got> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      {
        host: '127.0.0.1',
        port: server.port,
        path: '/validate-crd',
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json' },
      },
      (res) => {
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
      },
    )
    req.on('error', reject)
    req.end(REVIEW)
  })
}

const allowed = (got: Got) =>
  got.status === 200 && (JSON.parse(got.body) as { response?: { allowed?: boolean } }).response?.allowed === true
/** The failing readiness checks of the server (what the ops listener's /readyz would name). */
const failing = (server: RunningWebhookServer) => readinessReport(server.readiness).failing

/** What `probe` returns once it returns something (not undefined, not an error). */
async function eventually<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 5000): Promise<T> {
  return (await until(what, timeoutMs, probe, (value) => value !== undefined, { everyMs: 50 }))!
}

/** The fingerprint of the certificate a new connection gets. */
const servedFingerprint = async (server: RunningWebhookServer) => (await servedCertificate(server, first.caCertPem)).fingerprint256

t.test('generateDevCertificates: CA-signed serving certificate with the service names', async (t) => {
  const certs: DevCertificates = first
  const ca = new X509Certificate(certs.caCertPem)
  const leaf = new X509Certificate(certs.certPem)
  t.ok(ca.ca, 'ca.crt is a CA')
  t.notOk(leaf.ca, 'tls.crt is not')
  t.ok(leaf.checkIssued(ca) && leaf.verify(ca.publicKey), 'tls.crt is signed by ca.crt')
  for (const name of [
    'localhost',
    'crd-migrator',
    'crd-migrator.crd-migrator',
    'crd-migrator.crd-migrator.svc',
    'crd-migrator.crd-migrator.svc.cluster.local',
  ]) {
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

t.test(
  'loadCertificatePair: a FIFO or /dev/zero named as the certificate or key is refused at once, never waited on (issue 44, item 4)',
  async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'crd-migrator-tls-fifo-'))
    t.teardown(() => rm(dir, { recursive: true, force: true }))
    const fifo = join(dir, 'fifo')
    execFileSync('mkfifo', [fifo])
    const rows: Array<[string, string, string, RegExp]> = [
      ['certificate a FIFO', fifo, other.keyFile, /^certificate\/key .*fifo is a FIFO, not a regular file/],
      ['key a FIFO', other.certFile, fifo, /^certificate\/key .*fifo is a FIFO, not a regular file/],
      ['certificate /dev/zero', '/dev/zero', other.keyFile, /^certificate\/key \/dev\/zero is a character device, not a regular file/],
    ]
    for (const [what, cert, key, message] of rows) {
      const started = performance.now()
      await t.rejects(
        loadCertificatePair(cert, key),
        { name: 'CertificateError', code: 'CRDM_CERTIFICATE', reason: 'unreadable', message },
        what,
      )
      t.ok(performance.now() - started < 1000, `${what}: at once`)
    }
    t.equal(
      (await loadCertificatePair(other.certFile, other.keyFile)).info.fingerprint256,
      fingerprint(other.certPem),
      'regular files: loaded',
    )
  },
)

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
  t.same(failing(server), [], 'ready')
  const before = await postReview(server, agent)
  t.ok(allowed(before), 'a review is answered')
  t.equal(before.fingerprint, fingerprint(first.certPem))
  t.match(await registry.metrics(), `crd_migrator_webhook_certificate_expiry_timestamp_seconds{serial="${first.serialNumber}"}`)

  await publish(dir, { cert: second.certPem, key: second.keyPem })
  const rotated = await eventually('the new certificate on a new connection', async () => {
    const cert = await servedCertificate(server, first.caCertPem)
    return cert.fingerprint256 === fingerprint(second.certPem) ? cert : undefined
  })
  t.equal(rotated.serialNumber.replace(/^0+/, ''), second.serialNumber.replace(/^0+/, ''), 'new serial')

  const after = await postReview(server, agent)
  t.ok(allowed(after), 'the old keep-alive connection still completes reviews')
  t.ok(after.reusedSocket, 'on the same socket')
  t.equal(after.fingerprint, fingerprint(first.certPem), 'which still has the old session')

  const metrics = await registry.metrics()
  t.match(metrics, `crd_migrator_webhook_certificate_expiry_timestamp_seconds{serial="${second.serialNumber}"}`)
  t.notMatch(metrics, `serial="${first.serialNumber}"`, 'the old serial is gone from the gauge')
  t.ok(
    logs.lines().some((l) => l['msg'] === 'serving certificate reloaded' && l['serial'] === second.serialNumber),
    'reload logged',
  )
})

t.test('a half-written pair is ignored until a consistent pair is there', async (t) => {
  const dir = join(root, 'live-mismatch')
  await publish(dir, firstPem)
  const { server, logs } = await start(dir)
  t.teardown(() => server.close())

  // New certificate, old key: what a writer renaming tls.crt before tls.key leaves behind.
  await publish(dir, { cert: second.certPem, key: first.keyPem })
  t.equal(await server.certificates.reload(), 'invalid', 'the reloader rejects the pair')
  const mismatchWarnings = () =>
    logs
      .lines()
      .filter((l) => l['level'] === 40 && String((l['err'] as { message?: string } | undefined)?.message).includes('does not match'))
  // Through the file events the half-written pair raises, checked all along.
  await consistently(
    'the first certificate served, ready, at most one warning',
    200,
    async () => ({ served: await servedFingerprint(server), failing: failing(server), warnings: mismatchWarnings().length }),
    (v) => v.served === fingerprint(first.certPem) && v.failing.length === 0 && v.warnings <= 1,
  )
  t.equal(await servedFingerprint(server), fingerprint(first.certPem), 'still the first certificate')
  t.same(failing(server), [], 'still ready')
  const warnings = mismatchWarnings()
  t.equal(warnings.length, 1, 'warned once, not once per event')

  await publish(dir, { cert: second.certPem, key: second.keyPem })
  await eventually('the completed pair', async () =>
    (await servedCertificate(server, first.caCertPem)).fingerprint256 === fingerprint(second.certPem) ? true : undefined,
  )
  t.pass('served once consistent')
})

t.test('validateCertificatePair refuses an expired or not yet valid certificate', async (t) => {
  t.throws(() => validateCertificatePair(expired.cert, expired.key), {
    name: 'CertificateError',
    reason: 'expired',
    message: /expired at .*not serving it/,
  })
  const info = validateCertificatePair(first.certPem, first.keyPem).info
  t.throws(() => validateCertificatePair(first.certPem, first.keyPem, new Date(info.notAfter.getTime() + 1000)), {
    name: 'CertificateError',
    reason: 'expired',
  })
  const early = new Date(info.notBefore.getTime() - 1000)
  const err = (() => {
    try {
      validateCertificatePair(first.certPem, first.keyPem, early)
    } catch (e) {
      return e as CertificateError
    }
    return undefined
  })()
  t.equal(err?.reason, 'not-yet-valid')
  t.same(err?.validFrom, info.notBefore, 'says when it becomes valid')
  t.match(err?.message, /not valid before/)
  t.throws(() => validateCertificatePair(first.certPem, second.keyPem), { name: 'CertificateError', reason: 'key-mismatch' })
})

t.test('TLS 1.2 suites: CBC, SHA-1 MACs, RSA or DHE key exchange refused; ECDHE with AEAD in our order; TLS 1.3', async (t) => {
  const dir = join(root, 'live-ciphers')
  await publish(dir, firstPem)
  const { server } = await start(dir)
  t.teardown(() => server.close())

  const handshake = (options: tls.ConnectionOptions) =>
    new Promise<{ protocol: string | null; cipher: string }>((resolve, reject) => {
      const socket = tls.connect({ host: '127.0.0.1', port: server.port, ca: first.caCertPem, ...options }, () => {
        const result = { protocol: socket.getProtocol(), cipher: socket.getCipher().name }
        socket.end()
        resolve(result)
      })
      socket.on('error', reject)
    })
  const tls12 = { minVersion: 'TLSv1.2', maxVersion: 'TLSv1.2' } as const
  const weak = [
    'ECDHE-RSA-AES128-SHA', // CBC, SHA-1: what Node's default list let in
    'ECDHE-RSA-AES256-SHA',
    'AES128-SHA', // RSA key exchange: no forward secrecy
    'AES256-GCM-SHA384',
    'ECDHE-RSA-AES128-SHA256', // CBC
    'DHE-RSA-AES128-GCM-SHA256',
  ]
  const refusesWeak = async (when: string) => {
    for (const cipher of weak) {
      await t.rejects(handshake({ ...tls12, ciphers: cipher }), /handshake failure|no shared cipher/i, `${cipher} refused ${when}`)
    }
  }
  await refusesWeak('')

  t.same(await handshake({}), { protocol: 'TLSv1.3', cipher: 'TLS_AES_128_GCM_SHA256' }, 'a default client gets TLS 1.3, AES-128-GCM first')
  t.same(
    await handshake(tls12),
    { protocol: 'TLSv1.2', cipher: 'ECDHE-RSA-AES128-GCM-SHA256' },
    'a default TLS 1.2 client gets ECDHE with AES-GCM',
  )
  for (const cipher of TLS12_CIPHERS.filter((c) => c.includes('-RSA-'))) {
    t.equal((await handshake({ ...tls12, ciphers: cipher })).cipher, cipher, `${cipher} works`)
  }
  t.equal(
    (await handshake({ ...tls12, ciphers: 'ECDHE-RSA-CHACHA20-POLY1305:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-RSA-AES128-GCM-SHA256' })).cipher,
    'ECDHE-RSA-AES128-GCM-SHA256',
    "the server's order wins",
  )

  // A reload replaces the whole secure context: the suites must come with it.
  await publish(dir, { cert: second.certPem, key: second.keyPem })
  await eventually('the rotated certificate', async () =>
    (await servedCertificate(server, first.caCertPem)).fingerprint256 === fingerprint(second.certPem) ? true : undefined,
  )
  await refusesWeak('after a reload')
  t.equal((await handshake(tls12)).cipher, 'ECDHE-RSA-AES128-GCM-SHA256', 'and the strong ones work')
})

t.test('an expired pair is not swapped in: the current one keeps serving, one warning, counted, then a valid pair is taken', async (t) => {
  const dir = join(root, 'live-expired')
  await publish(dir, firstPem)
  const { server, logs, registry } = await start(dir)
  t.teardown(() => server.close())
  t.equal(rejected(await registry.metrics(), 'expired'), 0, 'the series exists before the first rejection')

  await publish(dir, expired)
  t.equal(await server.certificates.reload(), 'invalid', 'the reloader refuses it')
  t.equal(await server.certificates.reload(), 'invalid', 'again on the next poll')
  const expiredWarnings = () => logs.lines().filter((l) => l['level'] === 40 && l['reason'] === 'expired')
  // Through the file events the expired pair raises, checked all along.
  await consistently(
    'the first certificate served, ready, at most one warning',
    200,
    async () => ({ served: await servedFingerprint(server), failing: failing(server), warnings: expiredWarnings().length }),
    (v) => v.served === fingerprint(first.certPem) && v.failing.length === 0 && v.warnings <= 1,
  )
  t.equal(await servedFingerprint(server), fingerprint(first.certPem), 'still the first certificate')
  t.same(failing(server), [], 'still ready')
  const warnings = expiredWarnings()
  t.equal(warnings.length, 1, 'warned once for this pair, not once per event or poll')
  t.match(warnings[0], {
    msg: 'ignoring unusable certificate/key; still serving the previous certificate',
    err: { message: /expired at/, code: 'CRDM_CERTIFICATE' },
  })
  const metrics = await registry.metrics()
  t.equal(rejected(metrics, 'expired'), 1, 'counted once')
  t.match(
    metrics,
    `crd_migrator_webhook_certificate_expiry_timestamp_seconds{serial="${first.serialNumber}"}`,
    'the expiry gauge shows the pair in use',
  )

  await publish(dir, { cert: second.certPem, key: second.keyPem })
  await eventually('the valid pair', async () =>
    (await servedCertificate(server, first.caCertPem)).fingerprint256 === fingerprint(second.certPem) ? true : undefined,
  )
  t.pass('a valid pair is taken afterwards')
})

t.test('a pair not valid yet is refused, then taken when it becomes valid, without another event', async (t) => {
  const dir = join(root, 'live-early')
  await publish(dir, firstPem)
  const { server, logs, registry } = await start(dir)
  t.teardown(() => server.close())

  const early = await servingPair(new Date(Date.now() + 3000), new Date(Date.now() + 30 * DAY))
  const validFrom = new X509Certificate(early.cert).validFrom
  await publish(dir, early)
  t.equal(await server.certificates.reload(), 'invalid')
  t.ok(Date.now() < new Date(validFrom).getTime(), 'refused while not valid yet')
  t.equal((await servedCertificate(server, first.caCertPem)).fingerprint256, fingerprint(first.certPem), 'still the first certificate')
  t.equal(rejected(await registry.metrics(), 'not-yet-valid'), 1)
  t.ok(
    logs.lines().some((l) => l['level'] === 40 && l['reason'] === 'not-yet-valid'),
    'warned',
  )
  // Polling is off here: the watcher re-reads the pair when its notBefore passes.
  await eventually(
    'the pair once valid',
    async () => ((await servedCertificate(server, first.caCertPem)).fingerprint256 === fingerprint(early.cert) ? true : undefined),
    8000,
  )
  t.ok(Date.now() >= new Date(validFrom).getTime(), 'taken once valid')
})

t.test('starts with only an expired pair: serves nothing, not ready, says why; ready once a valid pair appears', async (t) => {
  const dir = join(root, 'live-expired-start')
  await publish(dir, expired)
  const { server, logs, registry } = await start(dir, { certPollIntervalMs: 200 })
  t.teardown(() => server.close())

  t.equal(server.certificates.loaded, false)
  t.same(failing(server), ['webhook-certificate'], 'not ready')
  await t.rejects(
    servedCertificate(server, first.caCertPem, { rejectUnauthorized: false }),
    'no handshake: the expired certificate is not served',
  )
  const startup = logs
    .lines()
    .filter((l) => l['level'] === 40 && l['msg'] === 'no usable serving certificate at startup; waiting for one (not ready)')
  t.equal(startup.length, 1, 'one clear log line')
  t.match(startup[0], { reason: 'expired', err: { message: /the certificate expired at/ } })
  // Two polls and more (every 200 ms), checked all along.
  const repeated = await consistently(
    'one warning through the polls',
    500,
    async () => logs.lines().filter((l) => l['level'] === 40).length,
    (n) => n === 1,
  )
  t.equal(repeated, 1, 'polls do not repeat it')
  const metrics = await registry.metrics()
  t.equal(rejected(metrics, 'expired'), 1, 'counted')
  t.notMatch(metrics, /crd_migrator_webhook_certificate_expiry_timestamp_seconds\{/, 'no certificate in the expiry gauge')

  await publish(dir, firstPem)
  await eventually('a loaded certificate', async () => (server.certificates.loaded ? true : undefined))
  t.same(failing(server), [], 'ready')
  t.equal((await servedCertificate(server, first.caCertPem)).fingerprint256, fingerprint(first.certPem))
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
  t.same(readinessReport(server.readiness), {
    ready: false,
    failing: ['webhook-certificate'],
    checks: {
      'webhook-certificate': 'no usable serving certificate loaded yet; see the log',
      'webhook-open': 'ok',
      'webhook-connections': 'ok',
    },
  })
  await t.rejects(servedCertificate(server, first.caCertPem), 'no handshake without a certificate')
  t.ok(logs.lines().some((l) => l['level'] === 40 && l['msg'] === 'no usable serving certificate at startup; waiting for one (not ready)'))

  await publish(dir, firstPem)
  await eventually('a loaded certificate', async () => (server.certificates.loaded ? true : undefined))
  t.same(failing(server), [], 'ready')
  t.equal((await servedCertificate(server, first.caCertPem)).fingerprint256, fingerprint(first.certPem))
})

t.test('close: not ready during the drain delay, reviews still answered, idle keep-alive does not hold it', async (t) => {
  const dir = join(root, 'live-close')
  await publish(dir, firstPem)
  const { server } = await start(dir, { shutdownDelayMs: 300 })
  const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: first.caCertPem })
  t.teardown(() => agent.destroy())

  t.ok(allowed(await postReview(server, agent)), 'an idle keep-alive connection exists')
  t.same(failing(server), [], 'ready')
  const started = Date.now()
  const closed = server.close()
  t.same(failing(server), ['webhook-open'], 'not ready while draining')
  t.equal(readinessReport(server.readiness).checks['webhook-open'], 'draining: answering in-flight reviews, then closing')
  const during = await postReview(server, agent)
  t.ok(allowed(during), 'a review sent while draining is still answered')
  t.equal(during.reusedSocket, true, 'on the keep-alive connection')
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
