/**
 * `crd-migrator webhook-config` as an installed package runs it: the built CLI started from
 * a temporary directory outside the repository (no certs/, no webhook-config/ there).
 * YAML on stdout by default and for `--out -` (no file named "-"), `--out FILE` writes the
 * file; a missing or unusable CA is a coded usage error (exit 2), never CRDM_INTERNAL.
 * The API server accepts what it prints (a server-side dry run of the create).
 */
import { existsSync } from 'node:fs'
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import t from 'tap'
import { parse } from 'yaml'
import { generateDevCertificates } from '../../dev/certs/devcerts.js'
import { ContentType } from '../../src/kube/http.js'
import { httpFor } from '../helpers/cluster.js'
import { getControlPlane, uniqueName } from '../helpers/controlplane.js'
import { runProcess } from '../helpers/run-process.js'

const main = resolve('dist/cli/main.js')

t.test('webhook-config from a directory outside the repository', async (t) => {
  const cwd = await mkdtemp(join(tmpdir(), 'crd-migrator-elsewhere-'))
  t.teardown(() => rm(cwd, { recursive: true, force: true }))
  const certs = await generateDevCertificates(join(cwd, 'pki'))
  const run = (...args: string[]) => runProcess(process.execPath, [main, 'webhook-config', ...args], { cwd })

  const missing = await run()
  t.equal(missing.code, 2, 'no --ca: exit 2', { stderr: missing.stderr })
  t.match(missing.stderr, /^crd-migrator: CRDM_CONFIG_INVALID: webhook-config: name the CA .*--ca FILE/)
  t.equal(missing.stdout, '')
  const absent = await run('--ca', 'certs/ca.crt')
  t.equal(absent.code, 2, 'a CA file that does not exist: exit 2')
  t.match(absent.stderr, /CRDM_CONFIG_INVALID: webhook-config: cannot read --ca certs\/ca\.crt: ENOENT/)
  t.notMatch(absent.stderr, /CRDM_INTERNAL/)
  await writeFile(join(cwd, 'not-a-cert.pem'), 'hello\n')
  const notPem = await run('--ca', 'not-a-cert.pem')
  t.equal(notPem.code, 2, 'not a PEM certificate: exit 2')
  t.match(notPem.stderr, /CRDM_CONFIG_INVALID: webhook-config: --ca not-a-cert\.pem holds no PEM certificate/)
  const badPort = await run('--ca', 'pki/ca.crt', '--port', '70000')
  t.equal(badPort.code, 2, 'port out of range: exit 2')
  t.match(badPort.stderr, /--port must be a whole number from 1 to 65535/)

  const stdout = await run('--ca', 'pki/ca.crt', '--port', '19443', '--host', 'webhook.example.test')
  t.equal(stdout.code, 0, 'stdout by default', { stderr: stdout.stderr })
  const config = parse(stdout.stdout) as {
    metadata: { name: string }
    webhooks: Array<{ clientConfig: { url: string; caBundle: string } }>
  }
  t.equal(config.webhooks[0]?.clientConfig.url, 'https://webhook.example.test:19443/validate-crd')
  t.equal(Buffer.from(config.webhooks[0]!.clientConfig.caBundle, 'base64').toString('utf8'), certs.caCertPem, 'caBundle is the CA given')
  const dash = await run('--ca', 'pki/ca.crt', '--port', '19443', '--host', 'webhook.example.test', '--out', '-')
  t.equal(dash.code, 0)
  t.equal(dash.stdout, stdout.stdout, '--out - is stdout too')
  t.notOk(existsSync(join(cwd, '-')), 'no file named "-"')
  const bundle = await run(
    '--ca-bundle',
    Buffer.from(certs.caCertPem).toString('base64'),
    '--port',
    '19443',
    '--host',
    'webhook.example.test',
  )
  t.equal(bundle.stdout, stdout.stdout, '--ca-bundle gives the same')
  const file = await run('--ca', 'pki/ca.crt', '--out', 'out/vwc.yaml')
  t.equal(file.code, 0, '--out FILE', { stderr: file.stderr })
  t.equal(file.stdout, '', 'nothing on stdout')
  t.match(file.stderr, 'wrote out/vwc.yaml; install it with: kubectl apply -f out/vwc.yaml')
  t.same((await readdir(cwd)).sort(), ['not-a-cert.pem', 'out', 'pki'], 'only the file asked for was written')

  // The API server accepts it (create with dryRun=All: validated, nothing stored).
  const cp = await getControlPlane()
  const vwc = parse(await readFile(join(cwd, 'out/vwc.yaml'), 'utf8')) as { metadata: { name: string } }
  vwc.metadata.name = uniqueName('vwc')
  const created = await httpFor(cp.kubeconfigPath).request({
    method: 'POST',
    path: '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations?dryRun=All',
    body: vwc,
    contentType: ContentType.json,
  })
  t.equal(created.status, 201, 'the API server accepts the configuration')
})
