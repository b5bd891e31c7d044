/**
 * A cluster that cannot be used fails fast and says why (src/kube/connection-errors.ts,
 * the 401/403 codes of src/kube/api-errors.ts), with real sockets: a port nothing listens
 * on, a TLS server whose CA the kubeconfig does not hold, a tls-server-name its certificate
 * does not cover, and the real kube-apiserver refusing a bad token (401) and a user
 * without RBAC (403). Through the CLI, as a user meets them: exit code, the code in the
 * message, and the retries in the log.
 */
import { once } from 'node:events'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import https from 'node:https'
import { createServer, type AddressInfo } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { generate } from 'selfsigned'
import t from 'tap'
import { stringify } from 'yaml'
import { loadKubeConfig } from '../../src/kube/client.js'
import { KubeHttp } from '../../src/kube/http.js'
import { getControlPlane, uniqueName } from '../helpers/controlplane.js'
import { runProcess } from '../helpers/run-process.js'

const b64 = (s: string) => Buffer.from(s).toString('base64')

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'crd-migrator-kube-errors-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

/** A kubeconfig of one context `name` with this cluster and user. */
async function kubeconfig(dir: string, name: string, cluster: Record<string, unknown>, user: Record<string, unknown>): Promise<string> {
  const file = path.join(dir, `${name}.yaml`)
  await writeFile(
    file,
    stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name, cluster }],
      users: [{ name: `${name}-user`, user }],
      contexts: [{ name, context: { cluster: name, user: `${name}-user` } }],
      'current-context': name,
    }),
  )
  return file
}

/** A port nothing listens on: one the kernel handed out and we gave back. */
async function freePort(): Promise<number> {
  const server = createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as AddressInfo
  server.close()
  await once(server, 'close')
  return port
}

interface CliRun {
  code: number | null
  stdout: string
  stderr: string
  /** The JSON log lines on stderr. */
  logs: Array<Record<string, unknown>>
  ms: number
}

/** `crd-migrator migrate <crd>` against the kubeconfig, logs as JSON at warn. */
async function migrate(file: string, ...extra: string[]): Promise<CliRun> {
  const started = performance.now()
  const r = await runProcess(
    process.execPath,
    ['dist/cli/main.js', 'migrate', 'widgets.example.com', '--kubeconfig', file, '--log-format', 'json', ...extra],
    { cwd: process.cwd(), env: { ...process.env, KUBECONFIG: '' } },
  )
  const logs = r.stderr
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>)
  return { ...r, logs, ms: performance.now() - started }
}

const connectRetries = (run: CliRun) => run.logs.filter((l) => l['errno'] !== undefined && l['level'] === 40)

t.test('a refused port: CRDM_UNREACHABLE naming the server and the errno, after --connect-attempts tries, in seconds', async (t) => {
  const dir = await tempDir()
  const port = await freePort()
  const file = await kubeconfig(dir, 'refused', { server: `https://127.0.0.1:${port}`, 'insecure-skip-tls-verify': true }, { token: 'x' })

  const run = await migrate(file)
  t.equal(run.code, 1, 'exit code 1: a request failed')
  t.match(
    run.stdout,
    new RegExp(
      `widgets\\.example\\.com: CRDM_UNREACHABLE: cannot reach the API server at https://127\\.0\\.0\\.1:${port}: ECONNREFUSED, connection refused.*\\(3 attempts\\)`,
    ),
  )
  t.equal(connectRetries(run).length, 2, 'the default 3 attempts: two retries, each logged at warn')
  t.match(connectRetries(run)[0], { errno: 'ECONNREFUSED', server: `https://127.0.0.1:${port}`, attempt: 1, of: 3, context: 'refused' })
  t.ok(run.ms < 10_000, `seconds, not 20 s of the migration's own retries (took ${Math.round(run.ms)} ms)`)

  const once = await migrate(file, '--connect-attempts', '1')
  t.equal(connectRetries(once).length, 0, '--connect-attempts 1: no retry')
  t.match(once.stdout, /CRDM_UNREACHABLE: .*ECONNREFUSED/)
  t.notMatch(once.stdout, /attempts\)/)
})

