/**
 * The standalone executable (issue 46, item 1): `npm run build:executable`'s script builds
 * it from dist/ into a temporary directory, with its archive, checksum and krew manifest;
 * then it runs with no Node.js anywhere on PATH and an empty environment, as a workstation
 * without Node runs it: its version is the package's, it is the kubectl plugin and kubectl's
 * completion helper when linked under their names, and it migrates a CRD on the real API
 * server (objects stored in v1, rewritten in v2, judged in etcd).
 */
import { execFile } from 'node:child_process'
import { createHash } from 'node:crypto'
import { mkdtemp, readFile, rm, symlink } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { parse } from 'yaml'
import {
  createCrd,
  createObjects,
  crdManifest,
  deleteCrd,
  httpFor,
  refFor,
  setStorageVersion,
  storedVersionsInEtcd,
} from '../helpers/cluster.js'
import { getControlPlane, uniqueGroup, uniqueName } from '../helpers/controlplane.js'

const run = promisify(execFile)
const dir = await mkdtemp(join(tmpdir(), 'crd-migrator-exe-'))
t.teardown(() => rm(dir, { recursive: true, force: true }))
const { version } = JSON.parse(await readFile('package.json', 'utf8')) as { version: string }

await run(process.execPath, ['scripts/build-executable.mjs', '--out', dir, '--base-url', 'https://example.org/r/v{{VERSION}}'], {
  maxBuffer: 1 << 20,
})
const exe = join(dir, 'crd-migrator')
/** No Node.js: an empty environment, PATH without the directory of the node that runs the tests. */
const bare = { env: { PATH: '/usr/bin:/bin', HOME: dir } }

t.test('the archive, its checksum and the krew manifest agree', async (t) => {
  const archive = `crd-migrator_v${version}_linux_amd64.tar.gz`
  const sha256 = createHash('sha256')
    .update(await readFile(join(dir, archive)))
    .digest('hex')
  t.equal(await readFile(join(dir, `${archive}.sha256`), 'utf8'), `${sha256}  ${archive}\n`)
  const manifest = parse(await readFile(join(dir, 'krew-crd-migrator.yaml'), 'utf8')) as {
    kind: string
    metadata: { name: string }
    spec: { version: string; platforms: { selector: { matchLabels: Record<string, string> }; uri: string; sha256: string; bin: string }[] }
  }
  t.match(manifest, { kind: 'Plugin', metadata: { name: 'crd-migrator' }, spec: { version: `v${version}` } })
  t.same(manifest.spec.platforms[0], {
    ...manifest.spec.platforms[0],
    selector: { matchLabels: { os: 'linux', arch: 'amd64' } },
    uri: `https://example.org/r/v${version}/${archive}`,
    sha256,
    bin: 'crd-migrator',
  })
  const { stdout } = await run('tar', ['-tzf', join(dir, archive)])
  t.same(stdout.split('\n').filter(Boolean).sort(), ['README.md', 'crd-migrator'], 'the archive holds what the manifest names')
})

t.test('runs without Node.js: version, the kubectl plugin, kubectl completion', async (t) => {
  t.equal((await run(exe, ['--version'], bare)).stdout.trim(), version, "the package's version, compiled in")
  await symlink(exe, join(dir, 'kubectl-crd_migrator'))
  await symlink(exe, join(dir, 'kubectl_complete-crd_migrator'))
  const help = (await run(join(dir, 'kubectl-crd_migrator'), ['--help'], bare)).stdout
  t.match(help, /^Usage: kubectl crd-migrator /, 'named kubectl-crd_migrator, it is the plugin')
  const completion = (await run(join(dir, 'kubectl_complete-crd_migrator'), ['mig'], bare)).stdout
  t.match(completion, /^migrate\t.*\n:4\n$/, "named kubectl_complete-crd_migrator, it answers kubectl's completion request")
})

t.test('migrates a CRD on the real API server', async (t) => {
  const cp = await getControlPlane()
  const http = httpFor(cp.kubeconfigPath)
  const crd = crdManifest({ group: uniqueGroup('exe'), versions: ['v1', 'v2'], storage: 'v1' })
  await createCrd(http, crd)
  t.teardown(() => deleteCrd(http, crd.metadata.name))
  const ns = uniqueName('exe')
  await http.request({ method: 'POST', path: '/api/v1/namespaces', body: { metadata: { name: ns } } })
  t.teardown(() => http.request({ method: 'DELETE', path: `/api/v1/namespaces/${ns}` }).then(() => undefined))
  await createObjects(http, refFor(crd, 'v1'), [ns], 20)
  await setStorageVersion(http, crd.metadata.name, 'v2')

  const { stdout } = await run(
    exe,
    ['migrate', crd.metadata.name, '--kubeconfig', cp.kubeconfigPath, '-o', 'json', '--progress-every', '0'],
    bare,
  )
  const [result] = JSON.parse(stdout) as { outcome: string; storedVersionsAfter: string[] }[]
  t.match(result, { outcome: 'Succeeded', storedVersionsAfter: ['v2'] }, 'the run Succeeded and narrowed storedVersions', { stdout })
  t.same(
    Object.fromEntries(await storedVersionsInEtcd(cp, crd.spec.group, crd.spec.names.plural)),
    { [`${crd.spec.group}/v2`]: 20 },
    'etcd holds every object in v2',
  )
})
