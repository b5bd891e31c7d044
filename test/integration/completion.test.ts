/**
 * Completion from the built program against the real API server: `__complete` lists the
 * cluster's CRD names for migrate/status/check/plan, managed ones first (the selector and
 * names of the flags, of the environment), the kubeconfig's contexts for --context (the
 * --kubeconfig given earlier on the line, or $KUBECONFIG), and says nothing and offers
 * nothing, quickly, for a kubeconfig that does not parse, a server that refuses, one that
 * never answers. Then the generated bash script in a real bash, kubectl_complete-crd_migrator,
 * and kubectl's own plugin completion (when kubectl is installed) running it.
 */
import { spawnSync } from 'node:child_process'
import { chmodSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { createServer, type Socket } from 'node:net'
import { dirname, join, resolve } from 'node:path'
import t, { type Test } from 'tap'
import { parse, stringify } from 'yaml'
import { CRD_API } from '../../src/kube/paths.js'
import { crdManifest, deleteCrd, httpFor } from '../helpers/cluster.js'
import { getControlPlane, uniqueGroup, uniqueName } from '../helpers/controlplane.js'
import { runProcess } from '../helpers/run-process.js'

const main = resolve('dist/cli/main.js')
const pluginComplete = resolve('dist/cli/kubectl-complete.js')
const cp = await getControlPlane()
const http = httpFor(cp.kubeconfigPath)

// Two CRDs managed by label, one by name, two not managed: the unmanaged ones sort first by name.
const group = uniqueGroup('complete')
const label = uniqueName('complete')
const name = (plural: string) => `${plural}.${group}`
const managedByLabel = ['mangos', 'zebras']
const managedByName = 'kiwis'
const unmanaged = ['apples', 'bananas']
for (const plural of [...managedByLabel, managedByName, ...unmanaged]) {
  const crd = crdManifest({ group, plural, kind: plural[0]!.toUpperCase() + plural.slice(1, -1), versions: ['v1'], storage: 'v1' })
  if (managedByLabel.includes(plural)) crd.metadata.labels = { 'complete-test': label }
  await http.request({ method: 'POST', path: CRD_API, body: crd })
  t.teardown(() => deleteCrd(http, crd.metadata.name))
}
/** Our CRDs in the order offered: managed ones (by name), then the others. */
const expected = [name(managedByName), name('mangos'), name('zebras'), name('apples'), name('bananas')]

const dir = t.testdir()
// The managed CRDs, as a config file gives them: every command has --config (migrate has no --crds).
const selectionFile = join(dir, 'selection.yaml')
writeFileSync(
  selectionFile,
  stringify({ migrator: { selector: { labelSelector: `complete-test=${label}`, names: [name(managedByName)] } } }),
)
const selection = ['--config', selectionFile]
/** The environment of a shell: no kubeconfig but the ones a test names, node on PATH. */
const baseEnv: NodeJS.ProcessEnv = {
  ...process.env,
  KUBECONFIG: '',
  HOME: dir,
  PATH: `${dirname(process.execPath)}:${process.env['PATH']}`,
}
for (const key of Object.keys(baseEnv)) if (key.startsWith('CRD_MIGRATOR_') && key !== 'CRD_MIGRATOR_TEST_CONTROLPLANE') delete baseEnv[key]

async function complete(words: string[], env: NodeJS.ProcessEnv = {}, script = main) {
  const started = performance.now()
  const r = await runProcess(process.execPath, [script, ...words], { env: { ...baseEnv, ...env } })
  const lines = r.stdout.split('\n').slice(0, -1)
  return {
    code: r.code,
    stderr: r.stderr,
    seconds: (performance.now() - started) / 1000,
    directive: lines.at(-1),
    candidates: lines.slice(0, -1).map((l) => l.split('\t')),
  }
}
const ours = (candidates: string[][]) => candidates.map((c) => c[0]!).filter((v) => v.endsWith(`.${group}`))

t.test('__complete migrate "": the CRDs of the cluster, managed ones first', async (t) => {
  const r = await complete(['__complete', 'migrate', '--kubeconfig', cp.kubeconfigPath, ...selection, ''])
  t.equal(r.code, 0)
  t.equal(r.stderr, '')
  t.equal(r.directive, ':36', 'no file names, keep this order')
  t.same(ours(r.candidates), expected)
  const firstUnmanaged = r.candidates.findIndex((c) => c[1] !== 'managed')
  t.ok(
    r.candidates.slice(firstUnmanaged).every((c) => c[1] !== 'managed'),
    'every managed CRD of the cluster comes before every other',
  )
  t.same(
    r.candidates.slice(0, firstUnmanaged).map((c) => c[0]),
    [name(managedByName), name('mangos'), name('zebras')],
  )
})

t.test('the selector of the environment, $KUBECONFIG, a prefix, names given already, and every command with CRD arguments', async (t) => {
  const env = { KUBECONFIG: cp.kubeconfigPath, CRD_MIGRATOR_SELECTOR: `complete-test=${label}` }
  for (const command of ['migrate', 'status', 'check', 'plan']) {
    const r = await complete(['__complete', command, name('zebras'), '--log-level', 'warn', ''], env)
    t.equal(r.stderr, '', command)
    t.same(ours(r.candidates), [name('mangos'), name('apples'), name('bananas'), name(managedByName)], `${command}: zebras named already`)
  }
  const r = await complete(['__complete', 'status', `mangos.${group.slice(0, 10)}`], env)
  t.same(r.candidates, [[name('mangos'), 'managed']], 'by prefix')
})

/** A kubeconfig with the control plane's context ("good"), one whose server never answers (current), and one more. */
async function kubeconfigs(t: Test): Promise<{ file: string; hanging: () => number }> {
  const sockets = new Set<Socket>()
  const server = createServer((s) => {
    sockets.add(s)
    s.on('error', () => {})
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    for (const s of sockets) s.destroy()
    server.close()
  })
  const admin = parse(readFileSync(cp.kubeconfigPath, 'utf8')) as {
    clusters: Array<{ name: string; cluster: Record<string, unknown> }>
    users: Array<{ name: string }>
    contexts: Array<{ name: string; context: { cluster: string; user: string } }>
  }
  const port = (server.address() as { port: number }).port
  const file = join(t.testdir(), 'kubeconfig')
  writeFileSync(
    file,
    stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [...admin.clusters, { name: 'hang', cluster: { server: `https://127.0.0.1:${port}`, 'insecure-skip-tls-verify': true } }],
      users: admin.users,
      contexts: [
        { name: 'good', context: admin.contexts[0]!.context },
        { name: 'hang', context: { cluster: 'hang', user: admin.users[0]!.name } },
        { name: 'arn:aws:eks:eu-west-1:1:cluster/prod', context: { cluster: 'hang', user: admin.users[0]!.name } },
      ],
      'current-context': 'hang',
    }),
  )
  return { file, hanging: () => sockets.size }
}