t.test('status, check and plan: the same fast CRDM_UNREACHABLE, --connect-attempts honoured and each retry logged', async (t) => {
  const dir = await tempDir()
  const port = await freePort()
  const file = await kubeconfig(dir, 'refused', { server: `https://127.0.0.1:${port}`, 'insecure-skip-tls-verify': true }, { token: 'x' })
  for (const args of [['status'], ['check', 'widgets.example.com', '--drop', 'v1'], ['plan']]) {
    const command = args[0]!
    const run = async (...extra: string[]) => {
      const r = await runProcess(process.execPath, ['dist/cli/main.js', ...args, '--kubeconfig', file, '--log-format', 'json', ...extra], {
        cwd: process.cwd(),
        env: { ...process.env, KUBECONFIG: '' },
      })
      const logs = r.stderr
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, unknown>)
      return { ...r, logs, ms: 0 }
    }
    const two = await run('--connect-attempts', '2')
    t.equal(two.code, 1, `${command}: exit code 1`)
    t.match(
      two.stderr,
      new RegExp(`CRDM_UNREACHABLE: cannot reach the API server at https://127\\.0\\.0\\.1:${port}: ECONNREFUSED`),
      `${command}: says why`,
    )
    // Requests sent together (status reads CRDs and migrations at once) each retry, logged once per attempt (issue 46, item 3).
    t.equal(connectRetries(two).length, 1, `${command}: one retry, logged once at warn`)
    t.match(connectRetries(two)[0], { errno: 'ECONNREFUSED', attempt: 1, of: 2 }, `${command}: --connect-attempts 2 is one retry`)
    const one = await run('--connect-attempts', '1')
    t.equal(connectRetries(one).length, 0, `${command}: --connect-attempts 1: no retry`)
  }
})

t.test('a name that does not resolve: CRDM_UNREACHABLE with ENOTFOUND', async (t) => {
  const dir = await tempDir()
  const http = new KubeHttp(loadKubeConfig(await kubeconfig(dir, 'dns', { server: 'https://no-such-host.invalid:6443' }, { token: 'x' })), {
    connectAttempts: 1,
  })
  t.teardown(() => http.close())
  await t.rejects(http.request({ method: 'GET', path: '/version' }), {
    code: 'CRDM_UNREACHABLE',
    errno: 'ENOTFOUND',
    retryable: false,
    message: /cannot reach the API server at https:\/\/no-such-host\.invalid:6443: ENOTFOUND, the name does not resolve/,
  })
})

t.test('a server that takes the connection and never answers: ETIMEDOUT after the connect timeout, not the request timeout', async (t) => {
  const silent = createServer(() => {}) // accepts, never says a word (no TLS handshake)
  silent.listen(0, '127.0.0.1')
  await once(silent, 'listening')
  t.teardown(() => silent.close())
  const { port } = silent.address() as AddressInfo
  const dir = await tempDir()
  const warnings: unknown[] = []
  const http = new KubeHttp(loadKubeConfig(await kubeconfig(dir, 'silent', { server: `https://127.0.0.1:${port}` }, { token: 'x' })), {
    connectAttempts: 2,
    connectTimeoutMs: 300,
    defaultTimeoutMs: 600_000,
    logger: { warn: (o: unknown) => warnings.push(o) },
  })
  t.teardown(() => http.close())
  await t.rejects(http.request({ method: 'GET', path: '/version' }), {
    code: 'CRDM_UNREACHABLE',
    errno: 'ETIMEDOUT',
    message: new RegExp(
      `cannot reach the API server at https://127\\.0\\.0\\.1:${port}: ETIMEDOUT, the connection timed out \\(2 attempts\\)`,
    ),
  })
  t.match(warnings, [{ errno: 'ETIMEDOUT', attempt: 1, of: 2 }], 'one retry, logged with its cause')
})

t.test(
  'TLS: a server certificate from a CA the kubeconfig does not hold; a tls-server-name it does not cover; an expired one',
  async (t) => {
    const cp = await getControlPlane()
    const pems = await generate([{ name: 'commonName', value: 'localhost' }], {
      keyType: 'ec',
      extensions: [{ name: 'subjectAltName', altNames: [{ type: 2, value: 'localhost' }] }],
    })
    const server = https.createServer({ cert: pems.cert, key: pems.private }, (_req, res) => res.end('{}'))
    server.listen(0, '127.0.0.1')
    await once(server, 'listening')
    t.teardown(() => server.close())
    const { port } = server.address() as AddressInfo
    const dir = await tempDir()

    // The kubeconfig trusts the test control plane's CA, not the one that signed this server.
    const untrusted = await migrate(
      await kubeconfig(
        dir,
        'other-ca',
        { server: `https://localhost:${port}`, 'certificate-authority-data': b64(cp.caPem) },
        { token: 'x' },
      ),
    )
    t.equal(untrusted.code, 1)
    t.match(
      untrusted.stdout,
      new RegExp(
        `CRDM_TLS: TLS: the certificate of the API server at localhost:${port} is not trusted: \\w+, signed by an authority not in the CA bundle; check certificate-authority\\(-data\\) of cluster "other-ca"`,
      ),
    )
    t.equal(connectRetries(untrusted).length, 0, 'a TLS failure is not retried: it will not pass')

    // The right CA, the wrong name: the certificate covers localhost only.
    const misnamed = await migrate(
      await kubeconfig(
        dir,
        'misnamed',
        { server: `https://localhost:${port}`, 'certificate-authority-data': b64(pems.cert), 'tls-server-name': 'api.example.com' },
        { token: 'x' },
      ),
    )
    t.equal(misnamed.code, 1)
    t.match(
      misnamed.stdout,
      /CRDM_TLS: TLS: .* does not cover "api\.example\.com" \(it covers DNS:localhost\) \(hostname mismatch\); fix tls-server-name of cluster "misnamed"/,
    )

    // The right CA and name, but the certificate's time is over.
    const expired = await generate([{ name: 'commonName', value: 'localhost' }], {
      keyType: 'ec',
      notBeforeDate: new Date(Date.now() - 3 * 86_400_000),
      notAfterDate: new Date(Date.now() - 86_400_000),
      extensions: [{ name: 'subjectAltName', altNames: [{ type: 2, value: 'localhost' }] }],
    })
    const old = https.createServer({ cert: expired.cert, key: expired.private }, (_req, res) => res.end('{}'))
    old.listen(0, '127.0.0.1')
    await once(old, 'listening')
    t.teardown(() => old.close())
    const oldPort = (old.address() as AddressInfo).port
    const outdated = await migrate(
      await kubeconfig(
        dir,
        'expired',
        { server: `https://localhost:${oldPort}`, 'certificate-authority-data': b64(expired.cert) },
        { token: 'x' },
      ),
    )
    t.equal(outdated.code, 1)
    t.match(
      outdated.stdout,
      new RegExp(`CRDM_TLS: TLS: the certificate of the API server at localhost:${oldPort} is not valid now: CERT_HAS_EXPIRED`),
    )
  },
)

