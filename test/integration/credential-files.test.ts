/**
 * Issue 44, item 4: Tab completion hung for ever on a kubeconfig or a tokenFile that is a
 * FIFO (no writer) or /dev/zero: its 2.5 s deadline is a promise race, and readFileSync
 * blocked the event loop before the race began (a token file's readFile held a thread of
 * the pool, and the process, the same way). The built program, run as a shell and a user
 * run it: `__complete` offers nothing, quietly, at once; `status` ends non-zero at once
 * with CRDM_KUBECONFIG naming the file and what it is. Each run is killed after
 * RUN_LIMIT_MS, so a regression fails here instead of hanging the suite.
 */
import { execFileSync, spawn } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import t from 'tap'
import { parse, stringify } from 'yaml'
import { getControlPlane } from '../helpers/controlplane.js'

const main = resolve('dist/cli/main.js')
const cp = await getControlPlane()
/** Longer than node's start and completion's 2.5 s deadline; a run still going then is a hang. */
const RUN_LIMIT_MS = 15_000

const dir = t.testdir()
const fifo = join(dir, 'fifo')
execFileSync('mkfifo', ['-m', '600', fifo])

/** The control plane's cluster (server and CA), its user's credentials replaced by `user`. */
function kubeconfigWithUser(name: string, user: Record<string, unknown>): string {
  const admin = parse(readFileSync(cp.kubeconfigPath, 'utf8')) as { clusters: Array<{ name: string; cluster: Record<string, unknown> }> }
  const file = join(dir, name)
  writeFileSync(
    file,
    stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'c', cluster: admin.clusters[0]!.cluster }],
      users: [{ name: 'u', user }],
      contexts: [{ name: 'c', context: { cluster: 'c', user: 'u' } }],
      'current-context': 'c',
    }),
  )
  return file
}

interface Run {
  code: number | null
  stdout: string
  stderr: string
  seconds: number
  killed: boolean
}

/** The built program with `args`, killed (and said so) once it has run RUN_LIMIT_MS. */
function run(args: string[]): Promise<Run> {
  const started = performance.now()
  return new Promise((done, fail) => {
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      KUBECONFIG: '',
      HOME: dir,
      PATH: `${dirname(process.execPath)}:${process.env['PATH']}`,
    }
    for (const key of Object.keys(env)) if (key.startsWith('CRD_MIGRATOR_') && key !== 'CRD_MIGRATOR_TEST_CONTROLPLANE') delete env[key]
    const child = spawn(process.execPath, [main, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    let killed = false
    const timer = setTimeout(() => {
      killed = true
      child.kill('SIGKILL')
    }, RUN_LIMIT_MS)
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d))
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d))
    child.on('error', fail)
    child.on('close', (code) => {
      clearTimeout(timer)
      done({ code, stdout, stderr, seconds: (performance.now() - started) / 1000, killed })
    })
  })
}

/** `contexts`: what `--context` completion prints (the contexts need the kubeconfig only, not the token). */
const NONE = ':0\n'
const cases: Array<{ what: string; kubeconfig: () => string; message: RegExp; contexts: string }> = [
  {
    what: 'a kubeconfig that is a FIFO',
    kubeconfig: () => fifo,
    message: new RegExp(`CRDM_KUBECONFIG: kubeconfig ${fifo} is a FIFO, not a regular file`),
    contexts: NONE,
  },
  {
    what: 'a kubeconfig that is /dev/zero',
    kubeconfig: () => '/dev/zero',
    message: /CRDM_KUBECONFIG: kubeconfig \/dev\/zero is a character device, not a regular file/,
    contexts: NONE,
  },
  {
    what: "a kubeconfig whose user's tokenFile is a FIFO",
    kubeconfig: () => kubeconfigWithUser('token-fifo', { tokenFile: fifo }),
    message: new RegExp(`CRDM_KUBECONFIG: token file ${fifo} \\(user "u"\\) is a FIFO, not a regular file`),
    contexts: 'c\tcurrent, cluster c\n:4\n',
  },
  {
    what: "a kubeconfig whose user's tokenFile is /dev/zero",
    kubeconfig: () => kubeconfigWithUser('token-zero', { tokenFile: '/dev/zero' }),
    message: /CRDM_KUBECONFIG: token file \/dev\/zero \(user "u"\) is a character device, not a regular file/,
    contexts: 'c\tcurrent, cluster c\n:4\n',
  },
]

for (const c of cases) {
  t.test(c.what, async (t) => {
    const kubeconfig = c.kubeconfig()
    const completions: Array<[string[], string, string]> = [
      [
        ['__complete', 'status', '--kubeconfig', kubeconfig, ''],
        NONE,
        'CRD names: none, the default directive (the shell may offer file names)',
      ],
      [['__complete', 'migrate', '--kubeconfig', kubeconfig, '--context', ''], c.contexts, 'contexts: what the kubeconfig alone gives'],
    ]
    for (const [words, stdout, what] of completions) {
      const r = await run(words)
      const line = words.slice(0, 2).join(' ') + (words.includes('--context') ? ' --context' : '')
      t.notOk(r.killed, `${line}: ended by itself (not killed after ${RUN_LIMIT_MS / 1000} s)`)
      t.ok(r.seconds < 10, `${line}: back in ${r.seconds.toFixed(1)} s`)
      t.equal(r.code, 0, `${line}: exits 0`)
      t.equal(r.stdout, stdout, `${line}: ${what}`)
      t.equal(r.stderr, '', `${line}: nothing on a shell's terminal`)
    }
    const r = await run(['status', '--kubeconfig', kubeconfig])
    t.notOk(r.killed, `status: ended by itself (not killed after ${RUN_LIMIT_MS / 1000} s)`)
    t.ok(r.seconds < 10, `status: back in ${r.seconds.toFixed(1)} s`)
    t.not(r.code, 0, `status exits non-zero (${r.code})`)
    t.match(r.stderr, c.message, 'status names the file and what it is')
    t.comment(r.stderr.trim())
  })
}

t.test('a config file (--config) that is a FIFO: completion offers nothing at once, status says why', async (t) => {
  // Not a credential file, but completion reads it too, with the same synchronous read.
  const r = await run(['__complete', 'status', '--config', fifo, '--kubeconfig', cp.kubeconfigPath, ''])
  t.notOk(r.killed, `__complete: ended by itself (not killed after ${RUN_LIMIT_MS / 1000} s)`)
  t.ok(r.seconds < 10, `__complete: back in ${r.seconds.toFixed(1)} s`)
  t.equal(r.stdout, NONE)
  t.equal(r.stderr, '')
  const s = await run(['status', '--config', fifo, '--kubeconfig', cp.kubeconfigPath])
  t.notOk(s.killed, `status: ended by itself (not killed after ${RUN_LIMIT_MS / 1000} s)`)
  t.not(s.code, 0)
  t.match(s.stderr, new RegExp(`CRDM_CONFIG_INVALID: config file ${fifo} is a FIFO, not a regular file`))
})

t.test('the same cluster through a token file that is a regular file: status answers (the check is no obstacle)', async (t) => {
  // A token the API server does not know: it answers 401, which proves the file was read and sent.
  writeFileSync(join(dir, 'token'), 'not-a-known-token\n')
  const r = await run(['status', '--kubeconfig', kubeconfigWithUser('token-file', { tokenFile: join(dir, 'token') })])
  t.notOk(r.killed)
  t.match(r.stderr, /CRDM_UNAUTHORIZED/, 'the token reached the API server, which refused it')
})