t.test('--context: the contexts of the kubeconfig named earlier on the line, or of $KUBECONFIG', async (t) => {
  const { file } = await kubeconfigs(t)
  const contexts = ['good', 'hang', 'arn:aws:eks:eu-west-1:1:cluster/prod']
  let r = await complete(['__complete', 'status', '--kubeconfig', file, '--context', ''])
  t.equal(r.stderr, '')
  t.equal(r.directive, ':4')
  t.same(
    r.candidates.map((c) => c[0]),
    contexts,
  )
  t.match(r.candidates[1]![1], /^current, cluster hang$/, 'the current context says so')
  r = await complete(['__complete', 'migrate', '--context=a'], { KUBECONFIG: file })
  t.same(r.candidates, [['arn:aws:eks:eu-west-1:1:cluster/prod', 'cluster hang']], '$KUBECONFIG, --context= form, by prefix')
  r = await complete(['__complete', 'migrate', '--context', ''])
  t.same(r.candidates, [], 'no kubeconfig at all: no contexts')
  t.equal(r.stderr, '')
})

t.test('a server that never answers, one that refuses, a kubeconfig that does not parse: nothing, quietly, at once', async (t) => {
  const { file, hanging } = await kubeconfigs(t)
  // The current context's server accepts connections and never answers: the deadline ends the look-up.
  let r = await complete(['__complete', 'migrate', '--kubeconfig', file, ''])
  t.equal(r.code, 0)
  t.equal(r.stderr, '')
  t.equal(r.directive, ':0', 'no candidates, the shell may offer file names')
  t.same(r.candidates, [])
  t.ok(hanging() > 0, 'it did connect to the server that never answers')
  t.ok(r.seconds < 10, `back in ${r.seconds.toFixed(1)} s (a deadline of 2.5 s, and the start of node)`)
  // --context on the line picks the cluster the look-up goes to.
  r = await complete(['__complete', 'migrate', '--kubeconfig', file, '--context', 'good', ...selection, ''])
  t.same(ours(r.candidates), expected, '--context good: the control plane answers')

  const refused = join(t.testdir(), 'refused')
  const port = await new Promise<number>((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port
      s.close(() => resolve(p))
    })
  })
  writeFileSync(
    refused,
    stringify({
      clusters: [{ name: 'c', cluster: { server: `https://127.0.0.1:${port}` } }],
      users: [{ name: 'u', user: { token: 'x' } }],
      contexts: [{ name: 'c', context: { cluster: 'c', user: 'u' } }],
      'current-context': 'c',
    }),
  )
  const broken = join(t.testdir(), 'broken')
  writeFileSync(broken, 'clusters: [ {\n')
  for (const [what, words] of [
    ['a server that refuses', ['__complete', 'status', '--kubeconfig', refused, '']],
    ['a kubeconfig that does not parse', ['__complete', 'status', '--kubeconfig', broken, '']],
    ['contexts of a kubeconfig that does not parse', ['__complete', 'status', '--kubeconfig', broken, '--context', '']],
    ['a kubeconfig that does not exist', ['__complete', 'plan', '--kubeconfig', join(dir, 'nope'), '']],
    ['a config file that does not parse', ['__complete', 'check', '--config', broken, '--kubeconfig', cp.kubeconfigPath, '']],
  ] as const) {
    r = await complete([...words])
    t.equal(r.code, 0, `${what}: exit 0`)
    t.equal(r.stderr, '', `${what}: nothing on stderr`)
    t.same(r.candidates, [], `${what}: no candidates`)
    t.equal(r.directive, ':0', `${what}: the default directive`)
    t.ok(r.seconds < 10, `${what}: back in ${r.seconds.toFixed(1)} s`)
  }
})