t.test('the real API server: a bad token is CRDM_UNAUTHORIZED, a user without RBAC CRDM_FORBIDDEN with what it may not do', async (t) => {
  const cp = await getControlPlane()
  const dir = await tempDir()
  const cluster = { server: cp.server, 'certificate-authority-data': b64(cp.caPem) }

  const badToken = await migrate(await kubeconfig(dir, 'bad-token', cluster, { token: 'not-a-token' }))
  t.equal(badToken.code, 1)
  t.match(
    badToken.stdout,
    /CRDM_UNAUTHORIZED: GET \/apis\/apiextensions\.k8s\.io\/v1\/customresourcedefinitions\/widgets\.example\.com: 401 .* the API server at https:\/\/127\.0\.0\.1:\d+ does not accept the credentials of user "bad-token-user" of context "bad-token" \(kubeconfig .*bad-token\.yaml\)/,
  )
  t.equal(connectRetries(badToken).length, 0)

  const nobody = await cp.mintUser(uniqueName('no-rbac'))
  const forbidden = await migrate(
    await kubeconfig(dir, 'no-rbac', cluster, {
      'client-certificate-data': b64(nobody.certPem),
      'client-key-data': b64(nobody.keyPem),
    }),
  )
  t.equal(forbidden.code, 1)
  t.match(
    forbidden.stdout,
    /CRDM_FORBIDDEN: GET \/apis\/apiextensions\.k8s\.io\/v1\/customresourcedefinitions\/widgets\.example\.com: 403 .* user "no-rbac-user" of context "no-rbac" may not use verb "get" on "customresourcedefinitions" in API group "apiextensions\.k8s\.io" \(name "widgets\.example\.com"\), cluster-wide: grant it with RBAC/,
  )
})

t.test('a kubeconfig that cannot be used exits 2, like any configuration error; a stale entry elsewhere changes nothing', async (t) => {
  const cp = await getControlPlane()
  const dir = await tempDir()
  const file = path.join(dir, 'config')
  await writeFile(
    file,
    stringify({
      clusters: [
        { name: 'good', cluster: { server: cp.server, 'certificate-authority-data': b64(cp.caPem) } },
        { name: 'bastion', cluster: { server: 'https://old:6443', 'proxy-url': 'socks5://bastion:1080' } },
      ],
      users: [
        { name: 'admin', user: { token: 'not-a-token' } },
        { name: 'gke-legacy', user: { 'auth-provider': { name: 'gcp', config: { 'cmd-path': 'gcloud' } } } },
      ],
      contexts: [
        { name: 'good', context: { cluster: 'good', user: 'admin' } },
        { name: 'gke', context: { cluster: 'good', user: 'gke-legacy' } },
        { name: 'old', context: { cluster: 'bastion', user: 'admin' } },
      ],
      'current-context': 'gke',
    }),
  )
  const stale = await migrate(file)
  t.equal(stale.code, 2, 'exit code 2: configuration')
  t.match(
    stale.stderr,
    /CRDM_KUBECONFIG: context "gke" cannot be used: kubeconfig .*: user "gke-legacy": auth-provider "gcp" is not supported/,
  )
  const socks = await migrate(file, '--context', 'old')
  t.equal(socks.code, 2)
  t.match(
    socks.stderr,
    /context "old" cannot be used: .*cluster "bastion": proxy-url "socks5:\/\/bastion:1080": only http:\/\/ and https:\/\/ proxies/,
  )
  // The context in use is fine: the command reaches the API server (which refuses the token).
  const good = await migrate(file, '--context', 'good')
  t.match(good.stdout, /CRDM_UNAUTHORIZED/, 'the stale entries did not stop it')
})
