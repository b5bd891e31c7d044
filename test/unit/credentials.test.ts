/**
 * Credentials kept current (src/kube/credentials.ts, src/kube/exec-credential.ts): when an
 * exec plugin runs again, when files are read again, what a half-rotated certificate pair
 * does, and the errors a user sees. The same against the real API server:
 * test/integration/kubeconfig.test.ts.
 */
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { PassThrough } from 'node:stream'
import os from 'node:os'
import path from 'node:path'
import { generate } from 'selfsigned'
import t from 'tap'
import { Credentials } from '../../src/kube/credentials.js'
import type { KubeContext, KubeExec, KubeUser } from '../../src/kube/kubeconfig.js'
import { EXEC_V1, writeExecPlugin } from '../helpers/exec-plugin.js'
import { execInteractive, runExecPlugin } from '../../src/kube/exec-credential.js'
import { runProcess } from '../helpers/run-process.js'

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'crd-migrator-credentials-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

function contextOf(user: Omit<KubeUser, 'name'>): KubeContext {
  return {
    name: 'ctx',
    cluster: { name: 'c', server: new URL('https://api.example.com:6443'), insecureSkipTlsVerify: false },
    user: { name: 'u', ...user },
    origin: 'kubeconfig /test',
  }
}

const exec = (command: string, more: Partial<KubeExec> = {}): KubeExec => ({
  command,
  args: [],
  env: [],
  apiVersion: EXEC_V1,
  interactiveMode: 'Never',
  provideClusterInfo: false,
  ...more,
})

t.test('static credentials: bearer, basic, impersonation (one header line per group)', async (t) => {
  const token = new Credentials(contextOf({ token: 'abc', impersonate: { user: 'alice', groups: ['a', 'b'], extra: { scope: ['x'] } } }), {
    refreshMs: 0,
  })
  const snapshot = await token.current()
  t.same(snapshot.headers, {
    Authorization: 'Bearer abc',
    'Impersonate-User': 'alice',
    'Impersonate-Group': ['a', 'b'],
    'Impersonate-Extra-scope': ['x'],
  })
  t.equal(token.renewable, false, 'nothing to load again on 401')
  const basic = await new Credentials(contextOf({ username: 'u', password: 'p' }), { refreshMs: 0 }).current()
  t.equal(basic.headers['Authorization'], `Basic ${Buffer.from('u:p').toString('base64')}`)
})

t.test('a token file is read again every refreshMs', async (t) => {
  const dir = await tempDir()
  const file = path.join(dir, 'token')
  await writeFile(file, 'first\n')
  const credentials = new Credentials(contextOf({ tokenFile: file }), { refreshMs: 0 })
  t.equal(credentials.renewable, true)
  t.equal((await credentials.current()).headers['Authorization'], 'Bearer first', 'trimmed')
  await writeFile(file, 'second')
  t.equal((await credentials.current()).headers['Authorization'], 'Bearer second')
  const slow = new Credentials(contextOf({ tokenFile: file }), { refreshMs: 3_600_000 })
  const before = await slow.current()
  await writeFile(file, 'third')
  t.equal(await slow.current(), before, 'not before refreshMs...')
  slow.refused(before.generation)
  t.equal((await slow.current()).headers['Authorization'], 'Bearer third', '...unless the API server refused it')
})

t.test('exec plugin: kept until it expires or is refused; a refusal of older credentials changes nothing', async (t) => {
  const plugin = await writeExecPlugin()
  await plugin.respondTo(1, { token: 'one', expirationTimestamp: new Date(Date.now() + 3_600_000).toISOString() })
  await plugin.respondTo(2, { token: 'two', expirationTimestamp: new Date(Date.now() - 1000).toISOString() })
  await plugin.respond({ token: 'later' })
  const credentials = new Credentials(contextOf({ exec: exec(plugin.command) }), { refreshMs: 0 })
  const first = await credentials.current()
  t.equal(first.headers['Authorization'], 'Bearer one')
  await credentials.current()
  t.equal(await plugin.runs(), 1, 'not expired: not run again')
  credentials.refused(first.generation)
  const second = await credentials.current()
  t.equal(second.headers['Authorization'], 'Bearer two', 'refused: run again')
  t.equal((await credentials.current()).headers['Authorization'], 'Bearer later', 'expired: run again')
  t.equal(await plugin.runs(), 3)
  credentials.refused(first.generation)
  await credentials.current()
  t.equal(await plugin.runs(), 3, 'a refusal of credentials already replaced is ignored')
  const concurrent = new Credentials(contextOf({ exec: exec(plugin.command) }), { refreshMs: 0 })
  await Promise.all([concurrent.current(), concurrent.current(), concurrent.current()])
  t.equal(await plugin.runs(), 4, 'requests at the same time share one run')
})