/** A directory on PATH with the package's executables, as npm installs them (links to the built files, executable). */
function installedBins(): string {
  const bin = join(dir, 'bin')
  spawnSync('mkdir', ['-p', bin])
  for (const file of [main, pluginComplete]) chmodSync(file, 0o755)
  const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { bin: Record<string, string> }
  for (const [command, target] of Object.entries(pkg.bin)) {
    try {
      symlinkSync(resolve(target), join(bin, command))
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
    }
  }
  return bin
}

t.test('the bash script in a real bash: CRD names and contexts through the program', async (t) => {
  const bin = installedBins()
  const { file } = await kubeconfigs(t)
  const env = { ...baseEnv, PATH: `${bin}:${baseEnv['PATH']}` }
  const reply = (words: string[], line?: string) => {
    const array = words.map((w) => `'${w}'`).join(' ')
    const lineVars = line === undefined ? '' : `COMP_LINE='${line}'; COMP_POINT=${line.length};`
    const r = spawnSync(
      'bash',
      [
        '-c',
        `source <(node '${main}' completion bash); COMP_WORDS=(${array}); COMP_CWORD=${words.length - 1}; ${lineVars} _crd_migrator; printf '%s\\n' "\${COMPREPLY[@]}"`,
      ],
      { encoding: 'utf8', env },
    )
    t.equal(r.stderr, '', `${words.join(' ')}: nothing on stderr`)
    return r.stdout.split('\n').filter((l) => l !== '')
  }
  const crds = reply(['crd-migrator', 'migrate', '--kubeconfig', cp.kubeconfigPath, ...selection, ''])
  t.same(
    crds.filter((v) => v.endsWith(`.${group}`)),
    expected,
  )
  t.same(reply(['crd-migrator', 'st']), ['status'])
  t.same(reply(['crd-migrator', 'status', '--kubeconfig', file, '--context', 'g']), ['good'])
  t.same(
    reply(
      ['crd-migrator', 'status', '--kubeconfig', file, '--context', '=', 'arn', ':', 'aws', ':', 'e'],
      `crd-migrator status --kubeconfig ${file} --context=arn:aws:e`,
    ),
    ['eks:eu-west-1:1:cluster/prod'],
    "--context=arn:aws:e as bash splits it: what follows the last ':'",
  )
  t.same(reply(['crd-migrator', 'migrate', '-o', '']).sort(), ['json', 'name', 'text', 'yaml'])
})

t.test('kubectl_complete-crd_migrator: the same answers for `kubectl crd-migrator ...`', async (t) => {
  const r = await complete(['migrate', '--kubeconfig', cp.kubeconfigPath, ...selection, ''], {}, pluginComplete)
  t.equal(r.stderr, '')
  t.equal(r.directive, ':36')
  t.same(ours(r.candidates), expected)
  const commands = await complete(['st'], {}, pluginComplete)
  t.same(
    commands.candidates.map((c) => c[0]),
    ['status'],
  )
})

const noKubectl = spawnSync('kubectl', ['version', '--client']).error ? 'kubectl is not installed' : false
t.test(
  "kubectl's plugin completion runs kubectl_complete-crd_migrator from PATH; the plugin's help says kubectl crd-migrator",
  { skip: noKubectl },
  async (t) => {
    const bin = installedBins()
    const env = { ...baseEnv, PATH: `${bin}:${baseEnv['PATH']}` }
    const kubectl = (args: string[]) => runProcess('kubectl', args, { env })
    let r = await kubectl(['__complete', 'crd-migrator', 'mig'])
    t.equal(r.code, 0, 'kubectl __complete', { stderr: r.stderr })
    t.match(r.stdout, /^migrate\t.+\n:4\n$/)
    r = await kubectl(['__complete', 'crd-migrator', 'migrate', '--kubeconfig', cp.kubeconfigPath, ...selection, ''])
    t.same(
      r.stdout
        .split('\n')
        .map((l) => l.split('\t')[0]!)
        .filter((v) => v.endsWith(`.${group}`)),
      expected,
    )
    r = await kubectl(['crd-migrator', '--help'])
    t.equal(r.code, 0)
    t.match(r.stdout, /^Usage: kubectl crd-migrator \[options\] \[command\]/)
    r = await kubectl(['crd-migrator', 'status', '--help'])
    t.match(r.stdout, /^Usage: kubectl crd-migrator status /)
  },
)
