/**
 * Issue 44, item 4: the one reader of files someone else names (src/regular-file.ts), and
 * every credential file read through it: a kubeconfig, a token file, a client certificate
 * and key, a cluster's CA file and the in-cluster namespace file that is a FIFO or a device
 * is refused at once, named, instead of holding the process (readFileSync on a FIFO without
 * a writer never returned; on /dev/zero it read until memory ran out). The CLI's own
 * behaviour, with bounded waits: test/integration/credential-files.test.ts.
 */
import { execFileSync } from 'node:child_process'
import { mkdtemp, rm, symlink, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { stringify } from 'yaml'
import { inClusterContext, loadKubeConfig } from '../../src/kube/client.js'
import { Credentials } from '../../src/kube/credentials.js'
import type { KubeContext, KubeUser } from '../../src/kube/kubeconfig.js'
import { tlsOptions } from '../../src/kube/transport.js'
import {
  FileRefused,
  MAX_CREDENTIAL_FILE_BYTES,
  MAX_KUBECONFIG_BYTES,
  readRegularFile,
  readRegularFileSync,
  type RegularFileOptions,
} from '../../src/regular-file.js'

const dir = await mkdtemp(path.join(os.tmpdir(), 'crd-migrator-regular-file-'))
t.teardown(() => rm(dir, { recursive: true, force: true }))
const fifo = path.join(dir, 'fifo')
execFileSync('mkfifo', ['-m', '600', fifo])
const options: RegularFileOptions = { what: 'the file', code: 'CRDM_KUBECONFIG', maxBytes: 10 }

t.test('readRegularFile and readRegularFileSync: regular files up to the bound; anything else refused at once', async (t) => {
  await writeFile(path.join(dir, 'ten'), '0123456789')
  await writeFile(path.join(dir, 'eleven'), '0123456789x')
  await writeFile(path.join(dir, 'empty'), '')
  await symlink(path.join(dir, 'ten'), path.join(dir, 'link'))
  const reads: Array<[string, (file: string) => Promise<Buffer>]> = [
    ['async', (file) => readRegularFile(file, options)],
    ['sync', async (file) => readRegularFileSync(file, options)],
  ]
  for (const [how, read] of reads) {
    t.equal((await read(path.join(dir, 'ten'))).toString(), '0123456789', `${how}: the bound exactly`)
    t.equal((await read(path.join(dir, 'link'))).toString(), '0123456789', `${how}: through a symlink`)
    t.equal((await read(path.join(dir, 'empty'))).length, 0, `${how}: empty`)
    const refusals: Array<[string, string, RegExp]> = [
      ['a FIFO without a writer', fifo, /^the file is a FIFO, not a regular file: /],
      ['/dev/zero', '/dev/zero', /^the file is a character device, not a regular file: /],
      ['a directory', dir, /^the file is a directory, not a regular file: /],
      ['one byte past the bound', path.join(dir, 'eleven'), /^the file holds more than 10 bytes: not read$/],
    ]
    for (const [what, file, message] of refusals) {
      const started = performance.now()
      await t.rejects(read(file), { name: 'FileRefused', code: 'CRDM_KUBECONFIG', message }, `${how}: ${what}`)
      t.ok(performance.now() - started < 1000, `${how}: ${what}: refused at once`)
    }
    await t.rejects(read(path.join(dir, 'missing')), { code: 'ENOENT' }, `${how}: the open's own error, as it is`)
  }
  // A larger file comes through whole, across chunks.
  const big = Buffer.alloc(200_000, 0x61)
  await writeFile(path.join(dir, 'big'), big)
  const large = { ...options, maxBytes: 200_000 }
  t.ok((await readRegularFile(path.join(dir, 'big'), large)).equals(big), 'async: 200,000 bytes whole')
  t.ok(readRegularFileSync(path.join(dir, 'big'), large).equals(big), 'sync: 200,000 bytes whole')
  t.ok(new FileRefused('CRDM_KUBECONFIG', 'x') instanceof Error)
  t.equal(MAX_KUBECONFIG_BYTES, 16 * 1024 * 1024)
  t.equal(MAX_CREDENTIAL_FILE_BYTES, 4 * 1024 * 1024)
})

function kubeconfig(name: string, user: Record<string, unknown>, cluster: Record<string, unknown> = {}): Promise<string> {
  const file = path.join(dir, name)
  return writeFile(
    file,
    stringify({
      clusters: [{ name: 'c', cluster: { server: 'https://127.0.0.1:6443', ...cluster } }],
      users: [{ name: 'u', user }],
      contexts: [{ name: 'c', context: { cluster: 'c', user: 'u' } }],
      'current-context': 'c',
    }),
  ).then(() => file)
}

function contextOf(user: Omit<KubeUser, 'name'>): KubeContext {
  return {
    name: 'ctx',
    cluster: { name: 'c', server: new URL('https://api.example.com:6443'), insecureSkipTlsVerify: false },
    user: { name: 'u', ...user },
    origin: 'kubeconfig /test',
  }
}

t.test('every credential file goes through it: a FIFO or /dev/zero is refused with CRDM_KUBECONFIG, naming the file', async (t) => {
  for (const file of [fifo, '/dev/zero']) {
    const kind = file === fifo ? 'a FIFO' : 'a character device'
    t.throws(
      () => loadKubeConfig(file),
      {
        code: 'CRDM_KUBECONFIG',
        message: `kubeconfig ${file} is ${kind}, not a regular file: name the kubeconfig file itself (a FIFO or a device is refused, never waited on or read)`,
      },
      `--kubeconfig ${kind}`,
    )
    t.throws(
      () => loadKubeConfig(undefined, { env: { KUBECONFIG: file }, homeDir: dir, serviceAccountDir: path.join(dir, 'none') }),
      { code: 'CRDM_KUBECONFIG', message: new RegExp(`^kubeconfig ${file} is ${kind}`) },
      `$KUBECONFIG ${kind}`,
    )
    const token = new Credentials(contextOf({ tokenFile: file }), { refreshMs: 60_000 })
    await t.rejects(
      token.current(),
      {
        code: 'CRDM_KUBECONFIG',
        message: `token file ${file} (user "u") is ${kind}, not a regular file: credentials are read from regular files only (a FIFO or a device is refused, never waited on or read)`,
      },
      `tokenFile ${kind}`,
    )
    const cert = new Credentials(contextOf({ clientCertificate: file, clientKeyData: 'k' }), { refreshMs: 60_000 })
    await t.rejects(
      cert.current(),
      { code: 'CRDM_KUBECONFIG', message: new RegExp(`^client certificate ${file} \\(user "u"\\) is ${kind}`) },
      `client-certificate ${kind}`,
    )
    const key = new Credentials(contextOf({ clientCertificateData: 'c', clientKey: file }), { refreshMs: 60_000 })
    await t.rejects(
      key.current(),
      { code: 'CRDM_KUBECONFIG', message: new RegExp(`^client key ${file} \\(user "u"\\) is ${kind}`) },
      `client-key ${kind}`,
    )
    const context = loadKubeConfig(await kubeconfig(`ca-${path.basename(file)}`, { token: 'x' }, { 'certificate-authority': file }))
    t.throws(
      () => tlsOptions(context.cluster, undefined),
      { code: 'CRDM_KUBECONFIG', message: new RegExp(`^certificate-authority ${file} of cluster "c" is ${kind}`) },
      `certificate-authority ${kind}`,
    )
  }
  // The in-cluster mount: a namespace file that is a FIFO is refused, not waited on.
  const sa = path.join(dir, 'sa')
  execFileSync('mkdir', ['-p', sa])
  await writeFile(path.join(sa, 'token'), 't')
  execFileSync('mkfifo', [path.join(sa, 'namespace')])
  t.throws(
    () => inClusterContext({ KUBERNETES_SERVICE_HOST: 'h', KUBERNETES_SERVICE_PORT: '443' }, sa),
    { code: 'CRDM_KUBECONFIG', message: /namespace file .* is a FIFO, not a regular file/ },
    'the in-cluster namespace file',
  )
  // A token file that is a regular file still works, and a missing one says so as before.
  const good = new Credentials(contextOf({ tokenFile: path.join(sa, 'token') }), { refreshMs: 60_000 })
  t.same((await good.current()).headers, { Authorization: 'Bearer t' })
  const missing = new Credentials(contextOf({ tokenFile: path.join(dir, 'missing') }), { refreshMs: 60_000 })
  await t.rejects(missing.current(), { code: 'CRDM_KUBECONFIG', message: /^cannot read .*missing \(user "u"\): ENOENT/ })
})