t.test('exec plugin failures say what went wrong', async (t) => {
  const dir = await tempDir()
  const script = async (name: string, body: string) => {
    const file = path.join(dir, name)
    await writeFile(file, `#!/bin/sh\n${body}\n`)
    await chmod(file, 0o755)
    return file
  }
  const cases: [string, KubeExec, RegExp][] = [
    [
      'exit 1',
      exec(await script('fails.sh', 'echo "you are not logged in; run: login" >&2; exit 1')),
      /exec plugin ".*fails\.sh" of user "u" failed \(exit 1\): you are not logged in; run: login/,
    ],
    [
      'not installed',
      exec(path.join(dir, 'missing'), { installHint: 'install it with: brew install thing' }),
      /exec plugin ".*missing" of user "u" not found\ninstall it with: brew install thing/,
    ],
    ['not JSON', exec(await script('text.sh', 'echo hello')), /did not print an ExecCredential as JSON \(it printed "hello\\n"\)/],
    [
      'another version',
      exec(
        await script(
          'v1beta1.sh',
          `echo '{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"x"}}'`,
        ),
      ),
      /is configured for client.authentication.k8s.io\/v1, but printed an ExecCredential of client.authentication.k8s.io\/v1beta1/,
    ],
    [
      'no credential',
      exec(await script('empty.sh', `echo '{"apiVersion":"${EXEC_V1}","kind":"ExecCredential","status":{}}'`)),
      /neither a token nor a client certificate/,
    ],
    [
      'bad expiry',
      exec(
        await script(
          'expiry.sh',
          `echo '{"apiVersion":"${EXEC_V1}","kind":"ExecCredential","status":{"token":"x","expirationTimestamp":"soon"}}'`,
        ),
      ),
      /expirationTimestamp that is not a time: "soon"/,
    ],
    [
      'interactive without a terminal',
      exec('anything', { interactiveMode: 'Always' }),
      /exec plugin "anything" of user "u" needs a terminal \(interactiveMode: Always\), but standard input is not one/,
    ],
  ]
  for (const [what, e, message] of cases) {
    const terminal = { stdinIsTerminal: false, stderr: new PassThrough() }
    await t.rejects(
      new Credentials(contextOf({ exec: e }), { refreshMs: 0, terminal }).current(),
      { code: 'CRDM_KUBECONFIG', message },
      what,
    )
  }
})

/** A self-signed certificate and its key; `certPem` of one with `keyPem` of another do not pair. */
async function certificate(cn: string): Promise<{ certPem: string; keyPem: string }> {
  const pems = await generate([{ name: 'commonName', value: cn }], { keyType: 'ec' })
  return { certPem: pems.cert, keyPem: pems.private }
}

t.test('client certificate files: a new pair is a new object; half a rotation keeps the old pair', async (t) => {
  const dir = await tempDir()
  const [a, b] = await Promise.all([certificate('a'), certificate('b')])
  const cert = path.join(dir, 'tls.crt')
  const key = path.join(dir, 'tls.key')
  await writeFile(cert, a.certPem)
  await writeFile(key, a.keyPem)
  const credentials = new Credentials(contextOf({ clientCertificate: cert, clientKey: key }), { refreshMs: 0 })
  const first = await credentials.current()
  t.ok(first.clientCertificate, 'the pair is loaded')
  t.equal((await credentials.current()).clientCertificate, first.clientCertificate, 'the same bytes: the same object (no new pool)')
  await writeFile(key, b.keyPem)
  t.equal(
    (await credentials.current()).clientCertificate,
    first.clientCertificate,
    'the new key with the old certificate: the old pair stays',
  )
  await writeFile(cert, b.certPem)
  const rotated = await credentials.current()
  t.not(rotated.clientCertificate, first.clientCertificate, 'both files new: the new pair')
  t.equal(String(rotated.clientCertificate?.cert), b.certPem)

  const mismatched = path.join(dir, 'other.key')
  await writeFile(mismatched, a.keyPem)
  await t.rejects(new Credentials(contextOf({ clientCertificate: cert, clientKey: mismatched }), { refreshMs: 0 }).current(), {
    code: 'CRDM_KUBECONFIG',
    message: /the client certificate and key of user "u" in the kubeconfig \/test are not a usable pair/,
  })
})

t.test("exec plugin's terminal: interactiveMode as client-go decides it, stderr to the user, stdin only when interactive", async (t) => {
  // [mode, stdin is a terminal, interactive (undefined: an error)]
  const table: [KubeExec['interactiveMode'], boolean, boolean | undefined][] = [
    ['Never', false, false],
    ['Never', true, false],
    ['IfAvailable', false, false],
    ['IfAvailable', true, true],
    ['Always', false, undefined],
    ['Always', true, true],
  ]
  for (const [mode, tty, interactive] of table) t.equal(execInteractive(mode, tty), interactive, `${mode}, stdin a terminal: ${tty}`)

  const dir = await tempDir()
  const plugin = path.join(dir, 'chatty.sh')
  await writeFile(
    plugin,
    `#!/bin/sh\nprintf '%s' "$KUBERNETES_EXEC_INFO" > "${dir}/info.json"\necho "open https://login.example.com/device and enter ABCD-EFGH" >&2\n` +
      `echo '{"apiVersion":"${EXEC_V1}","kind":"ExecCredential","status":{"token":"tok"}}'\n`,
  )
  await chmod(plugin, 0o755)
  const cluster = contextOf({}).cluster
  for (const [mode, tty, interactive] of table.filter(([, , i]) => i !== undefined)) {
    const stderr = new PassThrough()
    const said: Buffer[] = []
    stderr.on('data', (c: Buffer) => said.push(c))
    const result = await runExecPlugin(exec(plugin, { interactiveMode: mode }), cluster, 'u', { stdinIsTerminal: tty, stderr })
    t.equal(result.token, 'tok')
    t.equal(
      Buffer.concat(said).toString(),
      'open https://login.example.com/device and enter ABCD-EFGH\n',
      `${mode}/${tty}: the user sees the plugin's stderr`,
    )
    const info = JSON.parse(await readFile(path.join(dir, 'info.json'), 'utf8')) as { spec: { interactive: boolean } }
    t.equal(info.spec.interactive, interactive, `${mode}/${tty}: KUBERNETES_EXEC_INFO interactive ${interactive}`)
  }
})

t.test('an interactive plugin reads what the user types on a real terminal (script(1) gives it a pty)', async (t) => {
  const dir = await tempDir()
  const plugin = path.join(dir, 'login.sh')
  await writeFile(
    plugin,
    `#!/bin/sh\nprintf 'password: ' >&2\nread -r typed\n` +
      `printf '{"apiVersion":"${EXEC_V1}","kind":"ExecCredential","status":{"token":"%s"}}' "$typed"\n`,
  )
  await chmod(plugin, 0o755)
  // The product as built for the harness (scripts/test.mjs compiles dist-dev/ first), in a process whose stdin is a pty.
  const module = path.resolve('dist-dev/src/kube/exec-credential.js')
  const driver = path.join(dir, 'driver.mjs')
  await writeFile(
    driver,
    `import { runExecPlugin } from ${JSON.stringify(module)}\n` +
      `const exec = { command: ${JSON.stringify(plugin)}, args: [], env: [], apiVersion: '${EXEC_V1}', interactiveMode: process.argv[2], provideClusterInfo: false }\n` +
      `const cluster = { name: 'c', server: new URL('https://api:6443'), insecureSkipTlsVerify: false }\n` +
      `runExecPlugin(exec, cluster, 'u').then((r) => console.log('TOKEN=' + r.token), (e) => { console.log('ERROR=' + e.message); process.exit(3) })\n`,
  )
  const typed = async (mode: string) => {
    const child = await import('node:child_process')
    return new Promise<string>((resolve, reject) => {
      const p = child.spawn('script', ['-qec', `${JSON.stringify(process.execPath)} ${JSON.stringify(driver)} ${mode}`, '/dev/null'], {
        stdio: ['pipe', 'pipe', 'inherit'],
      })
      let out = ''
      p.stdout.setEncoding('utf8').on('data', (d: string) => (out += d))
      p.on('error', reject)
      p.on('close', () => resolve(out))
      p.stdin.end('s3cret\n')
    })
  }
  const always = await typed('Always')
  t.match(always, /password: /, "the plugin's prompt reached the terminal")
  t.match(always, /TOKEN=s3cret/, 'Always, on a terminal: the plugin read what was typed')
  t.match(await typed('IfAvailable'), /TOKEN=s3cret/, 'IfAvailable, on a terminal: the same')
  const never = await typed('Never')
  t.match(
    never,
    /ERROR=.* printed an ExecCredential with neither a token/,
    'Never: the plugin got no stdin, read nothing, printed no token',
  )
  // And without a terminal (a pipe), Always is refused with the user named.
  const piped = await runProcess(process.execPath, [driver, 'Always'])
  t.match(piped.stdout, /ERROR=exec plugin ".*login\.sh" of user "u" needs a terminal \(interactiveMode: Always\)/)
})
